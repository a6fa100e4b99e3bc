"""95 % intervals for the report tables, from scipy: Wilson score intervals for proportions
(``scipy.stats.binomtest(...).proportion_ci(method="wilson")``) and seeded bootstrap intervals
for means and for statistics built from several groups (``scipy.stats.bootstrap``, BCa, with
the percentile interval where BCa is undefined).

A cell reads ``62.5 [48.1, 75.0]``: the point estimate as the table showed it before, then the
interval. A mean of one value has no interval and shows the value alone; a constant sample's
interval is the value itself (every resample gives it). The bootstrap is seeded, so the same
records always give the same interval, whatever the machine's load.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

LEVEL = 0.95
SEED = 0
# Enough for two-digit intervals, and few enough that a report's many cells stay quick.
RESAMPLES = 2000
# BCa needs a jackknife over every value (n statistics of n-1 values): beyond this many
# values the percentile interval is used instead (it agrees closely for large samples).
BCA_MAX = 2000

# Resamples (and BCa's jackknife samples) per vectorised call: memory stays O(BATCH × n).
BATCH = 256

T = TypeVar("T")

INTERVALS_NOTE = (
    "Rates and mean scores carry a 95 % interval in brackets: Wilson for shares, a seeded "
    "bootstrap (BCa) for means; a mean of a single value has none."
)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval (``low``/``high`` None: too few values for one)."""

    estimate: float
    low: float | None
    high: float | None

    def text(self, digits: int = 1, scale: float = 1.0) -> str:
        """``62.5 [48.1, 75.0]`` (values times ``scale``), or the estimate alone."""
        point = f"{scale * self.estimate:.{digits}f}"
        if self.low is None or self.high is None:
            return point
        return f"{point} [{scale * self.low:.{digits}f}, {scale * self.high:.{digits}f}]"


def cell(interval: Interval | None, digits: int = 1, scale: float = 1.0) -> str:
    """A table cell: the interval's text, or ``–`` when there is nothing to estimate."""
    return "–" if interval is None else interval.text(digits, scale)


def wilson(successes: int, n: int, level: float = LEVEL) -> Interval | None:
    """The share ``successes / n`` with its Wilson score interval (None when ``n`` is 0)."""
    if n <= 0:
        return None
    from scipy.stats import binomtest

    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return Interval(successes / n, float(ci.low), float(ci.high))


def rate_cell(successes: int, n: int, digits: int = 1) -> str:
    """A percentage with its Wilson interval: ``62.5 [48.1, 75.0]`` (``–`` when ``n`` is 0)."""
    return cell(wilson(successes, n), digits, 100.0)


def _numbers(values: Sequence[Any]) -> list[float]:
    """The numeric values (None and NaN left out, as the tables' means do)."""
    out = []
    for v in values:
        if isinstance(v, int | float):  # bool is an int: a share
            f = float(v)
            if not math.isnan(f):
                out.append(f)
    return out


def _bootstrap(
    data: tuple[Any, ...],
    statistic: Callable[..., Any],
    vectorized: bool,
    level: float,
    bca_max: int = BCA_MAX,
) -> list[tuple[float, float]]:
    """(low, high) per output of ``statistic``: BCa, and the percentile interval for an
    output where BCa is undefined (NaN: a degenerate sample) or the sample is too large."""
    import numpy as np
    from scipy.stats import bootstrap

    size = sum(len(d) for d in data)
    out: list[tuple[float, float]] | None = None
    for method in ("BCa", "percentile") if size <= bca_max else ("percentile",):
        with warnings.catch_warnings():
            # scipy warns where BCa is undefined and returns NaN there: handled below.
            warnings.simplefilter("ignore")
            result = bootstrap(
                data,
                statistic,
                vectorized=vectorized,
                confidence_level=level,
                n_resamples=RESAMPLES,
                batch=BATCH,
                method=method,
                rng=np.random.default_rng(SEED),
            )
        lows = np.atleast_1d(result.confidence_interval.low)
        highs = np.atleast_1d(result.confidence_interval.high)
        found = [(float(lo), float(hi)) for lo, hi in zip(lows, highs, strict=True)]
        out = (
            found
            if out is None
            else [
                new if math.isnan(old[0]) or math.isnan(old[1]) else old
                for old, new in zip(out, found, strict=True)
            ]
        )
        if not any(math.isnan(lo) or math.isnan(hi) for lo, hi in out):
            break
    assert out is not None
    return out


def mean_interval(values: Sequence[Any], level: float = LEVEL) -> Interval | None:
    """The mean of ``values`` (None and NaN left out) with its seeded bootstrap interval."""
    xs = _numbers(values)
    if not xs:
        return None
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return Interval(mean, None, None)
    if min(xs) == max(xs):
        return Interval(mean, xs[0], xs[0])
    import numpy as np

    ((low, high),) = _bootstrap((np.asarray(xs),), np.mean, True, level)
    if math.isnan(low):
        return Interval(mean, None, None)
    return Interval(mean, low, high)


def mean_cell(values: Sequence[Any], digits: int = 2, scale: float = 1.0) -> str:
    """A mean with its bootstrap interval: ``0.62 [0.48, 0.75]`` (``–`` without values)."""
    return cell(mean_interval(values), digits, scale)


