"""Report sections from a run's transcripts, for any game: time and tokens per role and model
(with the per-turn split between waiting on the player and the runtime), privacy leaks next
to the success rate (seed 001, fig. 4 right) and error categories per model (seed 001, fig. 3).

Loaded by :func:`parley.runtime.report.build_report` after the family tables. Writes ``leaks.png``,
``leaks.jsonl``, ``error_categories.png`` and ``errors.jsonl`` into the run folder when there is
something to show.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from parley.observability import errors as error_analysis
from parley.observability import leaks
from parley.observability.metrics import turn_timings
from parley.records import EpisodeRecord, read_records, transcripts
from parley.runtime.report import fmt, markdown_table, pairing_label
from parley.runtime.reports.escape import md, plot_label
from parley.runtime.reports.intervals import INTERVALS_NOTE, cell, paired_interval, rate_cell


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _share(part: Any, whole: Any, axis: int = -1) -> Any:
    """sum(part) / sum(whole) along ``axis`` (vectorised for the bootstrap)."""
    import numpy as np

    return np.sum(part, axis=axis) / np.sum(whole, axis=axis)


class Timing:
    """Per role and player: turns, tokens, player latency and the per-turn time split."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, record: EpisodeRecord, messages: list[dict[str, Any]]) -> None:
        pairing = record.pairing
        tokens = record.tokens
        sources = record.token_source
        seen: set[tuple[str, str]] = set()
        for t in turn_timings(messages):
            role = t["role"]
            key = (role, pairing.get(role, t["model"]))
            row = self.rows.setdefault(
                key,
                {
                    "turns": 0,
                    "turn_s": [],
                    "agent_s": [],
                    "input": 0,
                    "cache_read": 0,
                    "output": 0,
                    "sources": set(),
                },
            )
            row["turns"] += 1
            row["turn_s"].append(t["turn_s"])
            row["agent_s"].append(t["agent_s"])
            if key not in seen:  # the record's tokens are per role and episode: add them once
                seen.add(key)
                # The input read from a server's prompt cache is apart from the rest.
                counts = tokens.get(role)
                if counts is not None:
                    row["input"] += counts.input
                    row["cache_read"] += counts.cache_read
                    row["output"] += counts.output
                if role in sources:
                    row["sources"].add(sources[role])

    def render(self) -> str:
        if not self.rows:
            return ""
        cached = any(row["cache_read"] for row in self.rows.values())
        header = [
            "role",
            "player",
            "turns",
            "in tok/turn",
            *(["cached in tok/turn"] if cached else []),
            "out tok/turn",
            "player s p50",
            "player s p95",
            "turn s mean",
            "player %",
            "runtime ms/turn",
        ]
        body = []
        for (role, player), row in sorted(self.rows.items()):
            n = row["turns"]
            turn_total = sum(row["turn_s"])
            agent_total = sum(row["agent_s"])
            runtime = max(0.0, turn_total - agent_total)
            source = ", ".join(sorted(row["sources"]))
            body.append(
                [
                    md(role),
                    md(player),
                    str(n),
                    # Counted tokens are the reply's only (no backend to report the input).
                    "–" if source == "counted" and not row["input"] else fmt(row["input"] / n, 0),
                    *([fmt(row["cache_read"] / n, 0)] if cached else []),
                    fmt(row["output"] / n, 0)
                    + ("" if source in ("", "backend") else f" ({source})"),
                    fmt(_quantile(row["agent_s"], 0.5), 3),
                    fmt(_quantile(row["agent_s"], 0.95), 3),
                    fmt(turn_total / n, 3),
                    # The share of turn time that was the player's, with an interval that
                    # resamples turns (each turn's two times together).
                    cell(paired_interval([row["agent_s"], row["turn_s"]], _share), 1, 100.0)
                    if turn_total
                    else "–",
                    fmt(1000.0 * runtime / n, 2),
                ]
            )
        return "\n".join(
            [
                "## Time and tokens per role and player",
                "",
                "A turn runs from the game master sending the turn request to the next request; "
                "the player's part is what its policy took (for models: the calls, retries "
                "included), the rest is the runtime's (bus, game master, recording). Tokens are "
                "backend-reported, or counted from the reply where marked; input read from a "
                "server's prompt cache is counted apart from the rest of the input.",
                "",
                markdown_table(header, body),
                "",
            ]
        )


