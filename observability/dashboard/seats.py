"""Seats: a person plays one role of one episode from a browser, over the run's bus.

A role whose player is ``{kind: human, via: browser}`` (docs/humans.md) has a seat here. The
seat plays the role's agent with a :class:`~parley.agents.policies.SeatPolicy`: it subscribes
to exactly that role's inbox (``parley/{run}/{episode}/agent/{role}``), assembles each turn's
prompt the way a model's agent does (system text, the conversation so far under the role's
memory policy, observation, feedback, legal actions), shows it on the seat's page, and
publishes the person's reply to the game master's inbox as a ``TurnResponse`` (``model:
human``, the time they took as its latency, ``raw.player: human``). The game master reads it
as it reads a model's.

Each seat has an unguessable token; its page and WebSocket (``/seat/{run}/{episode}/{role}``,
served by :mod:`.server`) open only with it, and a page receives nothing but its role's turns
and the episode's end. A seat left empty for the player's ``rejoin_s`` while the game waits on
it sends a ``TurnResponse`` with ``raw.left`` instead: the episode ends ``aborted``
(``human_left``). The same link opens the seat again (a reload, another browser) until then.

Example::

    seats = SeatRegistry(base_url=lambda: "http://127.0.0.1:8765/")
    seats.bus = bus
    for seat in seats.plan(run, specs):          # before the run starts: links to hand out
        print(seats.link(seat))
    seats.see(episode_started)                   # from the bus: opens its seats
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from parley.agents.agent import Agent
from parley.agents.policies import SeatClosed, SeatPolicy
from parley.agents.prompt import Prompt
from parley.bus import topics
from parley.bus.base import Bus, BusClosed, Subscription
from parley.bus.messages import (
    EpisodeFinished,
    EpisodeStarted,
    ImagePart,
    Message,
    TextPart,
    TurnRequest,
    TurnResponse,
)
from parley.memory import HistoryPolicy

log = logging.getLogger("parley.dashboard.seats")

MAX_REPLY_CHARS = 20_000  # what one person's reply may hold
KEEP_FINISHED = 500  # finished seats kept (their page shows the end), then the oldest go
CHECK_EVERY_S = 0.25  # how often empty seats are checked against their rejoin time


def _player_seat(player: Any) -> bool:
    """Whether a player, as an episode spec's JSON holds it, plays at a browser seat."""
    return (
        isinstance(player, dict)
        and player.get("kind") == "human"
        and (player.get("via") == "browser")
    )


