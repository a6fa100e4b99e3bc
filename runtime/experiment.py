"""Expanding a config into episode specs: game × instance × pairing × repetition."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from parley import spelling
from parley.environments import registry
from parley.memory.across import memory_key as across_key
from parley.runtime.config import (
    _MISSING,
    ConfigError,
    ExperimentConfig,
    GameBlock,
    MemorySpec,
    PairingMatrix,
    PlayerSpec,
    settings_problems,
)
from parley.user_files import JsonLinesError, read_json_objects


class EpisodeSpec(BaseModel):
    """One episode to play; ``id`` is stable across runs of the same config (for --resume)."""

    id: str
    game: str
    seed: int
    repetition: int = 0
    players: dict[str, PlayerSpec]
    memory: dict[str, MemorySpec] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    instance: dict[str, Any] | None = None

    @property
    def pairing(self) -> dict[str, str]:
        return {role: p.label for role, p in self.players.items()}

    @property
    def pairing_label(self) -> str:
        return ",".join(f"{role}={label}" for role, label in self.pairing.items())

    def memory_keys(self) -> dict[str, str]:
        """The key of each role with memory across episodes (:func:`memory_key`)."""
        return {
            role: memory_key(self, role) for role, spec in self.memory.items() if spec.remembers
        }

    @property
    def position(self) -> tuple[int, int, str]:
        """Where the episode sits in its keys' order: seed, repetition, then id."""
        return (self.seed, self.repetition, self.id)


def memory_key(spec: EpisodeSpec, role: str) -> str:
    """Which earlier episodes ``role`` of ``spec`` remembers (:func:`parley.memory.across.memory_key`)."""
    across = spec.memory[role].across
    assert across is not None
    return across_key(
        spec.game, role, spec.pairing, across.policy, across.group, across.across_pairings
    )


