"""Episodic memory: what each history policy lets into a prompt, and memory kept in SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.bus.messages import TextPart
from parley.memory import EpisodicMemory, HistoryPolicy, InMemoryStore, MemoryEntry, SQLiteStore


def conversation() -> list[MemoryEntry]:
    """Three turns of an agent: (expert says, agent replies) × 3, then the expert again."""
    entries = []
    for turn in range(3):
        entries.append(MemoryEntry("expert", False, (f"hint {turn}",)))
        entries.append(MemoryEntry("solver", True, (f"reply {turn}",)))
    entries.append(MemoryEntry("expert", False, ("hint 3",)))
    return entries


def texts(entries: list[MemoryEntry]) -> list[str]:
    return [e.parts[0] for e in entries]


def test_full_keeps_everything() -> None:
    assert texts(HistoryPolicy("full").select(conversation())) == texts(conversation())


def test_none_keeps_only_the_latest_message_received() -> None:
    assert texts(HistoryPolicy("none").select(conversation())) == ["hint 3"]
    only_own = [MemoryEntry("solver", True, ("reply",))]
    assert HistoryPolicy("none").select(only_own) == []


@pytest.mark.parametrize(
    ("k", "expected"),
    [
        (1, ["hint 2", "reply 2", "hint 3"]),
        (2, ["hint 1", "reply 1", "hint 2", "reply 2", "hint 3"]),
        (5, ["hint 0", "reply 0", "hint 1", "reply 1", "hint 2", "reply 2", "hint 3"]),
    ],
)
def test_last_k_keeps_the_last_k_turns(k: int, expected: list[str]) -> None:
    assert texts(HistoryPolicy("last_k", k).select(conversation())) == expected


def test_memories_of_different_keys_stay_apart() -> None:
    store = InMemoryStore()
    a, b = EpisodicMemory("ep1:solver", store), EpisodicMemory("ep1:expert", store)
    a.append("expert", ["to the solver"])
    b.append("solver", ["to the expert"])
    assert [e.parts for e in a.entries()] == [("to the solver",)]
    a.clear()
    assert a.entries() == [] and len(b.entries()) == 1


def test_sqlite_memory_outlives_its_store(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    dump, load = (lambda p: p.model_dump()), (lambda d: TextPart.model_validate(d))
    first = SQLiteStore(path, dump, load)
    memory = EpisodicMemory("agent-7", first)
    memory.append("expert", [TextPart(text="cut wire 2")])
    memory.append("solver", [TextPart(text="cut_wire_2")], own=True)
    first.close()

    again = EpisodicMemory("agent-7", SQLiteStore(path, dump, load))
    entries = again.entries()
    assert [(e.speaker, e.own, e.parts[0].text) for e in entries] == [
        ("expert", False, "cut wire 2"),
        ("solver", True, "cut_wire_2"),
    ]
    assert isinstance(entries[0].parts[0], TextPart)
    assert texts_of_window(again) == ["cut wire 2"]
    again.clear()
    assert EpisodicMemory("agent-7", SQLiteStore(path, dump, load)).entries() == []


def texts_of_window(memory: EpisodicMemory) -> list[str]:
    return [e.parts[0].text for e in memory.window(HistoryPolicy("none"))]
