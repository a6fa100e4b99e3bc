"""LVLM-Playground tables (seed 003): the paper's Tables 2–5 — perceiving, QA and rule
following accuracy and the mean E2E score, one row per player, one column per game — plus
the star-weighted aggregate per task and the ability ratings it uses (Table 1).

Rows are the player of role ``player`` (with ``[text]`` for the text variant, and the
opponent when it is not the built-in search). A value below the random player's for the same
game and variant is marked ↓ (the paper's blue).

    python -m parley.runtime.reports.playground RUN_DIR
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from parley.environments.playground.ratings import (
    ABILITIES,
    GAMES,
    STARS,
    TASK_ABILITIES,
    stars_text,
    weight,
)
from parley.records import EpisodeRecord
from parley.runtime.reports.escape import md
from parley.runtime.reports.intervals import (
    INTERVALS_NOTE,
    cell,
    mean_cell,
    mean_of_means_interval,
)

TITLES = {
    "tictactoe": "TicTacToe",
    "reversi": "Reversi",
    "sudoku": "Sudoku",
    "minesweeper": "Minesweeper",
    "gomoku": "Gomoku",
    "chess": "Chess",
}
TABLES = (
    ("perceiving", "Table 2 — Perceiving (cell accuracy)", "accuracy", 3),
    ("qa", "Table 3 — Question answering (accuracy)", "accuracy", 3),
    ("rule", "Table 4 — Rule following (valid moves)", "valid", 3),
    ("e2e", "Table 5 — End-to-end playing (mean score, the paper's formulas)", "e2e_score", 1),
)
TASK_NAMES = {"perceiving": "Perceiving", "qa": "QA", "rule": "Rule following", "e2e": "E2E"}


def _split(game: str) -> tuple[str, str] | None:
    parts = game.split(".")
    if len(parts) != 3 or parts[0] != "playground" or parts[1] not in GAMES:
        return None
    return parts[1], parts[2]


def row_label(record: EpisodeRecord) -> str:
    pairing = record.pairing
    label = str(pairing.get("player", "?"))
    opponent = pairing.get("opponent")
    if opponent is not None and opponent != "scripted":
        label += f" vs {opponent}"
    if (record.spec.get("settings") or {}).get("variant") == "text":
        label += " [text]"
    return label


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def collect(records: list[EpisodeRecord]) -> dict[str, dict[str, dict[str, float]]]:
    """``{task: {row: {game: mean}}}``; E2E also under ``e2e_main`` (main / 100, for the
    aggregate). Episodes that errored or were cancelled are left out."""
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for task, rows in collect_values(records).items():
        for label, games in rows.items():
            for game, values in games.items():
                out[task][label][game] = sum(values) / len(values)
    return out


def collect_values(records: list[EpisodeRecord]) -> dict[str, dict[str, dict[str, list[float]]]]:
    """``{task: {row: {game: [value per episode]}}}``, the values :func:`collect` averages."""
    sums: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for record in records:
        where = _split(record.game)
        if where is None or record.outcome not in ("success", "lost", "aborted"):
            continue
        game, task = where
        scores = record.scores
        label = row_label(record)
        key = next(k for t, _, k, _ in TABLES if t == task)
        value = scores.get(key)
        if value is not None:
            sums[(task, label, game)].append(float(value))
        main = record.main_score
        if task == "e2e" and main is not None:
            sums[("e2e_main", label, game)].append(float(main) / 100.0)
    values: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(dict))
    for (task, label, game), found in sums.items():
        if found:
            values[task][label][game] = found
    return values


def _ordered_rows(rows: dict[str, dict[str, float]]) -> list[str]:
    """Scripted first, models in name order, random last (as the paper's tables)."""

    def key(label: str) -> tuple[int, str]:
        base = label.split(" ")[0]
        return (0 if base == "scripted" else 2 if base == "random" else 1, label)

    return sorted(rows, key=key)


def _random_row(label: str) -> str:
    return "random" + (" [text]" if label.endswith("[text]") else "")


def _label_cell(label: str) -> str:
    """A row's label as a table cell: the players' names escaped (they come from the config),
    parley's own `` [text]`` mark as it is."""
    mark = " [text]"
    if label.endswith(mark):
        return md(label[: -len(mark)]) + mark
    return md(label)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def report(records: list[EpisodeRecord], run_dir: Path) -> str:
    data = collect(records)
    values = collect_values(records)
    parts = ["## LVLM-Playground", ""]
    if not data:
        return "\n".join([*parts, "No playground episodes."])
    counts: dict[str, int] = defaultdict(int)
    for record in records:
        where = _split(record.game)
        if where:
            counts[where[1]] += 1
    parts.append(
        "Episodes: " + ", ".join(f"{TASK_NAMES[t]} {counts[t]}" for t, *_ in TABLES if counts[t])
    )
    parts += ["", INTERVALS_NOTE + " The ↓ mark compares the means.", ""]
    header = ["player", *(TITLES[g] for g in GAMES)]
    for task, title, _, digits in TABLES:
        rows = data.get(task)
        if not rows:
            continue
        body = []
        for label in _ordered_rows(rows):
            baseline = rows.get(_random_row(label), {})
            cells = []
            for game in GAMES:
                value = rows[label].get(game)
                if value is None:
                    cells.append("–")
                    continue
                mark = ""
                floor = baseline.get(game)
                if not label.startswith("random") and floor is not None and value < floor:
                    mark = " ↓"
                cells.append(mean_cell(values[task][label][game], digits) + mark)
            body.append([_label_cell(label), *cells])
        parts += [f"### {title}", "", _table(header, body), ""]
    # The star-weighted aggregate per task (E2E on the normalised main score).
    labels = sorted({label for task in data for label in data[task]}, key=lambda s: s)
    body = []
    for label in _ordered_rows({label: {} for label in labels}):
        cells = []
        for task, *_ in TABLES:
            per_game = values.get("e2e_main" if task == "e2e" else task, {}).get(label, {})
            games = [g for g in GAMES if g in per_game]
            # The star-weighted mean of the game means (as ``aggregate``); the bootstrap
            # resamples the episodes within each game.
            interval = mean_of_means_interval(
                [per_game[g] for g in games], [weight(g, task) for g in games]
            )
            cells.append(cell(interval, 3))
        body.append([_label_cell(label), *cells])
    parts += [
        "### Star-weighted aggregate per task",
        "",
        "Each game weighs by its stars over the abilities the task needs: "
        + "; ".join(f"{TASK_NAMES[t]}: {', '.join(a)}" for t, a in TASK_ABILITIES.items())
        + ". E2E uses main = score / best possible score.",
        "",
        _table(["player", *(TASK_NAMES[t] for t, *_ in TABLES)], body),
        "",
        "### Ability ratings (Table 1)",
        "",
        _table(
            ["ability", *(TITLES[g] for g in GAMES)],
            [[a.capitalize(), *(stars_text(STARS[g][a]) for g in GAMES)] for a in ABILITIES],
        ),
    ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    from parley.records import read_records

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m parley.runtime.reports.playground RUN_DIR", file=sys.stderr)
        return 2
    run = Path(args[0])
    print(report(read_records(run), run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
