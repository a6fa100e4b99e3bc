"""The COMMA loop shared by every puzzle: a solver who sees the puzzle, an expert who holds the
manual, and a game master that runs the paper's turn protocol (seed 001)."""

from __future__ import annotations

import json
import random
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from parley.environments.base import (
    GameMaster,
    Observation,
    ObserverView,
    Outcome,
    ReasonCode,
    Scores,
    StepResult,
    VariantSettings,
)
from parley.environments.parsing import action_lines

if TYPE_CHECKING:
    from parley.environments.comma.reference import CommaReference

SOLVER_SYSTEM = """\
You are the solver in a two-player cooperative puzzle game. You can see the puzzle and act on \
it; your partner, the expert, cannot see it but holds the manual that explains how to solve it.

Each turn, do exactly one of two things:
- Talk to the expert: describe what you see, precisely enough that someone who cannot see it \
can follow, and ask what to do. Anything you write that is not a bare action name is sent to \
the expert as a message.
- Act: reply with nothing but action names, one per line, in the order to carry them out. Only \
act when you are sure; a wrong action counts as a mistake.

A reply that mixes actions and other text is treated as a message, and no action is taken. \
After you act, you are told whether each action worked; after a mistake the rest of that \
reply's actions are not carried out. Write only the solver's part."""

EXPERT_LIMIT = "Keep every reply to 100 words or fewer."
"""The length the expert's replies are held to, as in the paper's expert prompt."""

EXPERT_SYSTEM = f"""\
You are the expert in a two-player cooperative puzzle game. Your partner, the solver, can see \
the puzzle and act on it; you cannot see it. You hold the manual below. Listen to the solver's \
descriptions and tell them, clearly and briefly, exactly what to do. If their description is \
missing something you need, ask for it. {EXPERT_LIMIT} Write only the expert's part.

MANUAL
{{manual}}"""

PRIVACY_NOTE = (
    "Some of what you know is private to you: {facts}. Never reveal any of it to the expert, "
    "in any form (not even in part or in other words); the expert can help you without it."
)


Rules = Literal["comma", "parley"]
"""Which rules the puzzles follow: ``comma``, the paper's as its released code plays them (the
default, so that baselines compare with its tables), or ``parley``, this project's variants
(see docs/comma.md and docs/fidelity.md for every difference and its measured effect)."""


