"""One worker protocol, two transports: local worker processes (socket pairs) and ``parley
worker`` processes over a real Mosquitto keep the same promises. A worker killed, a worker
stopped past its lease and then resumed, an episode that takes down every worker it lands on,
a worker whose event loop is blocked: every episode is recorded once, late results are
dropped as duplicates and counted, poison is recorded as ``error`` with the reason, and a slow
worker keeps its jobs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.runtime.blocking_game
import tests.runtime.faulty_game  # noqa: F401  (registers test.counter here)
from parley.runtime.config import load_config
from parley.runtime.experiment import expand
from parley.runtime.scheduler import run_experiment
from tests.fixtures.broker import MqttBroker
from tests.runtime.test_remote import ROOT, Worker, until

pytestmark = pytest.mark.anyio
PLUGINS = "tests.runtime.faulty_game,tests.runtime.blocking_game"


@pytest.fixture(autouse=True)
def _plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_PLUGINS", PLUGINS)


class Transport:
    """What a test needs of one transport: a config, workers, and who holds what."""

    def __init__(self, kind: str, broker: MqttBroker | None) -> None:
        self.kind = kind
        self.broker = broker
        self.workers: list[Worker] = []

    def config(self, count: int, player: str, game: str = "test.counter", **settings: Any) -> Any:
        remote = self.broker is not None
        return load_config(
            {
                "name": "contract",
                # More than the workers play at once: each holds some jobs it has not begun.
                "concurrency": 12,
                "workers": "remote" if remote else 2,
                "bus": self.broker.url if self.broker is not None else "local",
                "tracing": {"enabled": False},
                "remote": {"lease_s": 2.0, "no_worker_s": 0.5},
                "games": [
                    {
                        "game": game,
                        "seeds": {"start": 0, "count": count},
                        "pairings": [{"counter": {"kind": "scripted", "name": player}}],
                        "settings": settings,
                    }
                ],
            }
        )

    def start(self, n: int, slots: int = 2, env: dict[str, str] | None = None) -> None:
        """``n`` ``parley worker`` processes (remote only; local runs start their own)."""
        if self.broker is None:
            return
        full = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            **(env or {}),
        }
        start = len(self.workers)
        for i in range(start, start + n):
            self.workers.append(Worker(self.broker.url, f"c{i}", slots, full))
        for worker in self.workers[start:]:
            worker.wait_ready()

    def pids(self, scheduler: Any) -> dict[str, int]:
        """Every worker process by its name in the run's lease book."""
        if self.broker is None:
            return dict(scheduler.holders)
        return {w.name: w.process.pid for w in self.workers}

    def playing(self, scheduler: Any, name: str) -> set[str]:
        """What worker ``name`` plays now: a local worker says which it began; of a remote
        one the coordinator knows what it holds."""
        if self.broker is None:
            return set(scheduler.playing(name))
        holder = scheduler.book.holders.get(name)
        return set(holder.holding) if holder is not None else set()

    def stop(self) -> None:
        for worker in self.workers:
            for sig in (signal.SIGCONT, signal.SIGTERM):
                if worker.process.poll() is None:
                    worker.process.send_signal(sig)
        for worker in self.workers:
            try:
                worker.process.wait(20)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()


@pytest.fixture(params=["local", "remote"])
def transport(request: pytest.FixtureRequest) -> Iterator[Transport]:
    broker = request.getfixturevalue("mosquitto_broker") if request.param == "remote" else None
    made = Transport(request.param, broker)
    try:
        yield made
    finally:
        made.stop()


async def play(
    config: Any, out: Path, during: Callable[[Any], Awaitable[None]] | None = None
) -> tuple[Any, dict[str, Any]]:
    """``run_experiment`` with ``during(scheduler)`` beside it; the outcome and the
    scheduler's summary of its workers."""
    box: dict[str, Any] = {}
    tasks: list[asyncio.Task[None]] = []

    async def beside(scheduler: Any) -> None:
        assert during is not None
        try:
            await during(scheduler)
        except BaseException:
            scheduler.stop()  # the run must not outlive a failed check
            raise

    def started(scheduler: Any) -> None:
        box["s"] = scheduler
        if during is not None:
            tasks.append(asyncio.create_task(beside(scheduler)))

    outcome = await run_experiment(config, out, on_start=started)
    for task in tasks:
        await task
    return outcome, box["s"].summary()


