"""Run lifecycle: memory released per episode, crash and resume, Ctrl-C, MQTT parity, bad configs."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

import tests.runtime.faulty_game  # noqa: F401  (registers test.counter)
from parley.bus.base import Subscription
from parley.bus.local import LocalBus
from parley.bus.messages import Envelope
from parley.runtime.actor import Actor
from parley.runtime.cli import main
from parley.runtime.config import ConfigError, load_config
from parley.runtime.episode import EpisodeOptions, EpisodeResult, EpisodeRunner
from parley.runtime.experiment import expand
from parley.runtime.results import ResultWriter, RunFolder
from parley.runtime.scheduler import Scheduler, run_experiment
from tests.conftest import require

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


def counter_specs(count: int, start: int = 0) -> list:
    config = load_config(
        {
            "name": "m",
            "record_prompts": False,
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": "test.counter",
                    "seeds": {"start": start, "count": count},
                    "pairings": [{"counter": "scripted"}],
                }
            ],
        }
    )
    return config, expand(config)


async def test_memory_does_not_grow_with_episodes(tmp_path: Path) -> None:
    """Two equal batches after a warm-up leave the same things behind: no actor, subscription,
    message, runner or result outlives its episode, and the second batch adds no memory.

    Each batch is measured only once it is fully on disk: its writer is closed (every write done,
    no batch held in the writer's task) before objects are counted and memory read.
    """
    config, warmup = counter_specs(100)
    batches = [warmup, counter_specs(500, start=100)[1], counter_specs(500, start=600)[1]]
    folder = RunFolder.prepare(tmp_path / "run", config, resume=False, planned=1100)
    bus = LocalBus()
    options = EpisodeOptions(run="m", record_prompts=False)
    done: list[dict[str, int]] = []
    live: list[dict[str, int]] = []
    traced: list[int] = []

    tracemalloc.start()
    try:
        for batch in batches:
            writer = ResultWriter(folder, "m")
            writer.start()
            scheduler = Scheduler(batch, bus, writer, options, concurrency=50)
            await scheduler.run()
            await writer.close()
            done.append(scheduler.progress.outcomes)
            assert len(scheduler.host) == 0 and len(bus.router) == 0
            del scheduler, writer
            gc.collect()
            live.append(_live_objects())
            traced.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()

    assert done == [{"success": 100}, {"success": 500}, {"success": 500}]
    assert len(folder.records()) == 1100
    # Nothing of an episode stays alive once it is recorded: a kept episode shows here as a
    # batch's worth more runners and results, and their messages. (Compared with the batch
    # before, not with zero: other tests in this process may hold messages of their own.)
    assert all(live[2][kind] <= live[1][kind] for kind in LIVE_KINDS), live
    # 500 more episodes, and memory stays where it was (measured: a few kB; keeping each
    # episode's runner costs ~25 kB an episode, keeping only its record ~3.4 kB).
    growth = traced[2] - traced[1]
    assert growth < 250_000, f"grew by {growth} bytes over 500 episodes"


LIVE_KINDS = {
    "actors": Actor,
    "subscriptions": Subscription,
    "messages": Envelope,
    "runners": EpisodeRunner,
    "results": EpisodeResult,
}


def _live_objects() -> dict[str, int]:
    """How many objects of each kind in LIVE_KINDS the garbage collector can see.

    Compared by exact type against every subclass: ``isinstance`` on every object in the
    process runs code of its own (the ABCs' caches, ``__class__`` properties) that allocates
    memory in the middle of the measurement."""
    classes: dict[type, str] = {}
    for name, kind in LIVE_KINDS.items():
        todo = [kind]
        while todo:
            cls = todo.pop()
            classes[cls] = name
            todo.extend(cls.__subclasses__())
    counts = dict.fromkeys(LIVE_KINDS, 0)
    for obj in gc.get_objects():
        name = classes.get(type(obj))
        if name is not None:
            counts[name] += 1
    return counts


def _config_file(tmp_path: Path, count: int, **extra: object) -> Path:
    data = {
        "name": "crash",
        "concurrency": 20,
        "tracing": {"enabled": False},
        "games": [
            {
                "game": "comma.wire",
                "seeds": {"count": count},
                "settings": {"variant": "text"},
                "pairings": [{"solver": "scripted", "expert": "scripted"}],
            }
        ],
        **extra,
    }
    path = tmp_path / "crash.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _parley(*args: str) -> list[str]:
    return [sys.executable, "-m", "parley.runtime.cli", *args]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_bytes().splitlines()) >= n:
            return
        assert proc.poll() is None, "the run ended before it could be interrupted"
        time.sleep(0.02)
    raise AssertionError(f"{path} did not reach {n} lines")


def test_sigkill_then_resume_gives_exactly_the_planned_episodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config_file(tmp_path, 1500)
    out = tmp_path / "run"
    proc = subprocess.Popen(_parley("run", str(config), "--out", str(out), "--quiet"), cwd=ROOT)
    _wait_for_lines(out / "episodes.jsonl", 100, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    killed_at = len(_lines(out / "episodes.jsonl"))
    assert 0 < killed_at < 1500

    # The resume needs no process of its own: the CLI's main, here.
    assert main(["run", str(config), "--out", str(out), "--resume", "--quiet"]) == 0
    assert f"{killed_at} already done" in capsys.readouterr().err.replace("\n", " ")
    records = _lines(out / "episodes.jsonl")
    ids = [r["episode"] for r in records]
    assert len(ids) == 1500 and len(set(ids)) == 1500
    assert {r["outcome"] for r in records} == {"success"}
    # Every record still points at its own transcript.
    folder = RunFolder(out)
    for r in records[::150]:
        kinds = [m["kind"] for m in folder.iter_transcript(r["episode"])]
        assert kinds[0] == "episode_started" and kinds[-1] == "episode_finished"


def test_ctrl_c_records_cancelled_and_the_folder_resumes(tmp_path: Path) -> None:
    config = tmp_path / "slow.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "slow",
                "concurrency": 20,
                "games": [
                    {
                        "game": "test.counter",
                        "seeds": {"count": 60},
                        "pairings": [{"counter": {"kind": "scripted", "name": "slow"}}],
                    }
                ],
            }
        )
    )
    out = tmp_path / "run"
    env = {**os.environ, "PARLEY_PLUGINS": "tests.runtime.faulty_game"}
    proc = subprocess.Popen(
        _parley("run", str(config), "--out", str(out), "--quiet"),
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    _wait_for_lines(out / "episodes.jsonl", 5, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err
    records = _lines(out / "episodes.jsonl")
    outcomes = [r["outcome"] for r in records]
    assert "cancelled" in outcomes and len(records) < 60
    assert set(outcomes) == {"success", "cancelled"}

    assert main(["run", str(config), "--out", str(out), "--resume", "--quiet"]) == 0
    records = _lines(out / "episodes.jsonl")
    assert len(records) == 60 and len({r["episode"] for r in records}) == 60
    assert {r["outcome"] for r in records} == {"success"}


async def test_the_same_run_over_mosquitto_gives_identical_results(
    tmp_path: Path, mqtt_broker
) -> None:
    require(mqtt_broker.mqtt5, "needs Mosquitto (MQTT 5): apt-get install mosquitto")
    data = {
        "name": "parity",
        "concurrency": 8,
        "games": [
            {
                "game": "comma.wire",
                "seeds": {"count": 25},
                "pairings": [
                    {"solver": "scripted", "expert": "scripted"},
                    {"solver": "random", "expert": "scripted"},
                ],
            }
        ],
    }
    local = await run_experiment(load_config(data), tmp_path / "local")
    mqtt = await run_experiment(load_config(data), tmp_path / "mqtt", bus_url=mqtt_broker.url)

    def key(records: list[dict]) -> dict:
        return {r["episode"]: (r["outcome"], r["scores"], r["turns"]) for r in records}

    assert len(local.records) == 50
    assert key(local.records) == key(mqtt.records)


@pytest.mark.parametrize(
    ("change", "field", "expected"),
    [
        (
            {"games": [{"game": "comma.wires", "pairings": [{"solver": "scripted"}]}]},
            "games.0.game",
            "comma.wire",
        ),
        ({"concurrency": 0}, "concurrency", "greater than or equal to 1"),
        ({"colour": "blue"}, "colour", "unknown field"),
        (
            {
                "games": [
                    {
                        "game": "comma.wire",
                        "pairings": [{"solver": "scriptd", "expert": "scripted"}],
                    }
                ]
            },
            "games.0.pairings.0.solver",
            "a model declared under `models`",
        ),
        (
            {"games": [{"game": "comma.wire", "pairings": [{"solver": "scripted"}]}]},
            "games.0.pairings.0",
            "no player for role(s) expert",
        ),
        (
            {
                "games": [
                    {"game": "comma.wire", "pairings": [{"solver": "scripted", "expert": "random"}]}
                ]
            },
            "games.0.pairings.0.expert",
            "expected one of: scripted",
        ),
        (
            {
                "games": [
                    {
                        "game": "comma.wire",
                        "settings": {"max_turn": 3},
                        "pairings": [{"solver": "scripted", "expert": "scripted"}],
                    }
                ]
            },
            "games.0.settings.max_turn",
            "not a setting of comma.wire; did you mean 'max_turns'?; its settings: variant, "
            "max_turns, max_mistakes",
        ),
        (
            {
                "games": [
                    {
                        "game": "comma.wire",
                        "seeds": {"count": -1},
                        "pairings": [{"solver": "scripted", "expert": "scripted"}],
                    }
                ]
            },
            "games.0.seeds.count",
            "greater than 0",
        ),
        (  # a role of a matrix with nobody in it would pair nobody: nothing would play
            {
                "games": [
                    {
                        "game": "comma.wire",
                        "pairings": [{"matrix": {"solver": ["scripted"], "expert": []}}],
                    }
                ]
            },
            "games.0.pairings.0.matrix.expert",
            "at least 1 item",
        ),
        (
            {"games": [{"game": "comma.wire", "pairings": [{"matrix": {}}]}]},
            "games.0.pairings.0.matrix",
            "at least 1 item",
        ),
        (
            {"games": [{"game": "comma.wire", "pairings": [{"matrix": {"solver": 5}}]}]},
            "games.0.pairings.0.matrix.solver",
            "valid list",
        ),
        (  # .inf passes every bound, then overflows in the HTTP client
            {"models": {"m": {"model": "x", "base_url": "http://h/v1", "timeout_s": float("inf")}}},
            "models.m.timeout_s",
            "got inf; expected a finite number",
        ),
        ({"episode_timeout_s": float("inf")}, "episode_timeout_s", "expected a finite number"),
    ],
)
def test_bad_configs_name_the_field_and_the_fix(change: dict, field: str, expected: str) -> None:
    data = {
        "name": "bad",
        "games": [
            {"game": "comma.wire", "pairings": [{"solver": "scripted", "expert": "scripted"}]}
        ],
    }
    data.update(change)
    with pytest.raises(ConfigError) as info:
        expand(load_config(data))
    message = str(info.value)
    assert f"  {field}:" in message, message
    assert expected in message, message


def test_the_cli_reports_a_bad_config_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "name: bad\ngames:\n  - game: comma.wire\n    pairings: [{solver: scripted, expert: nobody}]\n"
    )
    assert main(["run", str(config), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "games.0.pairings.0.expert" in err and "'nobody'" in err
    assert "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_overrides_and_the_resume_guard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config_file(tmp_path, 5)
    out = tmp_path / "run"
    run = ["run", str(config), "--out", str(out), "--quiet"]
    assert main([*run, "--set", "games.0.seeds.count=3"]) == 0
    assert len(_lines(out / "episodes.jsonl")) == 3
    capsys.readouterr()
    # Without the override the config is another one: the folder says so and what to type.
    assert main(run) == 1
    err = capsys.readouterr().err
    assert "holds a run of another config" in err and "games.0.seeds" in err
    assert "--out NEW" in err and "--force-resume" in err


async def test_turns_stay_in_process_and_events_reach_the_broker(
    tmp_path: Path, mqtt_broker
) -> None:
    require(mqtt_broker.mqtt5, "needs Mosquitto (MQTT 5): apt-get install mosquitto")
    import aiomqtt

    seen: list[tuple[str, str]] = []
    ready = asyncio.Event()

    async def watch() -> None:
        async with aiomqtt.Client(
            mqtt_broker.host, mqtt_broker.port, protocol=aiomqtt.ProtocolVersion.V5
        ) as client:
            await client.subscribe("parley/#", qos=1)
            ready.set()
            async for message in client.messages:
                if message.payload:  # empty: a state's retained copy cleared at the episode's end
                    data = json.loads(message.payload)
                    # A batch (a JSON array) holds several messages of one topic (docs/bus.md).
                    for item in data if isinstance(data, list) else [data]:
                        seen.append((str(message.topic), item["kind"]))

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(ready.wait(), 10)
    data = {
        "name": "mirror",
        "games": [
            {
                "game": "comma.wire",
                "seeds": {"count": 3},
                "pairings": [{"solver": "scripted", "expert": "scripted"}],
            }
        ],
    }
    outcome = await run_experiment(load_config(data), tmp_path / "run", bus_url=mqtt_broker.url)
    await asyncio.sleep(0.3)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    kinds = {kind for _, kind in seen}
    assert {r["outcome"] for r in outcome.records} == {"success"}
    # Observers get what happened; the actors' own requests and replies never left the process.
    assert {"episode_started", "transcript_event", "episode_finished"} <= kinds
    assert not kinds & {"turn_request", "turn_response"}
    assert sum(kind == "episode_finished" for _, kind in seen) == 3


async def test_instances_written_to_jsonl_play_as_their_seeds(tmp_path: Path) -> None:
    path = tmp_path / "wire.jsonl"
    assert main(["instances", "comma.wire", "--count", "8", "--out", str(path)]) == 0
    assert len(path.read_text().splitlines()) == 8

    def block(**source: object) -> dict:
        pairings = [{"solver": "random", "expert": "scripted"}]
        return {"name": "i", "games": [{"game": "comma.wire", "pairings": pairings, **source}]}

    by_seed = await run_experiment(load_config(block(seeds={"count": 8})), tmp_path / "a")
    by_file = await run_experiment(load_config(block(instances_file=str(path))), tmp_path / "b")

    def key(records: list[dict]) -> dict:
        return {r["episode"]: (r["seed"], r["outcome"], r["scores"]) for r in records}

    assert key(by_seed.records) == key(by_file.records)
    assert len({r["outcome"] for r in by_seed.records}) == 2  # random play: won and lost both


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\xff\xfe\n", "cannot be read: not UTF-8 text"),
        (b'{"seed": 1}\n[1]\n', "line 2 is a JSON list, not an object (an instance)"),
        (b'{"seed": 1}\n{broken\n', "line 2 is not JSON: Expecting property name"),
        (b'{"seed": "abc"}\n', "line 1: seed 'abc' is not a whole number"),
    ],
)
def test_a_damaged_instances_file_is_a_config_error_naming_the_line(
    content: bytes, says: str, tmp_path: Path
) -> None:
    path = tmp_path / "wire.jsonl"
    path.write_bytes(content)
    pairings = [{"solver": "scripted", "expert": "scripted"}]
    config = load_config(
        {
            "name": "i",
            "games": [{"game": "comma.wire", "pairings": pairings, "instances_file": str(path)}],
        }
    )
    with pytest.raises(ConfigError) as caught:
        expand(config)
    [(field, value, expected)] = caught.value.problems
    assert (field, value) == ("games.0.instances_file", str(path))
    assert expected.startswith(says), expected


def test_instances_refuses_an_unknown_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.jsonl"
    assert main(["instances", "comma.wire", "--set", "wires=9", "--out", str(out)]) == 2
    assert "not a setting of comma.wire" in capsys.readouterr().err
    assert not out.exists()
