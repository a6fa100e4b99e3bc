"""``parley plan``: what a config will cost before it runs — episodes, model calls, tokens, money.

The plan expands the config as the run does (runtime/experiment.py ``expand``), then, for each
game × pairing, plays a few of its own episodes in this process, without a bus: the same
instances, settings, memory policies and seeded built-in players as the run, with each model's
role played by the game's oracle (its ``oracle`` player where it has one, else ``scripted``)
and each human by it too. What that sample shows is the **typical** length of an episode:
turns per role, hence model calls, and the prompts each call would carry.

- **Prompt tokens** are counted on the rendered prompt of every sampled call (system text,
  memory, observation, feedback: what the backend would send), with parley's offline counter
  (``parley.tokens``, within about 15 % of common BPE tokenizers on English), plus
  ``image_tokens`` for each image (default 765, OpenAI's count for a 512×512 image at high
  detail; vision models vary from about 64 to a few thousand).
- **Reply tokens** (typical) are those of the sampled replies, each cut to the model's
  ``max_tokens`` (a scripted reply may be longer than a model may write): a reply that does
  the job, which a model's chattier answer will exceed; the upper bound is ``max_tokens`` on
  every call.
- **Context**: the longest prompt of a role's sampled calls, against the model entry's
  ``context_size`` (:func:`context_warnings`, which ``parley check`` calls too).
- **Upper bounds** come from the games' own limits: COMMA's ``max_turns`` (the solver at most
  that many turns, the expert one fewer), MapWorld's ``max_turns``, the Playground's
  ``max_moves`` plus ``max_invalid`` replies. A game without such a limit is bounded by the
  most turns seen in sampled play by the oracle, random and stalling (prose) players, and the
  plan says ``seen`` for it.
- **Cost** is tokens × ``price:`` (per million tokens) of each model entry; a model without a
  price shows none. Retries are not counted (a call is one request that succeeded).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from parley.agents.backends.spec import ModelSpec
    from parley.agents.prompt import Prompt
    from parley.environments.registry import GameInfo
    from parley.runtime.config import ExperimentConfig
    from parley.runtime.experiment import EpisodeSpec

DEFAULT_SAMPLE = 10  # episodes sampled per game × pairing, at most
SAMPLE_TURNS = 60  # ... and no more once they have played this many turns
MIN_SAMPLE = 2
IMAGE_TOKENS = 765
MESSAGE_TOKENS = 4  # per chat message: the role and the separators around it
MAX_REPLIES = 2_000  # as runtime/checkgame.py: an episode not over by then never will be

Bound = Literal["limit", "seen"]


class RolePlan(BaseModel):
    """One role of one pairing: who plays it and what one episode asks of it."""

    role: str
    player: str
    model: str | None = None  # the registry name, for a model's role
    turns: float  # typical turns per episode (mean of the sample)
    turns_max: int  # upper bound per episode
    bound: Bound
    input_tokens: float = 0.0  # typical prompt tokens per episode (model roles)
    output_tokens: float = 0.0  # typical reply tokens per episode (model roles)
    images: float = 0.0  # typical images sent per episode (model roles)
    prompt_tokens_max: int = 0  # the longest prompt of one sampled call (model roles)
    reply_tokens_max: int = 0  # the most one reply may have: max_tokens (model roles)
    memory: str = "full"  # the memory policy inside an episode (last_k with its k)
    notes: bool = False  # an end-of-episode note (memory across episodes: notes) each episode


class PairingPlan(BaseModel):
    """One game × pairing: its episodes and what each takes."""

    game: str
    pairing: str
    episodes: int
    sampled: int  # episodes played for the estimate
    outcomes: dict[str, int] = Field(default_factory=dict)  # of the sampled episodes
    error: str | None = None  # why a sampled episode ended as error (the first such)
    turns: float  # typical turns per episode, all roles
    turns_max: int
    roles: list[RolePlan]


class ModelPlan(BaseModel):
    """One model over the whole run."""

    model: str
    served: str
    calls: float
    calls_max: int
    input_tokens: float
    output_tokens: float
    output_tokens_max: int
    input_tokens_max: float  # the typical prompt size × calls_max
    cost: float | None = None
    cost_max: float | None = None
    currency: str | None = None


class Plan(BaseModel):
    """What a config asks for: the episodes, and the calls, tokens and cost per model."""

    config: str
    episodes: int
    turns: float
    turns_max: int
    image_tokens: int
    pairings: list[PairingPlan]
    models: list[ModelPlan]
    warnings: list[str] = Field(default_factory=list)  # prompts over a context (one a line)


# --- upper bounds ---------------------------------------------------------------------------


def turn_limits(
    game: str, settings: dict[str, Any], roles: tuple[str, ...]
) -> dict[str, int] | None:
    """The most turns each role can take in one episode, as the game declares them
    (``GameInfo.turn_limits``); None for a game without (see the module's docstring)."""
    from parley.environments import registry

    info = registry.get(game)
    return None if info.turn_limits is None else info.turn_limits(settings, roles)


# --- playing a sample -----------------------------------------------------------------------


@dataclass
class _Calls:
    """What one role's policy was asked in one sampled episode."""

    input_tokens: int = 0
    output_tokens: int = 0
    images: int = 0
    longest: int = 0  # prompt tokens of the longest call


@dataclass
class _Sampled:
    outcome: str
    turns: dict[str, int]
    calls: dict[str, _Calls] = field(default_factory=dict)
    reason: str = ""  # why it ended as error


class _Counting:
    """A policy that counts what its prompts would cost a model, then lets ``inner`` reply."""

    def __init__(
        self,
        inner: Any,
        tally: _Calls,
        image_tokens: int,
        max_images: int | None,
        max_output: int | None = None,
    ) -> None:
        self.name = inner.name
        self.inner = inner
        self.tally = tally
        self.image_tokens = image_tokens
        self.max_images = max_images  # what the backend sends at most (0: a text-only model)
        self.max_output = max_output  # the most a model may write in one reply

    async def decide(self, prompt: Prompt) -> Any:
        from parley.bus.messages import ImagePart, TextPart
        from parley.tokens import count_tokens

        images = tokens = 0
        for message in prompt.messages():
            tokens += MESSAGE_TOKENS
            for part in message.content:
                if isinstance(part, TextPart):
                    tokens += count_tokens(part.text)
                elif isinstance(part, ImagePart):
                    images += 1
        if self.max_images is not None:
            images = min(images, self.max_images)
        tokens += images * self.image_tokens
        self.tally.images += images
        self.tally.input_tokens += tokens
        self.tally.longest = max(self.tally.longest, tokens)
        decision = await self.inner.decide(prompt)
        # The stand-in's reply may run longer than the model may write: what a model would
        # send is cut there.
        written = count_tokens(decision.text)
        if self.max_output is not None:
            written = min(written, self.max_output)
        self.tally.output_tokens += written
        return decision

    async def aclose(self) -> None:
        await self.inner.aclose()


def _stand_in(info: GameInfo, spec: EpisodeSpec, role: str, strategy: str) -> Any | None:
    """The player spec that plays ``role`` in the sample: the configured built-in player, or
    for a model's or a person's role the game's oracle (``strategy`` ``random``: its random
    player, where it has one)."""
    from parley.runtime.config import PlayerSpec

    player = spec.players[role]
    if player.kind in ("scripted", "random"):
        return player
    available = info.players.get(role, {})
    if strategy == "random" and "random" in available:
        return PlayerSpec(kind="random")
    if "oracle" in available:
        return PlayerSpec(kind="scripted", name="oracle")
    if "scripted" in available:
        return PlayerSpec(kind="scripted")
    if "random" in available:
        return PlayerSpec(kind="random")
    return None  # no built-in player for the role: a stalling one stands in


def _prose(view: Any, rng: random.Random) -> str:
    """A stalling player: a reply that chooses nothing (as runtime/checkgame.py's prose)."""
    return "Hmm, I am not sure yet; I would rather think about it some more before I decide."


async def play_sample(
    info: GameInfo,
    spec: EpisodeSpec,
    *,
    strategy: str = "oracle",
    image_tokens: int = IMAGE_TOKENS,
    models: Mapping[str, ModelSpec] | None = None,
) -> _Sampled:
    """Play ``spec`` in this process as a run would (same instance, settings, memory policies
    and seeds), model and human roles played by stand-ins (:func:`_stand_in`; ``strategy``
    ``prose``: a stalling reply), counting each model role's prompt and reply tokens (images
    as many as ``models``' entry sends: ``max_images``, none for a text-only model)."""
    from parley.agents.agent import Agent
    from parley.memory import HistoryPolicy
    from parley.runtime.episode import MAX_REPLY_CHARS, turn_request
    from parley.runtime.players import builtin_policy, make_policy

    sampled = _Sampled("error", dict.fromkeys(info.roles, 0))
    agents: dict[str, Agent] = {}
    for role in info.roles:
        key = f"{spec.id}:{role}"  # the run's seed of this role's built-in player
        stand_in = _stand_in(info, spec, role, strategy)
        if stand_in is None or (
            strategy == "prose" and spec.players[role].kind not in ("scripted", "random")
        ):
            policy: Any = builtin_policy("prose", _prose, random.Random(key))
        else:
            policy = make_policy(stand_in, role, info, key, {})
        if spec.players[role].kind == "llm":
            sampled.calls[role] = _Calls()
            model = (models or {}).get(spec.players[role].model or "")
            cap = None if model is None else (model.max_images if model.images else 0)
            most = None if model is None else reply_limit(model, spec.players[role].params)
            policy = _Counting(policy, sampled.calls[role], image_tokens, cap, most)
        memory = spec.memory.get(role)
        history = HistoryPolicy(memory.policy, memory.k) if memory else None
        agents[role] = Agent(role, policy, history=history, memory_key=key, record_prompts=False)
    try:
        instance = spec.instance or info.instance(spec.seed, spec.settings)
        gm = info.game_master(instance, spec.settings)
    except Exception as exc:  # the run would end this episode as error too
        sampled.reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        return sampled
    try:
        for n in range(1, MAX_REPLIES + 1):
            turn = gm.next_turn()
            gm.drain_events()
            if turn is None:
                break
            agent = agents[turn.role]
            system = gm.system_prompt(turn.role) if agent.turns == 0 else None
            request = turn_request(turn, run="plan", episode=spec.id, n=n, system=system)
            response = await agent.respond(request)
            sampled.turns[turn.role] += 1
            gm.on_reply(turn.role, response.text[:MAX_REPLY_CHARS])
            gm.drain_events()
        else:
            sampled.outcome = "unended"
            return sampled
    except Exception as exc:  # a game or player that raises: counted as the error it is
        sampled.reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        return sampled
    finally:
        for agent in agents.values():
            agent.forget()
    sampled.outcome = gm.outcome or "lost"
    return sampled


def reply_limit(model: ModelSpec, params: Mapping[str, Any] | None = None) -> int:
    """The most tokens one reply of ``model`` may have, with a player's ``params`` over the
    entry's: ``max_completion_tokens`` where set (a reasoning model's thinking counts), else
    ``max_tokens``."""
    merged = model.params.merged(dict(params or {}))
    return int(getattr(merged, "max_completion_tokens", None) or merged.max_tokens)


# --- the plan -------------------------------------------------------------------------------


def spread(specs: list[EpisodeSpec], k: int) -> list[EpisodeSpec]:
    """``k`` of ``specs`` spread evenly over them (the first and last included): every part of
    the seed range, and repetitions of one seed only when there is room."""
    n = len(specs)
    if k >= n:
        return list(specs)
    if k == 1:
        return specs[:1]
    return [specs[round(i * (n - 1) / (k - 1))] for i in range(k)]


def _memory_label(memory: Any) -> str:
    if memory is None:
        return "full"
    return f"last_k, k={memory.k}" if memory.policy == "last_k" else str(memory.policy)


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


async def _plan_pairing(
    info: GameInfo,
    specs: list[EpisodeSpec],
    sample: int,
    turns: int,
    image_tokens: int,
    models: Mapping[str, ModelSpec],
    bounds: bool = True,
) -> PairingPlan:
    first = specs[0]
    chosen: list[EpisodeSpec] = []
    played: list[_Sampled] = []
    for spec in spread(specs, sample):
        chosen.append(spec)
        played.append(await play_sample(info, spec, image_tokens=image_tokens, models=models))
        # Long games (a chess engine on every move) stop early: enough turns seen is enough.
        if len(played) >= MIN_SAMPLE and sum(sum(p.turns.values()) for p in played) >= turns:
            break
    limits = turn_limits(first.game, first.settings, info.roles)
    if limits is None:
        # No declared limit: the most turns seen by the oracle, random and stalling players.
        others = [
            await play_sample(info, s, strategy=strategy, image_tokens=image_tokens, models=models)
            for strategy in ("random", "prose")
            for s in chosen
            if bounds
        ]
        seen = {r: max(p.turns[r] for p in [*played, *others]) for r in info.roles}
    roles: list[RolePlan] = []
    for role in info.roles:
        player = first.players[role]
        memory = first.memory.get(role)
        notes = bool(
            memory and memory.remembers and memory.across and memory.across.policy == "notes"
        )
        calls = [p.calls[role] for p in played if role in p.calls]
        model = models.get(player.model or "") if player.kind == "llm" else None
        roles.append(
            RolePlan(
                role=role,
                player=player.label,
                model=player.model if player.kind == "llm" else None,
                turns=_mean([p.turns[role] for p in played]),
                turns_max=limits[role] if limits is not None else seen[role],
                bound="limit" if limits is not None else "seen",
                input_tokens=_mean([c.input_tokens for c in calls]),
                output_tokens=_mean([c.output_tokens for c in calls]),
                images=_mean([c.images for c in calls]),
                prompt_tokens_max=max((c.longest for c in calls), default=0),
                reply_tokens_max=0 if model is None else reply_limit(model, player.params),
                memory=_memory_label(memory),
                notes=notes and player.kind == "llm",
            )
        )
    outcomes: dict[str, int] = defaultdict(int)
    for p in played:
        outcomes[p.outcome] += 1
    return PairingPlan(
        game=first.game,
        pairing=first.pairing_label,
        episodes=len(specs),
        sampled=len(played),
        outcomes=dict(outcomes),
        error=next((p.reason for p in played if p.reason), None),
        turns=sum(r.turns for r in roles),
        turns_max=sum(r.turns_max for r in roles),
        roles=roles,
    )


async def make_plan(
    config: ExperimentConfig,
    *,
    sample: int = DEFAULT_SAMPLE,
    turns: int = SAMPLE_TURNS,
    image_tokens: int = IMAGE_TOKENS,
    label: str = "",
    only: Callable[[EpisodeSpec], bool] | None = None,
    bounds: bool = True,
) -> Plan:
    """The plan of ``config``: up to ``sample`` episodes of each game × pairing are played for
    the typical lengths, fewer (at least two) once they have played ``turns`` turns
    (raises :class:`~parley.runtime.config.ConfigError` for a bad config). ``only``: plan
    just the episodes it keeps; ``bounds`` false: a game without a turn limit is bounded by
    the oracle's play alone (quicker, for the prompts only)."""
    from parley.environments import registry
    from parley.runtime.experiment import expand

    # One row per game × pairing, and per settings and memory where blocks of one game differ
    # in them (another turn limit, another memory policy).
    groups: dict[tuple[str, str, str], list[EpisodeSpec]] = {}
    for spec in expand(config):
        if only is not None and not only(spec):
            continue
        how = json.dumps(
            [spec.settings, {r: m.model_dump() for r, m in spec.memory.items()}],
            sort_keys=True,
            default=str,
        )
        groups.setdefault((spec.game, spec.pairing_label, how), []).append(spec)
    # Pairings at once: the search players of board games think in threads or in an engine's
    # process, which then overlap. Each pairing's sample is the same whatever the order.
    limit = asyncio.Semaphore(max(1, os.cpu_count() or 1))

    async def one(game: str, specs: list[EpisodeSpec]) -> PairingPlan:
        async with limit:
            return await _plan_pairing(
                registry.get(game), specs, sample, turns, image_tokens, config.models, bounds
            )

    pairings = list(
        await asyncio.gather(*(one(game, specs) for (game, _, _), specs in groups.items()))
    )
    plan = Plan(
        config=label or config.name,
        episodes=sum(p.episodes for p in pairings),
        turns=sum(p.turns * p.episodes for p in pairings),
        turns_max=sum(p.turns_max * p.episodes for p in pairings),
        image_tokens=image_tokens,
        pairings=pairings,
        models=_models(config, pairings),
    )
    plan.warnings = await context_warnings(config, plan)
    return plan


def _models(config: ExperimentConfig, pairings: list[PairingPlan]) -> list[ModelPlan]:
    totals: dict[str, dict[str, float]] = {}
    for p in pairings:
        for r in p.roles:
            if r.model is None:
                continue
            t = totals.setdefault(r.model, defaultdict(float))
            extra = 1 if r.notes else 0
            t["calls"] += (r.turns + extra) * p.episodes
            t["calls_max"] += (r.turns_max + extra) * p.episodes
            t["input"] += r.input_tokens * p.episodes
            t["output"] += r.output_tokens * p.episodes
            t["output_max"] += (r.turns_max + extra) * p.episodes * r.reply_tokens_max
            per_call = r.input_tokens / r.turns if r.turns else 0.0
            t["input_max"] += per_call * (r.turns_max + extra) * p.episodes
    out: list[ModelPlan] = []
    for name in config.models:
        if name not in totals:
            continue
        t, spec = totals[name], config.models[name]
        calls_max = int(t["calls_max"])
        output_max = int(t["output_max"])
        cost = cost_max = None
        if spec.price is not None:
            per_in, per_out = spec.price.input_per_mtok / 1e6, spec.price.output_per_mtok / 1e6
            cost = t["input"] * per_in + t["output"] * per_out
            cost_max = t["input_max"] * per_in + output_max * per_out
        out.append(
            ModelPlan(
                model=name,
                served=spec.model,
                calls=round(t["calls"], 1),
                calls_max=calls_max,
                input_tokens=round(t["input"]),
                output_tokens=round(t["output"]),
                output_tokens_max=output_max,
                input_tokens_max=round(t["input_max"]),
                cost=cost,
                cost_max=cost_max,
                currency=spec.price.currency if spec.price is not None else None,
            )
        )
    return out


# --- context windows ------------------------------------------------------------------------

# parley's offline counter is within about 15 % of a model's own tokenizer: a prompt counted
# within that of the context may not fit.
CONTEXT_MARGIN = 1.15


def _context_of(
    config: ExperimentConfig, model: str | None, sizes: Mapping[str, int] | None
) -> int | None:
    spec = config.models.get(model or "")
    if spec is None:
        return None
    return spec.context_size or (sizes or {}).get(model or "")


async def context_warnings(
    config: ExperimentConfig,
    plan: Plan | None = None,
    *,
    sizes: Mapping[str, int] | None = None,
) -> list[str]:
    """One line per game, role and model whose longest prompt, as ``plan`` estimates it (with
    the offline counter's margin), does not fit the model's context: its ``context_size``, or
    ``sizes`` (model name → the size its server serves, read at pre-flight) where the entry
    sets none. Each line names the game, the role, the tokens and the fix. Without ``plan``,
    a quick one is played (two episodes a pairing) of the episodes whose models have a known
    context; none known: an empty list at once. Raises ConfigError for a bad config."""
    sized = {name for name in config.models if _context_of(config, name, sizes)}
    if not sized:
        return []
    if plan is None:
        plan = await make_plan(
            config,
            sample=MIN_SAMPLE,
            only=lambda spec: any(
                p.kind == "llm" and p.model in sized for p in spec.players.values()
            ),
            bounds=False,
        )
    longest: dict[tuple[str, str, str], RolePlan] = {}
    for pairing in plan.pairings:
        for played in pairing.roles:
            if played.model in sized:
                key = (pairing.game, played.role, played.model)
                if key not in longest or played.prompt_tokens_max > longest[key].prompt_tokens_max:
                    longest[key] = played
    out: list[str] = []
    for (game, role, model), played in sorted(longest.items()):
        tokens = played.prompt_tokens_max
        size = _context_of(config, model, sizes) or 0
        if tokens * CONTEXT_MARGIN <= size:
            continue
        where = (
            f"models.{model}.context_size"
            if config.models[model].context_size
            else f"served by the server of {model}"
        )
        if played.memory == "none":
            fix = "a bigger context (this role's memory keeps the latest message only already)"
        elif played.memory.startswith("last_k"):
            fix = (
                f"a smaller k in the game's memory.{role} (now {played.memory}), "
                "or a bigger context"
            )
        else:
            fix = (
                f"a memory policy that keeps fewer turns (the game's memory: {{{role}: "
                f"{{policy: last_k, k: 2}}}}; now {played.memory}), or a bigger context"
            )
        fits = "over" if tokens > size else "within 15 % of"
        out.append(
            f"{game}, role {role} (model {model}): prompts of up to about {tokens:,} tokens "
            f"(counted offline, ±15 %), {fits} its context of {size:,} ({where}); a prompt "
            f"that does not fit is not sent and ends its episode as error (context_exceeded). "
            f"Fix: {fix}"
        )
    return out


def print_context_warnings(
    config: ExperimentConfig, console: Any, *, sizes: Mapping[str, int] | None = None
) -> list[str]:
    """:func:`context_warnings` of ``config``, each printed on ``console`` (a rich Console),
    for ``parley check`` and the run's pre-flight; returns them. Not inside a running loop."""
    from parley import event_loop

    warnings = event_loop.run(context_warnings(config, sizes=sizes))
    for warning in warnings:
        console.print(f"[yellow]context: {warning}[/]", highlight=False, soft_wrap=True)
    return warnings


# --- printing -------------------------------------------------------------------------------


def _n(value: float) -> str:
    if value >= 10_000:
        return f"{value:,.0f}"
    return f"{value:,.1f}".removesuffix(".0")


def _money(value: float | None, currency: str | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f} {currency}" if value >= 0.01 or value == 0 else f"<0.01 {currency}"


def tables(plan: Plan) -> list[Any]:
    """The plan as rich tables: episodes per game × pairing, then calls and cost per model."""
    from rich.table import Table

    episodes = Table(
        title=f"plan: {plan.config} — {plan.episodes:,} episodes", title_justify="left"
    )
    for column in ("game", "pairing", "episodes", "turns/ep", "max", "model calls/ep", "sampled"):
        episodes.add_column(column, justify="left" if column in ("game", "pairing") else "right")
    for p in plan.pairings:
        calls = sum(r.turns + r.notes for r in p.roles if r.model)
        bound = "" if all(r.bound == "limit" for r in p.roles) else " (seen)"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(p.outcomes.items()))
        episodes.add_row(
            p.game,
            p.pairing,
            f"{p.episodes:,}",
            _n(p.turns),
            f"{p.turns_max:,}{bound}",
            _n(calls) if any(r.model for r in p.roles) else "-",
            f"{p.sampled} ({outcomes})",
        )
    out: list[Any] = [episodes]
    if plan.models:
        models = Table(
            title="model calls, tokens and cost (typical / at most)", title_justify="left"
        )
        for column in (
            "model",
            "calls",
            "calls max",
            "tokens in",
            "tokens out",
            "cost",
            "cost max",
        ):
            models.add_column(column, justify="left" if column == "model" else "right")
        for m in plan.models:
            models.add_row(
                m.model,
                _n(m.calls),
                f"{m.calls_max:,}",
                _n(m.input_tokens),
                f"{_n(m.output_tokens)} / {m.output_tokens_max:,}",
                _money(m.cost, m.currency),
                _money(m.cost_max, m.currency),
            )
        out.append(models)
    return out