def memory_chains(specs: list[EpisodeSpec]) -> list[list[EpisodeSpec]]:
    """``specs`` as chains to play one after another: the episodes that share a memory key
    (any role's), in order (:attr:`EpisodeSpec.position`); an episode without memory across
    episodes is a chain of one. Chains keep the order of their first episode in ``specs``."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for spec in specs:
        keys = list(spec.memory_keys().values())
        for key in keys[1:]:
            parent[find(key)] = find(keys[0])
    chains: dict[str, list[EpisodeSpec]] = {}
    order: list[list[EpisodeSpec]] = []
    for spec in specs:
        keys = list(spec.memory_keys().values())
        if not keys:
            order.append([spec])
            continue
        root = find(keys[0])
        if root not in chains:
            chains[root] = []
            order.append(chains[root])
        chains[root].append(spec)
    for chain in order:
        chain.sort(key=lambda s: s.position)
    return order


def _pairings(block: GameBlock) -> list[dict[str, PlayerSpec]]:
    out: list[dict[str, PlayerSpec]] = []
    for pairing in block.pairings:
        if isinstance(pairing, PairingMatrix):
            roles = list(pairing.matrix)
            for combo in itertools.product(*(pairing.matrix[r] for r in roles)):
                out.append(dict(zip(roles, combo, strict=True)))
        else:
            out.append(dict(pairing))
    return out


def _check_block(
    i: int, block: GameBlock, config: ExperimentConfig, pairings: list[dict[str, PlayerSpec]]
) -> list[tuple[str, Any, str]]:
    where = f"games.{i}"
    # Only the game's family is imported when it has the game (registry.find).
    info = registry.find(block.game)
    if info is None:
        games = registry.all_games()
        guess = spelling.did_you_mean(block.game, games, most=3)
        expected = f"expected one of: {', '.join(games)}"
        return [(f"{where}.game", block.game, f"{guess}; {expected}" if guess else expected)]
    problems: list[tuple[str, Any, str]] = []
    roles = set(info.roles)
    for j, pairing in enumerate(pairings):
        missing = roles - set(pairing)
        if missing:
            problems.append(
                (
                    f"{where}.pairings.{j}",
                    _MISSING,
                    f"no player for role(s) {', '.join(sorted(missing))}; "
                    f"{block.game} has roles {', '.join(info.roles)}",
                )
            )
        for role, player in pairing.items():
            field = f"{where}.pairings.{j}.{role}"
            if role not in roles:
                problems.append(
                    (field, role, f"not a role of {block.game}; roles: {', '.join(info.roles)}")
                )
                continue
            if player.kind in ("scripted", "random"):
                available = info.players.get(role, {})
                if (player.name or player.kind) not in available:
                    choices = [*available, "human", "a model name from `models`"]
                    problems.append(
                        (
                            field,
                            player.name or player.kind,
                            f"expected one of: {', '.join(choices)}",
                        )
                    )
            elif player.kind == "llm" and player.model not in config.models:
                known = ", ".join(config.models) or "none declared"
                problems.append((field, player.model, f"a model declared under `models` ({known})"))
            elif player.kind == "llm" and player.params:
                try:
                    config.models[player.model or ""].params.merged(player.params)
                except ValueError as exc:
                    problems.append(
                        (f"{field}.params", player.params, f"generation parameters: {exc}")
                    )
    for role, memory in block.memory.items():
        if memory.remembers and config.workers == "remote":
            problems.append(
                (
                    f"{where}.memory.{role}.across",
                    memory.across.policy if memory.across else None,
                    "memory across episodes needs its episodes in order on one machine; "
                    "use workers: N (processes here), not remote",
                )
            )
        if memory.remembers and any(p.get(role) and p[role].kind == "human" for p in pairings):
            problems.append(
                (
                    f"{where}.memory.{role}.across",
                    memory.across.policy if memory.across else None,
                    "a human player remembers on their own; memory across episodes is for "
                    "models and built-in players",
                )
            )
        if role not in roles:
            problems.append(
                (
                    f"{where}.memory.{role}",
                    role,
                    f"not a role of {block.game}; roles: {', '.join(info.roles)}",
                )
            )
    settings_wrong = settings_problems(
        block.game, info.settings, block.settings, f"{where}.settings"
    )
    problems.extend(settings_wrong)
    if block.instances_file and not Path(block.instances_file).exists():
        problems.append((f"{where}.instances_file", block.instances_file, "an existing JSONL file"))
    if info.check_settings is not None and not problems:
        for problem in info.check_settings(info.resolve_settings(block.settings)):
            problems.append((f"{where}.settings", block.settings, problem))
    return problems


def episode_key(
    players: dict[str, PlayerSpec], settings: dict[str, Any], memory: dict[str, MemorySpec]
) -> str:
    """What sets apart the episodes of one game, seed and repetition: a short hash of their
    players, settings and memory (the same for every episode of a pairing in a block)."""
    key = json.dumps(
        {
            "players": {r: p.model_dump() for r, p in players.items()},
            "settings": settings,
            "memory": {r: m.model_dump() for r, m in memory.items()},
        },
        sort_keys=True,
    )
    return hashlib.sha256(key.encode()).hexdigest()[:8]


def episode_id(game: str, seed: int, repetition: int, key: str) -> str:
    """An episode's id, stable across runs of the same config (``key``: :func:`episode_key`)."""
    return f"{game}-s{seed}-r{repetition}-{key}"


class InstancesFileError(ValueError):
    """An instances file that does not hold one instance (a JSON object) a line."""


def read_instances(path: str | Path) -> list[dict[str, Any]]:
    """Instances from a JSONL file, one JSON object a line; an instance's ``seed``, where it
    has one, is a whole number. Raises :class:`InstancesFileError` naming the first line that
    is not one, or why the file cannot be read."""
    try:
        lines = read_json_objects(path, "an instance")
    except JsonLinesError as exc:
        raise InstancesFileError(str(exc)) from None
    for number, instance in lines:
        seed = instance.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InstancesFileError(f"line {number}: seed {seed!r} is not a whole number")
    return [instance for _, instance in lines]


def write_instances(path: str | Path, instances: list[dict[str, Any]]) -> None:
    Path(path).write_text("".join(json.dumps(i, sort_keys=True) + "\n" for i in instances))


class _NeedsImages(Exception):
    def __init__(self, role: str, model: str, why: str) -> None:
        self.role, self.model, self.why = role, model, why


_image_roles_cache: dict[str, frozenset[str]] = {}