def grouped_intervals(
    groups: Sequence[Sequence[T]],
    statistic: Callable[[list[list[T]]], Sequence[float | None]],
    level: float = LEVEL,
) -> list[Interval | None]:
    """Statistics of several groups (games, puzzles) with stratified bootstrap intervals: each
    group's items are resampled within the group, in one pass for all the statistics.
    ``statistic`` gets the groups (lists of items) and returns a number per statistic (None:
    nothing to estimate). A group of one item is held fixed (it has no spread to resample);
    with no group of two or more items there is no interval.
    """
    items: list[list[T]] = [list(g) for g in groups]
    estimates = list(statistic(items))
    varying = [i for i, g in enumerate(items) if len(g) >= 2]
    intervals: list[Interval | None] = [
        None if e is None or math.isnan(e) else Interval(float(e), None, None) for e in estimates
    ]
    if not varying or all(iv is None for iv in intervals):
        return intervals
    import numpy as np

    # Object arrays: a resample is one fancy-indexing call, not a Python loop over items.
    arrays = {i: np.empty(len(items[i]), dtype=object) for i in varying}
    for i, array in arrays.items():
        array[:] = items[i]

    def resampled(*indices: Any) -> Any:
        chosen = list(items)
        for i, idx in zip(varying, indices, strict=True):
            chosen[i] = arrays[i][idx.astype(np.intp)].tolist()
        return np.array([math.nan if v is None else float(v) for v in statistic(chosen)])

    data = tuple(np.arange(len(items[i]), dtype=float) for i in varying)
    # A Python statistic per resample: BCa's jackknife (one call per item) only for small runs.
    bounds = _bootstrap(data, resampled, False, level, bca_max=1000)
    out: list[Interval | None] = []
    for iv, (low, high) in zip(intervals, bounds, strict=True):
        if iv is None or math.isnan(low) or math.isnan(high):
            out.append(iv)  # nothing to estimate, or some resamples had nothing to estimate
        else:
            out.append(Interval(iv.estimate, low, high))
    return out


def mean_of_means_interval(
    groups: Sequence[Sequence[float]],
    weights: Sequence[float] | None = None,
    level: float = LEVEL,
) -> Interval | None:
    """The (weighted) mean of the groups' means, with a stratified bootstrap interval that
    resamples values within each group; vectorised, so fast on thousands of values. Groups
    without values are left out; a group of one value is held fixed."""
    import numpy as np

    pairs = [(list(map(float, g)), 1.0 if weights is None else float(w))
             for g, w in zip(groups, weights or [1.0] * len(groups), strict=True) if len(g)]  # fmt: skip
    total = sum(w for _, w in pairs)
    if not pairs or total == 0:
        return None
    estimate = sum(w * sum(g) / len(g) for g, w in pairs) / total
    fixed = sum(w * sum(g) / len(g) for g, w in pairs if len(g) < 2)
    varying = [(np.asarray(g), w) for g, w in pairs if len(g) >= 2]
    if not varying:
        return Interval(estimate, None, None)
    if all(float(np.ptp(g)) == 0.0 for g, _ in varying):
        return Interval(estimate, estimate, estimate)  # constant groups: every resample agrees
    ws = [w for _, w in varying]

    def statistic(*samples: Any, axis: int = -1) -> Any:
        return (
            fixed + sum(w * np.mean(x, axis=axis) for x, w in zip(samples, ws, strict=True))
        ) / total

    ((low, high),) = _bootstrap(tuple(g for g, _ in varying), statistic, True, level)
    if math.isnan(low) or math.isnan(high):
        return Interval(estimate, None, None)
    return Interval(estimate, low, high)


def mean_of_shares_interval(groups: Sequence[Sequence[float]]) -> Interval | None:
    """The mean of the groups' shares (values 0 or 1). With groups of one size that is the
    share of all the items, and its interval is Wilson's (a bootstrap would collapse to a
    point at 0 % or 100 %); with sizes that differ, the stratified bootstrap of
    :func:`mean_of_means_interval`."""
    present = [list(map(float, g)) for g in groups if len(g)]
    if not present:
        return None
    if len({len(g) for g in present}) == 1:
        return wilson(round(sum(sum(g) for g in present)), sum(len(g) for g in present))
    return mean_of_means_interval(present)


def paired_interval(
    columns: Sequence[Sequence[float]],
    statistic: Callable[..., Any],
    level: float = LEVEL,
) -> Interval | None:
    """A statistic of several values per item (an episode's PSR and tokens) with a bootstrap
    interval that resamples items, keeping each item's values together. ``statistic(*columns,
    axis=-1)`` must be vectorised (numpy) along ``axis``."""
    import numpy as np

    arrays = [np.asarray(c, dtype=float) for c in columns]
    if not arrays or not len(arrays[0]):
        return None
    estimate = float(statistic(*arrays, axis=-1))
    if len(arrays[0]) < 2:
        return Interval(estimate, None, None)
    if all(float(np.ptp(a)) == 0.0 for a in arrays):
        return Interval(estimate, estimate, estimate)
    from scipy.stats import bootstrap

    def bounds(method: str) -> tuple[float, float]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # BCa undefined: NaN, and the percentile below
            ci = bootstrap(
                tuple(arrays),
                statistic,
                paired=True,
                vectorized=True,
                confidence_level=level,
                n_resamples=RESAMPLES,
                batch=BATCH,
                method=method,
                rng=np.random.default_rng(SEED),
            ).confidence_interval
        return float(ci.low), float(ci.high)

    low, high = bounds("BCa" if len(arrays[0]) <= BCA_MAX else "percentile")
    if math.isnan(low) or math.isnan(high):
        low, high = bounds("percentile")
    if math.isnan(low) or math.isnan(high):
        return Interval(estimate, None, None)
    return Interval(estimate, low, high)


def grouped_interval(
    groups: Sequence[Sequence[T]],
    statistic: Callable[[list[list[T]]], float | None],
    level: float = LEVEL,
) -> Interval | None:
    """One statistic of several groups with its stratified bootstrap interval
    (:func:`grouped_intervals`)."""
    return grouped_intervals(groups, lambda gs: [statistic(gs)], level)[0]
