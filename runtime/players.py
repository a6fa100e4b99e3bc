"""Turning a config's player spec into a policy: built-in players come from the game's own
functions, models from the backends."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from parley.agents.backends.policy import LlmPolicy
from parley.agents.backends.pool import ModelPool
from parley.agents.policies import FunctionPolicy, HumanPolicy, Policy, SeatPolicy
from parley.agents.prompt import Prompt
from parley.environments.base import PlayFn, View
from parley.environments.registry import GameInfo
from parley.runtime.config import PlayerSpec

# An override for model players (tests, custom backends): (player, role, game, models) -> Policy.
LlmFactory = Callable[[PlayerSpec, str, GameInfo, Any], Policy]
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
        # Memory of earlier episodes first, as the prompt has it (speaker "memory").
        history=prompt.history_pairs(),
        turn=prompt.turn,
    )


def builtin_policy(
    kind: str, play: PlayFn, rng: random.Random, *, offload: bool = False
) -> FunctionPolicy:
    return FunctionPolicy(kind, lambda prompt: play(view_of(prompt), rng), offload=offload)


def make_policy(
    player: PlayerSpec,
    role: str,
    game: GameInfo,
    rng_key: str,
    models: ModelPool | Any,
    draw: Mapping[str, Any] | None = None,
) -> Policy:
    """The policy for ``role``; ``rng_key`` seeds scripted and random play deterministically,
    ``draw`` (the episode's seed and repetition) sets a model's sampled replies apart in the
    response cache.

    ``models`` is the run's :class:`ModelPool` (clients shared by every episode, see
    :func:`parley.runtime.launch.open_models`); given the bare registry instead (a dict of specs), the
    policy gets clients of its own, closed with the episode.
    """
    if player.kind in ("scripted", "random"):
        play = game.players[role][player.name or player.kind]
        return builtin_policy(
            player.label, play, random.Random(rng_key), offload=game.offload_players
        )
    if player.kind == "human":
        # A browser seat's person answers through the dashboard (observability/dashboard/
        # seats.py), which plays the role with this policy; the runtime only keeps its clock.
        return SeatPolicy() if player.seat else HumanPolicy()
    if llm_factory is not None:
        return llm_factory(player, role, game, models)
    assert player.model is not None
    if isinstance(models, ModelPool):
        return models.policy(player.model, player.params, role, draw)
    return _own_policy(player, role, models or {})


def _own_policy(player: PlayerSpec, role: str, specs: dict[str, Any]) -> Policy:
    """A model policy with a pool of its own (no run-wide pool given): correct, not shared."""
    from parley.observability import tracing

    pool = ModelPool(specs, tracer=tracing.tracer)
    policy = pool.policy(player.model or "", player.params, role)
    if isinstance(policy, LlmPolicy):
        policy.closer = pool.aclose
    return policy
