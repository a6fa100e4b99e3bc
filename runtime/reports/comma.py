"""COMMA's tables (seed 001): PSR by puzzle with 95 % intervals in the paper's Table 1 layout, SR,
mistakes, conversation length and efficiency per pairing, and the turn-limit curve (success
when only the first t solver turns count, computed by cutting the recorded transcripts).

Metrics per episode (``episode_metrics``): SR (0/1), PSR (0–1; 1 on success, else the
puzzle's partial score), mistakes, conversation length ((solver + expert messages) // 2),
tokens = the output tokens of the solver's and the expert's messages (the backend's count when
a model answered, otherwise ``parley.agents.tokens`` — ``token_source`` says which),
conciseness ``c = 1 / (1 + tokens / 1000)`` and efficiency ``2·PSR·c / (PSR + c)``.
Per pairing, efficiency is computed as in the paper, from the mean PSR and the mean tokens.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from parley.records import EpisodeRecord, TokenCounts, parse_message
from parley.runtime.report import markdown_table
from parley.runtime.reports.escape import csv_cell, md, plot_label
from parley.runtime.reports.intervals import (
    INTERVALS_NOTE,
    cell,
    mean_cell,
    mean_of_means_interval,
    mean_of_shares_interval,
    paired_interval,
    wilson,
)

PUZZLES = (
    "wire",
    "telehealth",
    "who",
    "led",
    "memory",
    "keypad",
    "password",
    "colour",
    "maze",
    "atm",
)
TITLES = {
    "wire": "Wire",
    "telehealth": "Telehealth",
    "who": "Who",
    "led": "LED",
    "memory": "Memory",
    "keypad": "Keypad",
    "password": "Password",
    "colour": "Color",
    "maze": "Maze",
    "atm": "ATM",
}
LOOP_DEFAULTS = {"max_turns": 10, "max_mistakes": 3, "variant": "image"}
PLAYED = ("success", "lost", "aborted")


def efficiency(psr: float, tokens: float) -> float:
    """The paper's efficiency: harmonic mean of PSR (0–1) and conciseness ``1/(1+tokens/1000)``."""
    c = 1.0 / (1.0 + tokens / 1000.0)
    return 0.0 if psr + c == 0 else 2 * psr * c / (psr + c)


def _efficiency(psr: Any, tokens: Any, axis: int = -1) -> Any:
    """:func:`efficiency` of the means of arrays (vectorised for the bootstrap)."""
    import numpy as np

    p, c = np.mean(psr, axis=axis), 1.0 / (1.0 + np.mean(tokens, axis=axis) / 1000.0)
    return 2 * p * c / (p + c)  # c > 0, so p + c > 0


def puzzle_of(record: EpisodeRecord) -> str:
    return record.game.split(".", 1)[1]


def group_label(record: EpisodeRecord) -> str:
    """The pairing, plus memory policies and loop settings that differ from the defaults (so
    ablations get their own rows)."""
    label = ", ".join(f"{role}={who}" for role, who in record.pairing.items())
    spec = record.spec
    extras = []
    for role, memory in (spec.get("memory") or {}).items():
        if memory.get("policy", "full") != "full":
            policy = memory["policy"]
            extras.append(
                f"{role} memory {policy}" + (f"={memory.get('k')}" if policy == "last_k" else "")
            )
    settings = spec.get("settings") or {}
    extras += [
        f"{k}={settings[k]}"
        for k in LOOP_DEFAULTS
        if k in settings and settings[k] != LOOP_DEFAULTS[k]
    ]
    return f"{label} [{'; '.join(extras)}]" if extras else label


