"""The report's tables and the star-weighted aggregate, on records whose numbers are known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parley.environments.playground.ratings import (
    GAMES,
    NORMALISED,
    STARS,
    aggregate,
    stars_text,
    weight,
)
from parley.records import EpisodeRecord
from parley.runtime.reports.intervals import mean_cell
from parley.runtime.reports.playground import collect, report
from tests.records import record as episode_record


def record(
    game: str, task: str, player: str, scores: dict[str, Any], **extra: Any
) -> EpisodeRecord:
    pairing = {"player": player, **extra.pop("pairing", {})}
    return episode_record(
        {
            "game": f"playground.{game}.{task}",
            "pairing": pairing,
            "outcome": "success",
            "spec": {"settings": {"variant": extra.pop("variant", "image")}},
            "scores": scores,
            **extra,
        }
    )


def test_stars_are_table_6_rounded_to_half_stars() -> None:
    for game in GAMES:
        for ability, value in NORMALISED[game].items():
            if value is None:
                assert STARS[game][ability] is None
            else:
                assert STARS[game][ability] == round(value * 2) / 2
    assert stars_text(3.5) == "★★★✩" and stars_text(0.5) == "✩" and stars_text(None) == "N/A"


def test_aggregate_by_hand() -> None:
    # Perceiving weighs by perception stars: TicTacToe 0.5, Chess 3.5.
    assert aggregate("perceiving", {"tictactoe": 1.0, "chess": 0.2}) == pytest.approx(
        (0.5 * 1.0 + 3.5 * 0.2) / (0.5 + 3.5)
    )
    # E2E: Sudoku has no adversary rating (0): weight 3.5 + 2 + 2 = 7.5; Gomoku 5+4+3.5+4.
    assert weight("sudoku", "e2e") == 7.5 and weight("gomoku", "e2e") == 16.5
    assert aggregate("e2e", {"sudoku": 0.5, "gomoku": 0.1}) == pytest.approx(
        (7.5 * 0.5 + 16.5 * 0.1) / 24.0
    )
    assert aggregate("qa", {}) is None


def test_tables_show_means_per_player_and_game(tmp_path: Path) -> None:
    records = [
        record("tictactoe", "perceiving", "scripted", {"accuracy": 1.0, "main": 100.0}),
        record("tictactoe", "perceiving", "random", {"accuracy": 0.5, "main": 50.0}),
        record("tictactoe", "perceiving", "random", {"accuracy": 0.25, "main": 25.0}),
        record("tictactoe", "perceiving", "gpt", {"accuracy": 0.3, "main": 30.0}),
        record("chess", "rule", "random", {"valid": 0.0, "main": 0.0}),
        record(
            "chess",
            "e2e",
            "scripted",
            {"e2e_score": 355.0, "main": 20.0},
            pairing={"opponent": "scripted"},
        ),
        record(
            "chess",
            "e2e",
            "scripted",
            {"e2e_score": 545.0, "main": 40.0},
            pairing={"opponent": "scripted"},
        ),
        record(
            "gomoku",
            "e2e",
            "scripted",
            {"e2e_score": 50.0, "main": 2.0},
            pairing={"opponent": "random"},
        ),
        record("sudoku", "qa", "scripted", {"accuracy": 1.0, "main": 100.0}, variant="text"),
        record("sudoku", "qa", "random", {"accuracy": 1.0}, outcome="error"),
    ]
    data = collect(records)
    assert data["perceiving"]["random"]["tictactoe"] == pytest.approx(0.375)
    assert data["e2e"]["scripted"]["chess"] == 450.0
    assert data["e2e_main"]["scripted"]["chess"] == pytest.approx(0.3)
    assert "scripted vs random" in data["e2e"] and "scripted [text]" in data["qa"]
    assert "random" not in data["qa"]  # errored episodes are left out
    text = report(records, tmp_path)
    # Means with their bootstrap intervals; one episode: the value alone.
    assert "| scripted | 1.000 | – | – | – | – | – |" in text
    assert f"| random | {mean_cell([0.5, 0.25], 3)} | – | – | – | – | – |" in text
    assert mean_cell([0.5, 0.25], 3).startswith("0.375 [")
    assert "| gpt | 0.300 ↓ |" in text  # below the random baseline
    assert f"| scripted | – | – | – | – | – | {mean_cell([355.0, 545.0], 1)} |" in text
    assert mean_cell([355.0, 545.0], 1).startswith("450.0 [")
    lines = text.splitlines()
    table2 = lines.index("### Table 2 — Perceiving (cell accuracy)")
    rows = [line.split(" |")[0] for line in lines[table2 + 4 : table2 + 7]]
    assert rows == ["| scripted", "| gpt", "| random"]  # the paper's order: random last


def test_no_playground_records() -> None:
    assert "No playground episodes" in report([], Path("."))