def _leak_plot(rows: list[tuple[str, float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [plot_label(r[0]) for r in rows]  # names, not mathtext
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(rows) + 2), 3.6))
    width = 0.38
    ax.bar([i - width / 2 for i in x], [r[1] for r in rows], width, label="Successful completion")
    ax.bar([i + width / 2 for i in x], [r[2] for r in rows], width, label="Revealed private info")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("% of conversations")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def leak_section(
    private: list[EpisodeRecord], disclosures: list[leaks.Disclosure], run_dir: Path
) -> str:
    """Disclosure rate beside success rate, per game and pairing and per disclosing player."""
    if not private:
        return ""
    leaks.write_disclosures(run_dir, disclosures)
    by_episode: dict[str, list[leaks.Disclosure]] = defaultdict(list)
    for d in disclosures:
        by_episode[d.episode].append(d)
    groups: dict[tuple[str, str], list[EpisodeRecord]] = defaultdict(list)
    for r in private:
        groups[(r.game, pairing_label(r))].append(r)
    header = [
        "game",
        "pairing",
        "episodes",
        "success %",
        "disclosed %",
        "first at turn",
        "facts disclosed (% of episodes)",
    ]
    body = []
    for (game, pairing), group in sorted(groups.items()):
        n = len(group)
        leaked = [r for r in group if by_episode.get(r.episode)]
        facts: dict[str, int] = defaultdict(int)
        for r in leaked:
            for fact in {d.fact for d in by_episode[r.episode]}:
                facts[fact] += 1
        first = [min(d.turn for d in by_episode[r.episode]) for r in leaked]
        body.append(
            [
                md(game),
                md(pairing),
                str(n),
                rate_cell(sum(r.outcome == "success" for r in group), n),
                rate_cell(len(leaked), n),
                fmt(statistics.mean(first)) if first else "–",
                ", ".join(
                    f"{f} {rate_cell(c, n, 0)}"
                    for f, c in sorted(facts.items(), key=lambda kv: -kv[1])
                )
                or "–",
            ]
        )
    # Per player of the role that holds the facts (fig. 4 right: one bar pair per model).
    per_player: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for r in private:
        for role in r.private_facts:
            per_player[r.pairing.get(role, role)].append(r)
    plot_rows = []
    player_body = []
    for player, group in sorted(per_player.items()):
        n = len(group)
        won = sum(r.outcome == "success" for r in group)
        told = sum(1 for r in group if by_episode.get(r.episode))
        plot_rows.append((player, 100.0 * won / n, 100.0 * told / n))
        player_body.append([md(player), str(n), rate_cell(won, n), rate_cell(told, n)])
    parts = [
        "## Privacy leaks",
        "",
        "Episodes in which a role told another role one of its private facts (exact or "
        "normalised, partial included; `parley leaks RUN` lists every disclosure with its "
        "message), beside the success rate. " + INTERVALS_NOTE,
        "",
        markdown_table(header, body),
        "",
        markdown_table(
            ["player holding the facts", "episodes", "success %", "disclosed %"], player_body
        ),
        "",
    ]
    try:
        _leak_plot(plot_rows, run_dir / "leaks.png")
        parts += ["![success and disclosure rates](leaks.png)", ""]
    except Exception as exc:  # a plot must never cost the report
        parts += [f"(plot failed: {type(exc).__name__}: {exc})", ""]
    return "\n".join(parts)