def episode_metrics(record: EpisodeRecord) -> dict[str, Any] | None:
    """COMMA's per-episode metrics, or None for an episode that was not played to an end."""
    if record.outcome not in PLAYED:
        return None
    scores = record.scores
    success = 1.0 if record.outcome == "success" else 0.0
    psr = 1.0 if success else float(scores.get("psr") or 0.0)
    none = TokenCounts()
    solver = record.tokens.get("solver", none).output
    expert = record.tokens.get("expert", none).output
    sources = sorted(set(record.token_source.values())) or ["none"]
    return {
        "episode": record.episode,
        "puzzle": puzzle_of(record),
        "seed": record.seed,
        "group": group_label(record),
        "success": success,
        "psr": psr,
        "mistakes": float(scores.get("mistakes") or 0.0),
        "conversation_length": float(scores.get("conversation_length") or 0.0),
        "turns": float(scores.get("turns") or 0.0),
        "tokens_solver": solver,
        "tokens_expert": expert,
        "tokens": solver + expert,
        "token_source": "+".join(sources),
        "efficiency": efficiency(psr, solver + expert),
        # COMMA's rules score an episode cut at the turn limit as PSR 0 (docs/comma.md).
        "cut_scores_zero": (record.spec.get("settings") or {}).get("rules", "comma") == "comma",
    }


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for a single value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def _cell(values: list[float], scale: float, digits: int, share: bool = False) -> str:
    """A mean with its 95 % interval: Wilson for a share of episodes (0/1 values), the
    bootstrap otherwise (runtime/reports/intervals.py)."""
    if share:
        return cell(wilson(round(sum(values)), len(values)), digits, scale)
    return mean_cell(values, digits, scale)


def _overall(per_puzzle: list[list[float]], scale: float, digits: int, share: bool) -> str:
    # As in the paper: the mean of the puzzle means; its interval resamples the episodes
    # within each puzzle (a stratified bootstrap), or for a share over puzzles of one size
    # (the share of all their episodes) is Wilson's.
    if share:
        return cell(mean_of_shares_interval(per_puzzle), digits, scale)
    return cell(mean_of_means_interval(per_puzzle), digits, scale)


def by_puzzle_table(
    rows: list[dict[str, Any]], key: str, scale: float = 100.0, digits: int = 1
) -> str:
    """Groups × puzzles (paper order) of ``key``'s mean with its 95 % interval, with an overall
    column (the mean of the puzzle means)."""
    puzzles = [p for p in PUZZLES if any(r["puzzle"] == p for r in rows)]
    groups = sorted({r["group"] for r in rows})
    out = []
    for group in groups:
        cells, present = [], []
        for puzzle in puzzles:
            values = [r[key] for r in rows if r["group"] == group and r["puzzle"] == puzzle]
            cells.append(_cell(values, scale, digits, key == "success") if values else "–")
            if values:
                present.append(values)
        overall = _overall(present, scale, digits, key == "success") if present else "–"
        out.append([md(group), *cells, overall])
    return markdown_table(["pairing", *(TITLES[p] for p in puzzles), "Overall"], out)


def pairing_table(rows: list[dict[str, Any]]) -> str:
    out = []
    for group in sorted({r["group"] for r in rows}):
        g = [r for r in rows if r["group"] == group]
        n = len(g)
        # The paper's efficiency is a function of two means: its interval resamples episodes.
        eff = paired_interval([[r["psr"] for r in g], [r["tokens"] for r in g]], _efficiency)
        out.append(
            [
                md(group),
                str(n),
                _cell([r["success"] for r in g], 100, 1, share=True),
                _cell([r["psr"] for r in g], 100, 1),
                f"{sum(r['mistakes'] for r in g) / n:.2f}",
                f"{sum(r['conversation_length'] for r in g) / n:.2f}",
                f"{sum(r['tokens_solver'] for r in g) / n:.1f}",
                f"{sum(r['tokens_expert'] for r in g) / n:.1f}",
                "/".join(sorted({r["token_source"] for r in g})),
                cell(eff, 1, 100.0),
                mean_cell([r["efficiency"] for r in g], 1, 100.0),
            ]
        )
    header = [
        "pairing",
        "episodes",
        "SR %",
        "PSR %",
        "mistakes",
        "conv. length",
        "tokens solver",
        "tokens expert",
        "token source",
        "efficiency",
        "mean episode efficiency",
    ]
    return markdown_table(header, out)


# Turn-limit curve --------------------------------------------------------------------------


class _Trace:
    """One episode's partial score after each solver turn, built message by message."""

    def __init__(self) -> None:
        self.progress: list[float] = []
        self.current = 0.0
        self.won = False

    def add(self, message: dict[str, Any]) -> None:
        kind = message.get("kind")
        if kind == "turn_response" and message.get("role") == "solver":
            self.progress.append(self.current)
        elif kind == "transcript_event" and message.get("event") == "action":
            self.current = float((message.get("data") or {}).get("progress") or 0.0)
            if self.progress:
                self.progress[-1] = self.current
        elif kind == "episode_finished":
            self.won = message.get("outcome") == "success"


def turn_trace(transcript: list[dict[str, Any]]) -> tuple[list[float], bool]:
    """The partial score after each solver turn, and whether the episode was won (on its last
    solver turn: a win ends the episode at once)."""
    trace = _Trace()
    for message in transcript:
        trace.add(message)
    return trace.progress, trace.won


