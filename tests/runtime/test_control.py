"""Control obeyed: a paused run starts no new episode (and goes on after resume), an abort ends
exactly one episode as ``aborted`` / ``operator_abort`` — over MQTT, in-process, with workers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

import pytest

import tests.runtime.faulty_game  # noqa: F401  (registers test.counter; workers use PARLEY_PLUGINS)
from parley.bus import topics
from parley.bus.base import Bus
from parley.bus.messages import Control, EpisodeFinished, EpisodeStarted
from parley.bus.signing import RunKey
from parley.observability.dashboard.server import Dashboard
from parley.runtime.config import load_config
from parley.runtime.scheduler import Scheduler, run_experiment
from parley.runtime.workers import WorkerScheduler
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_PLUGINS", "tests.runtime.faulty_game")


def slow_config(count: int, workers: int = 1, target: int = 6) -> Any:
    """Episodes of ``target`` replies a fifth of a second each: long enough to act on."""
    return load_config(
        {
            "name": "control",
            "concurrency": 2,
            "workers": workers,
            "tracing": {"enabled": False},
            "state": {"publish": "off"},
            "games": [
                {
                    "game": "test.counter",
                    "seeds": {"start": 0, "count": count},
                    "pairings": [{"counter": {"kind": "scripted", "name": "slow"}}],
                    "settings": {"target": target},
                }
            ],
        }
    )


class Watcher:
    """Counts the episodes of a run that started and finished, as a dashboard sees them."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.changed = asyncio.Event()

    async def watch(self, bus: Bus) -> None:
        async with (
            bus.subscribe("parley/+/+/events") as events,
            bus.subscribe("parley/+/results") as results,
        ):

            async def pump(sub: Any) -> None:
                async for delivery in sub:
                    if isinstance(delivery.message, EpisodeStarted):
                        self.started.append(delivery.message.episode)
                    elif isinstance(delivery.message, EpisodeFinished):
                        self.finished.append(delivery.message.episode)
                    self.changed.set()

            await asyncio.gather(pump(events), pump(results))

    async def until(self, condition: Any, timeout: float = 60) -> None:
        async with asyncio.timeout(timeout):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


async def check_pause_and_resume(
    watcher: Watcher, pause: Any, resume: Any, run: asyncio.Task[Any], planned: int
) -> Any:
    await watcher.until(lambda: len(watcher.started) >= 1)
    await pause()
    # Episodes begun just before the pause may still be announcing themselves (over a broker,
    # from worker processes): give them a moment to be seen.
    await asyncio.sleep(0.5)
    # The episodes running when the pause took effect go on to their end...
    await watcher.until(lambda: watcher.started and len(watcher.finished) == len(watcher.started))
    started = len(watcher.started)
    await asyncio.sleep(1.0)  # ...and nothing new starts while paused
    assert len(watcher.started) == started < planned
    assert not run.done()
    await resume()
    outcome = await asyncio.wait_for(run, 120)
    assert len(watcher.started) == planned
    return outcome


async def dashboard_of(bus: Bus, run_id: str) -> Dashboard:
    """A dashboard watching ``bus`` (no web server: its ``control`` is what its buttons call),
    once it knows the run from its status (and so its folder and key)."""
    dashboard = Dashboard()
    await dashboard.watch(bus)
    async with asyncio.timeout(30):
        while (state := dashboard.hub.runs.get(run_id)) is None or state.key is None:
            await asyncio.sleep(0.05)
    return dashboard