def seat_roles(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The roles of an episode spec (its JSON form) played at browser seats, with their player."""
    players = spec.get("players") or {}
    return {role: player for role, player in players.items() if _player_seat(player)}


@dataclass(eq=False)
class Seat:
    """One role of one episode, played from a browser."""

    run: str
    episode: str
    role: str
    token: str
    game: str = ""
    rejoin_s: float | None = None
    turn_timeout_s: float | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    sockets: set[Any] = field(default_factory=set)
    images: dict[str, bytes] = field(default_factory=dict)  # this role's own, by sha256
    agent: Agent | None = None
    policy: SeatPolicy | None = None
    request: TurnRequest | None = None  # the request being answered
    turn_frame: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    finished: dict[str, Any] | None = None
    left: bool = False
    empty_since: float = field(default_factory=time.monotonic)
    waiting_since: float = 0.0
    opened: bool = False
    last_request: str = ""  # the id of the latest request taken (a retained one comes again)
    task: asyncio.Task[None] | None = None
    follower: asyncio.Task[None] | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.run, self.episode, self.role)

    @property
    def waiting(self) -> bool:
        """Whether the game waits on this seat's person now."""
        return self.policy is not None and self.policy.waiting and self.finished is None

    def check(self, token: str) -> bool:
        return secrets.compare_digest(token.encode(), self.token.encode())


def _parts(parts: Iterable[Any], seat: Seat) -> list[dict[str, Any]]:
    """Content parts as the page shows them: text, or an image by sha256 (served to this seat
    only, from the bytes it received)."""
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append({"text": part.text})
        elif isinstance(part, ImagePart):
            if part.data is not None:
                seat.images[part.sha256] = part.data
            out.append({"image": part.sha256})
    return out


class SeatRegistry:
    """Every seat this dashboard holds, by token and by (run, episode, role).

    ``base_url`` gives the dashboard's URL (for links); ``announce(seat, link)`` is told of
    each new seat (``parley dashboard`` prints it). ``bus`` must be set before seats open.
    """

    def __init__(
        self,
        base_url: Callable[[], str],
        announce: Callable[[Seat, str], Any] | None = None,
    ) -> None:
        self.base_url = base_url
        self.announce = announce
        self.bus: Bus | None = None
        self.seats: dict[tuple[str, str, str], Seat] = {}
        self.version = 0  # changes whenever a seat's state that the episode list shows does
        self._finished: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._checker: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()

    # --- seats ------------------------------------------------------------------------------

    def get(self, run: str, episode: str, role: str, token: str) -> Seat | None:
        """The seat ``token`` opens, if it is this very seat's token (None otherwise: a token
        for another role, another episode or none at all opens nothing)."""
        seat = self.seats.get((run, episode, role))
        if seat is None or not token or not seat.check(token):
            return None
        return seat

    def link(self, seat: Seat) -> str:
        base = self.base_url().split("?", 1)[0].rstrip("/")
        path = "/".join(quote(p, safe="") for p in (seat.run, seat.episode, seat.role))
        return f"{base}/seat/{path}?token={seat.token}"

    def _seat(self, run: str, episode: str, role: str, player: dict[str, Any]) -> Seat:
        key = (run, episode, role)
        seat = self.seats.get(key)
        if seat is None:
            seat = self.seats[key] = Seat(run, episode, role, secrets.token_urlsafe(18))
            seat.rejoin_s = player.get("rejoin_s")
            seat.turn_timeout_s = player.get("turn_timeout_s")
            self.version += 1
            if self.announce is not None:
                self.announce(seat, self.link(seat))
        return seat

    def plan(self, run: str, specs: Iterable[Any]) -> list[Seat]:
        """Seats for the episodes a run is about to play (``EpisodeSpec`` objects or their
        JSON), so their links can be handed out before they start."""
        made = []
        for spec in specs:
            data = spec if isinstance(spec, dict) else spec.model_dump(mode="json")
            for role, player in seat_roles(data).items():
                seat = self._seat(run, str(data["id"]), role, player)
                seat.game = str(data.get("game") or "")
                seat.memory = dict((data.get("memory") or {}).get(role) or {})
                made.append(seat)
        return made

    def see(self, message: Message) -> None:
        """Take an episode's start (its seats open: they follow their inboxes) or end."""
        if isinstance(message, EpisodeStarted):
            for role, player in seat_roles(message.spec).items():
                seat = self._seat(message.run, message.episode, role, player)
                seat.game = message.game
                seat.memory = dict((message.spec.get("memory") or {}).get(role) or {})
                self._open(seat)
        elif isinstance(message, EpisodeFinished):
            for seat in [
                s for s in self.seats.values() if s.key[:2] == (message.run, message.episode)
            ]:
                self._finish(seat, message)

    def rows(self, run: str, episodes: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        """For the episode list: each episode's seats, whether the game waits on them, and
        their join links."""
        out: dict[str, list[dict[str, Any]]] = {}
        wanted = set(episodes)
        for seat in self.seats.values():
            if seat.run != run or seat.episode not in wanted:
                continue
            out.setdefault(seat.episode, []).append(
                {
                    "role": seat.role,
                    "waiting": seat.waiting,
                    "connected": len(seat.sockets),
                    "finished": seat.finished is not None,
                    "link": self.link(seat),
                }
            )
        return out

    # --- following a role's inbox -------------------------------------------------------------

    def _open(self, seat: Seat) -> None:
        if seat.opened or seat.finished is not None or self.bus is None:
            return
        seat.opened = True
        history = HistoryPolicy(seat.memory.get("policy", "full"), int(seat.memory.get("k", 3)))
        seat.policy = SeatPolicy(on_prompt=lambda prompt: self._show(seat, prompt))
        seat.agent = Agent(
            seat.role,
            seat.policy,
            history=history,
            # Its own key: in a run's own process the runtime's agents keep memories too.
            memory_key=f"seat:{seat.run}:{seat.episode}:{seat.role}",
        )
        seat.follower = asyncio.create_task(self._follow(seat), name=f"seat:{seat.role}")

    async def _follow(self, seat: Seat) -> None:
        """Take the role's turn requests from its inbox, one at a time."""
        assert self.bus is not None
        inbox = topics.agent_inbox(seat.run, seat.episode, seat.role)
        sub: Subscription | None = None
        try:
            sub = self.bus.subscribe(inbox, maxsize=100)
            await sub.ready()
            async for delivery in sub:
                request = delivery.message
                if isinstance(request, TurnRequest) and request.role == seat.role:
                    self._take(seat, request)
        except (BusClosed, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("seat %s of %s stopped following its inbox", seat.role, seat.episode)
        finally:
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.close()

    def _take(self, seat: Seat, request: TurnRequest) -> None:
        if request.id == seat.last_request or seat.finished is not None:
            return  # the retained request again (a second subscription), or too late
        if seat.request is not None and request.turn <= seat.request.turn:
            return
        seat.last_request = request.id
        if seat.task is not None and not seat.task.done():
            seat.task.cancel()  # a newer turn: the game moved on without this answer
        seat.request = request
        seat.waiting_since = time.monotonic()
        seat.task = asyncio.create_task(self._answer(seat, request))

    async def _answer(self, seat: Seat, request: TurnRequest) -> None:
        """Play the turn as the role's agent: show the prompt, wait for the person, reply."""
        assert seat.agent is not None and self.bus is not None
        try:
            response = await seat.agent.respond(request)
        except (SeatClosed, asyncio.CancelledError):
            return
        try:
            await self.bus.publish(topics.seat_replies(seat.run, seat.episode, seat.role), response)
        except Exception as exc:  # the bus is gone: the page says so, the run's clock goes on
            log.warning("seat %s of %s: reply not sent: %s", seat.role, seat.episode, exc)
            self._send(seat, {"type": "error", "error": f"your reply could not be sent: {exc}"})
            return
        seat.turn_frame = None
        seat.history.append({"speaker": seat.role, "own": True, "parts": [{"text": response.text}]})
        self.version += 1
        self._send(seat, {"type": "sent", "turn": request.turn, "text": response.text})
        self._send(seat, self._waiting_frame(seat))

    def _show(self, seat: Seat, prompt: Prompt) -> None:
        """A prompt to answer: what the page shows, sent to every open page of the seat."""
        request = seat.request
        assert request is not None
        history = [
            {"speaker": e.speaker, "own": e.own, "parts": _parts(e.parts, seat)}
            for e in prompt.history
        ]
        seat.history = history
        seat.turn_frame = {
            "type": "turn",
            "turn": request.turn,
            "system": prompt.system,
            "history": history,
            "observation": _parts(prompt.working.observation, seat),
            "feedback": prompt.working.feedback,
            "legal_actions": list(prompt.working.legal_actions),
            "deadline": request.deadline,
        }
        self.version += 1
        self._send(seat, seat.turn_frame)

    def _waiting_frame(self, seat: Seat) -> dict[str, Any]:
        return {"type": "waiting", "history": seat.history}

    # --- the seat's pages ---------------------------------------------------------------------

    def hello(self, seat: Seat) -> list[dict[str, Any]]:
        """What a page that just opened the seat is sent: who it plays, then where it stands."""
        frames: list[dict[str, Any]] = [
            {
                "type": "seat",
                "run": seat.run,
                "episode": seat.episode,
                "role": seat.role,
                "game": seat.game,
                "turn_timeout_s": seat.turn_timeout_s,
                "rejoin_s": seat.rejoin_s,
            }
        ]
        if seat.finished is not None:
            frames.append(seat.finished)
        elif seat.turn_frame is not None and seat.waiting:
            frames.append(seat.turn_frame)
        else:
            frames.append(self._waiting_frame(seat))
        return frames

    def joined(self, seat: Seat, ws: Any) -> None:
        seat.sockets.add(ws)
        self.version += 1

    def left(self, seat: Seat, ws: Any) -> None:
        seat.sockets.discard(ws)
        if not seat.sockets:
            seat.empty_since = time.monotonic()
        self.version += 1

    def reply(self, seat: Seat, turn: Any, text: Any) -> str | None:
        """The person's reply from the page; why not, when it cannot be taken."""
        if seat.finished is not None:
            return "the episode is over"
        if not isinstance(text, str):
            return "a reply is text"
        if len(text) > MAX_REPLY_CHARS:
            return f"a reply holds at most {MAX_REPLY_CHARS} characters"
        if isinstance(turn, bool) or not isinstance(turn, int):  # true == 1 and 1.0 == 1
            return f"a reply names its turn as a whole number, not {type(turn).__name__}"
        if seat.request is None or not seat.waiting or turn != seat.request.turn:
            return "it is not your turn"
        assert seat.policy is not None
        seat.policy.answer(text)
        return None

    def _send(self, seat: Seat, frame: dict[str, Any]) -> None:
        if not seat.sockets:
            return
        text = json.dumps(frame)
        for ws in list(seat.sockets):
            task = asyncio.create_task(self._send_one(seat, ws, text))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send_one(self, seat: Seat, ws: Any, text: str) -> None:
        try:
            await ws.send_str(text)
        except Exception:  # a page gone mid-send: it is dropped when its socket ends
            seat.sockets.discard(ws)

    # --- endings ----------------------------------------------------------------------------

    def _finish(self, seat: Seat, message: EpisodeFinished) -> None:
        if seat.finished is not None:
            return
        seat.finished = {
            "type": "finished",
            "outcome": str(message.outcome),
            "reason": message.reason,
            "reason_code": message.reason_code,
            "main_score": message.main_score,
            "turns": message.turns,
        }
        self.version += 1
        self._send(seat, seat.finished)
        self._close(seat)
        self._finished[seat.key] = None
        while len(self._finished) > KEEP_FINISHED:
            old, _ = self._finished.popitem(last=False)
            self.seats.pop(old, None)

    def _close(self, seat: Seat) -> None:
        for task in (seat.task, seat.follower):
            if task is not None and not task.done():
                task.cancel()
        if seat.agent is not None:
            seat.agent.forget()

    async def _left_empty(self, seat: Seat) -> None:
        """The seat stayed empty past its rejoin time while the game waited on it: say so to
        the game master, which ends the episode as ``aborted`` (``human_left``)."""
        request = seat.request
        if request is None or self.bus is None or seat.left:
            return
        seat.left = True
        reason = (
            f"{seat.role}'s seat (a person at a browser) stayed empty for {seat.rejoin_s:g} s "
            f"while it was their turn"
        )
        response = TurnResponse(
            run=seat.run,
            episode=seat.episode,
            sender=seat.role,
            recipient="gm",
            turn=request.turn,
            role=seat.role,
            text="",
            model="human",
            raw={"player": "human", "via": "browser", "left": reason},
        )
        if seat.task is not None:
            seat.task.cancel()
        await self.bus.publish(topics.seat_replies(seat.run, seat.episode, seat.role), response)

    async def _check(self) -> None:
        while True:
            await asyncio.sleep(CHECK_EVERY_S)
            now = time.monotonic()
            for seat in list(self.seats.values()):
                if seat.rejoin_s is None or seat.sockets or not seat.waiting or seat.left:
                    continue
                empty_for = now - max(seat.empty_since, seat.waiting_since)
                if empty_for >= seat.rejoin_s:
                    try:
                        await self._left_empty(seat)
                    except Exception:
                        log.exception(
                            "seat %s of %s: could not say it was left", seat.role, seat.episode
                        )

    def start(self) -> None:
        """Start checking empty seats against their rejoin time."""
        if self._checker is None:
            self._checker = asyncio.create_task(self._check(), name="seats")

    async def stop(self, grace_s: float = 1.0) -> None:
        """Stop; an open page whose episode has ended gets the end first. The run's last
        results are taken in a few times a second, and a dashboard stopped with its run would
        otherwise close the page before: it waits up to ``grace_s`` for them."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(
            s.sockets and s.opened and s.finished is None for s in self.seats.values()
        ):
            await asyncio.sleep(0.05)
        if self._sending:
            await asyncio.wait(list(self._sending), timeout=grace_s)
        tasks = [t for s in self.seats.values() for t in (s.task, s.follower) if t is not None]
        if self._checker is not None:
            tasks.append(self._checker)
            self._checker = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
