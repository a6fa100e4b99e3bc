"""The guess family's section of report.md (the `parley.reports` entry point)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from parley.records import EpisodeRecord
from parley.runtime.report import fmt, markdown_table, mean, pairing_label


def report(records: list[EpisodeRecord], run_dir: Path) -> str:
    """Per pairing: how often the number was found, and in how many guesses."""
    groups: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for record in records:
        groups[pairing_label(record)].append(record)
    rows = []
    for pairing, group in sorted(groups.items()):
        found = [r for r in group if r.outcome == "success"]
        rows.append(
            [
                pairing,
                str(len(group)),
                fmt(100.0 * len(found) / len(group)),
                fmt(mean([r.scores.get("guesses") for r in found])),
            ]
        )
    header = ["pairing", "episodes", "found %", "guesses when found"]
    return "## Guess the number\n\n" + markdown_table(header, rows)
