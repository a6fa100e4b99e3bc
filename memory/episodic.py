"""Episodic memory: an agent's conversation in one episode, append-only, read through a policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from parley.memory.stores import InMemoryStore, MemoryStore


@dataclass(frozen=True)
class MemoryEntry:
    """One message in an agent's history: who said it, and whether it was the agent itself."""

    speaker: str
    own: bool
    parts: tuple[Any, ...]


@dataclass(frozen=True)
class HistoryPolicy:
    """How much history goes into a prompt.

    ``full``: everything; ``none``: only the latest message received (the COMMA no-memory
    ablation); ``last_k``: the last ``k`` turns, a turn being what arrived since the agent's
    previous reply plus its reply.
    """

    kind: Literal["full", "none", "last_k"] = "full"
    k: int = 3

    def select(self, entries: list[MemoryEntry]) -> list[MemoryEntry]:
        if self.kind == "full":
            return entries
        if self.kind == "none":
            for entry in reversed(entries):
                if not entry.own:
                    return [entry]
            return []
        own_seen = 0
        for i in range(len(entries) - 1, -1, -1):
            if entries[i].own:
                own_seen += 1
                if own_seen > self.k:
                    return entries[i + 1 :]
        return entries


class EpisodicMemory:
    """Append-only history of one agent in one episode, kept in a :class:`MemoryStore`."""

    def __init__(self, key: str, store: MemoryStore | None = None) -> None:
        self.key = key
        self.store = store if store is not None else InMemoryStore()

    def append(self, speaker: str, parts: list[Any], *, own: bool = False) -> None:
        self.store.append(self.key, MemoryEntry(speaker, own, tuple(parts)))

    def entries(self) -> list[MemoryEntry]:
        return self.store.load(self.key)

    def window(self, policy: HistoryPolicy) -> list[MemoryEntry]:
        return policy.select(self.entries())

    def clear(self) -> None:
        self.store.drop(self.key)
