"""The run status on the bus (runtime/status.py): a retained RunStatus per process, about once a
second, whose counts end equal to the run's records; endpoints as the stand-in server saw them;
the parent of a worker run counting every episode and the endpoints of every worker."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from parley.agents.backends.simserver import SimServerProcess
from parley.bus import codec, topics
from parley.bus.messages import RunStatus
from parley.records import EpisodeRecord
from parley.runtime.config import load_config
from parley.runtime.scheduler import Scheduler, run_experiment
from parley.runtime.status import model_tokens, status_line
from parley.runtime.workers import WorkerScheduler
from tests.backends.conftest import FAST_RETRY, SEEDS, base_sim, model, wire_config
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio

PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServerProcess]:
    # Replies after 0.1 s, and one request in five answered 429: a run of a few seconds.
    config = base_sim()
    config["latency"] = {"ttft_s": 0.1, "max_seqs": 1024}
    config["faults"] = [{"kind": "rate_limit", "rate": 0.2, "retry_after_s": 0.02}]
    with SimServerProcess(config) as server:
        yield server


def _config(sim: SimServerProcess, **top: Any) -> Any:
    models = {
        "solver-llm": model(sim, "solver-m", images=False, retry=FAST_RETRY, price=PRICE),
        "expert-llm": model(sim, "expert-m", retry=FAST_RETRY),
    }
    pairings = [{"solver": "solver-llm", "expert": "expert-llm"}]
    config = wire_config(models, pairings, seeds=SEEDS, **top).model_dump(mode="json")
    config["games"][0]["repetitions"] = 2
    return load_config(config)


def _check_final(status: RunStatus, records: list[EpisodeRecord]) -> None:
    """The last status counts what the run recorded, by outcome, with its tokens and cost."""
    assert status.final
    assert status.done == dict(Counter(r.outcome for r in records))
    assert status.finished == status.planned == len(records)
    assert status.running == 0
    assert status.failed == sum(r.outcome == "error" for r in records)
    assert status.eta_s == 0.0
    used = Counter[str]()
    for r in records:
        by_role = {role: t.model_dump() for role, t in r.tokens.items()}
        for tokens in model_tokens(r.spec["players"], by_role).values():
            used.update(input=tokens[0], output=tokens[1])
    assert used["input"] > 0
    assert status.tokens == {"input": used["input"], "output": used["output"]}
    # Only the solver has a price.
    solver = Counter[str]()
    for r in records:
        solver.update(input=r.tokens["solver"].input, output=r.tokens["solver"].output)
    expected = (solver["input"] * PRICE["input_per_mtok"] + solver["output"] * 15.0) / 1e6
    assert status.cost_usd == pytest.approx(expected, rel=1e-6)


def _check_endpoints(status: RunStatus, sim: SimServerProcess) -> None:
    """The endpoint table counts what the server says it did: every request, every 429."""
    served = sim.stats()
    assert len(status.endpoints) == 1  # both models are served by one sim server
    endpoint = status.endpoints[0]
    assert set(endpoint.model.split(", ")) == {"solver-llm", "expert-llm"}
    assert endpoint.requests == served["requests"]
    assert served["fault_rate_limit"] > 0
    assert endpoint.rate_limited == served["fault_rate_limit"]
    # Every 429 was tried again (none given up: twelve attempts allowed).
    assert endpoint.retries == served["fault_rate_limit"]
    assert endpoint.errors == 0
    assert endpoint.latency_p50_s is not None and endpoint.latency_p99_s is not None
    assert 0 < endpoint.latency_p50_s <= endpoint.latency_p99_s


async def test_statuses_over_mosquitto_rise_to_the_records_and_stay_retained(
    mqtt5_broker: MqttBroker, sim: SimServerProcess, tmp_path: Path
) -> None:
    sim.reset()
    config = _config(sim, name="status-mqtt", concurrency=2)
    seen: list[tuple[str, bool, RunStatus]] = []
    subscribed = asyncio.Event()

    async def watch() -> None:
        # A plain MQTT client, as a dashboard on another machine would be.
        async with aiomqtt.Client(mqtt5_broker.host, mqtt5_broker.port) as client:
            await client.subscribe("parley/+/status/+", qos=1)
            subscribed.set()
            async for message in client.messages:
                status = codec.decode(bytes(message.payload))  # type: ignore[arg-type]
                assert isinstance(status, RunStatus)
                if status.name == config.name:
                    seen.append((str(message.topic), bool(message.retain), status))
                    if status.final:
                        return

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(subscribed.wait(), 10)
    outcome = await run_experiment(config, tmp_path / "run", bus_url=mqtt5_broker.url)
    await asyncio.wait_for(watcher, 10)
    records = outcome.records
    assert len(records) == 2 * len(SEEDS)

    assert {topic for topic, _, _ in seen} == {topics.status(outcome.run_id, "main")}
    statuses = [status for _, _, status in seen]
    assert len(statuses) >= 2
    finished = [s.finished for s in statuses]
    assert finished == sorted(finished), "the counts of ended episodes only rise"
    assert statuses[0].finished == 0 and statuses[0].eta_s is None
    for status in statuses:
        # No ETA before an episode has ended; a number of seconds after.
        assert (status.eta_s is None) == (status.finished == 0)
        assert status.process == "main" and status.pid > 0
        assert status.folder == str(outcome.folder.path.resolve())
    assert [s.final for s in statuses] == [False] * (len(statuses) - 1) + [True]
    _check_final(statuses[-1], records)
    _check_endpoints(statuses[-1], sim)
    assert "done 12/12" in status_line(statuses[-1])

    # A subscriber that comes after the run still gets the last status: it is retained.
    async with aiomqtt.Client(mqtt5_broker.host, mqtt5_broker.port) as late:
        await late.subscribe(topics.status(outcome.run_id, "+"), qos=1)
        async with asyncio.timeout(10):
            message = await anext(aiter(late.messages))
    assert message.retain
    retained = codec.decode(bytes(message.payload))  # type: ignore[arg-type]
    assert isinstance(retained, RunStatus)
    assert retained.final and retained.id == statuses[-1].id


async def test_the_parent_of_two_workers_counts_every_episode_and_every_endpoint(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    sim.reset()
    config = _config(sim, name="status-workers", concurrency=4, workers=2)
    schedulers: list[Scheduler | WorkerScheduler] = []
    outcome = await run_experiment(config, tmp_path / "run", on_start=schedulers.append)
    (scheduler,) = schedulers
    assert isinstance(scheduler, WorkerScheduler)
    assert scheduler.status is not None
    main = scheduler.status.latest
    assert main is not None and main.process == "main"
    _check_final(main, outcome.records)
    # On the local bus each worker's own status stays in its process: the parent's carries
    # the endpoints of both workers, whose requests together are all the server answered.
    _check_endpoints(main, sim)
    assert main.endpoints[0].in_flight == 0


def test_outside_a_terminal_parley_run_logs_status_lines(
    sim: SimServerProcess,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under pytest stderr is not a terminal, as under nohup or Slurm: instead of the live
    table, ``parley run`` prints the run status as one line now and then (every 30 s; here
    every 0.2 s, so that a short run prints some)."""
    from parley.runtime import status
    from parley.runtime.cli import main

    monkeypatch.setattr(status, "LOG_EVERY_S", 0.2)
    sim.reset()
    config = tmp_path / "run.yaml"
    config.write_text(_config(sim, name="status-cli", concurrency=2).model_dump_json())
    assert main(["run", str(config), "--out", str(tmp_path / "run")]) == 0
    lines = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("status-cli:")
    ]
    assert lines
    done = [int(line.split("done ")[1].split("/")[0]) for line in lines]
    assert done == sorted(done) and done[-1] <= 12
    assert all("/12, running " in line and " req/s, ETA " in line for line in lines)
