"""MANGO episodes: a navigator reads a walkthrough and answers DF or RF questions about it.

Instances: the selected games' questions of one type, answerable at the cutoff, in a stable
order (questions in file order, optionally a seeded sample per game), cut per game into
episodes of ``questions_per_episode``, and the games' episodes dealt out in turn (game 1's
first, game 2's first, …, game 1's second, …) so that a few seeds already cover every game;
the instance for seed ``k`` is the ``k``-th episode (with one question per episode, the
``k``-th question).

The walkthrough goes into the system text (``walkthrough: system``, kept for the whole
episode), into the first message (``message``: episodic memory, so the memory policy decides
how long the navigator keeps it) or into every turn's observation (``every_turn``). Each
question is a message from ``game``, so a multi-question episode reads as question/answer
pairs in the navigator's history.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from typing import Any, Literal

from pydantic import Field, ValidationError

from parley.environments.base import (
    GameMaster,
    Observation,
    ObserverView,
    ReasonCode,
    Scores,
    Settings,
)
from parley.environments.mango.data import (
    MangoDataError,
    MangoGame,
    Question,
    Step,
    cached_game,
    game_names,
)
from parley.environments.mango.prompts import (
    INSTRUCTIONS,
    briefing,
    question_text,
    render_steps,
    walkthrough_block,
)
from parley.environments.mango.scoring import Maze, Unparsable, average, score
from parley.environments.mango.synthetic import synthetic_game, synthetic_name
from parley.tokens import count_tokens

PLACEMENTS = ("system", "message", "every_turn")
DIFFICULTIES = ("all", "easy", "hard")


class MangoSettings(Settings):
    """Which games and questions, how much walkthrough, where it goes."""

    data_dir: str | None = None  # a folder of MANGO games; None plays synthetic mazes
    games: str | list[str] = "all"  # "all", a game's name or a list of them
    cutoff: int = Field(default=70, ge=0)  # the last walkthrough step shown
    # Or: show the longest prefix within this many tokens (offline count).
    token_budget: int | None = Field(default=None, ge=1)
    difficulty: Literal["all", "easy", "hard"] = "all"  # always among answerable questions
    sample: int | None = Field(default=None, ge=1)  # or: this many questions per game (sample_seed)
    sample_seed: int = 0
    # 0: all of a game's questions in one episode
    questions_per_episode: int = Field(default=1, ge=0)
    walkthrough: Literal["system", "message", "every_turn"] = "system"
    synthetic_games: int = Field(default=6, ge=1)
    synthetic_seed: int = 0
    synthetic_rooms: int = Field(default=12, ge=2)
    # An answer that does not parse (or is an empty list): 0 in every average (``zero``), or
    # left out of them, as MANGO's evaluator does (``exclude``); docs/mango.md says why the
    # default is ``zero``.
    unparsable: Unparsable = "zero"


DEFAULT_SETTINGS: dict[str, Any] = MangoSettings().model_dump(mode="json")


# --- sources and instances -----------------------------------------------------------------


@lru_cache(maxsize=256)
def _synthetic(seed: int, index: int, rooms: int) -> MangoGame:
    return synthetic_game(seed, index, rooms=rooms)


def source_game(source: dict[str, Any]) -> MangoGame:
    """The game an instance's ``source`` points to (loaded once per process)."""
    if source.get("data_dir") is not None:
        return cached_game(source["data_dir"], source["game"])
    syn = source["synthetic"]
    return _synthetic(int(syn["seed"]), int(syn["index"]), int(syn["rooms"]))


