"""Reports over a run's records: a summary per game and pairing, plus each family's own tables."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from parley.records import main_score, read_records

# A family's own tables: the `parley.reports` entry point named after the family (parley's
# own in pyproject.toml, a plugin's in its package), "module:function" with
# ``function(records, run_dir) -> str`` (Markdown; it may also write files such as PNG plots).
FamilyReport = Callable[[list[dict[str, Any]], Path], str]
REPORTS_GROUP = "parley.reports"

OUTCOMES = ("success", "lost", "aborted", "error", "cancelled")


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


def pairing_label(record: dict[str, Any]) -> str:
    return ", ".join(f"{role}={who}" for role, who in record["pairing"].items())


def mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else None


def fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def summary_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Per game and pairing: episodes, outcome counts, success %, mean main score, turns."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[(r["game"], pairing_label(r))].append(r)
    header = ["game", "pairing", "episodes", *OUTCOMES, "success %", "main", "turns"]
    rows = []
    for (game, pairing), group in sorted(groups.items()):
        counts = {o: sum(1 for r in group if r["outcome"] == o) for o in OUTCOMES}
        rows.append(
            [
                game,
                pairing,
                str(len(group)),
                *(str(counts[o]) for o in OUTCOMES),
                fmt(100.0 * counts["success"] / len(group)),
                fmt(mean([main_score(r) for r in group])),
                fmt(mean([r["turns"] for r in group])),
            ]
        )
    return header, rows


def ending_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Per game and pairing: how many episodes ended with each reason code (``–``: a record
    from before reason codes whose ending only its game knew)."""
    groups: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for r in records:
        groups[(r["game"], pairing_label(r))][r.get("reason_code") or "–"] += 1
    codes = sorted({code for counts in groups.values() for code in counts})
    header = ["game", "pairing", *codes]
    rows = [
        [game, pairing, *(str(counts[c]) if counts[c] else "" for c in codes)]
        for (game, pairing), counts in sorted(groups.items())
    ]
    return header, rows


def build_report(run_dir: str | Path) -> str:
    """The Markdown report of a run folder."""
    from parley.environments import registry

    path = Path(run_dir)
    records = read_records(path)
    parts = [f"# Report: {path.name}", "", f"{len(records)} episodes.", ""]
    header, rows = summary_rows(records)
    parts += ["## Outcomes by game and pairing", "", markdown_table(header, rows), ""]
    header, rows = ending_rows(records)
    parts += ["## Endings by reason code", "", markdown_table(header, rows), ""]
    families: dict[str, list[dict[str, Any]]] = defaultdict(list)
    games = registry.all_games()
    for r in records:
        info = games.get(r["game"])
        families[info.family if info else r["game"].split(".")[0]].append(r)
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
