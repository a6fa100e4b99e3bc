"""The benchmarks' verdicts on their targets: each target read from its own line (the right
measure, the right peer), by the advantage it needs, and only where the run measured it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import concurrency
import peers


def test_peers_reads_each_target_from_its_measure_and_peer() -> None:
    run, loop = peers.CLEM_VARIANTS["clem-run"], peers.CLEM_VARIANTS["loop-only"]
    raised, defaults = peers.PEER_NAMES["inspect"], peers.PEER_NAMES["inspect-defaults"]
    summary = [
        peers._line("N=200 requests_per_s", [198.0, 198.3], [194.1, 194.7], raised, "higher"),
        peers._line("N=2,000 requests_per_s", [1491.0], [1300.0], raised, "higher"),
        peers._line("N=2,000 requests_per_s", [1491.0], [217.0], defaults, "higher"),
        peers._line("N=2,000 cpu_ms_per_request", [1.0], [4.0], raised, "lower"),
        peers._line("500×5 turns requests_per_s", [480.0], [100.0], raised, "higher"),
        peers._line("long ×100 bench.count cpu_us_per_turn", [121.2], [154.2], run, "lower"),
        peers._line("long ×100 bench.count cpu_us_per_turn", [121.2], [54.9], loop, "lower"),
        peers._line("long ×19 bench.count cpu_us_per_turn", [150.8], [140.2], run, "lower"),
    ]
    verdicts = {
        (t["measure"], t["peer"]): (t["needs"], t["met"]) for t in peers.against_targets(summary)
    }
    assert verdicts == {
        ("N=2,000 requests_per_s", raised): (1.2, False),  # 1.15×: not the defaults' line
        ("N=2,000 cpu_ms_per_request", raised): (3.33, True),
        ("500×5 turns requests_per_s", raised): (3.0, True),
        ("long ×100 bench.count cpu_us_per_turn", run): (1.0, True),  # not the bare loop's
    }
    slower = [peers._line("long ×100 bench.count cpu_us_per_turn", [160.0], [154.2], run, "lower")]
    assert [t["met"] for t in peers.against_targets(slower)] == [False]
    unmeasured = [peers._line("N=2,000 requests_per_s", [], [1300.0], raised, "higher")]
    assert peers.against_targets(unmeasured) == [
        {
            "measure": "N=2,000 requests_per_s",
            "peer": raised,
            "needs": 1.2,
            "advantage": None,
            "met": False,
        }
    ]


def test_peers_compares_each_parley_side_with_its_peer_side() -> None:
    """The summary pairs parley at its defaults with Inspect AI raised (the fair line), the
    tuned parley with the same, and parley's defaults with Inspect's; long games by length."""
    rows = [
        {"workload": "single", "n": 200, "turns": 1, "who": who, "requests_per_s": rate}
        for who, rate in (
            ("parley", 190.0),
            ("parley-tuned", 195.0),
            ("inspect", 180.0),
            ("inspect-defaults", 40.0),
        )
    ]
    rows += [
        {"workload": "long", "who": who, "game": game, "length": 100, "cpu_us_per_turn": cpu}
        for who, game, cpu in (("parley", "bench.count", 110.0), ("clemcore", "clem-run", 120.0))
    ]
    lines = {(line["measure"], line["peer"]): line for line in peers.summarise(rows)}
    fair = lines[("N=200 requests_per_s", peers.PEER_NAMES["inspect"])]
    assert (fair["parley"], fair["peer_value"], fair["advantage"]) == (190.0, 180.0, 1.06)
    tuned = lines[("N=200 requests_per_s (tuned)", peers.PEER_NAMES["inspect"])]
    assert tuned["parley"] == 195.0
    assert (
        lines[("N=200 requests_per_s", peers.PEER_NAMES["inspect-defaults"])]["advantage"] == 4.75
    )
    long = lines[("long ×100 bench.count cpu_us_per_turn", peers.CLEM_VARIANTS["clem-run"])]
    assert long["advantage"] == round(120.0 / 110.0, 2)


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