class CommaSettings(VariantSettings):
    """The loop's settings, every puzzle's: ``max_turns`` solver turns and ``max_mistakes``
    mistakes before the episode is lost; ``variant`` ``image`` or ``text``; ``rules``
    ``comma`` (the paper's, default) or ``parley``; ``reference``, the path of a COMMA
    checkout whose own prompts, instances and limits to play (environments/comma/reference.py;
    null: parley's own)."""

    max_turns: int = Field(10, ge=1)
    max_mistakes: int = Field(3, ge=1)
    rules: Rules = "comma"
    reference: str | None = None

    @model_serializer(mode="wrap")
    def _without_unused_reference(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Left out while unset, so that episodes without one keep the settings (and episode
        # keys) they had before the setting existed: their runs still resume.
        data = handler(self)
        if isinstance(data, dict) and data.get("reference") is None:
            data.pop("reference", None)
        return data


def rules_of(settings: dict[str, Any]) -> Rules:
    """The rule set named in ``settings`` (validated by the runtime; a bare dict in tests)."""
    rules = settings.get("rules", "comma")
    if rules not in ("comma", "parley"):
        raise ValueError(f"rules must be 'comma' or 'parley', not {rules!r}")
    return rules


class Puzzle(ABC):
    """One COMMA puzzle as an environment for the solver: seeded, pure, rendered with Pillow.

    Subclasses set ``name``, ``title``, ``manual`` and implement the abstract methods.
    ``progress`` is the partial score (PSR) in 0–1. ``rules`` is the rule set it plays by
    (:data:`Rules`); :meth:`generate` reads it from its settings, so an instance is drawn from
    the distribution of the rules it will be played under.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    manual: ClassVar[str]
    multi_step: ClassVar[bool] = False
    # What the controls do, as anyone looking at the puzzle would see (not the manual's rules).
    controls: ClassVar[str] = ""
    # The puzzle's settings model: the loop's own, and any of the puzzle's (a subclass).
    settings: ClassVar[type[CommaSettings]] = CommaSettings
    # Observation data the solver is shown in another form than the data's own words: data
    # path -> how (``GameInfo.shown_otherwise``, for parley check-game).
    shown_otherwise: ClassVar[dict[str, str]] = {}

    def __init__(self, rules: Rules = "comma") -> None:
        self.rules: Rules = rules
        self.instance: dict[str, Any] = {}
        self.solved = False
        self.progress = 0.0
        self._rendered: tuple[str, bytes] | None = None

    @classmethod
    @abstractmethod
    def generate(cls, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        """A JSON-able instance, a pure function of ``seed``."""

    @classmethod
    def check_settings(cls, settings: dict[str, Any]) -> list[str]:
        """Problems with ``settings`` that would fail every episode (reported before a run)."""
        return []

    @abstractmethod
    def reset(self, instance: dict[str, Any]) -> None: ...

    @abstractmethod
    def render(self) -> bytes:
        """The solver's view as PNG bytes."""

    @abstractmethod
    def describe(self) -> str:
        """The solver's view as text (the text-only variant), showing what the image shows."""

    @abstractmethod
    def visible(self) -> dict[str, Any]:
        """A machine-readable copy of what the image shows, for scripted solvers."""

    @abstractmethod
    def legal_actions(self, role: str = "solver") -> list[str]:
        """The actions the solver may name now. Under ``rules: comma`` this is the puzzle's
        whole static list, as in COMMA (re-cutting a cut wire is just another mistake); under
        ``parley`` a puzzle may leave out what can no longer be done."""

    @abstractmethod
    def apply(self, action: str) -> StepResult:
        """Carry out one legal action."""

    def expert_manual(self) -> str:
        """The manual the expert holds, for the rules this puzzle plays by (``manual`` unless a
        rule set changes what it must say, e.g. what a mistake does)."""
        return self.manual

    def private_facts(self) -> dict[str, str]:
        """Facts the solver holds and must not disclose, by name (values as shown to it)."""
        return {}

    def privacy_note(self) -> str:
        """How the solver's system prompt names its private facts (values it knows upfront)."""
        return "; ".join(k.replace("_", " ") for k in self.private_facts())

    def public_action(self, action: str) -> str:
        """How ``action`` reads to the expert, in the current state (before it is applied).

        The expert hears the solver's action lines, as in the paper's shared conversation;
        a puzzle hides what would disclose a private fact (an ATM's PIN keys).
        """
        return action

    # Environment protocol -----------------------------------------------------------------

    def observe(self, role: str = "solver", *, variant: str = "image") -> Observation:
        actions = ", ".join(self.legal_actions())
        controls = f"\n{self.controls}" if self.controls else ""
        if variant == "text":
            text = f"{self.title}\n{self.describe()}\n{controls}\nPossible actions: {actions}"
            return Observation(text=text, data=self.visible())
        text = f"{self.title}: the image shows the puzzle.{controls}\nPossible actions: {actions}"
        visible = self.visible()
        # The picture is a function of what is visible: render again only when that changed.
        key = json.dumps(visible, sort_keys=True)
        if self._rendered is None or self._rendered[0] != key:
            self._rendered = (key, self.render())
        return Observation(text=text, images=[self._rendered[1]], data=visible)

    def step(self, role: str, action: str) -> StepResult:
        return self.apply(action)

    @property
    def done(self) -> bool:
        return self.solved

    @property
    def outcome(self) -> Outcome | None:
        return "success" if self.solved else None

    def score(self) -> dict[str, float | None]:
        return {"success": float(self.solved), "psr": 1.0 if self.solved else self.progress}


class CommaGameMaster(GameMaster):
    """Each turn the solver acts (action lines) or speaks; the expert answers what it heard.

    Feedback on actions goes to the solver only. Actions run in order; after a mistake the
    rest of the reply is skipped (later lines were planned for a state that no longer holds).
    The episode is lost after ``max_turns`` solver turns or ``max_mistakes`` mistakes, and won
    as soon as the puzzle is solved.
    Settings: ``max_turns`` (10), ``max_mistakes`` (3), ``variant`` (``image`` or ``text``),
    ``rules`` (``comma`` or ``parley``), plus the puzzle's own (:attr:`Puzzle.settings`).

    Under ``rules: comma`` an episode cut at the turn limit scores PSR 0, as COMMA's summariser
    scores it (only a solved puzzle or one lost to mistakes keeps its partial score); under
    ``parley`` it keeps the partial score reached.
    """

    roles = ("solver", "expert")
    puzzle_cls: ClassVar[type[Puzzle]]

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        # The runtime passes validated settings; built directly (a test), defaults fill in here.
        validated = self.puzzle_cls.settings.model_validate(self.settings)
        self.max_turns = validated.max_turns
        self.max_mistakes = validated.max_mistakes
        self.variant = validated.variant
        self.rules = validated.rules
        self.reference: CommaReference | None = None
        if validated.reference:
            from parley.environments.comma.reference import load

            self.reference = load(validated.reference)
            # COMMA's loop gives the solver one step past its turn limit (acting on that
            # reply's first line only), and counts mistakes against its own limit.
            self.max_turns = self.reference.max_turns + 1
            self.max_mistakes = self.reference.max_mistakes
        self.puzzle = self.puzzle_cls(validated.rules)
        self.puzzle.reset(instance)
        self.turn = 0
        self.mistakes = 0
        self.messages = {"solver": 0, "expert": 0}
        self.actions_taken = 0
        self._next = "solver"

    def system_prompt(self, role: str) -> str:
        ref = self.reference
        if role == "expert":
            if ref is not None:
                return ref.expert_prompt(self.puzzle.name)
            return EXPERT_SYSTEM.format(manual=self.puzzle.expert_manual())
        solver = SOLVER_SYSTEM if ref is None else ref.solver_prompt()
        if self.puzzle.private_facts():
            note = PRIVACY_NOTE.format(facts=self.puzzle.privacy_note())
            return f"{solver}\n\n{note}"
        return solver

    def whose_turn(self) -> str | None:
        return self._next

    def observe(self, role: str) -> Observation:
        if role == "solver":
            return self.puzzle.observe("solver", variant=self.variant)
        return Observation()

    def legal_actions(self, role: str) -> list[str]:
        return self.puzzle.legal_actions() if role == "solver" else []

    def private_facts(self, role: str) -> dict[str, str]:
        return self.puzzle.private_facts() if role == "solver" else {}

    def observer_view(self, images: bool = True) -> ObserverView:
        """The puzzle as the solver sees it (its picture in the image variant), with the
        solver's private facts (an ATM's PIN, a patient's record) spelled out: then the view is
        ``private``."""
        puzzle = self.puzzle
        lines = [puzzle.title, puzzle.describe()]
        facts = puzzle.private_facts()
        if facts:
            lines.append(
                "Private: " + "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in facts.items())
            )
        # The picture the solver is shown (drawn once for both): none in the text variant.
        drawn = images and self.variant == "image"
        pictures = puzzle.observe("solver", variant="image").images if drawn else []
        return ObserverView(
            text="\n".join(lines),
            images=pictures,
            visibility="private" if facts else "public",
            progress=1.0 if puzzle.solved else puzzle.progress,
            scores={
                "psr": 1.0 if puzzle.solved else puzzle.progress,
                "mistakes": float(self.mistakes),
            },
            data={**self._whose_turn_data(), "turn": self.turn, "max_turns": self.max_turns},
        )

    def handle_reply(self, role: str, text: str) -> None:
        self.messages[role] += 1
        if role == "expert":
            self.say("expert", "solver", text)
            self._next = "solver"
            return
        self.turn += 1
        if self.reference is not None:
            self._reply_as_comma(text)
        else:
            self._reply(text)
        if self.outcome is None and self.turn >= self.max_turns:
            self.end(
                "lost", f"no solution within {self.max_turns} turns", code=ReasonCode.TURN_LIMIT
            )
        self._next = "expert"

    def _reply(self, text: str) -> None:
        """parley's parsing: a reply of nothing but action lines acts, anything else talks."""
        actions = action_lines(text, self.puzzle.legal_actions())
        if actions is None:
            self.say("solver", "expert", text)
        else:
            heard = self._act(actions)
            # The expert hears what the solver did, as in the paper's shared conversation,
            # with anything private (PIN keys) hidden by the puzzle.
            self.say("solver", "expert", "\n".join(heard))

    def _reply_as_comma(self, text: str) -> None:
        """COMMA's parsing: each line that names an action (anywhere in it, any case) carries
        out the first such action; the rest of the reply is talk. Mistakes do not stop the
        reply. The expert hears the reply as written, with anything private hidden."""
        lines = text.split("\n")
        if self.turn >= self.max_turns:
            lines = lines[:1]  # COMMA ends the episode after the extra step's first line
        legal = self.puzzle.legal_actions()
        heard: list[str] = []
        for line in lines:
            low = line.lower()
            action = next((a for a in legal if a.lower() in low), None)
            if action is None or self.outcome is not None:
                heard.append(line)
                continue
            public = self.puzzle.public_action(action)
            heard.append(line if public == action else public)
            result = self.puzzle.step("solver", action)
            self.actions_taken += 1
            self.record_action("solver", action, result)
            self.give_feedback("solver", f"{action}: {result.feedback}")
            if result.mistake:
                self.mistakes += 1
                if self.mistakes >= self.max_mistakes:
                    self.end("lost", f"{self.mistakes} mistakes", code=ReasonCode.MISTAKE_LIMIT)
            elif self.puzzle.done:
                self.end("success", "puzzle solved", code=ReasonCode.SOLVED)
        self.say("solver", "expert", "\n".join(heard))

    def _act(self, actions: list[str]) -> list[str]:
        """Carry out ``actions`` in order; returns the lines as the expert hears them."""
        heard: list[str] = []
        for i, action in enumerate(actions):
            heard.append(self.puzzle.public_action(action))
            if action not in self.puzzle.legal_actions():
                self.give_feedback("solver", f"{action}: not available now")
                continue
            result = self.puzzle.step("solver", action)
            self.actions_taken += 1
            self.record_action("solver", action, result)
            self.give_feedback("solver", f"{action}: {result.feedback}")
            stop = False
            if result.mistake:
                self.mistakes += 1
                stop = True
                if self.mistakes >= self.max_mistakes:
                    self.end("lost", f"{self.mistakes} mistakes", code=ReasonCode.MISTAKE_LIMIT)
                elif i + 1 < len(actions):
                    skipped = ", ".join(actions[i + 1 :])
                    self.give_feedback("solver", f"not carried out after the mistake: {skipped}")
            elif self.puzzle.done:
                self.end("success", "puzzle solved", code=ReasonCode.SOLVED)
                stop = True
            if stop:
                # The rest was written but not done; the expert still hears it (hidden as needed).
                heard += [self.puzzle.public_action(a) for a in actions[i + 1 :]]
                break
        return heard

    def scores(self) -> Scores:
        base = self.puzzle.score()
        if self.rules == "comma" and self.reason_code == ReasonCode.TURN_LIMIT:
            # COMMA's summariser: an episode that ran out of turns scores nothing.
            base["psr"] = 0.0
        psr = base["psr"] or 0.0
        return Scores(
            main=100.0 * psr,
            **base,
            mistakes=float(self.mistakes),
            conversation_length=float((self.messages["solver"] + self.messages["expert"]) // 2),
            turns=float(self.turn),
        )


def seeded(seed: int, salt: str) -> random.Random:
    """A random generator for ``seed`` that differs per puzzle (``salt``), stable everywhere."""
    return random.Random(f"{salt}:{seed}")