def image_roles(
    info: registry.GameInfo, settings: dict[str, Any], seed: int, instance: dict[str, Any] | None
) -> frozenset[str]:
    """Roles whose observations carry images, found by looking at the first observation of
    one instance (a game that cannot be set up this way counts every role)."""
    if info.text_only:
        return frozenset()
    key = json.dumps([info.name, settings], sort_keys=True, default=str)
    found = _image_roles_cache.get(key)
    if found is None:
        try:
            gm = info.game_master(instance or info.instance(seed, settings), settings)
            found = frozenset(r for r in info.roles if gm.observe(r).images)
        except Exception:
            found = frozenset(info.roles)
        _image_roles_cache[key] = found
    return found


def _text_variant(
    info: registry.GameInfo,
    block: GameBlock,
    players: dict[str, PlayerSpec],
    config: ExperimentConfig,
    instances: list[tuple[int, dict[str, Any] | None]],
) -> dict[str, Any]:
    """The episode settings for a pairing: the game's text variant (``text_settings``) merged
    in when a role that sees images is played by a model that takes none."""
    settings = info.resolve_settings(block.settings)
    blind = {
        role: p.model
        for role, p in players.items()
        if p.kind == "llm"
        and p.model in config.models
        and (not config.models[p.model].images or config.models[p.model].max_images == 0)
    }
    if not blind or not instances:
        return settings
    seeing = image_roles(info, settings, *instances[0])
    affected = {role: model for role, model in blind.items() if role in seeing}
    if not affected:
        return settings
    role, model = next(iter(affected.items()))
    if not info.text_settings:
        raise _NeedsImages(
            role,
            model or "",
            f"{info.name} shows the {role} images and has no text variant; "
            "use a model with `images: true` for this role",
        )
    for key, value in info.text_settings.items():
        if key in block.settings and block.settings[key] != value:
            raise _NeedsImages(
                role,
                model or "",
                f"a text-only model needs {key}={value!r} but the block sets "
                f"{key}={block.settings[key]!r}; remove the setting or use a model with images",
            )
    try:  # the text variant must fit the block's other settings (a set with text, say)
        return info.resolve_settings({**settings, **info.text_settings})
    except ValidationError as exc:
        why = "; ".join(e["msg"].replace("Value error, ", "") for e in exc.errors())
        raise _NeedsImages(
            role,
            model or "",
            f"a text-only model needs the text variant, which these settings do not allow: "
            f"{why}; change the settings or use a model with images",
        ) from None


def _constrained(player: PlayerSpec, mode: str | None) -> PlayerSpec:
    """A model player with its game block's ``constrain`` (a pairing's own ``params``
    win); the episode id changes only when a block sets it."""
    if mode is None or player.kind != "llm" or "constrain" in player.params:
        return player
    return player.model_copy(update={"params": {**player.params, "constrain": mode}})


def expand(config: ExperimentConfig) -> list[EpisodeSpec]:
    """Every episode the config asks for, in a stable order; raises :class:`ConfigError`."""
    problems: list[tuple[str, Any, str]] = []
    specs: list[EpisodeSpec] = []
    for i, block in enumerate(config.games):
        pairings = _pairings(block)
        found = _check_block(i, block, config, pairings)
        if found:
            problems.extend(found)
            continue
        info = registry.get(block.game)
        memory = {role: block.memory.get(role, MemorySpec()) for role in info.roles}
        if block.instances_file:
            try:
                read = read_instances(block.instances_file)
            except InstancesFileError as exc:
                problems.append((f"games.{i}.instances_file", block.instances_file, str(exc)))
                continue
            instances: list[tuple[int, dict[str, Any] | None]] = [
                (int(inst.get("seed", n)), inst) for n, inst in enumerate(read)
            ]
        else:
            instances = [(seed, None) for seed in block.seed_list()]
        for j, players in enumerate(pairings):
            ordered = {role: _constrained(players[role], block.constrain) for role in info.roles}
            try:
                settings = _text_variant(info, block, ordered, config, instances)
            except _NeedsImages as exc:
                problems.append((f"games.{i}.pairings.{j}.{exc.role}", exc.model, exc.why))
                continue
            key = episode_key(ordered, settings, memory)  # once a pairing, not once an episode
            for seed, instance in instances:
                for rep in range(block.repetitions):
                    specs.append(
                        EpisodeSpec(
                            id=episode_id(block.game, seed, rep, key),
                            game=block.game,
                            seed=seed,
                            repetition=rep,
                            players=ordered,
                            memory=memory,
                            settings=settings,
                            instance=instance,
                        )
                    )
    if problems:
        raise ConfigError(problems)
    ids = [s.id for s in specs]
    if len(set(ids)) != len(ids):
        dup = next(x for x in ids if ids.count(x) > 1)
        raise ConfigError(
            [("games", dup, "each episode once: two game blocks ask for the same episode")]
        )
    if config.limit is not None:
        specs = _first_of_each_game(specs, config.limit)
    return specs