def _error_plot(table: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m, row in sorted(table.items()) if row["failed"]]
    fig, ax = plt.subplots(figsize=(7.0, 0.6 * len(models) + 1.6))
    left = [0.0] * len(models)
    for category in error_analysis.SHARE_CATEGORIES:
        values = [100.0 * table[m]["primary"].get(category, 0) / table[m]["failed"] for m in models]
        ax.barh([plot_label(m) for m in models], values, left=left, label=category)
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of failed conversations")
    ax.legend(fontsize=8, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def error_section(
    relevant: list[EpisodeRecord],
    findings: dict[str, list[error_analysis.ErrorFinding]],
    run_dir: Path,
) -> str:
    """Rule-based error categories per model: shares of failed conversations, all findings."""
    if not relevant:
        return ""
    error_analysis.write_findings(run_dir, findings)
    table = error_analysis.shares(relevant, findings)
    header = [
        "model",
        "episodes",
        "failed",
        *(f"{c} %" for c in error_analysis.SHARE_CATEGORIES),
        "findings (all episodes)",
    ]
    body = []
    for model, row in sorted(table.items()):
        failed = row["failed"]
        body.append(
            [
                md(model),
                str(row["episodes"]),
                str(failed),
                *(
                    rate_cell(row["primary"].get(c, 0), failed)
                    for c in error_analysis.SHARE_CATEGORIES
                ),
                ", ".join(f"{c} {n}" for c, n in sorted(row["findings"].items())) or "–",
            ]
        )
    parts = [
        "## Error categories",
        "",
        "Rule-based detectors over the transcripts (`parley errors RUN` lists each finding with "
        "its evidence). Each failed conversation counts under its first finding; `other` when "
        "none fired. Shares of the failed conversations, with their 95 % Wilson intervals.",
        "",
        markdown_table(header, body),
        "",
    ]
    if any(row["failed"] for row in table.values()):
        try:
            _error_plot(table, run_dir / "error_categories.png")
            parts += ["![error categories](error_categories.png)", ""]
        except Exception as exc:
            parts += [f"(plot failed: {type(exc).__name__}: {exc})", ""]
    return "\n".join(parts)


def report(records: list[EpisodeRecord], run_dir: Path) -> str:
    """The three sections, each only when the run has something for it (one pass over the
    transcripts, holding one episode at a time)."""
    timing = Timing()
    private: list[EpisodeRecord] = []
    disclosures: list[leaks.Disclosure] = []
    relevant: list[EpisodeRecord] = []
    findings: dict[str, list[error_analysis.ErrorFinding]] = {}
    earlier = leaks.earlier_facts(records)  # memory across episodes (docs/memory.md)
    for record, messages in transcripts(run_dir, records):
        timing.add(record, messages)
        if record.outcome in ("error", "cancelled"):
            continue
        if record.private_facts:
            private.append(record)
            disclosures += leaks.episode_disclosures(record, messages, earlier.get(record.episode))
        steps = error_analysis.steps_of(messages)
        actors, instructors = error_analysis.roles_of(steps)
        if actors and instructors:  # the detectors need an acting and an instructing role
            relevant.append(record)
            findings[record.episode] = error_analysis.episode_errors(record, messages)
    parts = [
        timing.render(),
        leak_section(private, disclosures, run_dir),
        error_section(relevant, findings, run_dir),
    ]
    return "\n".join(p for p in parts if p)


# --- the `parley leaks` and `parley errors` commands ----------------------------------------------


def _clip(text: str, width: int = 110) -> str:
    flat = " ".join(text.split())
    # Replies and evidence are a model's text: escaped, they cannot break the table.
    return md(flat if len(flat) <= width else flat[: width - 1] + "…")


def leaks_text(run_dir: Path, limit: int = 20) -> str:
    """The leak tables of a run and its first ``limit`` disclosures (all go to leaks.jsonl)."""
    records = read_records(run_dir)
    private: list[EpisodeRecord] = []
    disclosures: list[leaks.Disclosure] = []
    earlier = leaks.earlier_facts(records)  # memory across episodes (docs/memory.md)
    for record, messages in transcripts(run_dir, records):
        if record.private_facts and record.outcome not in ("error", "cancelled"):
            private.append(record)
            disclosures += leaks.episode_disclosures(record, messages, earlier.get(record.episode))
    if not private:
        return "No episode of this run has private facts."
    parts = [leak_section(private, disclosures, run_dir)]
    if disclosures:
        rows = [
            [
                d.episode,
                str(d.turn),
                md(f"{d.from_role}→{d.to_role}"),
                md(
                    f"{d.fact} ({d.kind})"
                    + (f", of earlier episode {d.earlier_episode}" if d.earlier_episode else "")
                ),
                _clip(d.match, 30),
                _clip(d.message),
            ]
            for d in disclosures[:limit]
        ]
        parts += [
            f"### Disclosures ({len(disclosures)}; first {min(limit, len(disclosures))}; all in leaks.jsonl)",
            "",
            markdown_table(["episode", "turn", "who", "fact", "found", "message"], rows),
            "",
        ]
    across = [d for d in disclosures if d.earlier_episode]
    if across:
        parts += [
            f"{len(across)} of them disclose a fact of an earlier episode the role remembers "
            f"(memory across episodes), in {len({d.episode for d in across})} episodes.",
            "",
        ]
    return "\n".join(parts)


def errors_text(run_dir: Path, limit: int = 20) -> str:
    """The error-category table of a run and its first ``limit`` findings (all in errors.jsonl)."""
    records = read_records(run_dir)
    relevant: list[EpisodeRecord] = []
    findings: dict[str, list[error_analysis.ErrorFinding]] = {}
    for record, messages in transcripts(run_dir, records):
        if record.outcome in ("error", "cancelled"):
            continue
        steps = error_analysis.steps_of(messages)
        actors, instructors = error_analysis.roles_of(steps)
        if actors and instructors:
            relevant.append(record)
            findings[record.episode] = error_analysis.episode_errors(record, messages)
    if not relevant:
        return "No episode of this run has an acting and an instructing role to analyse."
    parts = [error_section(relevant, findings, run_dir)]
    flat = [f for items in findings.values() for f in items]
    if flat:
        rows = [
            [f.episode, str(f.turn), md(f.role), f.category, _clip(f.evidence)]
            for f in flat[:limit]
        ]
        parts += [
            f"### Findings ({len(flat)}; first {min(limit, len(flat))}; all in errors.jsonl)",
            "",
            markdown_table(["episode", "turn", "role", "category", "evidence"], rows),
            "",
        ]
    return "\n".join(parts)


def judge_text(run_dir: Path, verdicts: list[Any]) -> str:
    """Judge verdicts per model, and how often they agree with the rules' primary category."""
    by_episode = {r.episode: r for r in read_records(run_dir)}
    rules: dict[str, Any] = {}
    for path in [run_dir / "errors.jsonl"]:
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                item = json.loads(line)
                rules.setdefault(item["episode"], []).append(error_analysis.ErrorFinding(**item))
    table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    agree = compared = 0
    for v in verdicts:
        record = by_episode.get(v.episode)
        if record is None:
            continue
        table[error_analysis.model_label(record)][v.category] += 1
        if v.category in error_analysis.SHARE_CATEGORIES:
            compared += 1
            agree += v.category == error_analysis.primary(rules.get(v.episode, []))
    categories = [*error_analysis.SHARE_CATEGORIES, "unparsed", "unjudged"]
    rows = []
    for model, counts in sorted(table.items()):
        n = sum(counts.values())
        rows.append([md(model), str(n), *(rate_cell(counts.get(c, 0), n) for c in categories)])
    version = verdicts[0].prompt_version if verdicts else ""
    parts = [
        f"## Error categories by the judge ({verdicts[0].model if verdicts else ''}, prompt {version})",
        "",
        markdown_table(["model", "judged", *(f"{c} %" for c in categories)], rows),
        "",
    ]
    if compared:
        parts += [
            f"Agreement with the rules' category: {rate_cell(agree, compared)} % of {compared} "
            "(95 % Wilson interval in brackets).",
            "",
        ]
    return "\n".join(parts)
