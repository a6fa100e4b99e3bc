"""``parley check-game``: the contract every game keeps, checked by playing it directly.

Episodes are driven through the :class:`~parley.environments.base.GameMaster` API with the
runtime's own agents (memory, prompt assembly, the :class:`~parley.environments.base.View` a
built-in player gets) but no bus: fast, and each player sees what it would see in a run.

    >>> from parley.runtime.checkgame import check_game
    >>> check_game("comma.wire", seeds=2).passed
    True

The checks, one row each in the table ``parley check-game`` prints:

- **deterministic**: the same seed gives the same instance, and scripted play twice gives the
  same observations (text, images, data), feedback, legal actions, replies, ending and scores;
- **oracle wins**: each role's oracle (its built-in player named ``oracle``, else
  ``scripted``) wins every seed;
- **random play** and **garbage: …**: random players, and one role replying garbage (empty,
  huge, binary, prose naming the legal actions, or garbage every other reply) while the others
  play their oracles, may lose or abort but never raise (``error``) or play on for ever;
- **scores**: every ended episode declares a main score, 0–100 or None, None when aborted,
  and its other scores are numbers or None;
- **observation data**: ``data`` holds nothing the role was not shown (see
  :func:`unshown_leaves` for the heuristic and what it cannot check).

A game that departs from a check for a reason declares it in its ``GameInfo``
(``check_exemptions``: the row then reads ``exempt`` with the reason, and the check still runs,
its actual result in the detail, so an exemption no longer needed shows), and the observation
data it shows in another form than the data's own words (``shown_otherwise``).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from hashlib import sha256
from typing import Any

from parley.agents.agent import Agent
from parley.environments import registry
from parley.environments.base import Observation, PlayFn, Scores, View
from parley.environments.registry import GameInfo
from parley.runtime.config import PlayerSpec
from parley.runtime.episode import MAX_REPLY_CHARS, turn_request
from parley.runtime.players import builtin_policy, make_policy

MAX_REPLIES = 2_000  # an episode that has not ended after this many replies never will


def oracle_name(info: GameInfo, role: str) -> str:
    """The built-in player that plays ``role`` perfectly: ``oracle`` where the game has one
    (its ``scripted`` player then plays from the role's view alone, imperfectly), else
    ``scripted``."""
    players = info.players.get(role, {})
    return "oracle" if "oracle" in players else "scripted"


# --- garbage replies -----------------------------------------------------------------------


def _prose(view: View, rng: random.Random) -> str:
    """Prose that names legal actions (or words of the observation) without choosing one."""
    words = list(view.legal_actions) or re.findall(r"[A-Za-z0-9_]{3,}", view.text)[:20]
    picked = rng.sample(words, min(3, len(words))) if words else ["something"]
    return (
        f"Hmm, I am not sure yet. It could be {', or '.join(picked)}, but I would rather "
        "think about it some more before I decide anything."
    )


GARBAGE: dict[str, PlayFn] = {
    "empty": lambda view, rng: "",
    "huge": lambda view, rng: "lorem ipsum " * 25_000,
    "binary": lambda view, rng: (
        bytes(range(256)).decode("latin-1") + "\ufffd\ud800\udfff\u202e\x00" * 3
    ),
    "prose": _prose,
}


def _interleaved(oracle: PlayFn) -> PlayFn:
    """Garbage on every other reply (each kind in turn), the oracle's reply between: reaches
    states further into a game than garbage alone."""
    kinds = list(GARBAGE.values())

    def play(view: View, rng: random.Random) -> str:
        n = view.turn
        return oracle(view, rng) if n % 2 else kinds[(n // 2) % len(kinds)](view, rng)

    return play


# --- playing one episode directly ----------------------------------------------------------


@dataclass
class Step:
    """One turn as the acting role saw it and answered."""

    role: str
    observation: Observation
    feedback: str | None
    incoming: list[str]
    legal_actions: list[str]
    reply: str
    # How many of the texts the role was shown in the episode (``Played.seen[role]``) it had
    # seen by this turn, this turn's included.
    seen: int = 0

    def signature(self) -> tuple[Any, ...]:
        """Everything about the turn that must repeat with the same seed."""
        obs = self.observation
        return (
            self.role,
            obs.text,
            tuple(sha256(image).hexdigest() for image in obs.images),
            json.dumps(obs.data, sort_keys=True, default=repr),
            self.feedback,
            tuple(self.incoming),
            tuple(self.legal_actions),
            self.reply,
        )


@dataclass
class Played:
    """What came of one directly played episode."""

    outcome: str  # success | lost | aborted, or error (an exception) | unended
    reason: str = ""
    reason_code: str | None = None
    role_results: dict[str, str] = field(default_factory=dict)
    scores: Scores | None = None
    steps: list[Step] = field(default_factory=list)
    # Per role, every text it was shown, in order: system prompt, observations, feedback,
    # messages received, legal actions.
    seen: dict[str, list[str]] = field(default_factory=dict)
    error: str = ""  # the traceback of an exception

    def shown(self, step: Step) -> str:
        """All the text ``step``'s role had been shown by then."""
        return "\n".join(self.seen[step.role][: step.seen])

    def describe(self) -> str:
        return f"{self.outcome} ({self.reason})" if self.reason else self.outcome

    def ending(self) -> str:
        """The ending and scores as one comparable string."""
        scores = None if self.scores is None else {"main": self.scores.main, **self.scores}
        return json.dumps(
            [self.outcome, self.reason, self.reason_code, self.role_results, scores],
            sort_keys=True,
            default=repr,
        )


async def play_episode(
    info: GameInfo,
    instance: dict[str, Any],
    settings: dict[str, Any],
    players: dict[str, PlayFn | str],
    key: str,
) -> Played:
    """Play one episode of ``info`` through its game master with built-in players: a player
    is the name of one of the game's own (seeded from ``key`` as in a run) or a function."""
    played = Played("error")
    agents: dict[str, Agent] = {}
    for role in info.roles:
        player = players[role]
        if isinstance(player, str):
            # A named player ("oracle") is of the scripted kind, as in a config's pairing.
            spec = (
                PlayerSpec(kind="random")
                if player == "random"
                else PlayerSpec(kind="scripted", name=None if player == "scripted" else player)
            )
            policy = make_policy(spec, role, info, f"{key}:{role}", {})
        else:
            policy = builtin_policy("check", player, random.Random(f"{key}:{role}"))
        agents[role] = Agent(role, policy, memory_key=f"{key}:{role}", record_prompts=False)
    seen = played.seen = {role: [] for role in info.roles}
    gm = None
    try:
        gm = info.game_master(instance, settings)
        for n in range(1, MAX_REPLIES + 1):
            turn = gm.next_turn()
            gm.drain_events()
            if turn is None:
                break
            agent = agents[turn.role]
            obs = turn.observation
            system = gm.system_prompt(turn.role) if agent.turns == 0 else None
            request = turn_request(turn, run="check", episode=key, n=n, system=system)
            response = await agent.respond(request)
            seen[turn.role] += [
                request.system or "",
                obs.text,
                turn.feedback or "",
                *(m.text for m in turn.incoming),
                " ".join(turn.legal_actions),
            ]
            played.steps.append(
                Step(
                    turn.role,
                    obs,
                    turn.feedback,
                    [m.text for m in turn.incoming],
                    list(turn.legal_actions),
                    response.text,
                    len(seen[turn.role]),
                )
            )
            # As the runtime does: a reply is cut to its limit before the game sees it.
            gm.on_reply(turn.role, response.text[:MAX_REPLY_CHARS])
            gm.drain_events()
        else:
            played.outcome = "unended"
            played.reason = f"not over after {MAX_REPLIES} replies"
            return played
    except Exception as exc:
        played.reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        played.error = "".join(traceback.format_exception(exc))
        return played
    finally:
        for agent in agents.values():
            agent.forget()
    played.outcome = gm.outcome or "lost"
    played.reason = gm.reason
    played.reason_code = None if gm.reason_code is None else str(gm.reason_code)
    played.role_results = dict(gm.role_results)
    try:
        played.scores = Scores.of(gm.scores())
    except Exception as exc:
        played.outcome = "error"
        played.reason = f"scores() raised {type(exc).__name__}: {exc}"
        played.error = "".join(traceback.format_exception(exc))
    return played


# --- observation data ----------------------------------------------------------------------


def leaves(data: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every scalar in ``data`` (dict keys are structure, not content)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from leaves(value, f"{path}.{key}" if path else str(key))
    elif isinstance(data, list | tuple):
        for i, value in enumerate(data):
            yield from leaves(value, f"{path}[{i}]")
    else:
        yield path, data


def _number_forms(value: float) -> set[str]:
    forms = {str(value), f"{value:g}"}
    if isinstance(value, float):
        if value.is_integer():
            forms.add(str(int(value)))
        forms |= {f"{value:.{digits}f}" for digits in (1, 2, 3)}
    return forms


def shows(text: str, value: Any) -> bool | None:
    """Whether ``text`` shows the scalar ``value``: strings as words (case and spacing
    ignored), numbers in their usual forms as whole numbers; None for values text cannot show
    as such (booleans, null)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        needle = " ".join(value.split()).casefold()
        if not needle:
            return True
        haystack = " ".join(text.split()).casefold()
        return re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", haystack) is not None
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return any(
            re.search(rf"(?<![\w.]){re.escape(form)}(?![\w]|\.\d)", text)
            for form in _number_forms(value)
        )
    return None


@dataclass
class DataFinding:
    """What of the observation data the role was not shown as text, over many observations
    (keys: ``role: path`` with list indices folded, ``board[3][4]`` -> ``board[]``)."""

    unshown: dict[str, str] = field(default_factory=dict)  # -> an example value (text only)
    in_images: set[str] = field(default_factory=set)  # not in the text; there are images
    unverifiable: set[str] = field(default_factory=set)  # booleans, nulls
    declared: set[str] = field(default_factory=set)  # declared paths met (no role)
    not_json: set[str] = field(default_factory=set)  # roles whose data is not JSON
    observations: int = 0


def _shape(path: str) -> str:
    return re.sub(r"\[\d+\]", "[]", path)


def _under(shape: str, declared: str) -> bool:
    return shape == declared or shape.startswith((f"{declared}.", f"{declared}["))


def unshown_leaves(
    role: str,
    observation: Observation,
    shown: str,
    finding: DataFinding,
    otherwise: dict[str, str] | None = None,
) -> None:
    """Add to ``finding`` what of ``observation.data`` the role was not shown as text.

    The heuristic: every scalar leaf of ``data`` must appear (see :func:`shows`) in ``shown``,
    the text the role has been shown so far (system prompt, observations, feedback, messages,
    legal actions), except leaves under a path in ``otherwise`` (declared shown in another
    form). What it flags was shown nowhere as such: a leak to a scripted player, or a value
    shown in another form that the game should declare. What it cannot check: a leaf missing
    from the text of an observation with images (the picture may show it), booleans and nulls
    (no textual form), and a value that appears in the text for another reason.
    """
    data = observation.data
    if data is None:
        return
    finding.observations += 1
    try:
        json.dumps(data)
    except (TypeError, ValueError):
        finding.not_json.add(role)
    for path, value in leaves(data):
        shape = _shape(path)
        where = f"{role}: {shape}"
        covering = [declared for declared in otherwise or {} if _under(shape, declared)]
        if covering:
            finding.declared.add(covering[0])
            continue
        found = shows(shown, value)
        if found is None:
            finding.unverifiable.add(where)
        elif not found:
            if observation.images:
                finding.in_images.add(where)
            else:
                finding.unshown.setdefault(where, repr(value)[:40])


# --- the checks ----------------------------------------------------------------------------


@dataclass
class CheckResult:
    """One row of the table: a check, whether it passed, why."""

    name: str
    passed: bool
    detail: str = ""
    exempt: str = ""  # the declared reason, when the game is exempt from this check

    @property
    def status(self) -> str:
        if self.exempt:
            return "exempt"
        return "pass" if self.passed else "FAIL"


@dataclass
class GameReport:
    """Every check of one game."""

    game: str
    seeds: list[int]
    results: list[CheckResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed or r.exempt for r in self.results)


def _count(outcomes: list[str]) -> str:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))


_STEP_FIELDS = ("role", "text", "images", "data", "feedback", "incoming", "legal actions", "reply")


def _first_difference(a: Played, b: Played) -> str:
    for i, (x, y) in enumerate(zip(a.steps, b.steps, strict=False)):
        if x.signature() != y.signature():
            pairs = zip(_STEP_FIELDS, x.signature(), y.signature(), strict=True)
            differ = [name for name, u, v in pairs if u != v]
            return f"turn {i + 1} ({x.role}): {', '.join(differ)} differ"
    if len(a.steps) != len(b.steps):
        return f"{len(a.steps)} turns, then {len(b.steps)}"
    return f"the endings differ: {a.ending()} / {b.ending()}"


def _same(a: Played, b: Played) -> bool:
    return a.ending() == b.ending() and [s.signature() for s in a.steps] == [
        s.signature() for s in b.steps
    ]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _scores_problem(played: Played) -> str:
    scores = played.scores
    if scores is None:
        return "no scores"
    main = scores.main
    if main is not None and not _number(main):
        return f"main score {main!r} is not a number"
    if main is not None and not math.isnan(main):
        if played.outcome == "aborted":
            return f"aborted with main score {main!r} (must be None)"
        if not 0 <= main <= 100:
            return f"main score {main!r} outside 0–100"
    for key, value in scores.items():
        if value is not None and not _number(value):
            return f"score {key}={value!r} is not a number"
    return ""


def _instance_json(info: GameInfo, seed: int, settings: dict[str, Any]) -> str:
    return json.dumps(info.instance(seed, settings), sort_keys=True, default=repr)


class _Checker:
    """Plays the episodes of every check over one game and fills in its report."""

    def __init__(self, info: GameInfo, seeds: list[int], settings: dict[str, Any]) -> None:
        self.info = info
        self.seeds = seeds
        self.settings = settings
        self.report = GameReport(info.name, seeds)
        self.ended: list[Played] = []
        self.data = DataFinding()
        self.otherwise = dict(info.shown_otherwise)

    def add(self, name: str, passed: bool, detail: str) -> None:
        exempt = self.info.exemption(name, self.settings)
        self.report.results.append(CheckResult(name, passed, detail, exempt))

    def oracles(self) -> dict[str, PlayFn | str]:
        return {role: oracle_name(self.info, role) for role in self.info.roles}

    async def play(
        self,
        seed: int,
        players: dict[str, PlayFn | str],
        key: str,
        settings: dict[str, Any] | None = None,
    ) -> Played:
        settings = self.settings if settings is None else settings
        try:
            instance = self.info.instance(seed, settings)
        except Exception as exc:
            return Played(
                "error",
                f"instance({seed}) raised {type(exc).__name__}: {exc}",
                error="".join(traceback.format_exception(exc)),
            )
        played = await play_episode(self.info, instance, settings, players, key)
        for step in played.steps:
            shown = played.shown(step)
            unshown_leaves(step.role, step.observation, shown, self.data, self.otherwise)
        if played.outcome in ("success", "lost", "aborted"):
            # The ending only: long games' steps (with their images) would add up.
            self.ended.append(replace(played, steps=[], seen={}))
        return played

    async def run(self) -> GameReport:
        await self.check_determinism_and_oracle()
        await self.check_random()
        await self.check_garbage()
        self.check_scores()
        await self.check_data()
        return self.report

    async def check_determinism_and_oracle(self) -> None:
        info, oracles = self.info, self.oracles()
        differ: list[str] = []
        first: list[Played] = []
        for seed in self.seeds:
            try:
                if _instance_json(info, seed, self.settings) != _instance_json(
                    info, seed, self.settings
                ):
                    differ.append(f"seed {seed}: two instances differ")
            except Exception as exc:
                differ.append(f"seed {seed}: instance raised {type(exc).__name__}: {exc}")
            key = f"{info.name}-s{seed}"
            played, again = await self.play(seed, oracles, key), await self.play(seed, oracles, key)
            if not _same(played, again):
                differ.append(f"seed {seed}: {_first_difference(played, again)}")
            first.append(played)
        seeds = len(self.seeds)
        self.add(
            "deterministic",
            not differ,
            "; ".join(differ[:3]) or f"{seeds} seeds: instance and scripted play repeat",
        )
        lost = [
            f"seed {seed}: {played.describe()}"
            for seed, played in zip(self.seeds, first, strict=True)
            if played.outcome != "success"
        ]
        who = ", ".join(f"{role}={name}" for role, name in oracles.items())
        self.add("oracle wins", not lost, "; ".join(lost[:3]) or f"{who}: success on {seeds} seeds")

    async def check_random(self) -> None:
        info = self.info
        players: dict[str, PlayFn | str] = {
            role: "random" if "random" in info.players.get(role, {}) else oracle_name(info, role)
            for role in info.roles
        }
        if "random" not in players.values():
            self.add("random play", True, "no random player: nothing to check")
            return
        played = [
            await self.play(seed, players, f"{info.name}-s{seed}-random") for seed in self.seeds
        ]
        self._no_errors("random play", played, ", ".join(f"{r}={p}" for r, p in players.items()))

    async def check_garbage(self) -> None:
        info = self.info
        for name in [*GARBAGE, "interleaved"]:
            played = []
            for role in info.roles:
                if name == "interleaved":
                    garbage = _interleaved(info.players[role][oracle_name(info, role)])
                else:
                    garbage = GARBAGE[name]
                for seed in self.seeds:
                    players = {**self.oracles(), role: garbage}
                    key = f"{info.name}-s{seed}-{name}-{role}"
                    played.append(await self.play(seed, players, key))
            self._no_errors(f"garbage: {name}", played, f"from each role ({', '.join(info.roles)})")

    def _no_errors(self, check: str, played: list[Played], who: str) -> None:
        bad = [p for p in played if p.outcome in ("error", "unended")]
        detail = f"{who}: {_count([p.outcome for p in played])}"
        if bad:
            detail += f"; first: {bad[0].reason}"
        self.add(check, not bad, detail)

    def check_scores(self) -> None:
        problems = [problem for p in self.ended if (problem := _scores_problem(p))]
        ended = len(self.ended)
        detail = (
            f"{problems[0]} ({len(problems)} of {ended} episodes)"
            if problems
            else f"{ended} ended episodes: a main score in 0–100, None when aborted"
        )
        self.add("scores", not problems, detail)

    async def check_data(self) -> None:
        info = self.info
        if info.text_settings:
            # The text variant shows everything as text, so every leaf can be checked there.
            settings = info.resolve_settings({**self.settings, **info.text_settings})
            for seed in self.seeds:
                await self.play(seed, self.oracles(), f"{info.name}-s{seed}-text", settings)
        finding = self.data
        problems = []
        if finding.not_json:
            problems.append(f"data of {', '.join(sorted(finding.not_json))} is not JSON")
        problems += [f"{path} (e.g. {value})" for path, value in sorted(finding.unshown.items())]
        if problems:
            more = f"; {len(problems) - 4} more" if len(problems) > 4 else ""
            detail = "not shown to the role: " + "; ".join(problems[:4]) + more
        else:
            detail = f"{finding.observations} observations: every checkable leaf was shown"
        if finding.declared:
            detail += f" (besides {len(finding.declared)} declared shown otherwise)"
        self.add("observation data", not problems, detail)
        notes = self.report.notes
        if finding.declared:
            notes.append(
                "declared shown otherwise: "
                + "; ".join(f"{path}: {self.otherwise[path]}" for path in sorted(finding.declared))
            )
        if finding.in_images:
            notes.append(
                "not checkable (not in the text, may be in the images): "
                + ", ".join(sorted(finding.in_images))
            )
        if finding.unverifiable:
            notes.append(
                "not checkable (booleans, None): " + ", ".join(sorted(finding.unverifiable))
            )


def check_game(
    game: str | GameInfo, seeds: int | list[int] = 3, settings: dict[str, Any] | None = None
) -> GameReport:
    """Run every check over ``game`` for ``seeds`` (a count from 0, or a list of seeds) with
    ``settings`` over the game's defaults (validated: raises ``pydantic.ValidationError``)."""
    info = registry.get(game) if isinstance(game, str) else game
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    resolved = info.resolve_settings(dict(settings or {}))
    return asyncio.run(_Checker(info, seed_list, resolved).run())
