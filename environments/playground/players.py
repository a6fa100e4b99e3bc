"""Built-in players for every game and task. They read ``View.data`` — the machine-readable
copy of what their role was shown — and nothing else.

scripted: perfect perceiving and QA (computed from the board), a legal move for rule
following, a search player for E2E (minimax, alpha-beta, pattern search, a Sudoku solver, a
Minesweeper logician; in chess a small alpha-beta of its own, not Stockfish).
random: the paper's random baseline — a uniformly random matrix, option letter, or move in
the game's notation (legal or not) for rule following; a uniformly random legal move in E2E.
opponent: the search opponent of E2E (or a random legal move).
"""

from __future__ import annotations

import json
import random

from parley.environments.base import PlayFn, View
from parley.environments.playground.common import LETTERS, cpu_bound
from parley.environments.playground.kit import Kit


def _data(view: View) -> dict:
    if not view.data:
        raise ValueError(f"no machine-readable view for {view.role}; built-in players need one")
    return view.data


def players_for(kit: Kit, task: str) -> dict[str, dict[str, PlayFn]]:
    """``{role: {kind: play}}`` for one game and task."""
    if task == "perceiving":

        def scripted(view: View, rng: random.Random) -> str:
            return f"Game State: {json.dumps(_data(view)['board'])}"

        def rand(view: View, rng: random.Random) -> str:
            board = [[rng.choice(kit.values) for _ in range(kit.cols)] for _ in range(kit.rows)]
            return f"Game State: {json.dumps(board)}"

        return {"player": {"scripted": scripted, "random": rand}}

    if task == "qa":

        def scripted(view: View, rng: random.Random) -> str:
            data = _data(view)
            question = data["question"]
            right = kit.answer(data["board"], question["kind"], question["params"])
            return f"Answer: {LETTERS[question['options'].index(right)]}"

        def rand(view: View, rng: random.Random) -> str:
            options = _data(view)["question"]["options"]
            return f"Answer: {rng.choice(LETTERS[: len(options)])}"

        return {"player": {"scripted": scripted, "random": rand}}

    if task == "rule":

        def scripted(view: View, rng: random.Random) -> str:
            position = kit.from_view(_data(view))
            move = rng.choice(position.legal_moves())
            return f"Movement: {kit.write_move(position, move)}"

        def rand(view: View, rng: random.Random) -> str:
            return f"Movement: {kit.random_move_text(rng)}"

        return {"player": {"scripted": scripted, "random": rand}}

    def search_player(view: View, rng: random.Random) -> str:
        position = kit.from_view(_data(view))
        with cpu_bound():
            move = kit.player_move(position, rng)
        options = len(position.legal_moves())
        return (
            f"Observation: {position.to_move()} to move with {options} legal moves.\n"
            f"Strategy: search the moves ahead and play the best one found.\n"
            f"Movement: {kit.write_move(position, move)}"
        )

    def random_player(view: View, rng: random.Random) -> str:
        position = kit.from_view(_data(view))
        move = rng.choice(position.legal_moves())
        return (
            "Observation: the board as shown.\nStrategy: none, a random legal move.\n"
            f"Movement: {kit.write_move(position, move)}"
        )

    roles: dict[str, dict[str, PlayFn]] = {
        "player": {"scripted": search_player, "random": random_player}
    }
    if kit.opponent_side:

        def search_opponent(view: View, rng: random.Random) -> str:
            data = _data(view)
            position = kit.from_view(data)
            if not kit.search_in_process:
                move = kit.search_move(position, rng, data.get("search", {}))
            else:
                with cpu_bound():
                    move = kit.search_move(position, rng, data.get("search", {}))
            return f"Movement: {kit.write_move(position, move)}"

        def random_opponent(view: View, rng: random.Random) -> str:
            position = kit.from_view(_data(view))
            return f"Movement: {kit.write_move(position, rng.choice(position.legal_moves()))}"

        roles["opponent"] = {"scripted": search_opponent, "random": random_opponent}
    return roles
