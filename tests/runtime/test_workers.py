"""Worker processes: the same run folder as one process, failures contained, stop and resume."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import signal
import struct
from pathlib import Path
from typing import Any

import pytest

import tests.runtime.faulty_game  # noqa: F401  (registers test.counter here; workers use PARLEY_PLUGINS)
from parley.runtime.config import ConfigError, load_config
from parley.runtime.episode import EpisodeResult
from parley.runtime.experiment import EpisodeSpec
from parley.runtime.results import EncodedResult, RunFolder
from parley.runtime.scheduler import run_experiment
from parley.runtime.workers import (
    WorkerScheduler,
    pack_result,
    split,
    unpack_result,
    worker_bus_url,
    worker_models,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_PLUGINS", "tests.runtime.faulty_game")


def comma_config(workers: int, count: int = 12) -> Any:
    return load_config(
        {
            "name": "w",
            "concurrency": 8,
            "workers": workers,
            "games": [
                {
                    "game": "comma.wire",
                    "seeds": {"start": 0, "count": count},
                    "pairings": [
                        {"solver": "scripted", "expert": "scripted"},
                        {"solver": "random", "expert": "scripted"},
                    ],
                }
            ],
        }
    )


def counter_config(workers: int, count: int, player: str = "scripted", **settings: Any) -> Any:
    return load_config(
        {
            "name": "c",
            "concurrency": 4,
            "workers": workers,
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": "test.counter",
                    "seeds": {"start": 0, "count": count},
                    "pairings": [{"counter": {"kind": "scripted", "name": player}}],
                    "settings": settings,
                }
            ],
        }
    )


def by_episode(records: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    return {r["episode"]: (r["outcome"], r["scores"], r["turns"]) for r in records}


async def test_two_workers_play_the_same_episodes_as_one_process(tmp_path: Path) -> None:
    one = await run_experiment(comma_config(1), tmp_path / "one")
    two = await run_experiment(comma_config(2), tmp_path / "two")

    assert len(two.records) == 24 and two.progress.done == 24 and not two.errors
    # Seeds fix instances and scripted play: the same outcome, scores and turns per episode.
    assert by_episode(two.records) == by_episode(one.records)
    assert sum(r["outcome"] == "success" for r in two.records) >= 12  # the scripted pairing
    # One lag summary per process that played episodes.
    assert [x["worker"] for x in sorted(two.loop_lag, key=lambda x: x["worker"])] == [0, 1]
    assert all(x["samples"] > 0 for x in two.loop_lag)
    assert len(one.loop_lag) == 1
    meta = json.loads((two.folder.path / "run.json").read_text())
    assert meta["workers"] == 2 and meta["loop_lag"] == two.loop_lag and meta["errors"] == []
    # Every transcript is whole in the parent's single transcripts file.
    folder = RunFolder(two.folder.path)
    for record in two.records:
        messages = list(folder.iter_transcript(record["episode"]))
        assert messages[0]["kind"] == "episode_started"
        assert messages[-1]["kind"] == "episode_finished"
        assert messages[-1]["outcome"] == record["outcome"]
    # Both workers traced into the run's file, each span naming its worker.
    spans = [s for s in _spans(two.folder.path) if s["name"].startswith("episode ")]
    assert len(spans) == 24
    assert {s["resource"].get("parley.worker") for s in spans} == {0, 1}
    # The parent keeps the run's metrics, fed by both workers: its last export counts them all.
    assert _episodes_counted(two.folder.path) == {None: 24}


def _episodes_counted(path: Path) -> dict[Any, int]:
    """Per process (its ``parley.worker``), the ``parley.episodes`` of its last metrics export."""
    counted: dict[Any, int] = {}
    for line in (path / "metrics.jsonl").read_text().splitlines():
        for rm in json.loads(line)["resource_metrics"]:
            worker = rm["resource"]["attributes"].get("parley.worker")
            for sm in rm["scope_metrics"]:
                for metric in sm["metrics"]:
                    if metric["name"] == "parley.episodes":
                        points = metric["data"]["data_points"]
                        counted[worker] = sum(p["value"] for p in points)
    return counted


def _spans(path: Path) -> list[dict[str, Any]]:
    from parley.observability.tracing import read_spans

    return read_spans(path)


async def test_an_episode_that_kills_its_worker_twice_is_an_error_and_the_run_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = counter_config(2, 12, player="kills_process_on_5")
    monkeypatch.setenv("PARLEY_TEST_CRASH", "1")
    outcome = await run_experiment(config, tmp_path / "run")

    # Seed 5 goes to worker 1 (round robin); its process dies in it, a new one takes over and
    # dies in it again; then the episodes in flight both times are played alone, and seed 5,
    # killing its process a third time, is given up.
    assert not outcome.errors
    by_seed = {r["seed"]: r for r in outcome.records}
    assert sorted(by_seed) == list(range(12))
    assert by_seed[5]["outcome"] == "error"
    assert by_seed[5]["reason_code"] == "exception"
    assert "lost 3 times" in by_seed[5]["reason"]
    assert all(r["outcome"] == "success" for seed, r in by_seed.items() if seed != 5)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [t["worker"] for t in run["takeovers"]] == [1, 1, 1]
    assert run["takeovers"][-1]["given_up"] == [by_seed[5]["episode"]]
    assert all(t["exit_code"] == 3 for t in run["takeovers"])
    # The lease book's counts, as a distributed run's: one episode given up, none doubled.
    assert (run["leases"]["given_up"], run["leases"]["duplicates"]) == (1, 0)


async def test_a_killed_worker_is_taken_over_and_the_run_finishes(tmp_path: Path) -> None:
    config = counter_config(2, 16, player="slow", target=4)
    schedulers: list[WorkerScheduler] = []
    killed: list[int] = []

    async def kill_one() -> None:
        while not schedulers or schedulers[0].progress.done < 2:
            await asyncio.sleep(0.05)
        pid = schedulers[0].pids[0]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killer = asyncio.create_task(kill_one())
    outcome = await run_experiment(config, tmp_path / "run", on_start=schedulers.append)
    await killer

    assert killed and not outcome.errors and not outcome.interrupted
    assert sorted(r["seed"] for r in outcome.records) == list(range(16))
    assert {r["outcome"] for r in outcome.records} == {"success"}
    (takeover,) = json.loads((tmp_path / "run" / "run.json").read_text())["takeovers"]
    assert takeover["worker"] == 0 and takeover["exit_code"] == -signal.SIGKILL
    assert takeover["unfinished"] >= 1 and takeover["given_up"] == []
    assert schedulers[0].pids[0] != killed[0]


async def test_a_worker_dead_before_it_is_ready_holds_the_opening_of_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first workers wait for each other (the opening); one that dies first is not waited
    # for. With the opening's time limit out of reach, the run would hang if it were.
    monkeypatch.setattr("parley.runtime.workers.OPENING_WAIT_S", 3600.0)
    config = counter_config(2, 8)

    def kill_worker_1(scheduler: Any) -> None:
        worker = scheduler._spawned[1]  # started, given no job yet
        worker.process.kill()
        worker.process.wait()

    outcome = await run_experiment(config, tmp_path / "run", on_start=kill_worker_1)

    # Worker 0 played its share (half the episodes); worker 1's are left for --resume, and the
    # run says so.
    assert len(outcome.records) == 4
    assert {r["outcome"] for r in outcome.records} == {"success"}
    assert any("worker 1 exited" in e and "before it began" in e for e in outcome.errors)
    resumed = await run_experiment(config, tmp_path / "run", resume=True)
    assert sorted(r["seed"] for r in resumed.records) == list(range(8))


async def test_a_worker_ready_after_the_opening_went_starts_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No wait at all: the first worker ready opens the run, and the other is told to go as
    # soon as it says it is ready (were it not, its episodes would never start).
    monkeypatch.setattr("parley.runtime.workers.OPENING_WAIT_S", 0.0)
    outcome = await run_experiment(counter_config(2, 8), tmp_path / "run")
    assert not outcome.errors
    assert sorted(r["seed"] for r in outcome.records) == list(range(8))
    assert {r["outcome"] for r in outcome.records} == {"success"}


async def test_stop_cancels_in_the_workers_and_resume_finishes(tmp_path: Path) -> None:
    config = counter_config(2, 16, player="slow", target=5)
    schedulers: list[WorkerScheduler] = []

    async def stop_soon() -> None:
        while not schedulers or schedulers[0].progress.done < 2:
            await asyncio.sleep(0.05)
        schedulers[0].stop()

    stopper = asyncio.create_task(stop_soon())
    outcome = await run_experiment(config, tmp_path / "run", on_start=schedulers.append)
    await stopper
    outcomes = [r["outcome"] for r in outcome.records]
    assert outcome.interrupted and not outcome.errors
    assert "cancelled" in outcomes and outcomes.count("success") >= 2

    resumed = await run_experiment(config, tmp_path / "run", resume=True)
    assert sorted(r["seed"] for r in resumed.records) == list(range(16))
    assert {r["outcome"] for r in resumed.records} == {"success"}


def test_result_frames_round_trip() -> None:
    result = EncodedResult(
        {"episode": "e1", "outcome": "success", "turns": 3},
        b'{"kind":"turn_request"}\n{"kind":"episode_finished"}\n',
        {"a" * 64: b"\x89PNG one", "b" * 64: b"\x89PNG two, longer"},
    )
    back = unpack_result(pack_result(result))
    assert dataclasses.replace(back, record_json=None) == result
    assert back.record_json == json.dumps(result.record)


def test_shares_of_concurrency_and_endpoint_limits() -> None:
    assert split(2000, 2) == [1000, 1000]
    assert split(7, 3) == [3, 2, 2]
    models = worker_models(
        {
            "m": {
                "model": "x",
                "base_url": "http://127.0.0.1:1/v1",
                "concurrency": {"start": 64, "min": 1, "max": 257},
            }
        },
        2,
    )
    limits = models["m"].concurrency
    assert (limits.start, limits.min, limits.max) == (32, 1, 129)


def test_a_chosen_client_id_gets_one_suffix_per_worker() -> None:
    assert worker_bus_url("mqtt://h:1883", 1) == "mqtt://h:1883"
    assert worker_bus_url("mqtt://h:1883?client_id=lab&keepalive=5", 1) == (
        "mqtt://h:1883?client_id=lab-w1&keepalive=5"
    )


def test_workers_setting_is_checked() -> None:
    for bad in (0, 300, "many"):
        with pytest.raises(ConfigError) as info:
            counter_config(bad, 1)  # type: ignore[arg-type]
        assert "workers" in str(info.value) and "auto" in str(info.value)
    assert counter_config("auto", 1).workers == "auto"  # type: ignore[arg-type]


def test_a_frame_carries_the_record_encoded_once() -> None:
    """The header around a record encoded ahead (by EncodedResult.safely) is what json.dumps
    writes for the whole."""
    result = EncodedResult(
        {"episode": "e1", "outcome": "success", "score": float("nan"), "big": 1 << 70},
        b"line\n",
        {"c" * 64: b"\x89PNG"},
        {"turns": 2},
    )
    ahead = dataclasses.replace(result, record_json=json.dumps(result.record))
    payload = pack_result(ahead)
    assert payload == pack_result(result)
    size, record_size = struct.unpack_from(">II", payload)
    whole = {
        "record": result.record,
        "transcript": 5,
        "images": [["c" * 64, 4]],
        "metrics": {"turns": 2},
    }
    assert payload[8 : 8 + size] == json.dumps(whole).encode()
    assert record_size == len(json.dumps(result.record))
    back = unpack_result(payload)
    assert back.record["big"] == 1 << 70 and math.isnan(back.record["score"])
    assert back.record_json == json.dumps(result.record)  # the parent's writer takes it
    # The frame carries the JSON it was given, not an encoding of its own.
    compact = json.dumps(result.record, separators=(",", ":"))
    framed = pack_result(dataclasses.replace(result, record_json=compact))
    _, record_size = struct.unpack_from(">II", framed)
    start = 8 + len(b'{"record": ')
    assert framed[start : start + record_size] == compact.encode()
    assert unpack_result(framed).record_json == compact


def test_an_episode_whose_record_cannot_be_encoded_goes_back_as_an_error() -> None:
    spec = EpisodeSpec(id="e1", game="clem.reference", seed=0, players={})
    played = EpisodeResult(spec=spec, outcome="success", scores={"odd": object()}, turns=3)  # type: ignore[dict-item]
    encoded = EncodedResult.safely(played, "run-1")
    assert encoded.record_json is not None and json.loads(encoded.record_json) == encoded.record
    assert encoded.record["outcome"] == "error" and encoded.record["turns"] == 3
    assert "could not be written" in encoded.record["reason"]
    assert unpack_result(pack_result(encoded)).record == encoded.record
    fine = EpisodeResult(spec=spec, outcome="success", turns=3)
    encoded = EncodedResult.safely(fine, "run-1")
    assert encoded.record_json == fine.record("run-1").json_line()
    assert encoded.record["outcome"] == "success"