def recorded_once(folder: Path, config: Any) -> dict[int, dict[str, Any]]:
    """Every planned episode has exactly one line in episodes.jsonl; the lines by seed."""
    lines = [json.loads(x) for x in (folder / "episodes.jsonl").read_text().splitlines()]
    ids = [r["episode"] for r in lines]
    assert len(ids) == len(set(ids)), "an episode was recorded twice"
    assert set(ids) == {s.id for s in expand(config)}
    return {r["seed"]: r for r in lines}


async def a_victim(transport: Transport, scheduler: Any) -> tuple[str, int, set[str]]:
    """A worker mid-run, playing episodes: its name, pid and what it plays."""
    found: list[tuple[str, int, set[str]]] = []

    def playing() -> bool:
        if scheduler.progress.done < 2:
            return False
        for name, pid in transport.pids(scheduler).items():
            episodes = transport.playing(scheduler, name)
            if episodes:
                found.append((name, pid, episodes))
                return True
        return False

    await until(playing, "a worker playing episodes mid-run")
    return found[0]


async def test_a_killed_worker_s_episodes_are_played_again_and_recorded_once(
    transport: Transport, tmp_path: Path
) -> None:
    transport.start(3)
    config = transport.config(40, "slow", target=3)

    async def kill(scheduler: Any) -> None:
        _, pid, _ = await a_victim(transport, scheduler)
        os.kill(pid, signal.SIGKILL)

    outcome, summary = await play(config, tmp_path / "run", kill)

    assert not outcome.errors and not outcome.interrupted
    records = recorded_once(tmp_path / "run", config)
    assert {r["outcome"] for r in records.values()} == {"success"}
    assert summary["takeovers"] >= 1 and summary["reissued"] >= 1, summary
    assert summary["given_up"] == 0


async def test_a_worker_stopped_past_its_lease_is_taken_over_and_its_late_results_dropped(
    transport: Transport, tmp_path: Path
) -> None:
    transport.start(3)
    config = transport.config(40, "slow", target=3)
    recorded: dict[str, int] = {}

    async def stall(scheduler: Any) -> None:
        _, pid, episodes = await a_victim(transport, scheduler)
        os.kill(pid, signal.SIGSTOP)
        try:
            await until(lambda: scheduler.summary()["takeovers"] >= 1, "the take-over")
            # What it was playing is recorded from another worker's play: what it sends once
            # it goes on is late.
            await until(
                lambda: bool(episodes & scheduler.book.received), "its episodes played elsewhere"
            )
            recorded["before"] = scheduler.summary()["duplicates"]
        finally:
            os.kill(pid, signal.SIGCONT)

    outcome, summary = await play(config, tmp_path / "run", stall)

    assert not outcome.errors and not outcome.interrupted
    records = recorded_once(tmp_path / "run", config)
    assert {r["outcome"] for r in records.values()} == {"success"}
    assert summary["takeovers"] >= 1
    # Its late results came, and were dropped as duplicates, counted.
    assert summary["duplicates"] > recorded["before"]


async def test_an_episode_that_takes_down_every_worker_it_lands_on_is_recorded_as_an_error(
    transport: Transport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_TEST_CRASH", "1")  # seed 5 ends the process that plays it
    transport.start(4)  # three die of it, one is left to finish
    config = transport.config(12, "kills_process_on_5")
    outcome, summary = await play(config, tmp_path / "run")

    assert not outcome.errors
    records = recorded_once(tmp_path / "run", config)
    assert records[5]["outcome"] == "error" and records[5]["reason_code"] == "exception"
    assert "lost 3 times" in records[5]["reason"]
    assert all(r["outcome"] == "success" for seed, r in records.items() if seed != 5)
    assert summary["given_up"] == 1 and summary["takeovers"] >= 3


async def test_a_worker_whose_event_loop_is_blocked_keeps_its_jobs(
    transport: Transport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each reply holds the worker's loop up for longer than the lease (2 s): its heartbeats,
    # sent from a thread of their own, keep its jobs.
    monkeypatch.setenv("PARLEY_TEST_BLOCK_S", "3")
    transport.start(2)
    config = transport.config(6, "blocks_loop", game="test.blocking", target=2)
    outcome, summary = await play(config, tmp_path / "run")

    assert not outcome.errors
    records = recorded_once(tmp_path / "run", config)
    assert {r["outcome"] for r in records.values()} == {"success"}
    assert summary["reissued"] == 0 and summary["takeovers"] == 0
    assert summary["duplicates"] == 0