def cut(
    progress: list[float], won: bool, limit: int, zero_when_cut: bool = False
) -> tuple[float, float]:
    """(SR, PSR) of the episode had only its first ``limit`` solver turns counted;
    ``zero_when_cut``: an episode the limit cuts scores PSR 0 (``rules: comma``)."""
    if won and len(progress) <= limit:
        return 1.0, 1.0
    seen = progress[:limit]
    if zero_when_cut and len(progress) > limit:
        return 0.0, 0.0
    return 0.0, (seen[-1] if seen else 0.0)


def turn_limit_cuts(
    rows: list[dict[str, Any]], traces: dict[str, tuple[list[float], bool]], limit: int
) -> dict[str, list[list[tuple[float, float]]]]:
    """Per group, for 1 … ``limit`` allowed turns: each episode's (SR, PSR) had only that many
    solver turns counted."""
    out: dict[str, list[list[tuple[float, float]]]] = {}
    for group in sorted({r["group"] for r in rows}):
        g = [
            (*traces[r["episode"]], bool(r.get("cut_scores_zero")))
            for r in rows
            if r["group"] == group and r["episode"] in traces
        ]
        if g:
            out[group] = [
                [cut(progress, won, t, zero) for progress, won, zero in g]
                for t in range(1, limit + 1)
            ]
    return out


def turn_limit_curves(
    rows: list[dict[str, Any]], traces: dict[str, tuple[list[float], bool]], limit: int
) -> dict[str, list[tuple[int, float, float]]]:
    """Per group: (allowed turns, SR %, PSR %) for 1 … ``limit``."""
    curves: dict[str, list[tuple[int, float, float]]] = {}
    for group in sorted({r["group"] for r in rows}):
        g = [
            (*traces[r["episode"]], bool(r.get("cut_scores_zero")))
            for r in rows
            if r["group"] == group and r["episode"] in traces
        ]
        if not g:
            continue
        points = []
        for t in range(1, limit + 1):
            cuts = [cut(progress, won, t, zero) for progress, won, zero in g]
            points.append(
                (t, 100 * sum(s for s, _ in cuts) / len(g), 100 * sum(p for _, p in cuts) / len(g))
            )
        curves[group] = points
    return curves


