"""MANGO (seed 002): mapping and navigation questions over text-game walkthroughs.

``mango.df`` asks destination-finding questions, ``mango.rf`` route-finding ones; the role is
``navigator``, with built-in ``scripted``, ``oracle`` and ``random`` players.
"""

from __future__ import annotations

from functools import partial

from parley.environments.base import PlayFn
from parley.environments.mango.data import MangoDataError, MangoGame, Question, load_game
from parley.environments.mango.game import (
    DEFAULT_SETTINGS,
    MangoMaster,
    MangoSettings,
    check_settings,
    make_instance,
    plan,
)
from parley.environments.mango.players import oracle_navigator, random_navigator, scripted_navigator
from parley.environments.registry import GameInfo, register

PLAYERS: dict[str, dict[str, PlayFn]] = {
    "navigator": {
        "scripted": scripted_navigator,
        "random": random_navigator,
        "oracle": oracle_navigator,
    }
}

for _kind, _description in (
    ("df", "where do these actions lead from this place? (walkthrough of a text game)"),
    ("rf", "how do you get from this place to that one? (walkthrough of a text game)"),
):
    register(
        GameInfo(
            name=f"mango.{_kind}",
            family="mango",
            roles=("navigator",),
            game_master=MangoMaster,
            instance=partial(make_instance, _kind),
            players=PLAYERS,
            description=_description,
            text_only=True,
            settings=MangoSettings,
            check_settings=check_settings,
            shown_otherwise={"question.kind": "df or rf; the text asks the question"},
        )
    )

__all__ = [
    "DEFAULT_SETTINGS",
    "MangoDataError",
    "MangoGame",
    "MangoMaster",
    "MangoSettings",
    "Question",
    "load_game",
    "make_instance",
    "plan",
]
