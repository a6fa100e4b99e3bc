"""The pure, synchronous contracts every game implements: environment, game master, player view.

Nothing here knows the bus, a model or an agent. A game master holds a game's dialogue
protocol (whose turn, what each role sees, how a reply is parsed, limits, when it ends) and
reports what happened as :class:`Event` records; the runtime turns those into bus messages.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

Outcome = Literal["success", "lost", "aborted"]
Visibility = Literal["private", "shared", "public"]
RoleResult = Literal["win", "loss", "draw"]


class Settings(BaseModel):
    """A game's settings: subclass it with one typed field (and its default) per setting.

    A config's ``settings:`` block is validated against the model before anything runs (a
    wrong type or an unknown key is a config error naming the game, the field and the value);
    game masters and instance generators get the validated values as a plain dict, defaults
    filled in. Example::

        class CountingSettings(Settings):
            target: int = Field(3, ge=1)  # numbers to count to
            variant: Literal["image", "text"] = "image"
    """

    # No infinities, as in the run's config: a number setting is a finite number.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class VariantSettings(Settings):
    """Settings of a game shown as pictures (``image``) or, for text-only models, as text."""

    variant: Literal["image", "text"] = "image"


class ReasonCode(StrEnum):
    """Why an episode ended, as a short stable code beside the human ``reason`` text.

    The game's own endings (:meth:`GameMaster.end`) and the runtime's (timeout, exception,
    cancelled). Reports and analyses group by these; the text says the particulars.
    """

    SOLVED = "solved"  # the goal reached: puzzle solved, target picked, answer right
    FAILED = "failed"  # the game ended without reaching it: a wrong answer, a wrong pick
    GAME_OVER = "game_over"  # a competitive game ended by its rules; who won is in ``role_results``
    TURN_LIMIT = "turn_limit"  # the limit on turns or moves was reached
    MISTAKE_LIMIT = "mistake_limit"  # too many mistakes or invalid replies
    PARSE_ERROR = "parse_error"  # a reply could not be read (format)
    RULE_VIOLATION = "rule_violation"  # a reply broke the game's rules
    NO_TURN = "no_turn"  # the game master had no next turn and had not ended the game
    TIMEOUT = "timeout"  # the runtime: the episode ran past episode_timeout_s
    EXCEPTION = "exception"  # the runtime: a player or the game master raised
    CANCELLED = "cancelled"  # the runtime: the run was interrupted
    OPERATOR_ABORT = "operator_abort"  # the runtime: someone aborted it (a dashboard's Control)
    TURN_TIMEOUT = "turn_timeout"  # the runtime: a human seat left a turn unanswered too long
    HUMAN_LEFT = "human_left"  # the runtime: a human's seat stayed empty past its rejoin time
    CONTEXT_EXCEEDED = "context_exceeded"  # the runtime: a prompt over the model's context
    # The runtime: a model server's reply that parley will not read, over the model's
    # max_response_bytes or a redirect to another server (the particulars in ``reason``).
    BAD_RESPONSE = "bad_response"


# The code an ending gets when the game master names none (games written before codes).
DEFAULT_CODES: dict[str, ReasonCode] = {
    "success": ReasonCode.SOLVED,
    "lost": ReasonCode.FAILED,
    "aborted": ReasonCode.RULE_VIOLATION,
}


class Scores(dict[str, float | None]):
    """An episode's scores: the declared ``main`` score and any others by name.

    ``main`` is the headline number, 0–100 (clembench's convention: None when the episode was
    aborted); the others are the mapping itself. Example::

        def scores(self) -> Scores:
            return Scores(main=100.0 * self.progress, mistakes=float(self.mistakes))
    """

    def __init__(self, main: float | None, **others: float | None) -> None:
        super().__init__(others)
        self.main = main

    @classmethod
    def of(cls, value: Mapping[str, float | None]) -> Scores:
        """``value`` as :class:`Scores`; a plain mapping (a game written before ``Scores``)
        gives its ``"main"`` entry as the main score."""
        if isinstance(value, Scores):
            return value
        others = {k: v for k, v in value.items() if k != "main"}
        return cls(value.get("main"), **others)

    def __repr__(self) -> str:
        return f"Scores(main={self.main!r}, {dict.__repr__(self)})"


@dataclass
class Observation:
    """What a role sees now: text, PNG images, and a machine-readable copy of the same for
    scripted players (``data`` must hold nothing the text and images do not show)."""

    text: str = ""
    images: list[bytes] = field(default_factory=list)
    data: dict[str, Any] | None = None


@dataclass
class ObserverView:
    """What someone watching an episode sees now (a dashboard's board): the game's text
    rendering, PNG images where the game draws them, and how far it has come.

    ``visibility`` is ``private`` when the view shows something a role must keep from the
    others (its private facts, or what only one role is shown), else ``public``. ``data``
    holds small JSON-safe extras (whose turn it is); ``scores`` the scores so far, where the
    game has them.
    """

    text: str = ""
    images: list[bytes] = field(default_factory=list)
    visibility: Literal["private", "public"] = "public"
    progress: float | None = None
    scores: dict[str, float | None] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepResult:
    """The result of one action: feedback for the acting role, whether it was a mistake, and
    the partial progress (0–1) after it."""

    feedback: str
    mistake: bool = False
    progress: float = 0.0


@runtime_checkable
class Environment(Protocol):
    """Seeded game logic: reset, observe, act, score. Pure and synchronous."""

    def reset(self, instance: dict[str, Any]) -> None: ...
    def observe(self, role: str) -> Observation: ...
    def legal_actions(self, role: str) -> list[str]: ...
    def step(self, role: str, action: str) -> StepResult: ...
    @property
    def done(self) -> bool: ...
    @property
    def outcome(self) -> Outcome | None: ...
    def score(self) -> dict[str, float | None]: ...


@dataclass
class Event:
    """Something that happened in an episode, for the transcript.

    ``kind``: ``utterance`` (one role to another), ``action`` (a role acted on the environment;
    ``data`` holds action, mistake, progress), ``feedback`` (environment → a role), ``violation``
    (a reply broke the format or rules), ``note`` (game-master bookkeeping).
    """

    kind: Literal["utterance", "action", "violation", "feedback", "note"]
    role: str
    to: str = ""
    text: str = ""
    visibility: Visibility = "shared"
    images: list[bytes] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Message:
    """An utterance waiting in a role's inbox until its next turn."""

    sender: str
    text: str
    images: list[bytes] = field(default_factory=list)


@dataclass
class Turn:
    """The game master asks ``role`` to reply, giving it what it may see."""

    role: str
    observation: Observation
    feedback: str | None = None
    incoming: list[Message] = field(default_factory=list)
    legal_actions: list[str] = field(default_factory=list)


class GameMaster(ABC):
    """A game's dialogue protocol. Subclasses implement the abstract methods and report with
    :meth:`say`, :meth:`give_feedback`, :meth:`record_action`, :meth:`violation`, :meth:`end`.

    The runtime calls :meth:`next_turn`, sends the turn to the role's agent, and passes the reply
    to :meth:`on_reply`; :attr:`events` collects what happened since the runtime last drained it.
    """

    roles: ClassVar[tuple[str, ...]] = ()

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        self.instance = instance
        self.settings = dict(settings or {})
        self.events: list[Event] = []
        self.outcome: Outcome | None = None
        self.reason = ""
        self.reason_code: ReasonCode | None = None
        # Competitive games: each role's result (win, loss, draw), set by :meth:`end`.
        self.role_results: dict[str, RoleResult] = {}
        self.replies = 0
        self._inbox: dict[str, list[Message]] = {role: [] for role in self.roles}
        self._feedback: dict[str, str | None] = dict.fromkeys(self.roles)

    # --- what a game defines -------------------------------------------------------------

    @abstractmethod
    def system_prompt(self, role: str) -> str:
        """The role's standing instructions (sent with its first turn)."""

    @abstractmethod
    def whose_turn(self) -> str | None:
        """The role to reply next, or None when the episode is over."""

    @abstractmethod
    def observe(self, role: str) -> Observation:
        """What ``role`` sees now."""

    @abstractmethod
    def handle_reply(self, role: str, text: str) -> None:
        """Parse and apply one reply; report through the event helpers, :meth:`end` when done."""

    @abstractmethod
    def scores(self) -> Scores:
        """Episode scores, with the main one declared: ``Scores(main=..., other=...)``;
        clembench's convention: the main score is None when aborted."""

    def legal_actions(self, role: str) -> list[str]:
        """Actions ``role`` may name now (empty for pure dialogue turns)."""
        return []

    def private_facts(self, role: str) -> dict[str, str]:
        """Facts ``role`` holds that it must not disclose (for leak analysis)."""
        return {}

    def observer_view(self, images: bool = True) -> ObserverView:
        """The game as an observer sees it now (published after every step, for dashboards).

        By default: what every role is shown (each role's :meth:`observe`, once when all
        see the same), ``private`` when the roles are shown different things or hold private
        facts. A game overrides it to show its state directly (a board, a puzzle). With
        ``images=False`` the view carries no images (the run does not publish them).
        """
        saved = self.events
        self.events = []  # what observe() notes belongs to the roles' turns, not to this view
        try:
            seen = {role: self.observe(role) for role in self.roles}
        finally:
            self.events = saved
        distinct: dict[tuple[str, tuple[bytes, ...]], list[str]] = {}
        for role, obs in seen.items():
            distinct.setdefault((obs.text, tuple(obs.images)), []).append(role)
        if len(distinct) == 1:
            ((text, pictures),) = distinct
        else:
            text = "\n\n".join(f"[{', '.join(who)}]\n{t}" for (t, _), who in distinct.items())
            pictures = tuple(p for (_, ps) in distinct for p in ps)
        private = len(distinct) > 1 or any(self.private_facts(r) for r in self.roles)
        return ObserverView(
            text=text,
            images=list(dict.fromkeys(pictures)) if images else [],
            visibility="private" if private else "public",
            data=self._whose_turn_data(),
        )

    def _whose_turn_data(self) -> dict[str, Any]:
        role = None if self.outcome is not None else self.whose_turn()
        return {"to_move": role} if role else {}

    # --- driven by the runtime -----------------------------------------------------------

    def next_turn(self) -> Turn | None:
        """The next request, with the role's pending messages and feedback; None when over."""
        if self.outcome is not None:
            return None
        role = self.whose_turn()
        if role is None:
            if self.outcome is None:
                self.end("lost", "the game master had no next turn", code=ReasonCode.NO_TURN)
            return None
        incoming, self._inbox[role] = self._inbox[role], []
        feedback, self._feedback[role] = self._feedback[role], None
        return Turn(
            role=role,
            observation=self.observe(role),
            feedback=feedback,
            incoming=incoming,
            legal_actions=self.legal_actions(role),
        )

    def on_reply(self, role: str, text: str) -> None:
        """Take one reply from ``role``."""
        self.replies += 1
        self.handle_reply(role, text)

    def drain_events(self) -> list[Event]:
        events, self.events = self.events, []
        return events

    @property
    def done(self) -> bool:
        return self.outcome is not None

    # --- reporting helpers for subclasses ------------------------------------------------

    def say(
        self, sender: str, recipient: str, text: str, images: list[bytes] | None = None
    ) -> None:
        """Route an utterance to ``recipient``'s next turn."""
        self._inbox[recipient].append(Message(sender, text, list(images or [])))
        self.events.append(
            Event("utterance", sender, recipient, text, "shared", list(images or []))
        )

    def give_feedback(self, role: str, text: str) -> None:
        """Environment feedback that only ``role`` sees, with its next turn."""
        previous = self._feedback[role]
        self._feedback[role] = text if previous is None else f"{previous}\n{text}"
        self.events.append(Event("feedback", "environment", role, text, "private"))

    def record_action(self, role: str, action: str, result: StepResult) -> None:
        self.events.append(
            Event(
                "action",
                role,
                "environment",
                action,
                "private",
                data={
                    "action": action,
                    "mistake": result.mistake,
                    "progress": result.progress,
                    "feedback": result.feedback,
                },
            )
        )

    def violation(
        self,
        role: str,
        reason: str,
        *,
        abort: bool = True,
        code: ReasonCode = ReasonCode.RULE_VIOLATION,
    ) -> None:
        """A reply broke the rules (or, with ``code=ReasonCode.PARSE_ERROR``, the format); by
        default the episode is aborted with that code."""
        code = ReasonCode(code)
        self.events.append(
            Event("violation", role, "", reason, "public", data={"code": code.value})
        )
        if abort:
            self.end("aborted", f"{role}: {reason}", code=code)

    def note(self, text: str, *, private: bool = False, **data: Any) -> None:
        """Game-master bookkeeping for readers of the transcript. ``private=True`` for what a
        player must not see (an answer, a whole map): it is recorded, but published only on the
        game master's private topic (``parley/{run}/{episode}/private/gm``), which the run's own
        processes and operators read, never on the events topic spectators and seats read."""
        visibility: Visibility = "private" if private else "public"
        self.events.append(Event("note", "gm", "", text, visibility, data=data))

    def end(
        self,
        outcome: Outcome,
        reason: str = "",
        *,
        code: ReasonCode | None = None,
        winner: str | None = None,
        draw: bool = False,
    ) -> None:
        """End the episode (the first call counts): ``outcome`` for the benchmark, ``reason``
        in words, ``code`` the :class:`ReasonCode` (by default ``solved``, ``failed`` or
        ``rule_violation`` after the outcome). Competitive games name the ``winner`` role
        (every other role lost) or say ``draw``; the roles' results go into the record.

        Example: ``self.end("lost", "checkmate", code=ReasonCode.GAME_OVER, winner="opponent")``
        """
        if self.outcome is not None:
            return
        self.outcome = outcome
        self.reason = reason
        self.reason_code = ReasonCode(code) if code is not None else DEFAULT_CODES[outcome]
        if draw:
            self.role_results = dict.fromkeys(self.roles, "draw")
        elif winner is not None:
            if winner not in self.roles:
                raise ValueError(f"winner {winner!r} is not a role; roles: {self.roles}")
            self.role_results = {r: "win" if r == winner else "loss" for r in self.roles}


@dataclass
class View:
    """What a scripted or random player may use: exactly what its role was shown.

    ``history`` is the role's episodic memory as its memory policy presents it, oldest first,
    as (speaker, text) pairs; the player's own replies have its own role as speaker.
    """

    role: str
    system: str
    text: str
    data: dict[str, Any] | None
    feedback: str | None
    legal_actions: list[str]
    history: list[tuple[str, str]]
    turn: int

    def last_from(self, speaker: str) -> str | None:
        """The latest thing ``speaker`` said to this role, if any."""
        for who, text in reversed(self.history):
            if who == speaker:
                return text
        return None

    def own_replies(self) -> int:
        return sum(1 for who, _ in self.history if who == self.role)


PlayFn = Callable[[View, random.Random], str]
