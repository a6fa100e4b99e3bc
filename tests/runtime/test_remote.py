"""Distributed runs: ``parley worker`` processes over a real Mosquitto, a coordinator that
leases jobs, and every episode recorded exactly once through kills, restarts and resumes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import tests.runtime.faulty_game  # noqa: F401  (registers test.counter here; workers use PARLEY_PLUGINS)
from parley.bus import topics
from parley.bus.messages import Job, JobResult, new_id
from parley.bus.signing import RunKey
from parley.runtime.config import ConfigError, load_config
from parley.runtime.experiment import expand
from parley.runtime.remote import RemoteScheduler, incompatibility
from parley.runtime.results import RunFolder
from parley.runtime.scheduler import run_experiment
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
PLUGINS = "tests.runtime.faulty_game"
READY = "waiting for jobs"


@pytest.fixture(autouse=True)
def _plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_PLUGINS", PLUGINS)


class Worker:
    """A ``parley worker`` in a process of its own; its log lines are kept. ``url`` is a bus
    URL, or a credentials file (``--credentials``)."""

    def __init__(self, url: str | Path, name: str, slots: int, env: dict[str, str]) -> None:
        self.name = name
        self.lines: list[str] = []
        self.ready = threading.Event()
        where = ["--credentials", str(url)] if isinstance(url, Path) else ["--bus", url]
        options = [*where, "--slots", str(slots), "--id", name]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "parley.runtime.remote_worker", *options],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if READY in line:
                self.ready.set()
        self.ready.set()  # it exited

    def wait_ready(self) -> None:
        assert self.ready.wait(60), f"worker {self.name} did not start"
        assert self.process.poll() is None, f"worker {self.name} exited: {''.join(self.lines)}"

    @property
    def log(self) -> str:
        return "".join(self.lines)


@pytest.fixture
def workers() -> Iterator[Callable[..., Worker]]:
    """``start(url, name, slots=4, env=None)``: a worker process, ready; all stopped after."""
    started: list[Worker] = []

    def start(
        url: str | Path,
        name: str,
        slots: int = 4,
        env: dict[str, str] | None = None,
        wait: bool = True,
    ) -> Worker:
        full = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            **(env or {}),
        }
        worker = Worker(url, name, slots, full)
        started.append(worker)
        if wait:
            worker.wait_ready()
        return worker

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    for worker in started:
        try:
            worker.process.wait(20)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()


def counter(url: str, count: int, player: str = "scripted", **remote: Any) -> dict[str, Any]:
    """A run of ``test.counter`` episodes (``slow``: 0.2 s per reply) for remote workers."""
    return {
        "name": "remote",
        "concurrency": 24,
        "workers": "remote",
        "bus": url,
        "tracing": {"enabled": False},
        "remote": {"lease_s": 2.0, "no_worker_s": 0.5, **remote},
        "games": [
            {
                "game": "test.counter",
                "seeds": {"start": 0, "count": count},
                "pairings": [{"counter": {"kind": "scripted", "name": player}}],
                "settings": {"target": 1 if player == "slow" else 3},
            }
        ],
    }


def exactly_once(folder: Path, config: Any) -> list[dict[str, Any]]:
    """Every planned episode has one line in episodes.jsonl, and nothing else has one."""
    lines = [json.loads(x) for x in (folder / "episodes.jsonl").read_text().splitlines()]
    ids = [r["episode"] for r in lines]
    assert len(ids) == len(set(ids)), "an episode was recorded twice"
    assert set(ids) == {s.id for s in expand(config)}
    return lines


def remote_counts(folder: Path) -> dict[str, Any]:
    meta = json.loads((folder / "run.json").read_text())
    assert meta["workers"] == "remote"
    return dict(meta["remote"])


async def until(check: Callable[[], bool], what: str, limit_s: float = 60.0) -> None:
    """Wait for ``check`` (a guard against a hang, not a timing assertion)."""
    for _ in range(int(limit_s / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


async def run_with(
    config: Any, out: Path, during: Callable[[RemoteScheduler], Any] | None = None
) -> Any:
    """``run_experiment`` with ``during(scheduler)`` run beside it once it starts."""
    box: dict[str, Any] = {}
    tasks: list[asyncio.Task[Any]] = []

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
    return outcome


# --- the tests ---------------------------------------------------------------------------------


async def test_three_workers_play_a_thousand_episodes_like_one_process(
    mosquitto_broker: MqttBroker, workers: Callable[..., Worker], tmp_path: Path
) -> None:
    pool = [workers(mosquitto_broker.url, f"w{i}", slots=8, wait=False) for i in range(3)]
    games = [
        {
            "game": "comma.wire",
            "seeds": {"start": 0, "count": 500},
            "pairings": [
                {"solver": "scripted", "expert": "scripted"},
                {"solver": "random", "expert": "scripted"},
            ],
            "settings": {"variant": "text"},
        }
    ]
    base = {"name": "thousand", "concurrency": 64, "tracing": {"enabled": False}, "games": games}
    local = await run_experiment(load_config({**base, "workers": 1}), tmp_path / "local")
    for worker in pool:
        worker.wait_ready()
    config = load_config({**base, "workers": "remote", "bus": mosquitto_broker.url})
    remote = await run_experiment(config, tmp_path / "remote")

    assert not remote.errors and remote.progress.done == 1000
    lines = exactly_once(tmp_path / "remote", config)
    # Seeds fix instances and scripted/random play: the same outcome, scores and turns.
    mine = {r["episode"]: (r["outcome"], r["scores"], r["turns"]) for r in lines}
    theirs = {r["episode"]: (r["outcome"], r["scores"], r["turns"]) for r in local.records}
    assert mine == theirs
    assert len({r["outcome"] for r in lines}) > 1  # random solvers lose some
    # Every worker played, and the run folder names who played what.
    assert {r["worker"] for r in lines} == {"w0", "w1", "w2"}
    counts = remote_counts(tmp_path / "remote")
    assert set(counts["workers"]) == {"w0", "w1", "w2"}
    assert sum(w["results"] for w in counts["workers"].values()) == 1000
    assert counts["malformed"] == 0  # every result was signed with the run's key
    # Transcripts and the report read the folder as they read a local run's.
    folder = RunFolder(tmp_path / "remote")
    messages = list(folder.iter_transcript(lines[-1]["episode"]))
    assert messages[0]["kind"] == "episode_started"
    assert messages[-1]["kind"] == "episode_finished"


async def test_a_killed_worker_s_jobs_are_issued_again_and_recorded_once(
    mosquitto_broker: MqttBroker, workers: Callable[..., Worker], tmp_path: Path
) -> None:
    pool = [workers(mosquitto_broker.url, f"k{i}", slots=2, wait=False) for i in range(3)]
    for worker in pool:
        worker.wait_ready()
    config = load_config(counter(mosquitto_broker.url, 90, "slow"))
    killed: dict[str, int] = {}

    async def kill_one(scheduler: RemoteScheduler) -> None:
        seen = scheduler.workers
        await until(
            lambda: scheduler.progress.done >= 15 and len(seen.get("k1", _Nobody).holding) > 0,
            "worker k1 to hold jobs mid-run",
        )
        killed["held"] = len(seen["k1"].holding)
        pool[1].process.send_signal(signal.SIGKILL)

    outcome = await run_with(config, tmp_path / "run", kill_one)

    assert pool[1].process.wait(10) == -signal.SIGKILL
    assert not outcome.errors
    lines = exactly_once(tmp_path / "run", config)
    assert all(r["outcome"] == "success" for r in lines)
    counts = remote_counts(tmp_path / "run")
    # What k1 held when it died went out again, counted as re-issued.
    assert counts["reissued"] >= 1
    assert {r["worker"] for r in lines} >= {"k0", "k2"}


class _Nobody:
    holding: frozenset[str] = frozenset()


async def test_a_broker_restart_loses_and_duplicates_nothing(
    mosquitto_broker: MqttBroker, workers: Callable[..., Worker], tmp_path: Path
) -> None:
    for worker in [workers(mosquitto_broker.url, f"b{i}", wait=False) for i in range(2)]:
        worker.wait_ready()
    config = load_config(counter(mosquitto_broker.url, 90, "slow"))
    restarted: dict[str, int] = {}

    async def restart(scheduler: RemoteScheduler) -> None:
        await until(lambda: scheduler.progress.done >= 20, "20 episodes before the restart")
        restarted["done_before"] = scheduler.progress.done
        await asyncio.to_thread(mosquitto_broker.restart, downtime=1.0)

    outcome = await run_with(config, tmp_path / "run", restart)

    assert not outcome.errors and outcome.progress.done == 90
    exactly_once(tmp_path / "run", config)
    assert restarted["done_before"] < 90  # it restarted mid-run


async def test_a_worker_that_joins_late_gets_work(
    mosquitto_broker: MqttBroker, workers: Callable[..., Worker], tmp_path: Path
) -> None:
    workers(mosquitto_broker.url, "early", slots=4)
    config = load_config(counter(mosquitto_broker.url, 80, "slow", window=8))

    async def join(scheduler: RemoteScheduler) -> None:
        await until(lambda: scheduler.progress.done >= 8, "the early worker's first episodes")
        # Paused while the late one starts: on a loaded machine a worker's start (seconds of
        # imports) could otherwise outlast the whole run, and the late worker would find none.
        scheduler.pause()
        await asyncio.to_thread(workers, mosquitto_broker.url, "late", 4)
        scheduler.resume()

    await run_with(config, tmp_path / "run", join)

    lines = exactly_once(tmp_path / "run", config)
    by = {w: sum(r["worker"] == w for r in lines) for w in ("early", "late")}
    assert by["early"] > 0 and by["late"] > 0, by


async def test_a_killed_coordinator_resumes_and_finishes(
    mosquitto_broker: MqttBroker, workers: Callable[..., Worker], tmp_path: Path
) -> None:
    for worker in [workers(mosquitto_broker.url, f"c{i}", wait=False) for i in range(2)]:
        worker.wait_ready()
    data = counter(mosquitto_broker.url, 90, "slow")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    coordinator = subprocess.Popen(
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
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    episodes = out / "episodes.jsonl"

    def some_recorded() -> bool:
        return episodes.exists() and len(episodes.read_text().splitlines()) >= 15

    try:
        await until(some_recorded, "the coordinator's first records")
    finally:
        coordinator.kill()
        coordinator.wait()
    before = len(episodes.read_text().splitlines())
    assert before < 80

    config = load_config(data)
    outcome = await run_experiment(config, out, resume=True)

    assert not outcome.errors
    exactly_once(out, config)
    assert outcome.progress.skipped >= before
    # Results of the killed coordinator's jobs that arrive now count once, or as duplicates.
    assert remote_counts(out)["duplicates"] >= 0


async def test_workers_of_another_version_or_without_the_plugin_refuse_and_the_run_says_so(
    mosquitto_broker: MqttBroker,
    workers: Callable[..., Worker],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    old = {"PARLEY_VERSION_OVERRIDE": "0.0.1-old"}
    refusing = [
        workers(mosquitto_broker.url, "old", env=old, wait=False),
        workers(mosquitto_broker.url, "bare", env={"PARLEY_PLUGINS": ""}, wait=False),
    ]
    for worker in refusing:
        worker.wait_ready()
    config = load_config(counter(mosquitto_broker.url, 20))
    with caplog.at_level(logging.ERROR, logger="parley.runtime.remote"):
        outcome = await run_experiment(config, tmp_path / "run")

    assert outcome.progress.done == 0
    [error] = outcome.errors
    assert "every worker refuses" in error
    assert "old: parley 0.0.1-old here" in error
    assert f"game plugin '{PLUGINS}' (unpackaged) is not installed here" in error
    assert "refuses its jobs" in caplog.text
    counts = remote_counts(tmp_path / "run")
    assert counts["refusals"] >= 2
    assert counts["workers"]["old"]["refused"].startswith("parley 0.0.1-old here")


async def test_without_workers_the_run_says_so_and_stops_cleanly(
    mosquitto_broker: MqttBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load_config(counter(mosquitto_broker.url, 10))
    said: dict[str, str] = {}

    async def wait_then_stop(scheduler: RemoteScheduler) -> None:
        await until(lambda: scheduler.waiting is not None, "the run to say it waits")
        said["waiting"] = scheduler.waiting or ""
        scheduler.stop()  # Ctrl-C

    with caplog.at_level(logging.WARNING, logger="parley.runtime.remote"):
        outcome = await run_with(config, tmp_path / "run", wait_then_stop)

    assert "no worker" in said["waiting"] and "parley worker" in said["waiting"]
    assert "no worker has taken a job" in caplog.text
    assert outcome.interrupted and outcome.progress.done == 0
    assert remote_counts(tmp_path / "run")["workers"] == {}
    # The folder resumes.
    assert (tmp_path / "run" / "run.json").exists()


def test_incompatibility_names_what_differs() -> None:
    job = Job(
        run="r",
        sender="main",
        spec={},
        version="1.0",
        plugins={"comma": "1.0", "extra": "2.0", "same": "3.0"},
    )
    here = {"comma": "1.1", "same": "3.0"}
    assert incompatibility(job, "1.0", {**here, "extra": "2.0"}) == (
        "game plugin 'comma' is 1.1 here, 1.0 at the coordinator"
    )
    assert incompatibility(job, "1.0", {"comma": "1.0", "extra": "2.0", "same": "3.0"}) is None
    problem = incompatibility(job, "0.9", here)
    assert problem is not None
    assert problem.startswith("parley 0.9 here, 1.0 at the coordinator")
    assert "game plugin 'extra' (2.0) is not installed here" in problem


async def test_remote_needs_an_mqtt_bus(tmp_path: Path) -> None:
    config = load_config({**counter("local", 2), "bus": "local"})
    with pytest.raises(ConfigError, match="workers: remote needs an MQTT bus"):
        await run_experiment(config, tmp_path / "run")
    assert load_config(counter("mqtt://h:1", 1)).workers == "remote"


async def test_three_workers_through_the_secure_broker_survive_a_kill_and_a_restart(
    secure_broker: Any, workers: Callable[..., Worker], tmp_path: Path
) -> None:
    """Done when: TLS, passwords and ACLs (``parley broker --secure``), three workers, one of
    them killed and the broker restarted mid-run, every episode exactly once."""
    # As a user starts them: with the worker's credentials file (its URL, CA and the workers'
    # secret group).
    credentials = Path(secure_broker.credentials("worker"))
    # s1, the one killed, plays for long: the jobs its heartbeats name cannot have ended by the
    # time it dies, so their leases run out and they go out again as taken ("reissued"). With
    # the others' fifth of a second, a fast machine finished them first, and what died with it
    # was only jobs no heartbeat had named yet ("unclaimed").
    slow_s1 = [None, {"PARLEY_TEST_SLOW_S": "30"}, None]
    pool = [workers(credentials, f"s{i}", slots=2, env=slow_s1[i], wait=False) for i in range(3)]
    for worker in pool:
        worker.wait_ready()
    config = load_config(counter(secure_broker.url("coordinator"), 90, "slow"))
    done: dict[str, int] = {}

    async def kill_then_restart(scheduler: RemoteScheduler) -> None:
        seen = scheduler.workers
        await until(
            lambda: scheduler.progress.done >= 10 and len(seen.get("s1", _Nobody).holding) > 0,
            "worker s1 to hold jobs mid-run",
        )
        pool[1].process.send_signal(signal.SIGKILL)
        done["at_kill"] = scheduler.progress.done
        await until(lambda: scheduler.progress.done >= done["at_kill"] + 10, "more episodes")
        done["at_restart"] = scheduler.progress.done
        assert secure_broker.process is not None
        await asyncio.to_thread(secure_broker.process.restart, downtime=1.0)

    outcome = await run_with(config, tmp_path / "run", kill_then_restart)

    assert not outcome.errors
    lines = exactly_once(tmp_path / "run", config)
    assert all(r["outcome"] == "success" for r in lines)
    assert done["at_restart"] < 90  # both happened mid-run
    assert remote_counts(tmp_path / "run")["reissued"] >= 1
    assert {r["worker"] for r in lines} >= {"s0", "s2"}


async def test_a_result_not_signed_with_the_run_key_is_dropped(
    mosquitto_broker: MqttBroker, tmp_path: Path
) -> None:
    """Anyone who can publish on the broker could send a result: only one signed with the run's
    key (which workers get in their jobs) counts."""
    config = load_config(counter(mosquitto_broker.url, 3))
    forged: dict[str, Any] = {}

    async def forge(scheduler: RemoteScheduler) -> None:
        await until(lambda: scheduler.counts["issued"] == 3, "the jobs to go out")
        spec = scheduler.specs[0]
        record = {"run": scheduler.run_id, "episode": spec.id, "outcome": "success", "turns": 3}
        message = JobResult(
            run=scheduler.run_id, episode=spec.id, sender="mallory", record=record, worker="x"
        )
        async with mosquitto_broker.bus() as other:
            await other.publish(topics.job_results(scheduler.run_id), message)
            signed = RunKey.generate().signed(message.model_copy(update={"id": new_id()}))
            await other.publish(topics.job_results(scheduler.run_id), signed)  # another key
        await until(
            lambda: scheduler.counts["malformed"] == 2,
            f"the forged results to arrive ({scheduler.counts})",
            limit_s=10,
        )
        forged["counts"] = dict(scheduler.counts)
        scheduler.stop()

    outcome = await run_with(config, tmp_path / "run", forge)

    assert forged["counts"]["malformed"] == 2
    assert outcome.progress.done == 0 and outcome.records == []


async def test_abort_reaches_the_remote_worker_playing_the_episode(
    mosquitto_broker: MqttBroker, workers: Callable[..., Worker], tmp_path: Path
) -> None:
    workers(mosquitto_broker.url, "a0", slots=4)
    data = counter(mosquitto_broker.url, 3, "slow")
    data["games"][0]["settings"]["target"] = 15  # 3 s an episode
    config = load_config(data)
    target = expand(config)[0].id

    async def abort(scheduler: RemoteScheduler) -> None:
        # Until it lands: an abort that comes before the episode begins is not for anyone.
        while scheduler.progress.done < 3:
            scheduler.abort(target, "enough")
            await asyncio.sleep(0.3)

    outcome = await run_with(config, tmp_path / "run", abort)

    by_id = {r["episode"]: r for r in outcome.records}
    assert by_id[target]["outcome"] == "aborted"
    assert by_id[target]["reason_code"] == "operator_abort"
    assert [r["outcome"] for e, r in by_id.items() if e != target] == ["success", "success"]


def test_a_worker_without_a_broker_says_so_and_exits(tmp_path: Path) -> None:
    from parley.bus.broker import free_port

    def worker(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "parley.runtime.remote_worker", *args]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)

    down = worker("--bus", f"mqtt://127.0.0.1:{free_port()}")
    assert down.returncode == 1 and "connection refused (is it running?)" in down.stderr
    missing = worker("--credentials", str(tmp_path / "worker.json"))
    assert missing.returncode == 1 and "worker.json" in missing.stderr
    assert "Traceback" not in down.stderr + missing.stderr


async def test_a_stopped_worker_finishes_its_episodes_puts_back_the_rest_and_says_goodbye(
    mosquitto_broker: MqttBroker, workers: Callable[..., Worker], tmp_path: Path
) -> None:
    pool = [workers(mosquitto_broker.url, f"t{i}", slots=2, wait=False) for i in range(2)]
    for worker in pool:
        worker.wait_ready()
    config = load_config(counter(mosquitto_broker.url, 60, "slow", lease_s=30.0))

    async def stop_one(scheduler: RemoteScheduler) -> None:
        seen = scheduler.workers
        await until(
            lambda: scheduler.progress.done >= 6 and len(seen.get("t1", _Nobody).holding) > 2,
            "worker t1 to hold queued jobs",
        )
        pool[1].process.send_signal(signal.SIGTERM)

    outcome = await run_with(config, tmp_path / "run", stop_one)

    # (A lease of 30 s: t1's jobs come back because it put them back and said goodbye.)
    assert pool[1].process.wait(30) == 0
    assert "goodbye" in pool[1].log
    assert not outcome.errors
    exactly_once(tmp_path / "run", config)
    counts = remote_counts(tmp_path / "run")
    assert counts["workers"]["t1"]["left"] is True
    assert counts["reissued"] >= 1
