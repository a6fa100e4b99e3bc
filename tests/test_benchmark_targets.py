"""The benchmarks' verdicts on issue 20's targets: each target read from its own line (the right
measure, the right peer), by the advantage it needs, and only where the run measured it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import concurrency
import peers


def test_peers_reads_each_target_from_its_measure_and_peer() -> None:
    run, loop = peers.CLEM_VARIANTS["clem-run"], peers.CLEM_VARIANTS["loop-only"]
    summary = [
        peers._line("N=200 requests_per_s", [198.0, 198.3], [194.1, 194.7], "Inspect AI", "higher"),
        peers._line("N=200 wall_s", [3.1], [8.6], "Inspect AI", "lower"),
        peers._line("N=1,000 requests_per_s", [909.0], [884.0], "Inspect AI", "higher"),
        peers._line("N=2,000 requests_per_s", [1491.0], [217.0], "Inspect AI", "higher"),
        peers._line("long bench.count us_per_turn", [121.2], [154.2], run, "lower"),
        peers._line("long bench.count us_per_turn", [121.2], [54.9], loop, "lower"),
        peers._line("long comma.memory us_per_turn", [150.8], [154.2], run, "lower"),
    ]
    verdicts = {
        (t["measure"], t["peer"]): (t["needs"], t["met"]) for t in peers.against_targets(summary)
    }
    assert verdicts == {
        ("N=200 requests_per_s", "Inspect AI"): (1.0, True),
        ("N=1,000 requests_per_s", "Inspect AI"): (1.5, False),
        ("N=2,000 requests_per_s", "Inspect AI"): (1.5, True),
        ("long bench.count us_per_turn", run): (1.0, True),  # not the bare loop's line
    }
    slower = [peers._line("long bench.count us_per_turn", [160.0], [154.2], run, "lower")]
    assert [t["met"] for t in peers.against_targets(slower)] == [False]
    unmeasured = [peers._line("N=200 requests_per_s", [], [194.0], "Inspect AI", "higher")]
    assert peers.against_targets(unmeasured) == [
        {
            "measure": "N=200 requests_per_s",
            "peer": "Inspect AI",
            "needs": 1.0,
            "advantage": None,
            "met": False,
        }
    ]


def test_concurrency_target_applies_to_its_setting_only() -> None:
    def result(**changes: object) -> dict[str, object]:
        base = {
            "concurrent_episodes": 2000,
            "tracing": True,
            "achieved_vs_ideal": 0.92,
            "loop_lag_p99_ms": 33.4,
        }
        return {**base, **changes}

    assert concurrency.against_target(result())["met"] is True
    late = concurrency.against_target(result(loop_lag_p99_ms=55.9, achieved_vs_ideal=0.89))
    assert (late["met"], late["share_met"], late["lag_met"]) == (False, False, False)
    assert concurrency._target_row(late) == "missed: < 90% of ideal, lag p99 > 50 ms"
    assert concurrency.against_target(result(achieved_vs_ideal=0.9))["met"] is True  # at it
    for other in (result(concurrent_episodes=200), result(tracing=False)):
        verdict = concurrency.against_target(other)
        assert verdict["applies"] is False
        assert concurrency._target_row(verdict).startswith("not measured")
