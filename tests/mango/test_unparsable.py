"""The ``unparsable`` setting on the real data: the scripted navigator answers some route-finding
questions with an empty list; ``zero`` counts those as 0, ``exclude`` leaves them out of every
average and of the easy/hard split, as MANGO's evaluator does (computed here on its own, from the
replies' text), and the report shows both aggregates side by side."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from parley.environments.base import View
from parley.environments.mango.game import check_settings, make_instance, plan
from parley.environments.mango.offline import play_episode
from parley.environments.mango.players import scripted_navigator
from parley.environments.mango.scoring import average
from parley.runtime.config import load_config
from parley.runtime.report import build_report
from parley.runtime.reports.intervals import mean_cell
from parley.runtime.reports.mango import question_rows
from parley.runtime.scheduler import run_experiment
from tests.mango.test_real import mango_config

# Mazes where the scripted navigator's map misses some routes (it then answers "[]").
GAMES = ["murdac", "deephome", "night", "tryst205"]


def mango_rule(replies: list[str], successes: list[float]) -> float | None:
    """MANGO's aggregate, written from the paper: the mean success over the answers that parse to
    a list with at least one step; the others are in no denominator."""
    kept = []
    for reply, success in zip(replies, successes, strict=True):
        try:
            value = json.loads(reply)
        except json.JSONDecodeError:
            continue
        if isinstance(value, list) and value:
            kept.append(success)
    return sum(kept) / len(kept) if kept else None


def play(data_dir: Path, unparsable: str) -> tuple[list[dict[str, Any]], list[str], list[Any]]:
    """Every RF episode of GAMES (one per game): rows, the replies' text, the episodes' scores."""
    settings = {
        "data_dir": str(data_dir),
        "games": GAMES,
        "sample": 8,
        "questions_per_episode": 0,
        "unparsable": unparsable,
    }
    replies: list[str] = []

    def recording(view: View, rng: random.Random) -> str:
        reply = scripted_navigator(view, rng)
        replies.append(reply)
        return reply

    rows: list[dict[str, Any]] = []
    scores = []
    for seed in range(len(plan("rf", settings))):
        gm = play_episode(make_instance("rf", seed, settings), settings, recording)
        rows.extend(gm.results)
        scores.append(gm.scores())
    return rows, replies, scores


def test_exclude_is_mangos_rule_and_zero_counts_every_question(data_dir: Path) -> None:
    rows, replies, _ = play(data_dir, "exclude")
    empty = sum(1 for r in replies if json.loads(r) == [])
    assert empty > 0 and all(r["parsed"] for r in rows)  # empty lists parse, yet give no route
    for label in ("easy", "hard", None):
        picked = [i for i, r in enumerate(rows) if label in (None, r["label"])]
        sel = [rows[i] for i in picked]
        success = [float(r["success_strict"]) for r in sel]
        expected = mango_rule([replies[i] for i in picked], success)
        assert average(sel, "success_strict", "exclude") == pytest.approx(expected)
        assert average(sel, "success_strict", "zero") == pytest.approx(sum(success) / len(sel))
    easy = [r for r in rows if r["label"] == "easy"]
    assert average(easy, "success_strict", "exclude") > average(easy, "success_strict", "zero")


def test_episode_scores_follow_the_setting(data_dir: Path) -> None:
    rows, replies, excluded = play(data_dir, "exclude")
    _, _, zeroed = play(data_dir, "zero")
    games = [r["game"] for r in rows]
    differ = 0
    for ex, ze, game in zip(excluded, zeroed, dict.fromkeys(games), strict=True):
        picked = [i for i, g in enumerate(games) if g == game]
        loose = [float(rows[i]["success_loose"]) for i in picked]
        assert ze["success_loose"] == pytest.approx(sum(loose) / len(loose))
        assert ex["success_loose"] == pytest.approx(mango_rule([replies[i] for i in picked], loose))
        assert ex.main == pytest.approx(100.0 * ex["success_loose"])
        differ += ex["success_loose"] != ze["success_loose"]
    assert differ == len(GAMES)


def test_a_bad_value_is_refused(data_dir: Path) -> None:
    problems = check_settings({"data_dir": str(data_dir), "unparsable": "skip"})
    assert problems and "unparsable" in " ".join(problems)


def test_the_report_shows_both_aggregates(data_dir: Path, tmp_path: Path) -> None:
    config = mango_config(data_dir, games=GAMES, sample=8, unparsable="exclude")
    config["games"] = [b for b in config["games"] if b["game"] == "mango.rf"]
    for block in config["games"]:
        block["pairings"] = [{"navigator": "scripted"}]
        block["seeds"] = {"count": len(GAMES)}  # one episode a maze
    outcome = asyncio.run(run_experiment(load_config(config), tmp_path / "run"))
    assert len(outcome.records) == len(GAMES)
    report = build_report(tmp_path / "run")
    assert "success (strict), unparsable left out" in report
    # Both aggregates, computed here from the run's own per-question notes.
    rows = question_rows(outcome.records, tmp_path / "run")
    assert len(rows) == len(GAMES) * 8
    for label in ("easy", "hard", "all"):
        sel = [r for r in rows if label in ("all", r["label"])]
        kept = [r for r in sel if r["answer_length"] > 0]
        # The means (the bootstrap intervals depend on the values' order).
        zero = mean_cell([r["success_strict"] for r in sel]).split()[0]
        left_out = mean_cell([r["success_strict"] for r in kept]).split()[0]
        assert zero != left_out
        line = next(x for x in report.splitlines() if x.startswith(f"| scripted | RF | {label} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[3] == str(len(sel))
        assert cells[6].split()[0] == zero and cells[-1].split()[0] == left_out
