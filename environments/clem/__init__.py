"""clem (seed 000): dialogue games with a programmatic game master, scored as clembench does.

Games: ``clem.reference`` (Reference game), ``clem.matchit`` (MatchIt), ``clem.mapworld_ee``,
``clem.mapworld_g2x`` and ``clem.mapworld_eegr`` (MapWorld: explore exhaustively, go to X,
explore and report the graph). Each has a ``variant`` setting, ``image`` or ``text``; an
experiment of the paper is one game with its settings (e.g. ``set: grids_letters``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parley.environments.base import PlayFn
from parley.environments.clem import clembench, mapworld, matchit, reference
from parley.environments.registry import GameInfo, register

GAMES = (
    "clem.matchit",
    "clem.reference",
    "clem.mapworld_ee",
    "clem.mapworld_g2x",
    "clem.mapworld_eegr",
)
TEXT = {"variant": "text"}


def _mapworld_turn_limits(
    settings: Mapping[str, Any], roles: tuple[str, ...]
) -> dict[str, int] | None:
    """Every role of a MapWorld episode takes at most ``max_turns`` turns."""
    if "max_turns" not in settings:
        return None
    return dict.fromkeys(roles, int(settings["max_turns"]))


def _reference_problems(settings: dict[str, Any]) -> list[str]:
    """A ``reference`` setting that names no playable clembench checkout."""
    if settings.get("reference") is None:
        return []
    return clembench.problems(settings["reference"])


register(
    GameInfo(
        name="clem.reference",
        family="clem",
        roles=("describer", "guesser"),
        game_master=reference.ReferenceGame,
        instance=reference.generate,
        players={
            "describer": {
                "scripted": reference.scripted_describer,
                "random": reference.random_describer,
            },
            "guesser": {"scripted": reference.scripted_guesser, "random": reference.random_guesser},
        },
        description="Reference game: describe the target of three pictures; the partner picks it",
        settings=reference.ReferenceSettings,
        text_settings=TEXT,
        check_settings=_reference_problems,
        reference_provenance=lambda path: clembench.load(path).provenance(),
        shown_otherwise={
            "images": "each grid's rows and cells as phrases; the text draws the grids",
            "target": "the target's index; the text says which grid is the target",
        },
    )
)

register(
    GameInfo(
        name="clem.matchit",
        family="clem",
        roles=("player_a", "player_b"),
        game_master=matchit.MatchItGame,
        instance=matchit.generate,
        players={
            role: {"scripted": matchit.scripted_player, "random": matchit.random_player}
            for role in ("player_a", "player_b")
        },
        description="MatchIt: two players, one picture each; same or different?",
        settings=matchit.MatchItSettings,
        text_settings=TEXT,
        shown_otherwise={"units": "the grid's rows as phrases; the text draws the grid"},
    )
)

NAVIGATOR: dict[str, dict[str, PlayFn]] = {
    "navigator": {"scripted": mapworld.scripted_navigator, "random": mapworld.random_navigator}
}


def _ee(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    return mapworld.explore_instance(seed, settings, "clem.mapworld_ee")


def _eegr(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    return mapworld.explore_instance(seed, settings, "clem.mapworld_eegr")


register(
    GameInfo(
        name="clem.mapworld_ee",
        turn_limits=_mapworld_turn_limits,
        family="clem",
        roles=("navigator",),
        game_master=mapworld.ExploreGame,
        instance=_ee,
        players=NAVIGATOR,
        description="MapWorld EE: visit every room of a map, then say DONE",
        settings=mapworld.ExploreSettings,
        text_settings=TEXT,
    )
)

register(
    GameInfo(
        name="clem.mapworld_g2x",
        turn_limits=_mapworld_turn_limits,
        family="clem",
        roles=("navigator",),
        game_master=mapworld.GoToGame,
        instance=mapworld.g2x_instance,
        players=NAVIGATOR,
        description="MapWorld G2X: find the room of a given kind and stop there",
        settings=mapworld.GoToSettings,
        text_settings=TEXT,
    )
)

register(
    GameInfo(
        name="clem.mapworld_eegr",
        turn_limits=_mapworld_turn_limits,
        family="clem",
        roles=("navigator",),
        game_master=mapworld.ExploreGraphGame,
        instance=_eegr,
        players=NAVIGATOR,
        description="MapWorld EE-gr: explore every room and report the explored map as a graph",
        settings=mapworld.ExploreGraphSettings,
        text_settings=TEXT,
    )
)

__all__ = ["GAMES"]
