"""LVLM-Playground (seed 003): six board games × four tasks (perceiving, QA, rule following,
end-to-end play), with search-based opponents. Registers ``playground.<game>.<task>``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from parley.environments.base import VariantSettings
from parley.environments.playground.chessgame import STOCKFISH_DEPTH, ChessKit
from parley.environments.playground.common import seeded
from parley.environments.playground.gomoku import GomokuKit
from parley.environments.playground.kit import Kit
from parley.environments.playground.minesweeper import MinesweeperKit
from parley.environments.playground.players import players_for
from parley.environments.playground.reversi import ReversiKit
from parley.environments.playground.sudoku import SudokuKit
from parley.environments.playground.tasks import TASKS, master_for
from parley.environments.playground.tictactoe import TicTacToeKit
from parley.environments.registry import (
    Exemption,
    GameInfo,
    InstanceFn,
    register,
    renders_pictures,
)

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
    "rule": "give one valid move in a position",
    "e2e": "play a whole game",
}


class E2ESettings(VariantSettings):
    """Every E2E game's: ``max_invalid`` invalid replies lose the game (forfeit), and it is
    unfinished after ``max_moves`` of the player's moves."""

    max_invalid: int = Field(3, ge=1)
    max_moves: int = Field(200, ge=1)


class SearchSettings(E2ESettings):
    """Reversi: the alpha-beta search's ``depth`` (for the opponent and the scripted player)."""

    depth: int = Field(3, ge=1)


class GomokuSettings(SearchSettings):
    """Gomoku: search ``depth`` and ``width`` (candidate moves looked at per ply)."""

    width: int = Field(10, ge=1)


class ChessSettings(E2ESettings):
    """Chess: Stockfish's search depth (12 plies by default: a fixed amount of work, so its
    moves, and the game, are the same on any machine under any load), an optional time limit
    per move (0: none; a time limit makes the moves depend on the machine's load; the
    reference used 1 s), skill level (0-20), and its path (empty: found on PATH)."""

    stockfish_time: float = Field(0.0, ge=0)
    stockfish_skill: int = Field(20, ge=0, le=20)
    stockfish_depth: int | None = Field(STOCKFISH_DEPTH, ge=1)
    stockfish_path: str = ""


class SudokuSettings(E2ESettings):
    """Sudoku: how many of the 81 cells start empty."""

    empty_cells: int = Field(45, ge=1, le=64)


# Observation data every playground game shows in another form than the data's own words.
SHOWN_OTHERWISE: dict[str, str] = {
    "board": "the paper's numeric board encoding; the text draws the board",
    "game": "the game's name; the system prompt describes the game",
    "task": "the task's name; the system prompt describes the task",
    "question.kind": "the question's type; the text asks the question",
    "question.params": "the question's cell, 0-based; the text names it",
    "fen": "the position as FEN; the text draws the board, side to move and castling",
}
TWO_PLAYER_E2E = (
    "a two-player board game: the scripted player and the scripted opponent both search, and "
    "neither is an oracle that must win (perfect TicTacToe is a draw)"
)


def _exemptions(kit: Kit, task: str) -> dict[str, Exemption]:
    """The checks of ``parley check-game`` the game departs from in ``task``."""
    if task != "e2e":
        return {}
    exemptions: dict[str, Exemption] = {"oracle wins": TWO_PLAYER_E2E} if kit.opponent_side else {}
    return {**exemptions, **kit.e2e_exemptions}


# Each E2E game's settings (search settings are shown to the opponent role).
E2E_SETTINGS: dict[str, type[E2ESettings]] = {
    "reversi": SearchSettings,
    "gomoku": GomokuSettings,
    "chess": ChessSettings,
    "sudoku": SudokuSettings,
}


def _instance_fn(kit: Kit, task: str) -> InstanceFn:
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
    settings: type[VariantSettings] = VariantSettings
    opponent = ""
    if task == "e2e":
        settings = E2E_SETTINGS.get(kit.name, E2ESettings)
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
            settings=settings,
            text_settings={"variant": "text"},
            # Searches (alpha-beta, Stockfish) and pictures are made in worker threads, so the
            # event loop never waits on them.
            offload_players=True,
            offload_game_master=renders_pictures,
            check_exemptions=_exemptions(kit, task),
            shown_otherwise=SHOWN_OTHERWISE,
            turn_limits=_e2e_turn_limits if task == "e2e" else None,
        )
    )


def _e2e_turn_limits(settings: Mapping[str, Any], roles: tuple[str, ...]) -> dict[str, int] | None:
    """A board game ends at ``max_moves`` of the player's; each side may also give
    ``max_invalid - 1`` invalid replies, and the opponent may move first."""
    if "max_moves" not in settings:
        return None
    moves, invalid = int(settings["max_moves"]), int(settings.get("max_invalid", 3))
    return {role: moves + invalid - (1 if role == "player" else 0) for role in roles}


GAMES = {f"{kit.name}.{task}": _register(kit, task) for kit in KITS.values() for task in TASKS}

__all__ = ["GAMES", "KITS"]