def game_sources(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The selected games, in order, as instance sources."""
    s = {**DEFAULT_SETTINGS, **settings}
    data_dir = s["data_dir"]
    if data_dir:
        names = game_names(data_dir)
        sources: list[dict[str, Any]] = [{"game": n, "data_dir": str(data_dir)} for n in names]
    else:
        seed, rooms = int(s["synthetic_seed"]), int(s["synthetic_rooms"])
        sources = [
            {
                "game": synthetic_name(seed, i),
                "data_dir": None,
                "synthetic": {"seed": seed, "index": i, "rooms": rooms},
            }
            for i in range(int(s["synthetic_games"]))
        ]
    wanted = s["games"]
    if wanted in (None, "all"):
        return sources
    wanted = [wanted] if isinstance(wanted, str) else list(wanted)
    by_name = {src["game"]: src for src in sources}
    unknown = [w for w in wanted if w not in by_name]
    if unknown:
        raise MangoDataError(
            f"unknown game(s) {', '.join(unknown)}; available: {', '.join(by_name)}"
        )
    return [by_name[w] for w in wanted]


def shown_steps(game: MangoGame, cutoff: int, token_budget: int | None) -> list[Step]:
    """The walkthrough steps shown: up to ``cutoff``, and within ``token_budget`` tokens."""
    steps = game.steps_upto(cutoff)
    if token_budget is None:
        return steps
    head = count_tokens(walkthrough_block(game.name, steps[:1])) - count_tokens(
        render_steps(steps[:1])
    )
    total, kept = head, []
    for step in steps:
        total += count_tokens(render_steps([step]))
        if total > token_budget:
            break
        kept.append(step)
    return kept


def check_settings(settings: dict[str, Any]) -> list[str]:
    """What is wrong with ``settings`` before anything runs (a missing data folder first)."""
    try:
        s = MangoSettings.model_validate({**DEFAULT_SETTINGS, **settings}).model_dump()
    except ValidationError as exc:
        return [
            f"{'.'.join(map(str, e['loc']))} {e.get('input')!r}: "
            + e["msg"].replace("Input should be", "expected")
            for e in exc.errors()
        ]
    try:
        game_sources(s)
    except MangoDataError as exc:
        return [str(exc)]
    return []


@lru_cache(maxsize=64)
def _plan(kind: str, settings_json: str) -> tuple[dict[str, Any], ...]:
    s = {**DEFAULT_SETTINGS, **json.loads(settings_json)}
    problems = check_settings(s)
    if problems:
        raise MangoDataError("; ".join(problems))
    per_episode = int(s["questions_per_episode"])
    budget = None if s["token_budget"] is None else int(s["token_budget"])
    per_game: list[list[dict[str, Any]]] = []
    for source in game_sources(s):
        game = source_game(source)
        steps = shown_steps(game, int(s["cutoff"]), budget)
        if not steps:
            continue
        cutoff = steps[-1].num
        chosen = []
        for q in game.questions(kind):  # type: ignore[arg-type]
            label = q.label(cutoff)
            if label is not None and s["difficulty"] in ("all", label):
                chosen.append((q, label))
        if s["sample"] is not None and len(chosen) > int(s["sample"]):
            rng = random.Random(f"mango.sample:{s['sample_seed']}:{game.name}:{kind}")
            keep = sorted(rng.sample(range(len(chosen)), int(s["sample"])))
            chosen = [chosen[i] for i in keep]
        size = per_episode if per_episode > 0 else max(len(chosen), 1)
        episodes: list[dict[str, Any]] = []
        per_game.append(episodes)
        for start in range(0, len(chosen), size):
            episodes.append(
                {
                    "game": game.name,
                    "source": source,
                    "cutoff": cutoff,
                    "questions": [
                        {**q.to_json(), "label": label} for q, label in chosen[start : start + size]
                    ],
                }
            )
    # Round robin over the games, so that the first seeds already cover every game.
    ordered = [
        game_episodes[i]
        for i in range(max((len(e) for e in per_game), default=0))
        for game_episodes in per_game
        if i < len(game_episodes)
    ]
    return tuple(ordered)


def plan(kind: str, settings: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """Every episode the settings give, in seed order."""
    return _plan(kind, json.dumps(settings, sort_keys=True, default=str))


def make_instance(kind: str, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    episodes = plan(kind, settings)
    if not 0 <= seed < len(episodes):
        raise MangoDataError(
            f"seed {seed} is past the last episode: these settings give {len(episodes)} "
            f"mango.{kind} episodes (seeds 0-{len(episodes) - 1}); lower `seeds.count`"
        )
    return {"seed": seed, **episodes[seed]}


# --- the game master ---------------------------------------------------------------------


class MangoMaster(GameMaster):
    """Asks the instance's questions one by one and scores each answer (notes carry the
    per-question results for the report). An unparsable answer is a violation that scores 0
    (or, with ``unparsable: exclude``, is left out of the episode's averages); the episode goes
    on. Outcome: success if every answer is a strict success, aborted if no
    answer could be parsed, lost otherwise."""

    roles = ("navigator",)

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.source = instance["source"]
        self.game = source_game(self.source)
        self.cutoff = int(instance["cutoff"])
        self.questions = [Question.from_json(q) for q in instance["questions"]]
        self.labels = [
            raw.get("label") or q.label(self.cutoff)
            for raw, q in zip(instance["questions"], self.questions, strict=True)
        ]
        self.actions, self.places = self.game.lists_at(self.cutoff)
        self.maze = Maze(self.game.graph, self.actions)
        self.placement = str(self.settings.get("walkthrough", "system"))
        steps = self.game.steps_upto(self.cutoff)
        self.block = briefing(self.game.name, steps, self.actions, self.places)
        self.index = 0
        self.results: list[dict[str, Any]] = []
        if self.placement == "message":
            self.say("game", "navigator", self.block)
        if self.questions:
            self._ask()

    def _ask(self) -> None:
        q = self.questions[self.index]
        self.say("game", "navigator", question_text(q, self.index + 1))

    def system_prompt(self, role: str) -> str:
        if self.placement == "system":
            return f"{INSTRUCTIONS}\n\n{self.block}"
        return INSTRUCTIONS

    def whose_turn(self) -> str | None:
        return "navigator" if self.index < len(self.questions) else None

    def observe(self, role: str) -> Observation:
        q = self.questions[self.index] if self.index < len(self.questions) else None
        data: dict[str, Any] = {
            "game": self.game.name,
            "cutoff": self.cutoff,
            # For the oracle only (it reads the data folder, being an oracle); the scripted
            # and random navigators never look at it.
            "source": self.source,
        }
        if q is not None:
            data["question"] = {
                "number": self.index + 1,
                "kind": q.kind,
                "src": q.src,
                "dst": q.dst if q.kind == "rf" else None,
                "actions": list(q.actions),
            }
        text = self.block if self.placement == "every_turn" else ""
        return Observation(text=text, data=data)

    def observer_view(self, images: bool = True) -> ObserverView:
        """The question being asked and how the answers so far scored (a text game: no image);
        nothing here is hidden from the navigator, so it is public."""
        lines = [
            f"{self.game.name}: question {min(self.index + 1, len(self.questions))} of "
            f"{len(self.questions)} (walkthrough up to step {self.cutoff})"
        ]
        if self.index < len(self.questions):
            lines.append(question_text(self.questions[self.index], self.index + 1))
        lines += [
            f"{r['question']} ({r['kind']} {r['label']}): strict {r.get('success_strict', 0):.0f}"
            for r in self.results
        ]
        done = len(self.results)
        strict = [float(r.get("success_strict") or 0.0) for r in self.results]
        return ObserverView(
            text="\n".join(lines),
            progress=done / len(self.questions) if self.questions else None,
            scores={"strict_so_far": sum(strict) / done} if done else {},
            data=self._whose_turn_data(),
        )

    def handle_reply(self, role: str, text: str) -> None:
        q = self.questions[self.index]
        result = score(q, text, self.maze)
        if not result.parsed:
            self.violation(
                role,
                f"question {self.index + 1}: {result.error}",
                abort=False,
                code=ReasonCode.PARSE_ERROR,
            )
        row = {
            "game": self.game.name,
            "question": q.id,
            "kind": q.kind,
            "label": self.labels[self.index],
            **result.to_json(),
        }
        self.results.append(row)
        self.note(
            f"question {self.index + 1} ({q.kind} {row['label']}): "
            f"strict {result.success_strict:.0f}, loose {result.success_loose:.2f}, "
            f"reasoning {result.reasoning:.0f}",
            mango=row,
        )
        self.index += 1
        if self.index < len(self.questions):
            self._ask()
            return
        if not any(r["parsed"] for r in self.results):
            self.end("aborted", "no answer could be parsed", code=ReasonCode.PARSE_ERROR)
        elif all(r["success_strict"] == 1.0 for r in self.results):
            self.end("success", "every answer right")
        else:
            wrong = sum(1 for r in self.results if r["success_strict"] < 1.0)
            self.end("lost", f"{wrong} of {len(self.results)} answers wrong")

    def scores(self) -> Scores:
        n = len(self.results)
        if n == 0:
            return Scores(None, questions=0.0)
        rule: Unparsable = self.settings.get("unparsable", "zero")
        parsed = sum(1 for r in self.results if r["parsed"])
        loose = average(self.results, "success_loose", rule)
        return Scores(
            main=None if parsed == 0 or loose is None else 100.0 * loose,
            questions=float(n),
            answered=float(parsed),
            success_loose=loose,
            success_strict=average(self.results, "success_strict", rule),
            reasoning=average(self.results, "reasoning", rule),
            weighted=average(self.results, "weighted", rule),
        )
