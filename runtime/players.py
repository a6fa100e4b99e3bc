"""Turning a config's player spec into a policy: built-in players come from the game's own
functions, models from the backends."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from agents.policies import FunctionPolicy, HumanPolicy, Policy
from agents.prompt import Prompt, history_text
from environments.base import PlayFn, View
from environments.registry import GameInfo
from runtime.config import PlayerSpec

# Set by the model backends: (player, role, game, models registry) -> Policy.
LlmFactory = Callable[[PlayerSpec, str, GameInfo, dict[str, Any]], Policy]
llm_factory: LlmFactory | None = None


def view_of(prompt: Prompt) -> View:
    """What a built-in player may use: the prompt's content, nothing more."""
    return View(
        role=prompt.role,
        system=prompt.system,
        text=prompt.text,
        data=prompt.working.view,
        feedback=prompt.working.feedback,
        legal_actions=list(prompt.working.legal_actions),
        history=history_text(prompt.history),
        turn=prompt.turn,
    )


def builtin_policy(
    kind: str, play: PlayFn, rng: random.Random, *, offload: bool = False
) -> FunctionPolicy:
    return FunctionPolicy(kind, lambda prompt: play(view_of(prompt), rng), offload=offload)


def make_policy(
    player: PlayerSpec, role: str, game: GameInfo, rng_key: str, models: dict[str, Any]
) -> Policy:
    """The policy for ``role``; ``rng_key`` seeds scripted and random play deterministically."""
    if player.kind in ("scripted", "random"):
        play = game.players[role][player.name or player.kind]
        return builtin_policy(
            player.label, play, random.Random(rng_key), offload=game.offload_players
        )
    if player.kind == "human":
        return HumanPolicy()
    if llm_factory is None:
        raise RuntimeError("model players need the model backends (agents.backends)")
    return llm_factory(player, role, game, models)
