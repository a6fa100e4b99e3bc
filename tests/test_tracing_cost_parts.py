"""benchmarks/tracing_cost.py --parts takes away what each mode says, and only for its block.

The modes measure what a tracing design without a part would cost; a mode that left a part in
(or took one away for good) would measure something else. Read from the run's own files.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import tracing_cost

from parley.agents.backends.simserver import SimServerProcess
from parley.observability.tracing import read_spans
from parley.runtime.scheduler import run_experiment


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServerProcess]:
    with SimServerProcess(tracing_cost.sim_config()) as server:
        yield server


def _span_kinds(run: Path) -> Counter[str]:
    """Spans in the run's trace file by the first word of their name (chat, turn …)."""
    return Counter(span["name"].split()[0] for span in read_spans(run))


def _episodes_counted(run: Path) -> int:
    """parley.episodes in the run's last metrics export (0 without one)."""
    path = run / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    if not lines:
        return 0
    total = 0
    for resource in json.loads(lines[-1])["resource_metrics"]:
        for scope in resource["scope_metrics"]:
            for metric in scope["metrics"]:
                if metric["name"] == "parley.episodes":
                    total += sum(int(p["value"]) for p in metric["data"]["data_points"])
    return total


@pytest.mark.anyio
async def test_each_mode_takes_away_its_parts_and_puts_them_back(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    seen = {}
    for n, mode in enumerate(["on", *tracing_cost.PARTS, "on"]):
        config = tracing_cost.run_config(sim.openai_url, 3, 3, {"enabled": True}, "direct")
        with tracing_cost.without(mode):
            await run_experiment(config, tmp_path / str(n))
        kinds = _span_kinds(tmp_path / str(n))
        seen[n] = (
            kinds["invoke_agent"] > 0,
            kinds["chat"] > 0,
            _episodes_counted(tmp_path / str(n)),
        )
        assert kinds["episode"] == 3 and kinds["turn"] > 0, (mode, kinds)
    # (invoke_agent spans, chat spans, episodes in the metrics), mode by mode
    assert seen == {
        0: (True, True, 3),
        1: (True, True, 0),
        2: (False, True, 0),
        3: (False, False, 0),
        4: (True, True, 3),  # traced as before: nothing stayed taken away
    }
