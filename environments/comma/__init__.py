"""COMMA (seed 001): solver/expert puzzles with private information."""

from __future__ import annotations

from typing import Any

from environments.comma.base import CommaGameMaster, Puzzle
from environments.comma.wire import WirePuzzle, random_solver, scripted_expert, scripted_solver
from environments.registry import GameInfo, register


def register_puzzle(
    puzzle: type[Puzzle], players: dict[str, dict[str, Any]], description: str
) -> GameInfo:
    """Register a puzzle as the game ``comma.<name>``."""
    game_master = type(f"{puzzle.__name__}Master", (CommaGameMaster,), {"puzzle_cls": puzzle})

    def instance(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        return puzzle.generate(seed, settings)

    return register(
        GameInfo(
            name=f"comma.{puzzle.name}",
            family="comma",
            roles=("solver", "expert"),
            game_master=game_master,
            instance=instance,
            players=players,
            description=description,
            default_settings={"max_turns": 10, "max_mistakes": 3, "variant": "image"},
            text_settings={"variant": "text"},
        )
    )


register_puzzle(
    WirePuzzle,
    {
        "solver": {"scripted": scripted_solver, "random": random_solver},
        "expert": {"scripted": scripted_expert},
    },
    "cut the one wire the manual names (3-6 wires, serial number)",
)

__all__ = ["CommaGameMaster", "Puzzle", "register_puzzle"]