async def test_pause_over_mqtt_starts_no_episode_until_resume(
    mqtt5_broker: MqttBroker, tmp_path: Path
) -> None:
    """The dashboard's pause and resume buttons, over a broker: signed with the run's key
    (read from its folder), they are obeyed."""
    box: dict[str, Any] = {}
    watcher = Watcher()
    async with mqtt5_broker.bus() as bus:
        watching = asyncio.create_task(watcher.watch(bus))
        await asyncio.sleep(0.2)
        run = asyncio.create_task(
            run_experiment(
                slow_config(6),
                tmp_path / "run",
                bus_url=mqtt5_broker.url,
                on_start=lambda s: box.setdefault("scheduler", s),
            )
        )
        await watcher.until(lambda: "scheduler" in box)
        dashboard = await dashboard_of(bus, box["scheduler"].options.run)

        async def send(command: Literal["pause", "resume"]) -> None:
            assert await dashboard.control(box["scheduler"].options.run, command) == "bus"
            await asyncio.sleep(0.2)
            assert box["scheduler"].paused is (command == "pause")

        outcome = await check_pause_and_resume(
            watcher, lambda: send("pause"), lambda: send("resume"), run, 6
        )
        watching.cancel()
        await dashboard.stop()
    assert sorted(r["outcome"] for r in outcome.records) == ["success"] * 6
    assert box["scheduler"].refused == {}  # the dashboard's were the run's own


async def test_pause_resume_and_abort_with_two_workers(
    mqtt5_broker: MqttBroker, tmp_path: Path
) -> None:
    box: dict[str, Any] = {}
    watcher = Watcher()
    async with mqtt5_broker.bus() as dashboard:
        watching = asyncio.create_task(watcher.watch(dashboard))
        await asyncio.sleep(0.2)
        run = asyncio.create_task(
            run_experiment(
                slow_config(6, workers=2),
                tmp_path / "run",
                bus_url=mqtt5_broker.url,
                on_start=lambda s: box.setdefault("scheduler", s),
            )
        )
        aborted: list[str] = []

        async def pause() -> None:
            scheduler = box["scheduler"]
            assert isinstance(scheduler, WorkerScheduler)
            # One running episode aborted through the parent (an A frame to the workers).
            victim = next(e for e in watcher.started if e not in watcher.finished)
            assert scheduler.abort(victim, "testing")
            aborted.append(victim)
            scheduler.pause()
            assert scheduler.paused

        async def resume() -> None:
            box["scheduler"].resume()

        outcome = await check_pause_and_resume(watcher, pause, resume, run, 6)
        watching.cancel()
    records = {r["episode"]: r for r in outcome.records}
    assert len(records) == 6
    (victim,) = aborted
    assert records[victim]["outcome"] == "aborted"
    assert records[victim]["reason_code"] == "operator_abort"
    assert records[victim]["reason"] == "aborted from the dashboard: testing"
    assert records[victim]["main_score"] is None
    others = [r["outcome"] for e, r in records.items() if e != victim]
    assert others == ["success"] * 5


async def test_an_abort_published_in_process_ends_exactly_that_episode(tmp_path: Path) -> None:
    watcher = Watcher()
    box: dict[str, Any] = {}

    def on_start(scheduler: Any) -> None:
        assert isinstance(scheduler, Scheduler)
        box["scheduler"] = scheduler
        box["watching"] = asyncio.create_task(watcher.watch(scheduler.bus))

    run = asyncio.create_task(run_experiment(slow_config(4), tmp_path / "run", on_start=on_start))
    await watcher.until(lambda: len(watcher.started) >= 2)
    victim = watcher.started[1]
    scheduler = box["scheduler"]
    run_id = scheduler.options.run
    # Signed with the run's key, as a dashboard that reads the run's folder signs it.
    abort = Control(run=run_id, episode=victim, sender="dashboard", command="abort", reason="stuck")
    await scheduler.bus.publish(
        topics.episode_control(run_id, victim), RunKey.load(tmp_path / "run").signed(abort)
    )
    outcome = await asyncio.wait_for(run, 60)
    box["watching"].cancel()
    records = {r["episode"]: r for r in outcome.records}
    assert records[victim]["outcome"] == "aborted"
    assert records[victim]["reason_code"] == "operator_abort"
    assert records[victim]["reason"] == "aborted from the dashboard: stuck"
    assert records[victim]["turns"] < 6  # it did not play on to the end
    assert sorted(r["outcome"] for e, r in records.items() if e != victim) == ["success"] * 3
    # An abort for an episode that is not running changes nothing.
    assert scheduler.abort(victim, "again") is False
