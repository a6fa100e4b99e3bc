"""Reports over a run's records: a summary per game and pairing, plus each family's own tables."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path

from parley.records import EpisodeRecord, read_records
from parley.runtime.reports.escape import md
from parley.runtime.reports.intervals import INTERVALS_NOTE, mean_cell, rate_cell

# A family's own tables: the `parley.reports` entry point named after the family (parley's
# own in pyproject.toml, a plugin's in its package), "module:function" with
# ``function(records, run_dir) -> str``: the family's records (parley.records.EpisodeRecord,
# typed) and the run folder, Markdown back (it may also write files such as PNG plots).
FamilyReport = Callable[[list[EpisodeRecord], Path], str]
REPORTS_GROUP = "parley.reports"

OUTCOMES = ("success", "lost", "aborted", "error", "cancelled")
# An episode ended because a prompt would not fit its model's context: the config's to fix
# (memory, context size), counted apart from the errors of servers, keys and networks.
CONTEXT_EXCEEDED = "context_exceeded"


def over_context(record: EpisodeRecord) -> bool:
    """The episode ended as ``error`` because a prompt was longer than its model's context."""
    return record.outcome == "error" and record.reason_code == CONTEXT_EXCEEDED


class ReportSectionError(Exception):
    """A family's report section could not be loaded (named in the message)."""


