"""The COMMA loop shared by every puzzle: a solver who sees the puzzle, an expert who holds the
manual, and a game master that runs the paper's turn protocol (seed 001)."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from environments.base import GameMaster, Observation, Outcome, StepResult
from environments.parsing import action_lines

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
After you act, you are told whether each action worked. Write only the solver's part."""

EXPERT_SYSTEM = """\
You are the expert in a two-player cooperative puzzle game. Your partner, the solver, can see \
the puzzle and act on it; you cannot see it. You hold the manual below. Listen to the solver's \
descriptions and tell them, clearly and briefly, exactly what to do. If their description is \
missing something you need, ask for it. Write only the expert's part.

MANUAL
{manual}"""

PRIVACY_NOTE = (
    "Some of what you see is private to you: {facts}. Never reveal it to the expert, in any "
    "form; the expert can help you without it."
)


class Puzzle(ABC):
    """One COMMA puzzle as an environment for the solver: seeded, pure, rendered with Pillow.

    Subclasses set ``name``, ``title``, ``manual`` and implement the abstract methods.
    ``progress`` is the partial score (PSR) in 0–1.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    manual: ClassVar[str]
    multi_step: ClassVar[bool] = False

    def __init__(self) -> None:
        self.instance: dict[str, Any] = {}
        self.solved = False
        self.progress = 0.0

    @classmethod
    @abstractmethod
    def generate(cls, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        """A JSON-able instance, a pure function of ``seed``."""

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
    def legal_actions(self, role: str = "solver") -> list[str]: ...

    @abstractmethod
    def apply(self, action: str) -> StepResult:
        """Carry out one legal action."""

    def private_facts(self) -> dict[str, str]:
        return {}

    # Environment protocol -----------------------------------------------------------------

    def observe(self, role: str = "solver", *, variant: str = "image") -> Observation:
        actions = ", ".join(self.legal_actions())
        if variant == "text":
            text = f"{self.title}\n{self.describe()}\n\nPossible actions: {actions}"
            return Observation(text=text, data=self.visible())
        text = f"{self.title}: the image shows the puzzle.\nPossible actions: {actions}"
        return Observation(text=text, images=[self.render()], data=self.visible())

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

    Feedback on actions goes to the solver only. The episode is lost after ``max_turns``
    solver turns or ``max_mistakes`` mistakes, and won as soon as the puzzle is solved.
    Settings: ``max_turns`` (10), ``max_mistakes`` (3), ``variant`` (``image`` or ``text``).
    """

    roles = ("solver", "expert")
    puzzle_cls: ClassVar[type[Puzzle]]

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.max_turns = int(self.settings.get("max_turns", 10))
        self.max_mistakes = int(self.settings.get("max_mistakes", 3))
        self.variant = str(self.settings.get("variant", "image"))
        self.puzzle = self.puzzle_cls()
        self.puzzle.reset(instance)
        self.turn = 0
        self.mistakes = 0
        self.messages = {"solver": 0, "expert": 0}
        self.actions_taken = 0
        self._next = "solver"

    def system_prompt(self, role: str) -> str:
        if role == "expert":
            return EXPERT_SYSTEM.format(manual=self.puzzle.manual)
        facts = self.puzzle.private_facts()
        if facts:
            listed = "; ".join(f"{k.replace('_', ' ')}" for k in facts)
            return f"{SOLVER_SYSTEM}\n\n{PRIVACY_NOTE.format(facts=listed)}"
        return SOLVER_SYSTEM

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

    def handle_reply(self, role: str, text: str) -> None:
        self.messages[role] += 1
        if role == "expert":
            self.say("expert", "solver", text)
            self._next = "solver"
            return
        self.turn += 1
        actions = action_lines(text, self.puzzle.legal_actions())
        if actions is None:
            self.say("solver", "expert", text)
        else:
            self._act(actions)
            # The expert hears what the solver did, as in the paper's shared conversation.
            self.say("solver", "expert", text)
        if self.outcome is None and self.turn >= self.max_turns:
            self.end("lost", f"no solution within {self.max_turns} turns")
        self._next = "expert"

    def _act(self, actions: list[str]) -> None:
        for action in actions:
            if action not in self.puzzle.legal_actions():
                self.give_feedback("solver", f"{action}: not available now")
                continue
            result = self.puzzle.step("solver", action)
            self.actions_taken += 1
            self.record_action("solver", action, result)
            self.give_feedback("solver", f"{action}: {result.feedback}")
            if result.mistake:
                self.mistakes += 1
                if self.mistakes >= self.max_mistakes:
                    self.end("lost", f"{self.mistakes} mistakes")
                    return
            if self.puzzle.done:
                self.end("success", "puzzle solved")
                return

    def scores(self) -> dict[str, float | None]:
        base = self.puzzle.score()
        psr = base["psr"] or 0.0
        return {
            **base,
            "main": 100.0 * psr,
            "mistakes": float(self.mistakes),
            "conversation_length": float((self.messages["solver"] + self.messages["expert"]) // 2),
            "turns": float(self.turn),
        }


def seeded(seed: int, salt: str) -> random.Random:
    """A random generator for ``seed`` that differs per puzzle (``salt``), stable everywhere."""
    return random.Random(f"{salt}:{seed}")
