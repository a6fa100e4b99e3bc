"""The 95 % intervals of the report tables (runtime/reports/intervals.py): Wilson intervals are
scipy's, the bootstrap is seeded and deterministic, degenerate samples are handled, and the
tables show them."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
from scipy.stats import binomtest, bootstrap

from parley.records import EpisodeRecord
from parley.runtime.report import summary_rows
from parley.runtime.reports.intervals import (
    RESAMPLES,
    SEED,
    Interval,
    cell,
    grouped_interval,
    mean_cell,
    mean_interval,
    mean_of_means_interval,
    mean_of_shares_interval,
    paired_interval,
    rate_cell,
    wilson,
)
from parley.runtime.reports.pairings import pairing_tables
from tests.records import record as episode_record

CELL = re.compile(r"^(-?\d+\.\d+) \[(-?\d+\.\d+), (-?\d+\.\d+)\]$")


@pytest.mark.parametrize(("k", "n"), [(0, 10), (5, 8), (10, 10), (1, 1), (37, 120)])
def test_wilson_is_scipys_wilson_interval(k: int, n: int) -> None:
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    got = wilson(k, n)
    assert got is not None
    assert got.estimate == pytest.approx(k / n)
    assert (got.low, got.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert got.low is not None and got.high is not None
    assert got.low <= k / n <= got.high
    # The cell: the percentage as before, then the interval in percent.
    assert rate_cell(k, n) == f"{100 * k / n:.1f} [{100 * ci.low:.1f}, {100 * ci.high:.1f}]"


def test_wilson_stays_inside_zero_and_one_where_the_normal_interval_does_not() -> None:
    # 0 of 10: the normal approximation's interval is [0, 0]; Wilson's reaches above 0.
    zero = wilson(0, 10)
    assert zero is not None and zero.low == pytest.approx(0.0, abs=1e-12)
    assert zero.high is not None and 0.2 < zero.high < 0.35
    assert wilson(0, 0) is None and rate_cell(0, 0) == "–"


def test_the_bootstrap_is_scipys_seeded_bca_and_deterministic() -> None:
    values = [0.0, 0.2, 0.25, 0.5, 0.5, 0.75, 0.9, 1.0, 1.0, 0.1]
    got = mean_interval(values)
    assert got is not None
    again = mean_interval(list(values))
    assert got == again  # same values, same interval: seeded
    expected = bootstrap(
        (np.asarray(values),),
        np.mean,
        confidence_level=0.95,
        n_resamples=RESAMPLES,
        method="BCa",
        rng=np.random.default_rng(SEED),
    ).confidence_interval
    assert got.estimate == pytest.approx(sum(values) / len(values))
    assert (got.low, got.high) == (pytest.approx(expected.low), pytest.approx(expected.high))
    assert got.low is not None and got.high is not None
    assert got.low < got.estimate < got.high
    match = CELL.match(mean_cell(values))
    assert match is not None and float(match.group(1)) == pytest.approx(got.estimate, abs=0.005)


def test_degenerate_samples() -> None:
    assert mean_interval([]) is None and mean_cell([None, math.nan]) == "–"
    one = mean_interval([0.4, None])  # None is left out, as the tables' means do
    assert one == Interval(0.4, None, None) and mean_cell([0.4]) == "0.40"
    same = mean_interval([3.0, 3.0, 3.0])  # every resample gives 3
    assert same == Interval(3.0, 3.0, 3.0) and mean_cell([3.0] * 3, 1) == "3.0 [3.0, 3.0]"
    pair = mean_interval([0.0, 1.0])
    assert pair is not None and pair.low is not None and pair.high is not None
    assert 0.0 <= pair.low <= 0.5 <= pair.high <= 1.0


def test_grouped_interval_resamples_within_groups() -> None:
    def mean_of_means(groups: list[list[float]]) -> float:
        return sum(sum(g) / len(g) for g in groups) / len(groups)

    groups = [[0.0, 1.0, 1.0, 0.0, 1.0], [0.5, 0.5, 0.5]]
    got = grouped_interval(groups, mean_of_means)
    assert got is not None and got.estimate == pytest.approx((0.6 + 0.5) / 2)
    # The second group is constant: the spread is the first group's, halved.
    first = mean_interval(groups[0])
    assert first is not None and first.low is not None and first.high is not None
    assert got.low is not None and got.high is not None
    assert got.low >= (0.0 + 0.5) / 2 and got.high <= (1.0 + 0.5) / 2
    assert grouped_interval(groups, mean_of_means) == got  # seeded
    # Groups of one item have nothing to resample: the estimate alone.
    assert grouped_interval([[0.2], [0.4]], mean_of_means) == Interval(
        pytest.approx(0.3), None, None
    )
    assert grouped_interval([[1.0]], lambda gs: None) is None


def test_mean_of_means_and_paired_intervals() -> None:
    groups = [[0.0, 1.0, 1.0, 0.0, 1.0], [0.5, 0.5, 0.5], [0.2]]
    fast = mean_of_means_interval(groups)
    assert fast is not None and fast.estimate == pytest.approx((0.6 + 0.5 + 0.2) / 3)
    assert fast.low is not None and fast.high is not None
    # Only the first group varies: the interval lies within what its mean can reach.
    assert (0.0 + 0.5 + 0.2) / 3 <= fast.low < fast.estimate < fast.high <= (1.0 + 0.5 + 0.2) / 3
    assert mean_of_means_interval(groups) == fast  # seeded
    weighted = mean_of_means_interval([[1.0, 1.0], [0.0, 0.0]], weights=[3.0, 1.0])
    assert weighted == Interval(0.75, 0.75, 0.75)  # constant groups, weights 3:1
    assert mean_of_means_interval([[], []]) is None
    # Shares over groups of one size: the share of all items, with Wilson's interval (a
    # bootstrap of 100 % would be the point 100 %).
    assert mean_of_shares_interval([[1.0, 1.0], [1.0, 1.0]]) == wilson(4, 4)
    assert mean_of_shares_interval([[1.0, 0.0], [0.0, 0.0]]) == wilson(1, 4)
    uneven = mean_of_shares_interval([[1.0, 0.0, 1.0], [0.0, 1.0]])
    assert uneven is not None and uneven.estimate == pytest.approx((2 / 3 + 1 / 2) / 2)

    def ratio(a: Any, b: Any, axis: int = -1) -> Any:
        return np.mean(a, axis=axis) / np.mean(b, axis=axis)

    paired = paired_interval([[1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0]], ratio)
    # Each item keeps its pair: every resample has a ratio of exactly 0.5.
    assert paired is not None and paired.estimate == pytest.approx(0.5)
    assert paired.low == pytest.approx(0.5) and paired.high == pytest.approx(0.5)
    spread = paired_interval([[1.0, 2.0, 3.0, 4.0], [4.0, 1.0, 3.0, 2.0]], ratio)
    assert spread is not None and spread.low is not None and spread.high is not None
    assert spread.low < 1.0 < spread.high


def _record(game: str, who: str, outcome: str, main: float | None, i: int) -> EpisodeRecord:
    return episode_record(
        {
            "game": game,
            "episode": f"{who}-{i}",
            "pairing": {"solver": who, "expert": "scripted"},
            "outcome": outcome,
            "main_score": main,
            "schema": 2,
            "scores": {},
            "turns": 3,
        }
    )


def test_report_tables_show_intervals() -> None:
    records = [
        _record("comma.wire", "a", "success" if i % 4 else "lost", 100.0 if i % 4 else 20.0, i)
        for i in range(12)
    ] + [_record("comma.wire", "b", "lost", 10.0 * i, 100 + i) for i in range(5)]
    header, rows = summary_rows(records)
    by_pairing = {row[1]: dict(zip(header, row, strict=True)) for row in rows}
    a = by_pairing["solver=a, expert=scripted"]
    assert a["success %"] == rate_cell(9, 12)
    assert a["success %"].startswith("75.0 [")
    main = CELL.match(a["main"])
    assert main is not None
    estimate, low, high = (float(x) for x in main.groups())
    assert estimate == pytest.approx((9 * 100 + 3 * 20) / 12, abs=0.05)
    assert low < estimate < high
    b = by_pairing["solver=b, expert=scripted"]
    assert b["success %"] == rate_cell(0, 5) and b["main"] == mean_cell([0, 10, 20, 30, 40], 1)
    # The pairing tables (one table per metric) carry them too.
    text = pairing_tables(records)
    assert f"| a | {rate_cell(9, 12)} |" in text


def test_clem_table1_carries_wilson_and_bootstrap_intervals() -> None:
    from parley.runtime.reports.clem import table1

    def record(game: str, outcome: str, main: float | None) -> EpisodeRecord:
        return episode_record(
            {
                "game": game,
                "outcome": outcome,
                "scores": {"main": main},
                "pairing": {"r": "m"},
                "spec": {"settings": {"variant": "image"}},
            }
        )

    records = [
        record("clem.reference", "success", 100.0),
        record("clem.reference", "lost", 0.0),
        record("clem.reference", "lost", 50.0),
        record("clem.reference", "aborted", None),
        record("clem.mapworld_ee", "success", 100.0),
        record("clem.mapworld_ee", "aborted", None),
        record("clem.mapworld_ee", "success", 80.0),
        record("clem.mapworld_ee", "error", None),  # left out, as by the scores
    ]
    header, _, row = table1(records).splitlines()
    cells = dict(zip(header.strip("| ").split(" | "), row.strip("| ").split(" | "), strict=True))
    # % played per game: 3 of 4 and 2 of 3 played, Wilson's interval in percent.
    assert cells["Reference %p"] == cell(wilson(3, 4), 2, 100.0)
    assert cells["EE %p"] == cell(wilson(2, 3), 2, 100.0)
    # Quality: the mean main score of the played episodes, bootstrapped.
    assert cells["Reference ql"] == mean_cell([100.0, 0.0, 50.0], 2)
    # The clemscore: its point estimate as before, then a bootstrap interval around it.
    match = CELL.match(cells["clemscore"])
    assert match is not None
    estimate, low, high = (float(x) for x in match.groups())
    played, quality = (75.0 + 200 / 3) / 2, (50.0 + 90.0) / 2
    assert estimate == pytest.approx(played / 100 * quality, abs=0.005)
    assert low <= estimate <= high


def _priced_record() -> EpisodeRecord:
    return episode_record(
        {
            "episode": "e0",
            "outcome": "success",
            "pairing": {"solver": "m"},
            "spec": {"players": {"solver": {"kind": "llm"}}},
            "tokens": {"solver": {"input": 1_000_000, "output": 0}},
            "model_calls": {"solver": {"requests": 1, "attempts": 1, "call_s": 0.5}},
        }
    )


@pytest.mark.parametrize(
    "damage",
    [b"models: \xff\xfe\n", b"models: [\n", b"- a list\n", b"models: [m]\n", None],
)
def test_the_usage_table_prices_from_a_readable_config_and_goes_on_without_one(
    damage: bytes | None, tmp_path: Any
) -> None:
    from parley.runtime.reports.pairings import usage_table

    price = {"input_per_mtok": 2.0, "output_per_mtok": 8.0}
    (tmp_path / "config.yaml").write_text(f"models:\n  m:\n    price: {price}\n")
    priced = usage_table([_priced_record()], tmp_path)
    assert "2.0000 USD" in priced  # a million input tokens at 2 a million
    if damage is None:
        (tmp_path / "config.yaml").unlink()
    else:
        (tmp_path / "config.yaml").write_bytes(damage)
    unpriced = usage_table([_priced_record()], tmp_path)
    assert "| m | 1 | 1 |" in unpriced and "USD" not in unpriced and "| cost |" not in unpriced