# --- the command line ----------------------------------------------------------------------


def _count(minimum: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        number = int(value) if value.isdigit() else -1
        if number < minimum:
            raise argparse.ArgumentTypeError(
                f"expected a whole number of at least {minimum}, got {value!r}"
            )
        return number

    return parse


def add_plan_command(sub: Any) -> None:
    """Register ``parley plan CONFIG``."""
    plan = sub.add_parser(
        "plan",
        help="episodes per game and pairing, model calls, tokens and cost of a config, "
        "before running it",
    )
    plan.add_argument("config", help="experiment YAML")
    plan.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, as for parley run",
    )
    plan.add_argument(
        "--sample",
        type=_count(1),
        default=DEFAULT_SAMPLE,
        help=f"episodes of each game × pairing to play for typical lengths (default {DEFAULT_SAMPLE})",
    )
    plan.add_argument(
        "--sample-turns",
        type=_count(1),
        default=SAMPLE_TURNS,
        help="stop sampling a game × pairing (after two episodes) once its sample has played "
        f"this many turns (default {SAMPLE_TURNS})",
    )
    plan.add_argument(
        "--image-tokens",
        type=_count(0),
        default=IMAGE_TOKENS,
        help=f"prompt tokens one image counts for (default {IMAGE_TOKENS})",
    )
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(fn=command)


