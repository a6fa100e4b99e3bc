"""COMMA's metrics and report helpers on hand-made records and transcripts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parley.records import EpisodeRecord
from parley.runtime.reports.comma import (
    by_puzzle_table,
    cut,
    efficiency,
    episode_metrics,
    group_label,
    mean_se,
    report,
    turn_trace,
)
from parley.runtime.reports.intervals import mean_cell, rate_cell
from tests.records import record as episode_record


def record(
    game: str, outcome: str, psr: float, tokens: tuple[int, int], **extra: Any
) -> EpisodeRecord:
    return episode_record(
        {
            "episode": f"{game}-{outcome}-{psr}",
            "game": game,
            "seed": 0,
            "pairing": {"solver": "m", "expert": "m"},
            "spec": extra.pop("spec", {}),
            "outcome": outcome,
            "scores": {"psr": psr, "mistakes": 1.0, "conversation_length": 4.0, "turns": 5.0},
            "tokens": {
                "solver": {"input": 999, "output": tokens[0]},
                "expert": {"input": 5, "output": tokens[1]},
            },
            "token_source": {"solver": "backend", "expert": "backend"},
            **extra,
        }
    )


def test_efficiency_formula() -> None:
    # tokens = 1000 → c = 0.5; PSR 0.5 → 2·0.25/1.0 = 0.5.
    assert efficiency(0.5, 1000) == pytest.approx(0.5)
    assert efficiency(1.0, 0) == pytest.approx(1.0)
    assert efficiency(0.0, 3000) == 0.0
    assert efficiency(1.0, 3000) == pytest.approx(2 * 0.25 / 1.25)


def test_episode_metrics_count_output_tokens_of_both_roles() -> None:
    m = episode_metrics(record("comma.led", "lost", 0.5, (600, 400)))
    assert m is not None
    assert (m["success"], m["psr"], m["tokens"], m["token_source"]) == (0.0, 0.5, 1000, "backend")
    assert m["efficiency"] == pytest.approx(0.5)
    won = episode_metrics(record("comma.led", "success", 0.2, (0, 0)))
    assert won is not None and won["psr"] == 1.0  # a win counts in full
    assert episode_metrics(record("comma.led", "error", 0.0, (0, 0))) is None


def test_group_label_names_ablations() -> None:
    spec = {
        "memory": {"solver": {"policy": "none", "k": 3}, "expert": {"policy": "last_k", "k": 2}},
        "settings": {"max_turns": 20, "max_mistakes": 3, "variant": "text"},
    }
    label = group_label(record("comma.wire", "lost", 0, (1, 1), spec=spec))
    assert (
        label
        == "solver=m, expert=m [solver memory none; expert memory last_k=2; max_turns=20; variant=text]"
    )


def test_mean_se_and_table() -> None:
    assert mean_se([1.0, 0.0, 1.0, 0.0]) == (0.5, pytest.approx(0.2886751))
    rows = [
        episode_metrics(record("comma.wire", "success", 1, (1, 1))),
        episode_metrics(record("comma.wire", "lost", 0, (1, 1))),
        episode_metrics(record("comma.maze", "lost", 0.5, (1, 1))),
    ]
    table = by_puzzle_table([r for r in rows if r], "psr")
    assert table.splitlines()[0] == "| pairing | Wire | Maze | Overall |"
    # Wire: mean 50 of (100, 0), with its bootstrap interval; Maze: one value, no interval.
    # Overall = mean of puzzle means (50 and 50), resampled within each puzzle: Wire's resampled
    # mean is 0, 50 or 100 (each extreme with probability 1/4), Maze is held fixed, so the
    # interval spans (0 + 50) / 2 to (100 + 50) / 2.
    assert table.splitlines()[2] == (
        f"| solver=m, expert=m | {mean_cell([1.0, 0.0], 1, 100.0)} | 50.0 | 50.0 [25.0, 75.0] |"
    )
    assert mean_cell([1.0, 0.0], 1, 100.0).startswith("50.0 [")
    success = by_puzzle_table([r for r in rows if r], "success")  # shares: Wilson intervals
    assert success.splitlines()[2].startswith(
        f"| solver=m, expert=m | {rate_cell(1, 2)} | {rate_cell(0, 1)} | 25.0 ["
    )


def _transcript(progress: list[list[float]], outcome: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for turn in progress:
        messages.append({"kind": "turn_response", "role": "solver"})
        for p in turn:
            messages.append(
                {"kind": "transcript_event", "event": "action", "data": {"progress": p}}
            )
        messages.append({"kind": "turn_response", "role": "expert"})
    messages.append({"kind": "episode_finished", "outcome": outcome})
    return messages


def test_cutting_a_transcript_at_a_turn_limit() -> None:
    progress, won = turn_trace(_transcript([[], [0.2], [], [0.4, 0.6], [0.8, 1.0]], "success"))
    assert progress == [0.0, 0.2, 0.2, 0.6, 1.0] and won
    assert cut(progress, won, 1) == (0.0, 0.0)
    assert cut(progress, won, 4) == (0.0, 0.6)
    assert cut(progress, won, 5) == (1.0, 1.0) == cut(progress, won, 10)
    progress, won = turn_trace(_transcript([[0.5], [0.0]], "lost"))
    assert cut(progress, won, 10) == (0.0, 0.0)  # a reset: the last score counts


def test_report_without_transcripts(tmp_path: Path) -> None:
    records = [record("comma.wire", "success", 1, (10, 10)), record("comma.atm", "lost", 0, (5, 5))]
    text = report(records, tmp_path)
    assert "| pairing | Wire | ATM | Overall |" in text
    assert "Turn-limit" not in text  # no transcripts to cut
    assert (tmp_path / "comma_psr.png").exists() and (tmp_path / "comma_episodes.csv").exists()
    assert "No COMMA episode" in report([record("comma.wire", "error", 0, (0, 0))], tmp_path)