def _plot_curves(curves: dict[str, list[tuple[int, float, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for group, points in curves.items():
        ts = [p[0] for p in points]
        axes[0].plot(ts, [p[1] for p in points], marker="o", label=plot_label(group))
        axes[1].plot(ts, [p[2] for p in points], marker="o", label=plot_label(group))
    for ax, title in zip(axes, ("Success rate", "Partial success rate"), strict=True):
        ax.set_title(f"{title} by turns allowed")
        ax.set_xlabel("solver turns allowed")
        ax.set_ylabel("%")
        ax.set_ylim(0, 102)
        ax.grid(alpha=0.3)
    fig.legend(
        *axes[0].get_legend_handles_labels(),
        fontsize=7,
        loc="lower center",
        ncol=2,
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_psr(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    puzzles = [p for p in PUZZLES if any(r["puzzle"] == p for r in rows)]
    groups = sorted({r["group"] for r in rows})
    width = 0.8 / max(1, len(groups))
    fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(puzzles) + 2), 4.2))
    for i, group in enumerate(groups):
        means, errors, xs = [], [], []
        for j, puzzle in enumerate(puzzles):
            values = [r["psr"] for r in rows if r["group"] == group and r["puzzle"] == puzzle]
            if values:
                mean, se = mean_se(values)
                xs.append(j + (i - (len(groups) - 1) / 2) * width)
                means.append(100 * mean)
                errors.append(100 * se)
        ax.bar(xs, means, width, yerr=errors, capsize=2, label=plot_label(group))
    ax.set_xticks(range(len(puzzles)), [TITLES[p] for p in puzzles])
    ax.set_ylabel("PSR % (± standard error)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def iter_messages(run_dir: Path, episodes: set[str]) -> Iterator[dict[str, Any]]:
    """The recorded messages of ``episodes``, each episode's in order, in one pass over the
    run's transcripts (``RunFolder.iter_transcript`` looks one episode up at a time)."""
    from parley.runtime.results import RunFolder

    folder = RunFolder(run_dir)
    if folder.transcripts.is_file():
        with folder.transcripts.open("rb") as f:
            for line in f:
                message = parse_message(line)  # None for a torn or damaged line
                if message is not None and message.get("episode") in episodes:
                    yield message
        return
    for episode in sorted(episodes):
        try:
            yield from folder.iter_transcript(episode)
        except FileNotFoundError:
            continue


def transcripts(run_dir: Path, episodes: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The recorded messages of ``episodes``, by episode."""
    out: dict[str, list[dict[str, Any]]] = {}
    for message in iter_messages(run_dir, episodes):
        out.setdefault(message["episode"], []).append(message)
    return out


def _traces(records: list[EpisodeRecord], run_dir: Path) -> dict[str, tuple[list[float], bool]]:
    traces: dict[str, _Trace] = {}
    for message in iter_messages(run_dir, {r.episode for r in records}):
        traces.setdefault(message["episode"], _Trace()).add(message)
    return {e: (t.progress, t.won) for e, t in traces.items()}


def write_episode_csv(rows: list[dict[str, Any]], path: Path) -> None:
    if not rows:
        return
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        # Model names and replies may start with "=" etc.: a spreadsheet would run them.
        writer.writerows({k: csv_cell(v) for k, v in row.items()} for row in rows)


def report(records: list[EpisodeRecord], run_dir: Path) -> str:
    """COMMA's section of a run report; writes ``comma_episodes.csv``, ``comma_psr.png`` and
    ``comma_turn_limit.png`` into ``run_dir``."""
    rows = [m for r in records if (m := episode_metrics(r)) is not None]
    skipped = len(records) - len(rows)
    parts = ["## COMMA", ""]
    if not rows:
        return "\n".join([*parts, "No COMMA episode was played to an end.", ""])
    run_dir = Path(run_dir)
    parts += [
        f"{len(rows)} episodes played to an end"
        + (
            f" ({skipped} more ended in error or were cancelled and are left out)"
            if skipped
            else ""
        )
        + ". Tokens: output tokens of the solver's and the expert's messages.",
        "",
        "### Partial success rate (%), mean [95 % interval] (the paper's Table 1 layout)",
        "",
        by_puzzle_table(rows, "psr"),
        "",
        "### Per pairing: SR, PSR, mistakes, conversation length, tokens, efficiency",
        "",
        pairing_table(rows),
        "",
        "Efficiency as in the paper: 2·PSR·c/(PSR + c), c = 1/(1 + tokens/1000), from the mean "
        "PSR and mean tokens of the row (×100); the last column averages it per episode. "
        + INTERVALS_NOTE
        + " Overall columns: the mean of the puzzle means, bootstrapped within each puzzle. "
        "The paper reports ± standard error; `comma_psr.png` shows that.",
        "",
        "### Success rate (%) by puzzle",
        "",
        by_puzzle_table(rows, "success"),
        "",
        "### Mistakes per episode by puzzle",
        "",
        by_puzzle_table(rows, "mistakes", scale=1.0, digits=2),
        "",
        "### Conversation length by puzzle",
        "",
        by_puzzle_table(rows, "conversation_length", scale=1.0, digits=2),
        "",
    ]
    write_episode_csv(rows, run_dir / "comma_episodes.csv")
    _plot_psr(rows, run_dir / "comma_psr.png")
    traces = _traces([r for r in records if r.outcome in PLAYED], run_dir)
    limit = max(int((r.spec.get("settings") or {}).get("max_turns", 10)) for r in records)
    curves = turn_limit_curves(rows, traces, limit)
    if curves:
        header = ["pairing", *(str(t) for t in range(1, limit + 1))]
        cuts = turn_limit_cuts(rows, traces, limit)
        sr_rows = [
            [g, *(_cell([c[0] for c in at], 100, 0, share=True) for at in cuts[g])] for g in curves
        ]
        psr_rows = [[g, *(_cell([c[1] for c in at], 100, 0) for at in cuts[g])] for g in curves]
        _plot_curves(curves, run_dir / "comma_turn_limit.png")
        parts += [
            "### Turn-limit curve: success when only the first t solver turns count",
            "",
            "SR %:",
            "",
            markdown_table(header, sr_rows),
            "",
            "PSR %:",
            "",
            markdown_table(header, psr_rows),
            "",
            "Plots: `comma_turn_limit.png`, `comma_psr.png`; per-episode metrics: "
            "`comma_episodes.csv`.",
            "",
        ]
    return "\n".join(parts)
