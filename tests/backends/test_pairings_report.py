"""Heterogeneous pairings: a solver × expert matrix of models and built-in players, reported as
one table per metric (rows: the first role's player, columns: the second's), and the model
usage and cost table."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.agents.backends.simserver import SimServerProcess
from parley.records import EpisodeRecord
from parley.runtime.report import build_report
from parley.runtime.reports.intervals import rate_cell
from parley.runtime.reports.pairings import pairing_tables
from tests.backends.conftest import base_sim, model, play, wire_config
from tests.records import record as episode_record

pytestmark = pytest.mark.anyio


def _table(report: str, title: str) -> dict[str, list[str]]:
    """The rows of the Markdown table whose header starts with ``title``, by first cell."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {title}"))
    rows: dict[str, list[str]] = {"": [c.strip() for c in lines[start].strip("|").split("|")][1:]}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


async def test_a_matrix_of_models_and_players_gives_pairing_and_cost_tables(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    sim.configure(
        models={
            **base_sim()["models"],
            # An expert that always names the first wire: right on some seeds only.
            "lazy-expert": {"text": "Cut wire 1."},
        }
    )
    models = {
        "solver-llm": model(
            sim,
            "solver-m",
            images=False,
            price={"input_per_mtok": 1.0, "output_per_mtok": 2.0},
        ),
        "lazy": model(sim, "lazy-expert"),
    }
    pairings = [{"matrix": {"solver": ["solver-llm", "scripted"], "expert": ["lazy", "scripted"]}}]
    seeds = [0, 1, 2, 3]
    records = await play(
        wire_config(models, pairings, seeds=seeds, settings={"max_turns": 3, "max_mistakes": 1}),
        tmp_path,
    )
    assert len(records) == 16
    assert {r["outcome"] for r in records} <= {"success", "lost"}
    report = build_report(tmp_path)
    assert "### comma.wire: solver (rows) × expert (columns)" in report
    success = _table(report, "success %: solver \\ expert")
    assert success[""] == ["lazy", "scripted"]
    assert set(success) == {"", "scripted", "solver-llm"}
    # With the scripted expert both solvers win everything (4 of 4, with a Wilson interval).
    assert success["scripted"][1] == success["solver-llm"][1] == rate_cell(4, 4)
    assert success["scripted"][1].startswith("100.0 [")

    def wins(solver: str, expert: str) -> tuple[int, int]:
        group = [r for r in records if r["pairing"] == {"solver": solver, "expert": expert}]
        return sum(r["outcome"] == "success" for r in group), len(group)

    for solver in ("solver-llm", "scripted"):
        k, n = wins(solver, "lazy")
        assert success[solver][0] == rate_cell(k, n)
        assert success[solver][0].split(" [")[0] == f"{100.0 * k / n:.1f}"
    episodes = _table(report, "episodes: solver \\ expert")
    assert episodes["solver-llm"] == episodes["scripted"] == ["4", "4"]

    usage = _table(report, "model |")
    solver_row = usage["solver-llm"]
    header = usage[""]
    cell = dict(zip(header, solver_row, strict=True))
    solver_records = [r for r in records if r["pairing"]["solver"] == "solver-llm"]
    tokens_in = sum(r["tokens"]["solver"]["input"] for r in solver_records)
    tokens_out = sum(r["tokens"]["solver"]["output"] for r in solver_records)
    assert cell["episodes"] == "8"
    assert cell["input tokens"] == f"{tokens_in:,}"
    assert cell["cost"] == f"{(tokens_in * 1.0 + tokens_out * 2.0) / 1e6:,.4f} USD"
    assert usage["lazy"][-1] == "–"  # no price configured
    assert "Total cost:" in report


def test_pairing_tables_are_generic_over_roles() -> None:
    """First role = rows, second = columns; a third role splits the tables."""

    def record(a: str, b: str, c: str, outcome: str) -> EpisodeRecord:
        return episode_record(
            {
                "game": "g",
                "episode": f"{a}{b}{c}{outcome}",
                "pairing": {"player": a, "opponent": b, "judge": c},
                "outcome": outcome,
                "scores": {"main": 100.0 if outcome == "success" else 0.0},
                "turns": 2,
            }
        )

    records = [
        record("x", "y", "j1", "success"),
        record("x", "z", "j1", "lost"),
        record("w", "y", "j1", "success"),
        record("x", "y", "j2", "lost"),
    ]
    text = pairing_tables(records)
    assert "### g: player (rows) × opponent (columns) with judge=j1" in text
    assert "### g: player (rows) × opponent (columns) with judge=j2" in text
    table = _table(text, "success %: player \\ opponent")
    assert table == {
        "": ["y", "z"],
        "w": [rate_cell(1, 1), ""],
        "x": [rate_cell(1, 1), rate_cell(0, 1)],
    }
    assert table["x"][1].startswith("0.0 [0.0, ")
    assert pairing_tables(records[:1]) == ""  # one pairing: nothing to compare