def _first_of_each_game(specs: list[EpisodeSpec], limit: int) -> list[EpisodeSpec]:
    """The first ``limit`` episodes of each game in the order the whole run would play them
    (:func:`play_order`), in ``specs``' order. A larger limit keeps every episode a smaller one
    kept, so a run resumed with it (or with none) only adds episodes."""
    taken: dict[str, int] = {}
    kept: set[str] = set()
    for spec in play_order(specs):
        if taken.get(spec.game, 0) < limit:
            taken[spec.game] = taken.get(spec.game, 0) + 1
            kept.add(spec.id)
    return [spec for spec in specs if spec.id in kept]


def _unit(*parts: object) -> float:
    """A number in [0, 1) fixed by ``parts`` (a hash, so the same on every machine and run)."""
    digest = hashlib.sha256(json.dumps(parts, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def play_order(specs: Sequence[EpisodeSpec]) -> list[EpisodeSpec]:
    """``specs`` in the order to start them: games, pairings and seeds interleaved, so that
    any prefix of a run is a fair sample of the whole (a report taken halfway is unbiased).

    The strata are the (game, pairing, settings) groups. Each stratum's ``n`` episodes get the keys
    ``(i + u) / n`` (``u`` a fixed offset of the stratum in [0, 1)), and the run plays them by
    key: after any ``m`` episodes a stratum of share ``n/N`` has played ``m·n/N`` of them,
    give or take one or two. Within a stratum the episodes go by repetition, then by the
    seeds in an order fixed per game and shared by all its pairings, so the pairings of a
    game meet the same instances at the same time (paired comparisons stay paired in any
    prefix) and a prefix covers as many instances as it can before repeating one.

    The order depends on the episode ids only (the config, not the machine or time), so a
    resumed run plays what is left in the same order; an episode plays the same whatever its
    place (its seed fixes it). Memory chains (:func:`memory_chains`) are formed from this order.
    """
    if len(specs) < 2:
        return list(specs)
    salt = hashlib.sha256("\n".join(sorted(s.id for s in specs)).encode()).hexdigest()
    strata: dict[tuple[str, str, str], list[EpisodeSpec]] = {}
    # The episodes of a block share their players and settings objects: each is put into
    # words once, not once per episode (a large run's plan is made the sooner).
    words: dict[int, str] = {}
    for spec in specs:
        settings = words.get(id(spec.settings))
        if settings is None:
            settings = words[id(spec.settings)] = json.dumps(
                spec.settings, sort_keys=True, default=str
            )
        pairing = words.get(id(spec.players))
        if pairing is None:
            pairing = words[id(spec.players)] = spec.pairing_label
        strata.setdefault((spec.game, pairing, settings), []).append(spec)
    keyed: list[tuple[float, float, str, EpisodeSpec]] = []
    seed_rank: dict[tuple[str, int], float] = {}  # one hash per game and seed, not per episode

    def rank(game: str, seed: int) -> float:
        found = seed_rank.get((game, seed))
        if found is None:
            found = seed_rank[(game, seed)] = _unit(salt, game, seed)
        return found

    for (game, pairing, settings), members in strata.items():
        members = sorted(members, key=lambda s: (s.repetition, rank(game, s.seed), s.seed, s.id))
        offset = _unit(salt, game, pairing, settings)
        n = len(members)
        for i, spec in enumerate(members):
            keyed.append(((i + offset) / n, offset, spec.id, spec))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]
