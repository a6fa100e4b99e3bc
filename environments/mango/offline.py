"""Playing MANGO episodes without the bus: the game master and a built-in player in a loop.

For checks over every question of the data (tens of thousands) where the bus would only add
time: the player sees what the runtime would show it with the ``none`` memory policy (the
system text, the current observation and the latest message).
"""

from __future__ import annotations

import random
from typing import Any

from parley.environments.base import PlayFn, View
from parley.environments.mango.game import MangoMaster, make_instance, plan


def play_episode(instance: dict[str, Any], settings: dict[str, Any], player: PlayFn) -> MangoMaster:
    """One episode to its end; returns the game master (``results`` holds a row a question)."""
    gm = MangoMaster(instance, settings)
    rng = random.Random(f"offline:{instance.get('seed')}")
    system = gm.system_prompt("navigator")
    turn = 0
    while (request := gm.next_turn()) is not None:
        history = [(m.sender, m.text) for m in request.incoming][-1:]
        view = View(
            role="navigator",
            system=system,
            text=request.observation.text,
            data=request.observation.data,
            feedback=request.feedback,
            legal_actions=request.legal_actions,
            history=history,
            turn=turn,
        )
        gm.on_reply("navigator", player(view, rng))
        turn += 1
    return gm


def play_all(kind: str, settings: dict[str, Any], player: PlayFn) -> list[dict[str, Any]]:
    """Every episode the settings give (best with ``questions_per_episode: 0``); one row per
    question, as in the transcript notes."""
    rows: list[dict[str, Any]] = []
    for seed in range(len(plan(kind, settings))):
        rows.extend(play_episode(make_instance(kind, seed, settings), settings, player).results)
    return rows
