"""Failures a run must make plain: a model whose key is missing (every episode of it an error,
a non-zero exit, the reason on the console and in report.md), ``--retry-errors`` playing them
again, ``fail_on_error`` stopping a run, the run folder's lock, and ``--resume`` refusing a
folder made by another config. The printed resume command repeats the ``--set`` overrides."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import tests.runtime.faulty_game  # noqa: F401  (registers test.counter)
from parley.agents.backends.simserver import SimServerProcess
from parley.observability.dashboard.hub import Hub
from parley.records import EpisodeRecord, read_records
from parley.runtime.cli import EXIT_MODEL_FAILED, EXIT_TOO_MANY_ERRORS, build_parser, main
from parley.runtime.report import failure_reasons, summary_rows
from parley.runtime.reports.intervals import rate_cell
from parley.runtime.results import LOCK_FILE
from tests.backends.conftest import FAST_RETRY, base_sim, model, wire_config
from tests.records import record

ROOT = Path(__file__).resolve().parents[2]
KEY = "PARLEY_TEST_FAILURES_KEY"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServerProcess]:
    with SimServerProcess(base_sim()) as server:
        yield server


def _no_check() -> list[str]:
    """``--no-check`` where ``parley run`` has pre-flight checks: a missing key must reach
    the episodes here, as it did before there were checks."""
    try:
        build_parser().parse_args(["run", "x.yaml", "--no-check"])
    except SystemExit:
        return []
    return ["--no-check"]


def _keyed_config(sim: SimServerProcess, path: Path, seeds: list[int], **top: Any) -> Path:
    """COMMA wire: a model that needs ``KEY`` as solver, and an all-scripted pairing."""
    models = {
        "keyed": model(sim, "solver-m", images=False, api_key_env=KEY, retry=FAST_RETRY),
    }
    pairings = [{"solver": "keyed", "expert": "scripted"}, {"solver": "scripted"}]
    config = wire_config(models, pairings, seeds=seeds, **top).model_dump(mode="json")
    config["games"][0]["pairings"][1] = {"solver": "scripted", "expert": "scripted"}
    path.write_text(yaml.safe_dump(config))
    return path


def _counter_config(path: Path, count: int) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "name": "counter",
                "tracing": {"enabled": False},
                "games": [
                    {
                        "game": "test.counter",
                        "seeds": {"count": count},
                        "pairings": [{"counter": "scripted"}],
                    }
                ],
            }
        )
    )
    return path


def _printed_command(err: str, after: str) -> list[str]:
    """The command printed after ``after`` on a line of ``err``, split as a shell would."""
    line = next(line for line in err.splitlines() if after in line)
    return shlex.split(line.split(after, 1)[1])


def test_a_missing_key_fails_loudly_and_retry_errors_plays_the_episodes_again(
    sim: SimServerProcess,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEY, raising=False)
    config = _keyed_config(sim, tmp_path / "keyed.yaml", seeds=[0, 1, 2])
    out = tmp_path / "run"
    args = ["run", str(config), "--out", str(out), *_no_check()]

    assert main(args) == EXIT_MODEL_FAILED
    err = capsys.readouterr().err
    records = read_records(out)
    assert sorted(r["outcome"] for r in records) == ["error"] * 3 + ["success"] * 3
    # The console says why, with the count, and names the model none of whose episodes played.
    assert "3 episodes ended in error" in err
    assert f"3 × solver failed: ModelUnavailable: environment variable {KEY}" in err
    assert "every episode of keyed ended in error" in err
    report = (out / "report.md").read_text()
    assert "## Why episodes failed" in report
    ((count, head, where, _),) = failure_reasons(records)
    assert count == 3 and KEY in head and "is not set" in head and "keyed" in where
    assert f"| 3 | {rate_cell(3, 3)} | {head} |" in report  # all the errors, with its interval
    retry = _printed_command(err, "play them again with: ")
    assert retry[retry.index("--out") + 1] == str(out) and retry[-1] == "--retry-errors"

    # A plain resume skips them, as before: they are done with, as errors.
    assert main([*args, "--resume"]) == EXIT_MODEL_FAILED
    assert len(read_records(out)) == 6
    capsys.readouterr()

    # With the key set, --retry-errors plays the three again; their new records supersede.
    monkeypatch.setenv(KEY, "sk-now-it-is-set")
    assert main([*args, "--resume", "--retry-errors"]) == 0
    err = capsys.readouterr().err
    assert "3 played now, 3 already done" in err
    records = read_records(out)
    assert sorted(r["outcome"] for r in records) == ["success"] * 6
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 9  # the three error records stay in the file, superseded
    header, rows = summary_rows(records)
    assert sum(int(row[header.index("error")]) for row in rows) == 0
    assert sum(int(row[header.index("episodes")]) for row in rows) == 6
    report = (out / "report.md").read_text()
    assert "## Why episodes failed" not in report
    # The dashboard reading the folder counts each episode once, by its latest record.
    hub = Hub()
    state = hub.follow(out)
    assert state is not None
    view = hub.run_view(state.run)
    assert view is not None
    assert [(p["episodes"], p["success_pct"]) for p in view["pairings"]] == [(3, 100.0)] * 2


def test_fail_on_error_stops_the_run_and_what_was_recorded_is_whole(
    sim: SimServerProcess,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Half the episodes fail (the keyed pairing, interleaved with a scripted one): with
    ``fail_on_error: 0.2`` the run stops soon after 10 have ended, records what ran as whole
    records (cancelled where cut), exits 4, and prints how to go on (with the --set)."""
    monkeypatch.delenv(KEY, raising=False)
    seeds = list(range(30))
    config = _keyed_config(sim, tmp_path / "keyed.yaml", seeds=seeds, concurrency=2)
    out = tmp_path / "a run"  # a space: the printed command must quote it
    overrides = ["--set", "fail_on_error=0.2", "--set", "record_prompts=false"]
    assert main(["run", str(config), "--out", str(out), *overrides, *_no_check()]) == (
        EXIT_TOO_MANY_ERRORS
    )
    err = capsys.readouterr().err
    assert "fail_on_error:" in err and "> 20%" in err
    lines = (out / "episodes.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line whole
    ended = [r for r in records if r["outcome"] != "cancelled"]
    assert 10 <= len(ended) < 2 * len(seeds)
    errors = sum(r["outcome"] == "error" for r in ended)
    assert errors > 0.2 * len(ended)
    command = _printed_command(err, "to continue anyway: ")
    assert command[:3] == ["parley", "run", str(config)]
    assert command[command.index("--out") + 1] == str(out)
    assert "--resume" in command
    sets = [command[i + 1] for i, part in enumerate(command) if part == "--set"]
    assert sets == ["fail_on_error=0.2", "record_prompts=false"]


_HOLD = """
import sys, time
from parley.runtime.results import RunFolder
folder = RunFolder(sys.argv[1])
folder.lock()  # held while the folder object lives
print("locked", flush=True)
time.sleep(120)
"""


def test_a_locked_run_folder_is_refused_and_a_killed_holder_leaves_no_stale_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _counter_config(tmp_path / "counter.yaml", 3)
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert main(["run", str(config), "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert f"run folder {out} is in use by pid {holder.pid}" in err
        assert not (out / "episodes.jsonl").exists()
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # no chance to clean up: the kernel drops the lock
        holder.wait()
    assert (out / LOCK_FILE).read_text().strip() == str(holder.pid)
    assert main(["run", str(config), "--out", str(out)]) == 0
    assert [r["outcome"] for r in read_records(out)] == ["success"] * 3


def test_resume_refuses_a_folder_made_by_another_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _counter_config(tmp_path / "counter.yaml", 3)
    out = tmp_path / "run"
    assert main(["run", str(config), "--out", str(out)]) == 0
    capsys.readouterr()
    more = ["--set", "games.0.seeds.count=5"]
    assert main(["run", str(config), "--out", str(out), "--resume", *more]) == 1
    err = capsys.readouterr().err
    assert "was made by another config" in err
    assert "games.0.seeds: [0, 1, 2] in the folder, 0..4 (5 seeds) now" in err
    assert len(read_records(out)) == 3  # nothing played, nothing rewritten
    # Another name is named too.
    assert main(["run", str(config), "--out", str(out), "--resume", "--set", "name=x"]) == 1
    assert "name: 'counter' in the folder, 'x' now" in capsys.readouterr().err
    # Other players are refused too.
    other = ["--set", "games.0.pairings.0.counter=random"]
    assert main(["run", str(config), "--out", str(out), "--resume", *other]) == 1
    assert "games.0.pairings:" in capsys.readouterr().err
    # A folder whose config.yaml an older parley wrote (a player without a field added
    # since, at its default) resumes with the same config.
    saved = yaml.safe_load((out / "config.yaml").read_text())
    del saved["games"][0]["pairings"][0]["counter"]["params"]
    (out / "config.yaml").write_text(yaml.safe_dump(saved))
    # The same config resumes; --force-resume adds the new episodes on purpose.
    assert main(["run", str(config), "--out", str(out), "--resume"]) == 0
    assert main(["run", str(config), "--out", str(out), "--force-resume", *more]) == 0
    assert len(read_records(out)) == 5


def test_failure_reasons_group_by_cause_not_by_the_figures_that_vary() -> None:
    """Two servers down, each for several episodes that took different times to give up:
    two reasons, with their counts; the addresses (which server) are kept apart."""

    def down(port: int, seconds: float, n: int) -> EpisodeRecord:
        return record(
            {
                "episode": f"ep-{port}-{n}",
                "game": "comma.wire",
                "outcome": "error",
                "reason": f"solver failed: ModelUnavailable: model m{port} unreachable: gave up "
                f"after 2 attempts in {seconds} s; last: Cannot connect to host 127.0.0.1:{port}",
                "spec": {"players": {"solver": {"kind": "llm", "model": f"m{port}"}}},
            }
        )

    records = [down(9001, 0.1 * i, i) for i in range(3)] + [down(9002, 2.5, 0)]
    records.append(record(episode="fine", game="comma.wire", outcome="success", spec={}))
    reasons = failure_reasons(records)
    assert [(n, where) for n, _, where, _ in reasons] == [
        (3, ["comma.wire", "m9001"]),
        (1, ["comma.wire", "m9002"]),
    ]
    assert "127.0.0.1:9001" in reasons[0][1] and "in … s" in reasons[0][1]


def test_a_run_whose_every_episode_fails_exits_non_zero_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No model involved: a player that raises in every episode (seed 3 of test.counter)."""
    config = tmp_path / "broken.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "broken",
                "tracing": {"enabled": False},
                "games": [
                    {
                        "game": "test.counter",
                        "seeds": [3],
                        "repetitions": 2,
                        "pairings": [{"counter": {"kind": "scripted", "name": "raises_on_3"}}],
                    }
                ],
            }
        )
    )
    assert main(["run", str(config), "--out", str(tmp_path / "run")]) == EXIT_MODEL_FAILED
    err = capsys.readouterr().err
    assert "every episode ended in error" in err
    assert "2 × " in err and "the player broke on purpose" in err
