"""Through the real bus with run_experiment: the scripted players score 100 % on perceiving,
QA and rule following for every game; the random players do not; E2E games finish; and the
recorded prompts show each role only what it may see."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from parley.environments.playground import KITS
from parley.runtime.config import load_config
from parley.runtime.reports.playground import collect, report
from parley.runtime.scheduler import run_experiment
from tests.conftest import require

GAMES = sorted(KITS)
OFFLINE = ("perceiving", "qa", "rule")


class Run:
    def __init__(self, path: Path, records: list[dict[str, Any]]) -> None:
        self.path = path
        self.records = records
        self.messages: dict[str, list[dict[str, Any]]] = defaultdict(list)
        with (path / "transcripts.jsonl").open(encoding="utf-8") as f:
            for line in f:
                message = json.loads(line)
                self.messages[message["episode"]].append(message)

    def of(self, game: str, player: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in self.records
            if r["game"] == game and (player is None or r["pairing"]["player"] == player)
        ]


def run(config: dict[str, Any], out: Path) -> Run:
    config = {"name": "pg-test", "concurrency": 64, "tracing": {"enabled": False}, **config}
    outcome = asyncio.run(run_experiment(load_config(config), out))
    return Run(outcome.folder.path, outcome.records)


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> Run:
    games = []
    for game in GAMES:
        for task in OFFLINE:
            games.append(
                {
                    "game": f"playground.{game}.{task}",
                    "seeds": {"count": 12},
                    "pairings": [{"player": "scripted"}, {"player": "random"}],
                }
            )
        # The text variant too, for one task per game.
        games.append(
            {
                "game": f"playground.{game}.qa",
                "seeds": {"start": 100, "count": 4},
                "pairings": [{"player": "scripted"}],
                "settings": {"variant": "text"},
            }
        )
    return run({"games": games}, tmp_path_factory.mktemp("pg") / "offline")


def test_scripted_players_score_everything_on_the_offline_tasks(offline: Run) -> None:
    for game in GAMES:
        for task in OFFLINE:
            records = offline.of(f"playground.{game}.{task}", "scripted")
            assert len(records) >= 12
            for r in records:
                assert r["outcome"] == "success", (r["game"], r["seed"], r["reason"])
                assert r["main_score"] == 100.0 and r["scores"]["parsed"] == 1.0


def test_random_players_do_not(offline: Run) -> None:
    for game in GAMES:
        for task in OFFLINE:
            records = offline.of(f"playground.{game}.{task}", "random")
            assert {r["outcome"] for r in records} <= {"success", "lost"}
            mean = sum(r["main_score"] for r in records) / len(records)
            assert mean < 90, (game, task, mean)
    perceiving = collect(offline.records)["perceiving"]["random"]
    assert perceiving["tictactoe"] > perceiving["chess"]  # 3 symbols vs 13


def test_offline_prompts_hold_no_answer(offline: Run) -> None:
    checked = 0
    for r in offline.records:
        for message in offline.messages[r["episode"]]:
            if message["kind"] != "turn_request":
                continue
            view = message["view"] or {}
            assert "answer" not in view and "answer" not in view.get("question", {})
            if r["game"].endswith(".qa"):
                options = view["question"]["options"]
                text = message["observation"][0]["text"]
                assert all(o in text for o in options)
            images = [p for p in message["observation"] if p["type"] == "image"]
            variant = r["spec"]["settings"]["variant"]
            assert len(images) == (0 if variant == "text" else 1)
            checked += 1
    assert checked == len(offline.records)


def test_report_prints_the_papers_tables(offline: Run) -> None:
    text = report(offline.records, offline.path)
    for title in ("Table 2", "Table 3", "Table 4", "Star-weighted aggregate", "Table 1"):
        assert title in text
    one = "1.000 [1.000, 1.000]"  # every episode scores 1: a constant sample
    assert f"| scripted | {one} | {one} | {one} | {one} | {one} | {one} |" in text
    assert "scripted [text]" in text


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Run:
    games = [
        {
            "game": "playground.tictactoe.e2e",
            "seeds": {"count": 4},
            "pairings": [
                {"player": "scripted", "opponent": "scripted"},
                {"player": "random", "opponent": "scripted"},
            ],
        },
        {
            "game": "playground.minesweeper.e2e",
            "seeds": {"count": 4},
            "pairings": [{"player": "scripted"}, {"player": "random"}],
        },
        {
            "game": "playground.sudoku.e2e",
            "seeds": {"count": 2},
            "pairings": [{"player": "scripted"}],
            "settings": {"empty_cells": 20, "variant": "text"},
        },
        {
            "game": "playground.gomoku.e2e",
            "seeds": {"count": 2},
            "pairings": [{"player": "random", "opponent": "scripted"}],
        },
        {
            "game": "playground.reversi.e2e",
            "seeds": {"count": 1},
            "pairings": [{"player": "random", "opponent": "random"}],
            "settings": {"variant": "text"},
        },
    ]
    return run({"games": games}, tmp_path_factory.mktemp("pg") / "e2e")


def test_e2e_games_finish_with_the_papers_scores(e2e: Run) -> None:
    assert all(r["outcome"] in ("success", "lost") for r in e2e.records), [
        (r["game"], r["reason"]) for r in e2e.records if r["outcome"] not in ("success", "lost")
    ]
    for r in e2e.of("playground.tictactoe.e2e", "scripted"):
        assert r["scores"]["draw"] == 1.0 and r["scores"]["e2e_score"] == 70.0  # perfect vs perfect
    for r in e2e.of("playground.tictactoe.e2e", "random"):
        assert r["scores"]["win"] == 0.0  # minimax never loses
    for r in e2e.of("playground.sudoku.e2e"):
        assert r["outcome"] == "success" and r["scores"]["e2e_score"] == 12 * 20 + 1000
    for r in e2e.of("playground.gomoku.e2e"):
        assert r["outcome"] == "lost" and r["scores"]["win"] == 0.0
    scripted = e2e.of("playground.minesweeper.e2e", "scripted")
    assert sum(r["scores"]["revealed"] for r in scripted) > sum(
        r["scores"]["revealed"] for r in e2e.of("playground.minesweeper.e2e", "random")
    )
    for r in e2e.records:
        assert r["scores"]["invalid"] == 0.0  # built-in players only make legal moves


def test_each_role_sees_only_its_own(e2e: Run) -> None:
    seen_opponent = 0
    for r in e2e.records:
        for message in e2e.messages[r["episode"]]:
            if message["kind"] != "turn_request":
                continue
            view = message["view"] or {}
            text = "\n".join(p["text"] for p in message["observation"] if p["type"] == "text")
            if message["role"] == "player":
                assert "search" not in view and "Search settings" not in text
                if r["game"].startswith("playground.minesweeper"):
                    # The player sees the visible board only: no mine layout anywhere.
                    assert set(view) == {"task", "game", "you", "board", "to_move"}
                    assert all(v != 9 for row in view["board"] for v in row)
            else:
                seen_opponent += 1
                game = r["game"].split(".")[1]
                assert view["you"] == KITS[game].opponent_side and "search" in view
        for message in e2e.messages[r["episode"]]:
            if message["kind"] == "turn_response" and message.get("prompt"):
                recorded = json.dumps(message["prompt"])
                if message["role"] == "player":
                    assert "Search settings" not in recorded
    assert seen_opponent > 0


def test_stockfish_opponent_through_the_bus(tmp_path: Path) -> None:
    require(
        bool(shutil.which("stockfish")) or os.path.exists("/usr/games/stockfish"),
        "Stockfish is not installed (apt-get install stockfish)",
    )
    config = {
        "games": [
            {
                "game": "playground.chess.e2e",
                "seeds": {"count": 2},
                "pairings": [{"player": "random", "opponent": "scripted"}],
                "settings": {"stockfish_time": 0.01, "variant": "text"},
            }
        ]
    }
    result = run(config, tmp_path / "chess")
    for r in result.records:
        assert r["outcome"] == "lost" and r["reason"] == "lost (Black)", r["reason"]
        opponent_moves = [
            m["text"]
            for m in result.messages[r["episode"]]
            if m["kind"] == "turn_response" and m["role"] == "opponent"
        ]
        assert opponent_moves and all(t.startswith("Movement: ") for t in opponent_moves)
