"""The MANGO report from a real run folder: per-question rows, tables, Table 1, the plot."""

from __future__ import annotations

import asyncio
from pathlib import Path

from PIL import Image

from parley.records import read_records
from parley.runtime.config import load_config
from parley.runtime.report import build_report
from parley.runtime.reports.intervals import mean_cell, rate_cell
from parley.runtime.reports.mango import (
    PLOT,
    _by_question,
    pairwise_table,
    paper_success,
    question_rows,
)
from parley.runtime.scheduler import run_experiment

PLAYERS = [
    {"navigator": {"kind": "scripted", "name": "oracle"}},
    {"navigator": "scripted"},
    {"navigator": "random"},
]


def test_report_tables_and_plot(tmp_path: Path) -> None:
    base = {"synthetic_games": 3, "questions_per_episode": 5}
    games = [
        {"game": f"mango.{k}", "seeds": {"count": 6}, "settings": {**base, "cutoff": cutoff},
         "pairings": PLAYERS if cutoff == 70 else PLAYERS[1:2]}
        for k in ("df", "rf") for cutoff in (70, 30)
    ]  # fmt: skip
    config = load_config({"name": "r", "tracing": {"enabled": False}, "games": games})
    asyncio.run(run_experiment(config, tmp_path / "run"))
    records = read_records(tmp_path / "run")
    rows = question_rows(records, tmp_path / "run")
    # 6 episodes of 5 questions, per type, 3 players at cutoff 70 and 1 at cutoff 30.
    assert len(rows) == 2 * 6 * 5 * 4
    # The cutoff differs between episodes, so it is part of the label.
    assert {r["player"] for r in rows} == {
        "oracle [cutoff=70]", "scripted [cutoff=70]", "random [cutoff=70]", "scripted [cutoff=30]",
    }  # fmt: skip
    per_player = _by_question(rows)
    table = pairwise_table(per_player, "df")
    # Recompute one cell by hand: random vs oracle on the easy DF questions both answered.
    rnd, orc = per_player["random [cutoff=70]"], per_player["oracle [cutoff=70]"]
    both = [k for k, r in rnd.items() if r["kind"] == "df" and r["label"] == "easy" and k in orc]
    values = [paper_success(rnd[k]) for k in both]
    cell = mean_cell(values)  # the mean with its bootstrap interval
    assert cell.split(" [")[0] == f"{sum(values) / len(values):.2f}"
    oracle = mean_cell([1.0] * len(both))
    assert oracle == "1.00 [1.00, 1.00]"  # every answer right: no spread
    # Names are escaped in the tables (a bracket could open a link); rendered, they read as
    # they are: random [cutoff=70].
    assert f"| random \\[cutoff=70\\] | {cell} \\| {oracle} (n={len(both)})" in table
    report = build_report(tmp_path / "run")
    assert "## MANGO (seed 002)" in report and "Pairwise comparison, RF" in report
    ones = "1.00 [1.00, 1.00]"
    assert (
        f"| oracle \\[cutoff=70\\] | DF | all | 30 | {rate_cell(30, 30)} | {ones} | {ones} | {ones} "
        f"| {ones} |" in report
    )
    with Image.open(tmp_path / "run" / PLOT) as image:
        assert image.format == "PNG" and image.width > 400
