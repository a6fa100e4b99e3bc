"""Ramp: a run of many one-request episodes puts every request out at once.

The stand-in model server holds every request (a ``timeout`` fault that hangs) so no reply is
released while the run ramps up: the runtime must have all N model requests in flight at the
same time, counted by the server itself, before anything comes back. Then the run is stopped
and every episode is recorded (as ``cancelled``): nothing is lost. The same through worker
processes started ahead of the run (``parley run`` starts them before its model check), and
what a run imports: only the families of the games it plays.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from parley import event_loop
from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.config import load_config
from parley.runtime.scheduler import AUTO_ONE_PROCESS_BELOW, run_experiment, worker_count
from parley.runtime.workers import discard_prestarted, prestart

N = 300
# The gate: every request hangs; none is answered while the run ramps up.
HOLD_ALL = {
    "latency": {"ttft_s": 0.0, "tokens_per_s": 0, "max_seqs": 100_000},
    "replies": {"text": "Answer: first"},
    "faults": [{"kind": "timeout", "rate": 1.0, "hang_s": 600}],
}


def _config(url: str, workers: int | str = "auto", *, model_defaults: bool = False) -> Any:
    model: dict[str, Any] = {
        "model": "sim",
        "base_url": url,
        "images": False,
        "timeout_s": 300,
        "retry": {"max_attempts": 1},
    }
    if not model_defaults:
        model |= {"transport": "direct", "concurrency": {"start": 4096, "min": 64, "max": 4096}}
    return load_config(
        {
            "name": "ramp",
            "concurrency": N,
            # auto: fewer than AUTO_ONE_PROCESS_BELOW episodes, this process
            "workers": workers,
            "tracing": {"enabled": False},
            "state": {"publish": "off"},
            "models": {"sim": model},
            "games": [
                {
                    "game": "clem.reference",
                    "seeds": {"count": N},
                    "settings": {"variant": "text", "set": "grids_letters"},
                    "pairings": [{"describer": "scripted", "guesser": "sim"}],
                }
            ],
        }
    )


async def _ramp(server: SimServerProcess, config: Any, out: Path) -> tuple[dict[str, Any], Any]:
    """Run ``config`` until the server holds N requests (or two minutes pass), then stop it:
    what the server saw at that moment, the run's outcome, and its scheduler."""
    schedulers: list[Any] = []
    run = asyncio.create_task(run_experiment(config, out, on_start=schedulers.append))
    seen: dict[str, Any] = {}
    deadline = time.monotonic() + 120  # generous: a loaded machine ramps slowly
    while time.monotonic() < deadline and not run.done():
        seen = await asyncio.to_thread(server.stats)
        if seen.get("in_flight", 0) >= N:
            break
        await asyncio.sleep(0.2)
    schedulers[0].stop()
    return seen, (await run, schedulers[0])


@pytest.mark.parametrize("model_defaults", [False, True], ids=["tuned", "model-defaults"])
def test_all_requests_in_flight_before_any_reply(tmp_path: Path, model_defaults: bool) -> None:
    """With the model's concurrency and transport at their defaults too: the run's
    ``concurrency`` alone bounds its requests, with no limit of the model's to raise first."""
    assert worker_count("auto", N) == 1 and N < AUTO_ONE_PROCESS_BELOW
    with SimServerProcess(HOLD_ALL) as server:
        config = _config(server.openai_url, model_defaults=model_defaults)
        seen, (outcome, _) = event_loop.run(_ramp(server, config, tmp_path / "run"))
        stats = server.stats()
    # All N requests were out together, and the server had answered none of them.
    assert seen["in_flight"] == N
    assert seen["requests"] - seen["in_flight"] == 0
    assert stats["peak_in_flight"] == N
    assert stats["requests"] == N  # one request per episode, none sent twice
    # Stopped mid-request: every episode is in the results, none lost.
    records = outcome.records
    assert len(records) == N
    assert {r["outcome"] for r in records} == {"cancelled"}


def test_worker_processes_started_ahead_play_the_run_and_lose_nothing(tmp_path: Path) -> None:
    with SimServerProcess(HOLD_ALL) as server:
        config = _config(server.openai_url, workers=2)

        async def main() -> tuple[list[int], dict[str, Any], Any, dict[int, int]]:
            ahead = prestart(config)  # as parley run does before its model check
            seen, (outcome, scheduler) = await _ramp(server, config, tmp_path / "run")
            return ahead, seen, outcome, scheduler.pids

        ahead, seen, outcome, pids = event_loop.run(main())
        stats = server.stats()
    # The two processes started ahead are the two that played (no third was started).
    assert len(ahead) == 2 and sorted(pids.values()) == sorted(ahead)
    # Between them, every request was out at once; none was sent twice.
    assert seen["in_flight"] == N and stats["requests"] == N
    assert len(outcome.records) == N
    assert {r["outcome"] for r in outcome.records} == {"cancelled"}
    assert not outcome.errors


def test_worker_processes_no_run_takes_exit(tmp_path: Path) -> None:
    config = _config("http://127.0.0.1:9/v1", workers=2)
    ahead = prestart(config)
    assert len(ahead) == 2
    discard_prestarted()
    for pid in ahead:  # each reads the end of its stream and exits, without a job
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 1
    # One process: nothing is started ahead.
    assert prestart(_config("http://127.0.0.1:9/v1", workers=1)) == []


def test_a_run_imports_only_the_families_of_its_games() -> None:
    probe = (
        "import sys; from parley.environments import registry; "
        "registry.get('clem.reference'); "
        "print(sorted(m for m in sys.modules if m.count('.') == 2 "
        "and m.startswith('parley.environments.') and m.split('.')[2] in "
        "('clem', 'comma', 'mango', 'playground'))); "
        "print('comma.wire' in registry.all_games())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split("\n")
    assert out[0] == "['parley.environments.clem']"
    assert out[1] == "True"  # listing the games still imports every family
