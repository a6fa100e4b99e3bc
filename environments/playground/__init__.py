"""LVLM-Playground (seed 003): six board games × four tasks (perceiving, QA, rule following,
end-to-end play), with search-based opponents. Registers ``playground.<game>.<task>``."""

from __future__ import annotations

from typing import Any

from parley.environments.playground.chessgame import ChessKit
from parley.environments.playground.common import seeded
from parley.environments.playground.gomoku import GomokuKit
from parley.environments.playground.kit import Kit
from parley.environments.playground.minesweeper import MinesweeperKit
from parley.environments.playground.players import players_for
from parley.environments.playground.reversi import ReversiKit
from parley.environments.playground.sudoku import SudokuKit
from parley.environments.playground.tasks import TASKS, master_for
from parley.environments.playground.tictactoe import TicTacToeKit
from parley.environments.registry import GameInfo, register, renders_pictures

KITS: dict[str, Kit] = {
    kit.name: kit
    for kit in (
        TicTacToeKit(),
        ReversiKit(),
        SudokuKit(),
        MinesweeperKit(),
        GomokuKit(),
        ChessKit(),
    )
}

TASK_WORDS = {
    "perceiving": "transcribe a random board into its matrix",
    "qa": "answer a multiple-choice question about a random board",
    "rule": "give one valid move in a reachable position",
    "e2e": "play a whole game",
}

# Settings every E2E game accepts, and each game's search settings (shown to the opponent).
E2E_SETTINGS: dict[str, Any] = {"variant": "image", "max_invalid": 3, "max_moves": 200}
GAME_SETTINGS: dict[str, dict[str, Any]] = {
    "reversi": {"depth": 3},
    "gomoku": {"depth": 3, "width": 10},
    "chess": {
        "stockfish_time": 0.1,
        "stockfish_skill": 20,
        "stockfish_depth": None,
        "stockfish_path": "",
    },
    "sudoku": {"empty_cells": 45},
}


def _instance_fn(kit: Kit, task: str):  # type: ignore[no-untyped-def]
    def instance(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        rng = seeded("playground", kit.name, task, seed)
        if task == "perceiving":
            board, extra = kit.random_board(rng)
            return {"seed": seed, "board": board, "extra": extra}
        if task == "qa":
            board, extra = kit.random_board(rng)
            question = kit.question(board, rng)
            return {"seed": seed, "board": board, "extra": extra, "question": question.to_json()}
        if task == "rule":
            return {"seed": seed, "state": kit.rule_position(rng).state()}
        return kit.e2e_instance(seed, settings)

    return instance


def _register(kit: Kit, task: str) -> GameInfo:
    master = master_for(kit, task)
    defaults: dict[str, Any] = {"variant": "image"}
    opponent = ""
    if task == "e2e":
        defaults = {**E2E_SETTINGS, **GAME_SETTINGS.get(kit.name, {})}
        if kit.opponent_side:
            opponent = f"; you play {kit.player_side} against {kit.opponent_side}"
    return register(
        GameInfo(
            name=f"playground.{kit.name}.{task}",
            family="playground",
            roles=master.roles,
            game_master=master,
            instance=_instance_fn(kit, task),
            players=players_for(kit, task),
            description=f"{kit.title}: {TASK_WORDS[task]}{opponent}",
            default_settings=defaults,
            text_settings={"variant": "text"},
            # Searches (alpha-beta, Stockfish) and pictures are made in worker threads, so the
            # event loop never waits on them.
            offload_players=True,
            offload_game_master=renders_pictures,
        )
    )


GAMES = {f"{kit.name}.{task}": _register(kit, task) for kit in KITS.values() for task in TASKS}

__all__ = ["GAMES", "KITS"]
