"""Learning curves: the score by episode index, for runs with memory across episodes.

A *curve* is one game, pairing and memory setting (``memory: opener=notes`` or ``memory
off``). Its episodes fall into *keys* (docs/memory.md): the episodes one agent remembers, in
the order they were played (seed, repetition, id). The point at index ``i`` is the mean main
score of every key's ``i``-th episode, with a 95 % bootstrap interval over keys (none with a
single key). Episodes without memory of the same game and pairing are indexed
the same way, as one key per block of settings, so the memoryless baseline sits beside the
curve it is compared with. Written only when some episode of the run remembers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from parley.memory.across import record_memory_keys
from parley.records import EpisodeRecord
from parley.runtime.reports.escape import md, plot_label
from parley.runtime.reports.intervals import mean_cell, mean_interval

MAX_COLUMNS = 20


def mean_ci(values: list[float]) -> tuple[float, float | None, float | None]:
    """Mean and its 95 % bootstrap interval (runtime/reports/intervals.py; no interval for a
    single value)."""
    interval = mean_interval(values)
    assert interval is not None, "mean_ci needs at least one value"
    return interval.estimate, interval.low, interval.high


def _across(record: EpisodeRecord) -> dict[str, dict[str, Any]]:
    memory = record.spec.get("memory") or {}
    return {
        role: m["across"]
        for role, m in memory.items()
        if isinstance(m, dict) and (m.get("across") or {}).get("policy", "none") != "none"
    }


def curve_label(record: EpisodeRecord) -> str:
    """The curve a record belongs to: its game, pairing and memory across episodes."""
    pairing = ", ".join(f"{role}={who}" for role, who in record.pairing.items())
    across = _across(record)
    memory = ", ".join(f"{role}={a['policy']}" for role, a in across.items()) or "off"
    return f"{record['game']} · {pairing} · memory {memory}"


def _key(record: EpisodeRecord) -> str:
    """The episodes a record's agents remember together (or, without memory, its block)."""
    spec = record.spec
    if _across(record):
        return "&".join(sorted(record_memory_keys(record).values()))
    return repr(sorted((spec.get("settings") or {}).items()))


def curves(records: list[EpisodeRecord]) -> dict[str, list[list[float]]]:
    """Per curve: the scores by episode index, one list per index (one value per key)."""
    keyed: dict[str, dict[str, list[EpisodeRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        keyed[curve_label(r)][_key(r)].append(r)
    out: dict[str, list[list[float]]] = {}
    for label, keys in keyed.items():
        points: list[list[float]] = []
        for episodes in keys.values():
            episodes.sort(key=lambda r: (r.seed, r.repetition, r.episode))
            for i, r in enumerate(episodes):
                while len(points) <= i:
                    points.append([])
                score = r.main_score
                if score is not None:
                    points[i].append(float(score))
        out[label] = points
    return out


def _bins(length: int) -> list[range]:
    width = max(1, math.ceil(length / MAX_COLUMNS))
    return [range(i, min(i + width, length)) for i in range(0, length, width)]


def _cell(values: list[float]) -> str:
    return mean_cell(values, 1)


def _plot(data: dict[str, list[list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, points in data.items():
        xs, means, lows, highs = [], [], [], []
        for i, values in enumerate(points):
            if not values:
                continue
            mean, low, high = mean_ci(values)
            xs.append(i + 1)
            means.append(mean)
            lows.append(mean if low is None else low)
            highs.append(mean if high is None else high)
        (line,) = ax.plot(xs, means, marker="o", markersize=3, label=plot_label(label))
        ax.fill_between(xs, lows, highs, alpha=0.2, color=line.get_color())
    ax.set_xlabel("episode index (per key, in play order)")
    ax.set_ylabel("main score (mean, 95 % bootstrap interval over keys)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(records: list[EpisodeRecord], run_dir: Path) -> str:
    """The learning-curve section (and ``learning_curve.png``), or "" when nothing remembers."""
    remembering = {(r.game, tuple(r.pairing.items())) for r in records if _across(r)}
    if not remembering:
        return ""
    # Each remembering curve, and the memoryless episodes of the same game and pairing.
    shown = [r for r in records if (r.game, tuple(r.pairing.items())) in remembering]
    data = dict(sorted(curves(shown).items()))
    length = max(len(points) for points in data.values())
    bins = _bins(length)
    header = [
        "curve",
        "keys",
        *(f"{b.start + 1}" if len(b) == 1 else f"{b.start + 1}–{b.stop}" for b in bins),
    ]
    rows = []
    for label, points in data.items():
        cells = [_cell([v for i in b if i < len(points) for v in points[i]]) for b in bins]
        rows.append([md(label), str(len(points[0]) if points else 0), *cells])
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    _plot(data, run_dir / "learning_curve.png")
    return "\n".join(
        [
            "## Learning curves (memory across episodes)",
            "",
            "Main score by episode index: the i-th episode each agent played of its key "
            "(docs/memory.md), mean [95 % bootstrap interval] over keys; `memory off` is the same "
            "game and pairing without memory. Columns of several indices pool them.",
            "",
            *lines,
            "",
            "Plot: `learning_curve.png`.",
        ]
    )