def command(args: argparse.Namespace) -> int:
    """``parley plan``: print the plan (0), or a config error (2, through the CLI)."""
    from rich.console import Console

    from parley import event_loop
    from parley.runtime.config import load_config

    config = load_config(args.config, args.set)
    plan = event_loop.run(
        make_plan(
            config,
            sample=args.sample,
            turns=args.sample_turns,
            image_tokens=args.image_tokens,
            label=args.config,
        )
    )
    if args.json:
        print(json.dumps(plan.model_dump(mode="json"), indent=2))
        return 0
    console = Console(width=None if sys.stdout.isatty() else 160)
    for table in tables(plan):
        console.print(table, highlight=False)
    for p in plan.pairings:
        if p.error:
            console.print(
                f"[yellow]{p.game} {p.pairing}: a sampled episode ended as error ({p.error}); "
                "the estimate counts what it played[/]",
                highlight=False,
                soft_wrap=True,
            )
    for warning in plan.warnings:
        console.print(f"[yellow]context: {warning}[/]", highlight=False, soft_wrap=True)
    calls = sum(m.calls for m in plan.models)
    console.print(
        f"{plan.episodes:,} episodes, about {_n(plan.turns)} turns (at most {plan.turns_max:,}); "
        f"{_n(calls)} model calls"
        + (
            ""
            if all(m.cost is not None for m in plan.models)
            else "; models without price: no cost"
        ),
        highlight=False,
    )
    return 0
