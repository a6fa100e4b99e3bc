"""Memory across episodes: the stores, the policies, the order, and what never crosses roles.

Runs real episodes of ``test.vault`` (tests/memory/vault_game.py): the opener scores 100 when
it opens at once and 50 when it must ask the keeper first, so an opener that remembers the
code scores higher in later episodes.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import tests.memory.vault_game  # noqa: F401  (registers test.vault; workers use PARLEY_PLUGINS)
from parley.memory.across import (
    SCHEMA_VERSION,
    EpisodeMemory,
    InProcessEpisodeStore,
    MemoryStoreError,
    Recollection,
    SchemaError,
    SQLiteEpisodeStore,
    render,
)
from parley.records import RecordedRun
from parley.runtime.cli import main
from parley.runtime.config import ConfigError, load_config
from parley.runtime.experiment import expand, memory_chains
from parley.runtime.scheduler import run_experiment
from parley.tokens import count_tokens
from tests.memory.vault_game import CODE, pin_of

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "tests.memory.vault_game"


def vault_block(
    seeds: list[int] | dict[str, int],
    opener: Any = None,
    keeper: Any = None,
    *,
    keeper_player: str = "scripted",
    group: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    memory = {}
    for role, across in (("opener", opener), ("keeper", keeper)):
        if across:
            across = {"policy": across} if isinstance(across, str) else across
            memory[role] = {"across": {**across, **({"group": group} if group else {})}}
    player: Any = (
        keeper_player
        if keeper_player == "scripted"
        else {"kind": "scripted", "name": keeper_player}
    )
    return {
        "game": "test.vault",
        "seeds": seeds,
        "pairings": [{"opener": "scripted", "keeper": player}],
        "memory": memory,
        **extra,
    }


def config(*blocks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "mem", "tracing": {"enabled": False}, "games": list(blocks), **extra}


def memory(episode: str, seed: int, *texts: str, key: str = "k") -> EpisodeMemory:
    return EpisodeMemory(
        key, episode, seed, 0, tuple(Recollection("note", "opener", t) for t in texts), "success"
    )


# --- stores --------------------------------------------------------------------------------------


def test_sqlite_store_writes_an_episode_once_and_reads_in_order(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    store = SQLiteEpisodeStore(path)
    for seed in (2, 0, 1):
        store.put(memory(f"e{seed}", seed, f"note {seed}"))
    store.put(memory("e1", 1, "note 1 again", "and more"))  # played again after a crash
    store.put(memory("x0", 0, "another key", key="other"))
    assert store.counts() == (4, 5)
    before = store.before("k", (2, 0, "e2"))
    assert [m.episode for m in before] == ["e0", "e1"]
    assert [e.text for e in before[1].entries] == ["note 1 again", "and more"]
    assert [m.episode for m in store.before("k", (9, 0, "z"), limit=2)] == ["e1", "e2"]
    assert store.before("k", (0, 0, "e0")) == []
    store.close()

    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(SchemaError, match="schema version 2"):
        SQLiteEpisodeStore(path)


def test_a_store_that_cannot_be_used_is_one_message_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"not a database \xff\xfe" * 100)
    with pytest.raises(MemoryStoreError, match=r"cannot be used \(file is not a database\)"):
        SQLiteEpisodeStore(damaged)
    assert damaged.read_bytes() == b"not a database \xff\xfe" * 100  # nothing lost
    with pytest.raises(MemoryStoreError, match="cannot be opened"):
        SQLiteEpisodeStore(tmp_path)  # a folder
    with pytest.raises(MemoryStoreError, match="schema version"):  # still one of these
        SQLiteEpisodeStore(_newer_schema(tmp_path / "newer.sqlite"))

    path = tmp_path / "mem.yaml"
    store = {"kind": "sqlite", "path": str(damaged)}
    path.write_text(yaml.safe_dump(config(vault_block([0, 1], "notes"), memory_store=store)))
    os.environ["PARLEY_PLUGINS"] = PLUGIN
    try:
        code = main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"])
    finally:
        del os.environ["PARLEY_PLUGINS"]
    printed = capsys.readouterr()
    said = " ".join((printed.out + printed.err).split())
    assert code == 1 and "Traceback" not in said, said
    assert f"the memory store {damaged} cannot be used" in said
    # No episode played without it, and no folder left that a second try would have to
    # --resume: the same command runs once the store is mended.
    assert not (tmp_path / "run").exists()
    ours = tmp_path / "ours"  # a folder with the user's own things in it keeps them
    ours.mkdir()
    (ours / "notes.txt").write_text("mine")
    os.environ["PARLEY_PLUGINS"] = PLUGIN
    try:
        assert main(["run", str(path), "--out", str(ours), "--quiet"]) == 1
        assert sorted(p.name for p in ours.iterdir()) == ["notes.txt"]
        damaged.unlink()
        code = main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"])
    finally:
        del os.environ["PARLEY_PLUGINS"]
    assert code == 0, capsys.readouterr()
    assert len(RecordedRun(tmp_path / "run").records()) == 2


def _newer_schema(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    return path


def _write_many(path: str, key: str, start: Any) -> None:
    start.wait(60)  # every process opens the fresh file at the same moment
    store = SQLiteEpisodeStore(path)
    for seed in range(50):
        store.before(key, (seed, 0, f"e{seed}"), 3)
        store.put(memory(f"e{seed}", seed, f"note {seed}", key=key))
    store.close()


def test_processes_opening_and_writing_one_file_at_once_lose_nothing(tmp_path: Path) -> None:
    import multiprocessing

    path = str(tmp_path / "shared.sqlite")
    # Spawned, not forked: a test worker may still run threads of earlier tests, and a child
    # forked while one of them holds a lock (logging's, an import's) can wait on it for ever.
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(4)
    processes = [context.Process(target=_write_many, args=(path, f"k{i}", start)) for i in range(4)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(60)
    assert [p.exitcode for p in processes] == [0, 0, 0, 0]
    store = SQLiteEpisodeStore(path)
    assert store.counts() == (200, 200)
    assert [m.seed for m in store.before("k3", (99, 0, ""))] == list(range(50))


def test_the_in_process_store_answers_like_the_sqlite_one(tmp_path: Path) -> None:
    stores = [InProcessEpisodeStore(), SQLiteEpisodeStore(tmp_path / "m.sqlite")]
    for store in stores:
        for seed in (3, 1, 2, 1):
            store.put(memory(f"e{seed}", seed, f"n{seed}"))
    answers = [[m.episode for m in s.before("k", (3, 0, "e3"), limit=5)] for s in stores]
    assert answers[0] == answers[1] == ["e1", "e2"]


def test_render_keeps_the_newest_episodes_within_the_budget() -> None:
    memories = [memory(f"e{i}", i, f"the code is {i} " + "word " * 40) for i in range(6)]
    text = render(memories, "notes", max_tokens=150)
    assert count_tokens(text) <= 150
    assert "the code is 5" in text and "the code is 0" not in text
    assert text.index("the code is 4") < text.index("the code is 5")  # oldest first
    one = render(memories[:1], "notes", max_tokens=20)  # the newest alone, cut to its end
    assert 0 < count_tokens(one) <= 20
    assert render([], "notes", 100) == ""


# --- config --------------------------------------------------------------------------------------


def test_episode_ids_without_memory_across_episodes_do_not_change() -> None:
    plain = expand(load_config(config(vault_block([0]))))[0]
    assert plain.id == "test.vault-s0-r0-324d2d35"  # the id before memory across episodes
    remembering = expand(load_config(config(vault_block([0], "notes"))))[0]
    assert remembering.id != plain.id


def test_bad_memory_configs_are_named() -> None:
    with pytest.raises(ConfigError, match=r"games.0.memory.opener.across.policy"):
        expand(load_config(config(vault_block([0], {"policy": "always"}))))
    with pytest.raises(ConfigError, match=r"games.0.memory.opener.across.*not remote"):
        expand(load_config(config(vault_block([0], "notes"), workers="remote")))
    human = vault_block([0], "notes")
    human["pairings"] = [{"opener": "human", "keeper": "scripted"}]
    with pytest.raises(ConfigError, match="a human player remembers on their own"):
        expand(load_config(config(human)))
    with pytest.raises(ConfigError, match="memory_store"):
        load_config(config(vault_block([0]), memory_store={"kind": "process", "path": "x"}))


def test_chains_put_a_key_in_order_and_keep_other_episodes_alone() -> None:
    specs = expand(
        load_config(
            config(
                vault_block([3, 1, 2], "notes", repetitions=2),
                vault_block([5, 4], "notes", group="b"),
                vault_block([7, 6]),
            )
        )
    )
    chains = memory_chains(specs)
    assert [[(s.seed, s.repetition) for s in c] for c in chains] == [
        [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)],
        [(4, 0), (5, 0)],
        [(7, 0)],
        [(6, 0)],
    ]


# --- runs ----------------------------------------------------------------------------------------


def prompts_of(run: RecordedRun, episode: str, role: str) -> list[str]:
    """The text of every prompt ``role`` was sent in ``episode`` (recorded in its responses)."""
    return [
        "\n".join(p.get("text", "") for m in message["prompt"] for p in m["content"])
        for message in run.iter_transcript(episode)
        if message["kind"] == "turn_response" and message["role"] == role
    ]


@pytest.mark.anyio
async def test_notes_make_the_opener_better_and_memory_off_does_not(tmp_path: Path) -> None:
    data = config(vault_block({"count": 5}, "notes"), vault_block({"count": 5}))
    outcome = await run_experiment(load_config(data), tmp_path / "run")
    curve: dict[bool, list[float]] = {True: [], False: []}
    for r in sorted(outcome.records, key=lambda r: r["seed"]):
        curve["across" in r["spec"]["memory"]["opener"]].append(r["main_score"])
    assert curve == {True: [50.0, 100.0, 100.0, 100.0, 100.0], False: [50.0] * 5}

    run = RecordedRun(tmp_path / "run")
    later = next(
        r for r in outcome.records if r["seed"] == 3 and "across" in r["spec"]["memory"]["opener"]
    )
    messages = list(run.iter_transcript(later["episode"]))
    notes = [
        m
        for m in messages
        if m["kind"] == "turn_response" and (m.get("raw") or {}).get("memory_note")
    ]
    assert [n["text"] for n in notes] == [f"The vault code is code {CODE}."]
    # The note is a call like any other: counted in the role's tokens.
    assert later["tokens"]["opener"]["output"] > count_tokens(f"open {CODE}")
    first_prompt = prompts_of(run, later["episode"], "opener")[0]
    assert "Earlier episode 3 (success, score 100)" in first_prompt
    assert "Earlier episode 1 (success, score 50)" in first_prompt  # k = 3: seeds 0, 1, 2


@pytest.mark.anyio
async def test_a_private_fact_never_reaches_another_role_through_memory(tmp_path: Path) -> None:
    # Both roles remember their transcripts; the keeper was shown its PIN every episode.
    data = config(vault_block({"count": 4}, "last_k", {"policy": "last_k", "k": 5}))
    outcome = await run_experiment(load_config(data), tmp_path / "run")
    run = RecordedRun(tmp_path / "run")
    pins = {pin_of(seed) for seed in range(4)}
    for record in outcome.records:
        keeper = "\n".join(prompts_of(run, record["episode"], "keeper"))
        opener = "\n".join(prompts_of(run, record["episode"], "opener"))
        assert opener and not any(pin in opener for pin in pins)
        # Memory works: the keeper's later prompts carry its earlier PINs.
        assert all(pin_of(s) in keeper for s in range(record["seed"]))
        assert pin_of(record["seed"]) in keeper


@pytest.mark.anyio
async def test_two_workers_keep_memories_apart_by_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_PLUGINS", PLUGIN)
    # Two groups × two pairings, played by two processes at once. With the blabber the
    # opener remembers nothing (so it asks, and the keeper speaks, every time).
    blocks = [
        vault_block(
            seeds,
            "notes" if keeper == "scripted" else None,
            "last_k",
            keeper_player=keeper,
            group=group,
        )
        for group, seeds in (("a", [0, 1, 2]), ("b", [3, 4, 5]))
        for keeper in ("scripted", "blabber")
    ]
    outcome = await run_experiment(load_config(config(*blocks, workers=2)), tmp_path / "run")
    assert len(outcome.records) == 12 and not outcome.errors
    for record in outcome.records:
        learns = record["pairing"]["keeper"] == "scripted" and record["seed"] not in (0, 3)
        assert record["main_score"] == (100.0 if learns else 50.0), record["episode"]
    run = RecordedRun(tmp_path / "run")
    for record in outcome.records:
        said = [
            m["text"]
            for m in run.iter_transcript(record["episode"])
            if m["kind"] == "turn_response" and m["role"] == "keeper"
        ]
        if record["pairing"]["keeper"] == "blabber" and record["seed"] not in (0, 3):
            # It repeats the PIN of the episode before it: of its own key, never another's.
            assert said == [
                f"The code is {CODE}. Last time my PIN was {pin_of(record['seed'] - 1)}."
            ]
    store = sqlite3.connect(tmp_path / "run" / "memory.sqlite")
    keys = store.execute("SELECT key, COUNT(*) FROM episodes GROUP BY key").fetchall()
    assert len(keys) == 6 and {n for _, n in keys} == {3}


def test_sigkill_then_resume_leaves_no_duplicate_memory(tmp_path: Path) -> None:
    count = 300
    data = config(vault_block({"count": count}, "notes", "last_k"))
    path = tmp_path / "mem.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    env = {**os.environ, "PARLEY_PLUGINS": PLUGIN}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "parley.runtime.cli",
            "run",
            str(path),
            "--out",
            str(out),
            "--quiet",
        ],
        cwd=ROOT,
        env=env,
    )
    episodes = out / "episodes.jsonl"
    deadline = time.monotonic() + 60
    while not (episodes.exists() and len(episodes.read_bytes().splitlines()) >= 30):
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    killed_at = len(episodes.read_bytes().splitlines())
    assert killed_at < count

    os.environ["PARLEY_PLUGINS"] = PLUGIN
    try:
        assert main(["run", str(path), "--out", str(out), "--resume", "--quiet"]) == 0
    finally:
        del os.environ["PARLEY_PLUGINS"]
    records = [json.loads(line) for line in episodes.read_text().splitlines()]
    assert len({r["episode"] for r in records}) == len(records) == count
    scores = [r["main_score"] for r in sorted(records, key=lambda r: r["seed"])]
    assert scores == [50.0] + [100.0] * (count - 1)  # as if never killed
    db = sqlite3.connect(out / "memory.sqlite")
    assert db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == 2 * count
    duplicates = db.execute(
        "SELECT COUNT(*) FROM (SELECT key, episode, idx FROM entries"
        " GROUP BY key, episode, idx HAVING COUNT(*) > 1)"
    ).fetchone()[0]
    assert duplicates == 0
    # Each episode's memory is whole: the opener's ends with its note, the keeper's has its
    # turn (shown, said) — none cut by the kill.
    kinds = db.execute(
        "SELECT key LIKE '%|opener|%', episode, GROUP_CONCAT(kind, ',') FROM"
        " (SELECT * FROM entries ORDER BY idx) GROUP BY key, episode"
    ).fetchall()
    for opener, _, joined in kinds:
        assert joined.split(",")[-1] == ("note" if opener else "said")


# --- reports and leaks ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_report_shows_the_learning_curve_beside_memory_off(tmp_path: Path) -> None:
    # Three keys (groups) with notes, and the same game and pairing without memory.
    blocks = [vault_block([0, 1, 2, 3], "notes", group=g) for g in ("a", "b", "c")]
    blocks.append(vault_block([0, 1, 2, 3]))
    await run_experiment(load_config(config(*blocks)), tmp_path / "run")
    from parley.runtime.report import build_report

    text = build_report(tmp_path / "run")
    section = text.split("## Learning curves", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split(" | ")[0].split(" · ")[-1]: line.split(" | ")[1:]
        for line in section.splitlines()
        if line.startswith("| test.vault")
    }
    # Every key scores the same at each index: constant samples, whose interval is the value.
    assert rows["memory opener=notes"] == [
        "3",
        "50.0 [50.0, 50.0]",
        "100.0 [100.0, 100.0]",
        "100.0 [100.0, 100.0]",
        "100.0 [100.0, 100.0] |",
    ]
    assert rows["memory off"] == ["1", "50.0", "50.0", "50.0", "50.0 |"]
    assert (tmp_path / "run" / "learning_curve.png").stat().st_size > 0


@pytest.mark.anyio
async def test_a_pin_from_an_earlier_episode_is_a_cross_episode_disclosure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = [
        vault_block([0, 1, 2], keeper="last_k", keeper_player="blabber"),
        vault_block([0, 1, 2], keeper_player="blabber"),  # no memory: nothing to repeat
    ]
    outcome = await run_experiment(load_config(config(*blocks)), tmp_path / "run")
    from parley.observability.leaks import run_disclosures

    found = list(run_disclosures(tmp_path / "run"))
    by_seed = {r["episode"]: r["seed"] for r in outcome.records}
    remembering = {
        r["episode"] for r in outcome.records if "across" in r["spec"]["memory"]["keeper"]
    }
    assert {(by_seed[d.episode], d.fact, d.match) for d in found} == {
        (1, "pin", pin_of(0)),
        (2, "pin", pin_of(1)),
    }
    for d in found:
        assert d.episode in remembering and d.from_role == "keeper" and d.to_role == "opener"
        assert by_seed[d.earlier_episode] == by_seed[d.episode] - 1
    assert main(["leaks", str(tmp_path / "run")]) == 0
    assert "2 of them disclose a fact of an earlier episode" in capsys.readouterr().out
