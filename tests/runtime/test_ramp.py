"""Ramp: a run of many one-request episodes puts every request out at once.

The stand-in model server holds every request (a ``timeout`` fault that hangs) so no reply is
released while the run ramps up: the runtime must have all N model requests in flight at the
same time, counted by the server itself, before anything comes back. Then the run is stopped
and every episode is recorded (as ``cancelled``): nothing is lost.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from parley import event_loop
from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.config import load_config
from parley.runtime.scheduler import AUTO_ONE_PROCESS_BELOW, run_experiment, worker_count

N = 300


def _config(url: str) -> Any:
    return load_config(
        {
            "name": "ramp",
            "concurrency": N,
            "workers": "auto",  # fewer than AUTO_ONE_PROCESS_BELOW episodes: this process
            "tracing": {"enabled": False},
            "state": {"publish": "off"},
            "models": {
                "sim": {
                    "model": "sim",
                    "base_url": url,
                    "images": False,
                    "transport": "direct",
                    "timeout_s": 300,
                    "retry": {"max_attempts": 1},
                    "concurrency": {"start": 4096, "min": 64, "max": 4096},
                }
            },
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


def test_all_requests_in_flight_before_any_reply(tmp_path: Path) -> None:
    sim = {
        "latency": {"ttft_s": 0.0, "tokens_per_s": 0, "max_seqs": 100_000},
        "replies": {"text": "Answer: first"},
        # The gate: every request hangs; none is answered while the run ramps up.
        "faults": [{"kind": "timeout", "rate": 1.0, "hang_s": 600}],
    }
    assert worker_count("auto", N) == 1 and N < AUTO_ONE_PROCESS_BELOW
    with SimServerProcess(sim) as server:

        async def main() -> tuple[dict[str, Any], Any]:
            schedulers: list[Any] = []
            run = asyncio.create_task(
                run_experiment(
                    _config(server.openai_url), tmp_path / "run", on_start=schedulers.append
                )
            )
            seen: dict[str, Any] = {}
            deadline = time.monotonic() + 120  # generous: a loaded machine ramps slowly
            while time.monotonic() < deadline and not run.done():
                seen = await asyncio.to_thread(server.stats)
                if seen["in_flight"] >= N:
                    break
                await asyncio.sleep(0.2)
            schedulers[0].stop()
            return seen, await run

        seen, outcome = event_loop.run(main())
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
