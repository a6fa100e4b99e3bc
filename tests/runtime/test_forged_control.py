"""A forged status, control or job changes nothing and is counted: the run's processes and its
dashboard act only on what the run's key signs (parley.bus.signing), over a real Mosquitto."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parley.bus import topics
from parley.bus.messages import Control, Job, JobResult, RunStatus
from parley.bus.signing import RunKey, SigningError
from parley.observability.dashboard.hub import Hub
from parley.runtime.config import load_config
from parley.runtime.remote import RemoteScheduler
from parley.runtime.scheduler import run_experiment
from tests.fixtures.broker import MqttBroker
from tests.runtime.test_control import Watcher, slow_config
from tests.runtime.test_control import _plugins as _plugins  # (PARLEY_PLUGINS for the workers)
from tests.runtime.test_remote import (
    Worker,
    counter,
    exactly_once,
    run_with,
    until,
)
from tests.runtime.test_remote import workers as workers  # the fixture

pytestmark = pytest.mark.anyio
MALLORY = RunKey.generate()


def refused_counts(folder: Path) -> dict[str, int]:
    import json

    return dict(json.loads((folder / "run.json").read_text())["refused"])


def forged_status(run: str, signer: RunKey | None = None, **fields: Any) -> RunStatus:
    """A "run finished" status as an intruder would send it: from the future, so that it is
    newer than any job, naming a key of its own."""
    now = time.time() + 3600
    status = RunStatus(
        run=run,
        sender="main",
        process="main",
        pid=1,
        name="remote",
        started_at=now,
        updated_at=now,
        sent_at=now,
        final=True,
        run_key=MALLORY.public_b64,
        **fields,
    )
    return signer.signed(status) if signer is not None else status


async def test_forged_and_replayed_controls_change_nothing_and_are_counted(
    mqtt5_broker: MqttBroker, tmp_path: Path
) -> None:
    box: dict[str, Any] = {}
    watcher = Watcher()
    folder = tmp_path / "run"
    async with mqtt5_broker.bus() as mallory:
        watching = asyncio.create_task(watcher.watch(mallory))
        await asyncio.sleep(0.2)
        run = asyncio.create_task(
            run_experiment(
                slow_config(4, target=15),  # 3 s an episode, two at a time
                folder,
                bus_url=mqtt5_broker.url,
                on_start=lambda s: box.setdefault("scheduler", s),
            )
        )
        await watcher.until(lambda: len(watcher.started) >= 2)
        scheduler = box["scheduler"]
        run_id = scheduler.options.run
        victim = next(e for e in watcher.started if e not in watcher.finished)
        key = RunKey.load(folder)

        def abort(**fields: Any) -> Control:
            base = {"run": run_id, "episode": victim, "sender": "x", "command": "abort"}
            return Control.model_validate({**base, "reason": "forged", **fields})

        def pause(**fields: Any) -> Control:
            return Control.model_validate(
                {"run": run_id, "sender": "x", "command": "pause", **fields}
            )

        # A genuine pause and resume (signed with the run's key) are obeyed...
        genuine_pause = key.signed(pause(sent_at=time.time() - 1))
        await mallory.publish(topics.control(run_id), genuine_pause)
        await until(lambda: scheduler.paused, "the genuine pause")
        await mallory.publish(topics.control(run_id), key.signed(pause(command="resume")))
        await until(lambda: not scheduler.paused, "the genuine resume")
        forged = [
            # ...and a genuine pause from before them, replayed, is not (the bus itself drops a
            # copy of a message it delivered already, by its id: this one it has not seen).
            (topics.control(run_id), key.signed(pause(sent_at=genuine_pause.sent_at - 30))),
            (topics.control(run_id), pause()),  # unsigned
            (topics.control(run_id), MALLORY.signed(pause())),  # another key
            (topics.episode_control(run_id, victim), abort()),
            (topics.episode_control(run_id, victim), MALLORY.signed(abort())),
            # The run's key, on another run's control: not this run's.
            (topics.episode_control(run_id, victim), key.signed(abort(run="another-run"))),
        ]
        for topic, message in forged:
            await mallory.publish(topic, message)
        with contextlib.suppress(AssertionError):
            await until(
                lambda: scheduler.refused.get("control") == len(forged), "the forged controls"
            )
        assert scheduler.refused == {"control": len(forged)}
        assert not scheduler.paused
        outcome = await asyncio.wait_for(run, 120)
        watching.cancel()
    records = {r["episode"]: r for r in outcome.records}
    assert [r["outcome"] for r in records.values()] == ["success"] * 4  # nothing aborted
    assert records[victim]["turns"] == 15  # it played on to its end
    assert refused_counts(folder) == {"control": len(forged)}


async def test_a_forged_finished_status_job_or_control_does_not_stop_a_remote_run(
    mosquitto_broker: MqttBroker, workers: Callable[..., Worker], tmp_path: Path
) -> None:
    """What held a remote run at zero progress: a "run finished" status sent again and again.
    Workers drop the run's jobs only on the coordinator's own final status."""
    worker = workers(mosquitto_broker.url, "f0", slots=4)
    data = counter(mosquitto_broker.url, 12, "slow")
    data["games"][0]["settings"]["target"] = 4  # about a second an episode
    config = load_config(data)
    sent: dict[str, int] = {"run_status": 0, "control": 0}
    played_forged: list[str] = []

    async def forge(scheduler: RemoteScheduler) -> None:
        # Once the worker holds a job of the run (so it knows the run's key from it).
        await until(
            lambda: any(lease.taken for lease in scheduler.book.leases.values()),
            "the worker to take a job",
        )
        run_id = scheduler.run_id
        spec = scheduler.specs[0].model_copy(update={"id": "forged-0"}).model_dump(mode="json")
        setup = {**scheduler.setup, "run_key": MALLORY.private_b64()}
        async with mosquitto_broker.bus() as mallory:
            results = mallory.subscribe(topics.job_results(run_id))
            await results.ready()

            async def watch_results() -> None:
                async for delivery in results:
                    message = delivery.message
                    if isinstance(message, JobResult) and message.episode.startswith("forged"):
                        played_forged.append(message.episode)

            watching = asyncio.create_task(watch_results())
            jobs = [
                Job(run=run_id, episode="forged-0", sender="main", spec=spec, setup={}),
                MALLORY.signed(
                    Job(
                        run=run_id,
                        episode="forged-1",
                        sender="main",
                        spec={**spec, "id": "forged-1"},
                        setup=setup,
                        version=scheduler.version,
                        plugins=scheduler.plugins,
                    )
                ),
            ]
            for job in jobs:
                await mallory.publish(topics.jobs(run_id), job)
            # Until the run is over (a run the forgeries held would end after a minute of them).
            for _ in range(300):
                if scheduler.progress.done == len(scheduler.specs) or scheduler.stopping:
                    break
                signer = MALLORY if sent["run_status"] % 2 else None
                await mallory.publish(topics.status(run_id, "main"), forged_status(run_id, signer))
                sent["run_status"] += 1
                if sent["control"] < 3:
                    control = Control(run=run_id, sender="main", command="pause")
                    await mallory.publish(topics.control(run_id), control)
                    sent["control"] += 1
                await asyncio.sleep(0.2)
            await until(
                lambda: scheduler.refused.get("control") == sent["control"],
                f"the coordinator to refuse every forged control ({scheduler.refused})",
            )
            watching.cancel()

    folder = tmp_path / "run"
    outcome = await asyncio.wait_for(run_with(config, folder, forge), 300)  # a guard on a hang

    lines = exactly_once(folder, config)  # every episode recorded, once
    assert [r["outcome"] for r in lines] == ["success"] * 12
    assert outcome.progress.done == 12
    assert sent["run_status"] >= 3  # it went on while the forged statuses came
    assert not played_forged
    assert refused_counts(folder) == {"control": sent["control"]}
    # The worker's own count, in its goodbye line.
    worker.process.send_signal(signal.SIGTERM)
    worker.process.wait(60)
    await until(lambda: "goodbye" in worker.log, "the worker's goodbye")
    found = re.search(r"refused (.*) as not their run's own", worker.log)
    assert found is not None, worker.log
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", found.group(1))}
    assert counts["job"] == 2
    assert counts["run_status"] >= 1  # the ones that came after it began the run
    assert counts["control"] == sent["control"]


def test_the_dashboard_drops_forged_and_replayed_statuses_and_signs_its_controls(
    tmp_path: Path,
) -> None:
    key = RunKey.generate()
    key.save(tmp_path)
    hub = Hub()
    state = hub.run("r1")
    hub.trust("r1", key.public_b64, "folder")
    state.folder = tmp_path

    def status(**fields: Any) -> RunStatus:
        now = time.time()
        base: dict[str, Any] = {"run": "r1", "sender": "main", "process": "main", "pid": 1}
        base |= {"name": "n", "started_at": now, "updated_at": now, "planned": 9}
        return RunStatus.model_validate({**base, **fields})

    first = key.signed(status(sent_at=time.time() - 5))
    hub.ingest(key.signed(status()))
    assert state.live and not state.status()["final"]
    hub.ingest(forged_status("r1"))  # unsigned
    hub.ingest(forged_status("r1", MALLORY))  # another key
    hub.ingest(first)  # genuine, but older than the latest: a replay
    assert state.live and not state.status()["final"]
    view = hub.run_view("r1")
    assert view is not None and view["refused"] == {"run_status": 3}
    hub.ingest(key.signed(status(final=True)))  # the run's own end is taken
    assert state.status()["final"] and not state.live

    # What the dashboard publishes for a button is signed with the folder's key...
    pause = hub.control_message("r1", "pause")
    assert pause.signature and pause.command == "pause"
    from parley.bus.signing import verify

    assert verify(pause, key.public_b64)
    # ...and a dashboard that cannot read the key says so instead of sending what is refused.
    (tmp_path / "run.key").unlink()
    with pytest.raises(SigningError, match="run key"):
        hub.control_message("r1", "abort", "e1")
    other = hub.run("r2")
    hub.trust("r2", MALLORY.public_b64, "status")
    assert other.folder is None
    with pytest.raises(SigningError, match="folder"):
        hub.control_message("r2", "pause")