def family_report(family: str) -> FamilyReport | None:
    """The report section ``family`` declares (its ``parley.reports`` entry point), or None."""
    found = [ep for ep in entry_points(group=REPORTS_GROUP) if ep.name == family]
    if not found:
        return None
    entry = found[0]
    try:
        fn = entry.load()
    except Exception as exc:
        raise ReportSectionError(
            f"the report section of {family!r} ({REPORTS_GROUP}: {entry.value}) failed to "
            f"load: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(fn):
        raise ReportSectionError(
            f"the report section of {family!r} ({REPORTS_GROUP}: {entry.value}) is not a "
            "function (expected module:function)"
        )
    return fn


def pairing_label(record: EpisodeRecord) -> str:
    """``role=player, …``: who played the episode's roles."""
    return ", ".join(f"{role}={who}" for role, who in record.pairing.items())


def mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else None


def fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def summary_rows(records: list[EpisodeRecord]) -> tuple[list[str], list[list[str]]]:
    """Per game and pairing: episodes, outcome counts, success % and mean main score (each
    with its 95 % interval, runtime/reports/intervals.py), turns."""
    groups: dict[tuple[str, str], list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        groups[(r.game, pairing_label(r))].append(r)
    header = ["game", "pairing", "episodes", *OUTCOMES, "success %", "main", "turns"]
    rows = []
    for (game, pairing), group in sorted(groups.items()):
        counts = {o: sum(1 for r in group if r.outcome == o) for o in OUTCOMES}
        rows.append(
            [
                md(game),
                md(pairing),
                str(len(group)),
                *(str(counts[o]) for o in OUTCOMES),
                rate_cell(counts["success"], len(group)),
                mean_cell([r.main_score for r in group], 1),
                fmt(mean([r.turns for r in group])),
            ]
        )
    return header, rows


def ending_rows(records: list[EpisodeRecord]) -> tuple[list[str], list[list[str]]]:
    """Per game and pairing: how many episodes ended with each reason code (``–``: a record
    from before reason codes whose ending only its game knew)."""
    groups: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for r in records:
        groups[(r.game, pairing_label(r))][r.reason_code or "–"] += 1
    codes = sorted({code for counts in groups.values() for code in counts})
    header = ["game", "pairing", *codes]
    rows = [
        [md(game), md(pairing), *(str(counts[c]) if counts[c] else "" for c in codes)]
        for (game, pairing), counts in sorted(groups.items())
    ]
    return header, rows


def player_kinds(record: EpisodeRecord) -> dict[str, str]:
    """Each role's kind of player: ``human`` (terminal or browser seat), ``model`` or
    ``built-in`` (scripted, random), from the record's spec."""
    players = record.spec.get("players") or {}
    kinds = {}
    for role in record.pairing:
        kind = (players.get(role) or {}).get("kind")
        kinds[role] = {"human": "human", "llm": "model"}.get(kind or "", "built-in")
    return kinds


def human_turn_seconds(run_dir: Path, records: list[EpisodeRecord]) -> dict[str, list[float]]:
    """Per episode with a human player: how long each human turn took (seconds), from the
    replies in its transcript (``raw.player: human``)."""
    from parley.records import RecordedRun

    run = RecordedRun(run_dir)
    out: dict[str, list[float]] = {}
    for r in records:
        if "human" not in player_kinds(r).values() or not r.transcript:
            continue
        out[r.episode] = [
            float(m.get("latency_s") or 0.0)
            for m in run.iter_transcript(r.episode)
            if m.get("kind") == "turn_response" and (m.get("raw") or {}).get("player") == "human"
        ]
    return out


def human_rows(
    records: list[EpisodeRecord], seconds: dict[str, list[float]]
) -> tuple[list[str], list[list[str]]]:
    """For each game a human played: every pairing of it, human pairs beside model and
    built-in ones, with who plays each role, outcomes, scores and the humans' time per turn."""
    games = {r.game for r in records if "human" in player_kinds(r).values()}
    groups: dict[tuple[str, str], list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        if r.game in games:
            groups[(r.game, pairing_label(r))].append(r)
    header = ["game", "pairing", "players", "episodes", "success %", "main", "turns"]
    header.append("human s/turn")
    rows = []
    for (game, pairing), group in sorted(groups.items()):
        kinds = player_kinds(group[0])
        times = [t for r in group for t in seconds.get(r.episode, [])]
        rows.append(
            [
                md(game),
                md(pairing),
                md(", ".join(f"{role}: {kind}" for role, kind in kinds.items())),
                str(len(group)),
                rate_cell(sum(r.outcome == "success" for r in group), len(group)),
                mean_cell([r.main_score for r in group], 1),
                fmt(mean([r.turns for r in group])),
                fmt(mean(times)) if times else "–",
            ]
        )
    return header, rows


# Figures that differ between episodes failing the same way (durations, "in 0.3 s"); a
# dotted address such as 127.0.0.1 is kept (it says which server was down).
_VARYING = re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])")
REASON_CHARS = 160  # a failure's reason is grouped by (and shown as) its first this many chars


def failure_head(record: EpisodeRecord) -> str:
    """What an ``error`` episode's failure is grouped by: the first line of its reason
    (which names the role, the exception type and its message), figures that vary from one
    episode to the next masked, cut to :data:`REASON_CHARS`; else the last line of its
    recorded exception."""
    text = record.reason.strip()
    if over_context(record):
        # One group whatever the token counts: "solver failed: …" keeps who it was.
        who = text.split(" failed:")[0] + " failed: " if " failed:" in text else ""
        return f"{who}a prompt longer than the model's context ({CONTEXT_EXCEEDED})"
    if not text:
        lines = [line for line in (record.error or "").splitlines() if line.strip()]
        text = lines[-1].strip() if lines else "no reason recorded"
    head = _VARYING.sub("…", text.splitlines()[0].strip())
    return head if len(head) <= REASON_CHARS else head[: REASON_CHARS - 1] + "…"


def record_models(record: EpisodeRecord) -> list[str]:
    """The models (registry names) that played in an episode, from its spec."""
    players = record.spec.get("players") or {}
    return sorted(
        {
            str(p.get("model"))
            for p in players.values()
            if isinstance(p, dict) and p.get("kind") == "llm" and p.get("model")
        }
    )


def failure_reasons(records: list[EpisodeRecord]) -> list[tuple[int, str, list[str], str]]:
    """Why episodes ended in ``error``, most frequent first: (count, reason head, the games
    and models of those episodes, one such episode's id)."""
    groups: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        if r.outcome == "error":
            groups[failure_head(r)].append(r)
    out = []
    for head, group in groups.items():
        where = sorted({r.game for r in group} | {m for r in group for m in record_models(r)})
        out.append((len(group), head, where, group[0].episode))
    out.sort(key=lambda row: (-row[0], row[1]))
    return out


def failed_models(records: list[EpisodeRecord]) -> list[str]:
    """The models every one of whose episodes ended in ``error`` (none played): a key that
    is not set, a server that is down, a wrong model name (prompts too long for the context
    are not such a failure)."""
    outcomes: dict[str, set[str]] = defaultdict(set)
    for r in records:
        if r.outcome == "cancelled":
            continue
        for model in record_models(r):
            outcomes[model].add(CONTEXT_EXCEEDED if over_context(r) else r.outcome)
    return sorted(m for m, seen in outcomes.items() if seen == {"error"})


def failure_rows(
    records: list[EpisodeRecord], limit: int = 10
) -> tuple[list[str], list[list[str]]]:
    """The top ``limit`` failure reasons as a table: episodes, share of the errors, reason,
    where (games and models), an example episode."""
    reasons = failure_reasons(records)
    total = sum(row[0] for row in reasons)
    header = ["episodes", "% of errors", "reason", "games and models", "e.g. episode"]
    rows = [
        [str(n), rate_cell(n, total), md(head), md(", ".join(where)), example]
        for n, head, where, example in reasons[:limit]
    ]
    if len(reasons) > limit:
        rest = sum(row[0] for row in reasons[limit:])
        rows.append([str(rest), rate_cell(rest, total), f"({len(reasons) - limit} more)", "", ""])
    return header, rows


def refused_section(records: list[EpisodeRecord], shown: int = 5) -> list[str]:
    """A paragraph on the replies the game masters refused as not their role's own player's
    (``refused_replies``), with the episodes that had most; nothing when there were none."""
    refused = sorted(
        (r for r in records if r.refused_replies), key=lambda r: (-r.refused_replies, r.episode)
    )
    if not refused:
        return []
    total = sum(r.refused_replies for r in refused)
    where = ", ".join(f"{md(r.episode)} ({r.refused_replies})" for r in refused[:shown])
    more = f" and {len(refused) - shown} more" if len(refused) > shown else ""
    return [
        "## Replies refused",
        "",
        f"{total} replies in {len(refused)} episodes were refused: each named a role's turn "
        "but came from another than that role's own agent or seat (another seat, a program "
        "on the broker), and the game went on without it. Each transcript names the sender in "
        f"a note. Most in: {where}{more}.",
        "",
    ]


def build_report(run_dir: str | Path) -> str:
    """The Markdown report of a run folder."""
    from parley.environments import registry

    path = Path(run_dir)
    records = read_records(path)
    parts = [f"# Report: {md(path.name)}", "", f"{len(records)} episodes.", ""]
    header, rows = summary_rows(records)
    parts += [
        "## Outcomes by game and pairing",
        "",
        INTERVALS_NOTE,
        "",
        markdown_table(header, rows),
        "",
    ]
    header, rows = ending_rows(records)
    parts += ["## Endings by reason code", "", markdown_table(header, rows), ""]
    parts += refused_section(records)
    if any(r.outcome == "error" for r in records):
        header, rows = failure_rows(records)
        errors = sum(r.outcome == "error" for r in records)
        over = sum(over_context(r) for r in records)
        dead = failed_models(records)
        parts += [
            "## Why episodes failed",
            "",
            f"{errors} of {len(records)} episodes ended in `error`, grouped by reason. "
            "`parley run CONFIG --out RUN --resume --retry-errors` plays them again once the "
            "cause is fixed.",
            "",
            *(
                [
                    f"Of these, {over} ended on a prompt longer than the model's context "
                    f"(`{CONTEXT_EXCEEDED}`: a memory policy that keeps fewer turns, or a "
                    "bigger context, fixes them, and `parley plan` warns of them) "
                    f"and {errors - over} on the infrastructure or other causes (servers, "
                    "keys, networks, code that raised).",
                    "",
                ]
                if over
                else []
            ),
            *(
                [
                    f"Every episode of {md(', '.join(dead))} failed: check the key, server and name.",
                    "",
                ]
                if dead
                else []
            ),
            markdown_table(header, rows),
            "",
        ]
    if any("human" in player_kinds(r).values() for r in records):
        header, rows = human_rows(records, human_turn_seconds(path, records))
        parts += [
            "## Human and model pairs",
            "",
            "Every pairing of the games people played (docs/humans.md), side by side.",
            "",
            markdown_table(header, rows),
            "",
        ]
    families: dict[str, list[EpisodeRecord]] = defaultdict(list)
    games = registry.all_games()
    for r in records:
        info = games.get(r.game)
        families[info.family if info else r.game.split(".")[0]].append(r)
    for family, group in sorted(families.items()):
        try:
            fn = family_report(family)
        except ReportSectionError as exc:  # the rest of the report still stands
            parts += [f"> {exc}", ""]
            continue
        if fn is not None:
            parts += [fn(group, path), ""]
    from parley.runtime.reports import pairings  # pairing tables and model usage/cost, any family

    extra = pairings.report(records, path)
    if extra:
        parts += [extra, ""]
    # The score by episode index, where agents remember earlier episodes (docs/memory.md).
    from parley.runtime.reports import learning

    extra = learning.report(records, path)
    if extra:
        parts += [extra, ""]
    # Time split and tokens per role, privacy leaks, error categories (observability, any game).
    from parley.runtime.reports import analysis

    extra = analysis.report(records, path)
    if extra:
        parts += [extra, ""]
    return "\n".join(parts)


def write_report(run_dir: str | Path) -> Path:
    path = Path(run_dir) / "report.md"
    path.write_text(build_report(run_dir), encoding="utf-8")
    return path
