"""A broker outage is not the players' fault: episode deadlines pause while the bus is cut off."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import tests.runtime.faulty_game  # noqa: F401  (registers test.counter)
from parley.runtime.config import load_config
from parley.runtime.scheduler import Scheduler, run_experiment
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio

TIMEOUT_S = 4.0
DOWNTIME_S = 7.0  # longer than an episode may take


async def test_an_outage_longer_than_the_episode_timeout_ends_no_episode(
    tmp_path: Path, mosquitto_broker: MqttBroker
) -> None:
    config = load_config(
        {
            "name": "outage",
            "concurrency": 6,
            "episode_timeout_s": TIMEOUT_S,
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": "test.counter",
                    "seeds": {"start": 0, "count": 6},
                    # 0.2 s a reply, five replies: each episode needs about a second of play.
                    "pairings": [{"counter": {"kind": "scripted", "name": "slow"}}],
                    "settings": {"target": 5},
                }
            ],
        }
    )
    # One unacknowledged publish at a time: with the broker gone, the episodes' next event
    # waits for it, as every episode of a busy run does once the in-flight window is full.
    url = f"{mosquitto_broker.url}?max_inflight=1"
    schedulers: list[Scheduler] = []
    outages: list[float] = []

    async def outage() -> None:
        while not schedulers or schedulers[0].progress.running == 0:
            await asyncio.sleep(0.02)
        await asyncio.to_thread(mosquitto_broker.restart, downtime=DOWNTIME_S)
        outages.append(schedulers[0].bus.outage_s())

    breaker = asyncio.create_task(outage())
    outcome = await run_experiment(
        config, tmp_path / "run", bus_url=url, on_start=schedulers.append
    )
    await breaker

    assert outages and outages[0] >= DOWNTIME_S * 0.9  # the bus saw the broker go
    assert schedulers[0].bus.stats.reconnects >= 1
    assert sorted(r["seed"] for r in outcome.records) == list(range(6))
    assert [r["outcome"] for r in outcome.records] == ["success"] * 6, [
        r["reason"] for r in outcome.records
    ]


async def test_a_player_that_is_too_slow_still_times_out(tmp_path: Path) -> None:
    """The deadline only moves for outages: on the local bus (never cut off) it holds."""
    config = load_config(
        {
            "name": "slow",
            "episode_timeout_s": 0.5,
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": "test.counter",
                    "seeds": [0],
                    "pairings": [{"counter": {"kind": "scripted", "name": "slow"}}],
                    "settings": {"target": 20},
                }
            ],
        }
    )
    outcome = await run_experiment(config, tmp_path / "run")
    (record,) = outcome.records
    assert record["outcome"] == "error"
    assert record["reason_code"] == "timeout"
