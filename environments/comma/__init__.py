"""COMMA (seed 001): solver/expert puzzles with private information.

Ten puzzles, each registered as ``comma.<name>`` with a scripted solver and expert (together
they win every seed: the proof that puzzle, manual and parser fit) and the paper's random
solver (uniform over the valid actions).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from parley.environments.comma import (
    atm,
    colour,
    keypad,
    led,
    maze,
    memory,
    password,
    reference,
    telehealth,
    who,
    wire,
)
from parley.environments.comma.base import CommaGameMaster, CommaSettings, Puzzle
from parley.environments.comma.leaks import LEAK_DETECTORS
from parley.environments.comma.talk import random_solver
from parley.environments.registry import GameInfo, register, renders_pictures


def register_puzzle(
    puzzle: type[Puzzle], players: dict[str, dict[str, Any]], description: str
) -> GameInfo:
    """Register a puzzle as the game ``comma.<name>``."""
    game_master = type(f"{puzzle.__name__}Master", (CommaGameMaster,), {"puzzle_cls": puzzle})

    def instance(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        if settings.get("reference"):
            made = reference.load(settings["reference"]).instance(puzzle.name, seed)
            if made is not None:
                return made
        return puzzle.generate(seed, settings)

    def check_settings(settings: dict[str, Any]) -> list[str]:
        if settings.get("reference") is not None:
            wrong = reference.problems(settings["reference"])
            if wrong:
                return wrong
        return puzzle.check_settings(settings)

    return register(
        GameInfo(
            name=f"comma.{puzzle.name}",
            family="comma",
            roles=("solver", "expert"),
            game_master=game_master,
            instance=instance,
            players=players,
            description=description,
            settings=puzzle.settings,
            text_settings={"variant": "text"},
            check_settings=check_settings,
            # Observations render PNGs inside the game master: keep that off the event loop.
            offload_game_master=renders_pictures,
            shown_otherwise=puzzle.shown_otherwise,
            # One table for every puzzle: a fact's name means the same in each.
            leak_detectors=LEAK_DETECTORS,
            turn_limits=_turn_limits,
            reference_provenance=lambda path: reference.load(path).provenance(),
        )
    )


def _turn_limits(settings: Mapping[str, Any], roles: tuple[str, ...]) -> dict[str, int] | None:
    """The solver's turns are counted against ``max_turns``; the expert answers each but the
    last."""
    found = None
    if settings.get("reference"):
        # A broken reference is reported by check_settings; the block's own limit stands here.
        with contextlib.suppress(reference.ReferenceError):
            found = reference.load(settings["reference"])
    if found is not None:
        n = found.max_turns + 1  # COMMA's extra step
    elif "max_turns" in settings:
        n = int(settings["max_turns"])
    else:
        return None
    return {role: n if role == "solver" else max(0, n - 1) for role in roles}


# In the paper's table order.
PUZZLES: dict[str, tuple[ModuleType, type[Puzzle], str]] = {
    "wire": (wire, wire.WirePuzzle, "cut the one wire the manual names (3-6 wires, serial number)"),
    "telehealth": (
        telehealth,
        telehealth.TelehealthPuzzle,
        "diagnose a skin lesion and pick its treatment without revealing the private profile",
    ),
    "who": (
        who,
        who.WhoPuzzle,
        "a display word says which label to read; its list says what to press",
    ),
    "led": (led, led.LedPuzzle, "2-5 stages: press a letter whose multiple matches its opposite"),
    "memory": (memory, memory.MemoryPuzzle, "five stages whose rules refer to earlier presses"),
    "keypad": (
        keypad,
        keypad.KeypadPuzzle,
        "press four symbols in the order of the one column holding them",
    ),
    "password": (
        password,
        password.PasswordPuzzle,
        "turn five letter wheels to the one listed word",
    ),
    "colour": (colour, colour.ColourPuzzle, "whiten a 4x4 grid group by group, as a table directs"),
    "maze": (maze, maze.MazePuzzle, "walk a mouse to the sphere the torus colour names"),
    "atm": (
        atm,
        atm.AtmPuzzle,
        "withdraw or deposit depending on a private balance, with a private PIN",
    ),
}

for _module, _puzzle, _description in PUZZLES.values():
    register_puzzle(
        _puzzle,
        {
            "solver": {"scripted": _module.scripted_solver, "random": random_solver},
            "expert": {"scripted": _module.scripted_expert},
        },
        _description,
    )

__all__ = ["PUZZLES", "CommaGameMaster", "CommaSettings", "Puzzle", "register_puzzle"]
