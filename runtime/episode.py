"""One episode on the bus: a game-master actor and one agent actor per role."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import anyio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Status, StatusCode

from parley.agents.agent import Agent
from parley.bus import topics
from parley.bus.base import Bus, Delivery
from parley.bus.local import LocalBus
from parley.bus.messages import (
    EpisodeFinished,
    EpisodeStarted,
    ImagePart,
    Message,
    StateUpdate,
    TextPart,
    TranscriptEvent,
    TurnRequest,
    TurnResponse,
    Utterance,
    Visibility,
)
from parley.bus.signing import RunKey, SigningError
from parley.environments import registry
from parley.environments.base import (
    Event,
    GameMaster,
    ObserverView,
    ReasonCode,
    Scores,
    Turn,
)
from parley.memory import HistoryPolicy, MemoryEntry
from parley.memory.across import EpisodeMemory, EpisodeStore, render
from parley.observability import tracing
from parley.observability.light_spans import UseSpan
from parley.records import RECORD_SCHEMA, EpisodeRecord  # readers upgrade older shapes
from parley.runtime.actor import Actor, ActorHost
from parley.runtime.experiment import EpisodeSpec
from parley.runtime.players import make_policy
from parley.tokens import count_tokens

log = logging.getLogger("parley.runtime.episode")
MAX_REPLY_CHARS = 100_000


@dataclass
class EpisodeOptions:
    """How episodes of a run are played and recorded."""

    run: str
    record_prompts: bool = True
    timeout_s: float | None = None
    # The run's model pool (parley.agents.backends.pool.ModelPool), or the bare registry.
    models: Any = field(default_factory=dict)
    max_reply_chars: int = MAX_REPLY_CHARS
    # Publish turn requests and responses to a broker too; by default they stay in-process
    # (their only subscribers are this episode's actors) and only events, state and results,
    # what remote observers need, cross the broker.
    mirror_turns: bool = False
    # The game's state for dashboards: "every_step", "end" or "off"; with images or not.
    state: str = "every_step"
    state_images: bool = True
    # Images this process has published inline already (later states name them by sha): shared
    # by the run's episodes, so each image crosses the broker once.
    sent_images: set[str] = field(default_factory=set)
    # The run's key (parley.bus.signing.RunKey): signs each EpisodeFinished, by which observers
    # tell the run's results from forged ones. None: results go unsigned.
    signer: RunKey | None = None
    # Where memory across episodes lives (memory/across.py); None when no role keeps any.
    memory_store: EpisodeStore | None = None


# Endings that come from outside the game: the game's position does not score them.
_FROM_OUTSIDE = frozenset(
    {ReasonCode.OPERATOR_ABORT, ReasonCode.TURN_TIMEOUT, ReasonCode.HUMAN_LEFT}
)
# The codes an exception may carry for its episode's ending (a model call's ContextExceeded).
_CODES = frozenset(code.value for code in ReasonCode)
# The failures of a model call (agents/backends/bodies.py) that end it as ``bad_response``:
# the server answered, but with what is no reply (its last attempt: the wrong shape, more
# than max_response_bytes, a redirect not followed).
_BAD_RESPONSES = frozenset({"bad_response", "too_large", "redirect"})
# Event sources that are not a role: a private event of theirs belongs to its recipient.
_NOT_ROLES = frozenset({"", "gm", "environment"})
MAX_SENT_IMAGES = 50_000  # then the memory starts over (an image sent twice costs only bytes)


@dataclass
class EpisodeResult:
    """A finished episode: its record for ``episodes.jsonl`` and what goes beside it."""

    spec: EpisodeSpec
    outcome: str
    reason: str = ""
    reason_code: str | None = None  # a ReasonCode value
    main_score: float | None = None
    scores: dict[str, float | None] = field(default_factory=dict)  # the others, by name
    role_results: dict[str, str] = field(default_factory=dict)  # role -> win/loss/draw
    turns: int = 0
    started_at: float = 0.0
    finished_at: float = 0.0
    model_time_s: float = 0.0
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)
    token_source: dict[str, str] = field(default_factory=dict)
    model_calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    private_facts: dict[str, dict[str, str]] = field(default_factory=dict)
    # Replies refused because they did not come from the role's own agent or seat.
    refused_replies: int = 0
    transcript: list[Message] = field(default_factory=list)
    images: dict[str, bytes] = field(default_factory=dict)
    # What the roles with memory across episodes keep of this one (not in the record).
    memories: list[EpisodeMemory] = field(default_factory=list)
    # The spec as the record shows it, dumped once at the start (EpisodeStarted carries it).
    spec_json: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def record(self, run: str) -> EpisodeRecord:
        """The episode's record for ``episodes.jsonl``, validated (a value of the wrong type,
        such as a game's score that is no number, raises ``pydantic.ValidationError``)."""
        data: dict[str, Any] = {
            "schema_version": RECORD_SCHEMA,
            "schema": RECORD_SCHEMA,  # the same, under the name parley 0.1's readers use
            "run": run,
            "episode": self.spec.id,
            "game": self.spec.game,
            "seed": self.spec.seed,
            "repetition": self.spec.repetition,
            "pairing": self.spec.pairing,
            "spec": (
                self.spec_json
                if self.spec_json is not None
                else self.spec.model_dump(mode="json", exclude={"instance"})
            ),
            "outcome": self.outcome,
            "reason": self.reason,
            "reason_code": self.reason_code,
            "main_score": self.main_score,
            "scores": self.scores,
            "role_results": self.role_results,
            "turns": self.turns,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": round(self.finished_at - self.started_at, 6),
            "model_time_s": round(self.model_time_s, 6),
            "tokens": self.tokens,
            "token_source": self.token_source,
            "model_calls": self.model_calls,
            "private_facts": self.private_facts,
            "error": self.error,
        }
        if self.refused_replies:  # only then: the records of untroubled runs keep their bytes
            data["refused_replies"] = self.refused_replies
        return EpisodeRecord.model_validate(data)


def _parts(text: str, images: list[bytes], cache: dict[str, bytes]) -> list[TextPart | ImagePart]:
    parts: list[TextPart | ImagePart] = [TextPart(text=text)] if text else []
    for data in images:
        image = ImagePart.from_bytes(data)
        cache.setdefault(image.sha256, data)
        parts.append(image)
    return parts


def turn_request(
    turn: Turn,
    *,
    run: str,
    episode: str,
    n: int,
    system: str | None,
    images: dict[str, bytes] | None = None,
) -> TurnRequest:
    """The request a game master's ``turn`` becomes: its observation, feedback, what others
    said, legal actions and view; ``images`` (sha256 → bytes) collects the pictures it shows."""
    seen = images if images is not None else {}
    obs = turn.observation
    observation = _parts(obs.text, obs.images, seen)
    incoming = [_utterance(m.sender, _parts(m.text, m.images, seen)) for m in turn.incoming]
    request = TurnRequest(
        run=run,
        episode=episode,
        sender="gm",
        recipient=turn.role,
        turn=n,
        role=turn.role,
        system=system,
        feedback=turn.feedback,
        legal_actions=turn.legal_actions,
        view=obs.data,
    )
    # Assigned, not validated again: the lists are made here, of parts and utterances
    # validated as they were made (validating a list of parts looks up each part's type by
    # its discriminator). The game's own lists and dicts are validated: that copies them.
    request.observation = observation
    request.incoming = incoming
    return request


def _utterance(sender: str, content: list[TextPart | ImagePart]) -> Utterance:
    """``Utterance(sender=sender, content=content)`` for ``content`` from :func:`_parts`
    (assigned as in :func:`turn_request`)."""
    utterance = Utterance(sender=sender, content=[])
    utterance.content = content
    return utterance


class _AgentActor(Actor):
    def __init__(self, runner: EpisodeRunner, agent: Agent) -> None:
        self.runner = runner
        self.agent = agent
        self.inbox = topics.agent_inbox(runner.options.run, runner.spec.id, agent.role)
        self.model_player = runner.spec.players[agent.role].kind == "llm"
        self.player_label = runner.spec.players[agent.role].label  # on every turn's span
        self.gm_inbox = topics.gm_inbox(runner.options.run, runner.spec.id)

    async def handle(self, delivery: Delivery) -> None:
        request = delivery.message
        if not isinstance(request, TurnRequest):
            return
        runner = self.runner
        if not tracing.enabled():
            # Untraced, a turn opens no span: an off tracer's spans cost a scripted turn a few
            # per cent (their attributes, the context manager, the traceparent).
            response = await self.agent.respond(request)
            await runner.bus.publish(self.gm_inbox, response, local=not runner.options.mirror_turns)
            return
        with tracing.handler_span(
            f"invoke_agent {self.agent.role}",
            # Under the receive span when the actor host opened one, else under the sender's.
            request.traceparent,
            # Run, game and pairing sit on the episode span (and the run on the resource):
            # each attribute is encoded again in every turn's span.
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.agent.role,
                "gen_ai.conversation.id": runner.spec.id,
                "parley.turn": request.turn,
                "parley.player": self.player_label,
            },
        ) as span:
            content = tracing.record_content()
            if self.model_player and content:
                # Model-call spans find their conversation on this span; the baggage adds the
                # content flag (and the conversation, for spans not under this one).
                token = otel_context.attach(tracing.conversation_context(runner.spec.id))
                try:
                    response = await self.agent.respond(request)
                finally:
                    otel_context.detach(token)
            else:
                response = await self.agent.respond(request)
            if content:  # message text only when the run opted in
                span.set_attributes(tracing.content_attributes(response.prompt, response.text))
            # Published inside the span: the traced bus stamps the response with its
            # traceparent (and makes the publish span its child).
            await runner.bus.publish(
                self.gm_inbox,
                response,
                local=not runner.options.mirror_turns,
            )


class _SeatActor(Actor):
    """A role played by a person at a dashboard seat (``via: browser``, docs/humans.md).

    It decides nothing: the seat (observability/dashboard/seats.py) reads the role's turn
    requests from this inbox over the bus and publishes the person's reply to the game
    master's inbox itself, as a model's agent would. Here only the clock is kept: a turn left
    unanswered for ``turn_timeout_s`` ends the episode as ``aborted`` (``turn_timeout``).
    """

    def __init__(self, runner: EpisodeRunner, role: str, timeout_s: float | None) -> None:
        self.runner = runner
        self.role = role
        self.timeout_s = timeout_s
        self.inbox = topics.agent_inbox(runner.options.run, runner.spec.id, role)
        self._timer: asyncio.TimerHandle | None = None

    async def handle(self, delivery: Delivery) -> None:
        request = delivery.message
        if not isinstance(request, TurnRequest) or self.timeout_s is None:
            return
        self._stop_clock()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.timeout_s, self._expire, request.turn)

    def _expire(self, turn: int) -> None:
        runner = self.runner
        self._timer = None
        if runner.expected == self.role and runner.requests == turn:
            runner.end_outside(
                f"{self.role} (a person at a browser seat) did not answer turn {turn} within "
                f"{self.timeout_s:g} s",
                ReasonCode.TURN_TIMEOUT,
            )

    def _stop_clock(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def replied(self) -> None:
        """The seat answered: stop the clock, and take the answered request off the inbox's
        retained message, so that a seat opened later does not show it as still to answer."""
        self._stop_clock()
        with contextlib.suppress(Exception):
            await self.runner.bus.clear_retained(self.inbox)

    async def close(self) -> None:
        self._stop_clock()
        with contextlib.suppress(Exception):
            await self.runner.bus.clear_retained(self.inbox)


class _GameMasterActor(Actor):
    def __init__(self, runner: EpisodeRunner) -> None:
        self.runner = runner
        self.inbox = topics.gm_inbox_filter(runner.options.run, runner.spec.id)

    async def handle(self, delivery: Delivery) -> None:
        if isinstance(delivery.message, TurnResponse):
            await self.runner.on_response(delivery.message, topics.seat_of(delivery.topic))


class EpisodeRunner:
    """Plays one episode: sends turns, applies replies, records everything, ends cleanly."""

    def __init__(
        self, spec: EpisodeSpec, bus: Bus, host: ActorHost, options: EpisodeOptions
    ) -> None:
        self.spec = spec
        self.bus = bus
        self.host = host
        self.options = options
        self.info = registry.get(spec.game)
        self._offload = self.info.offloads(spec.settings)
        self.result = EpisodeResult(spec=spec, outcome="error")
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.gm: GameMaster | None = None
        self.actors: list[Actor] = []
        self.expected: str | None = None
        self.requests = 0
        self.system_sent: set[str] = set()
        # Roles played at dashboard seats (human players, via: browser), by role.
        self.seats: dict[str, _SeatActor] = {}
        self._gm_host: ActorHost | None = None
        self._turn_span: trace.Span | None = None
        self._episode_span: trace.Span | None = None
        self._events_topic = topics.events(options.run, spec.id)
        self._inboxes: dict[str, str] = {}  # each role's inbox topic
        self._state_topic = topics.state(options.run, spec.id)
        self._state_step = 0
        self._state_on = options.state != "off"
        self._last_view: ObserverView | None = None
        self._last_image: tuple[bytes, ImagePart] | None = None
        # Images by reference save a broker their bytes; in-process they cost nothing, and a
        # late subscriber (the embedded dashboard) gets every retained picture whole.
        self._images_by_reference = not isinstance(getattr(bus, "inner", bus), LocalBus)

    # --- lifecycle -------------------------------------------------------------------------

    async def run(self, parent: trace.Span | None = None) -> EpisodeResult:
        tracer = tracing.tracer()
        # Each episode is a trace of its own (a run of thousands would make one unwieldy
        # trace), linked to the run's span.
        self._episode_span = tracer.start_span(
            f"episode {self.spec.game}",
            context=otel_context.Context(),
            links=[Link(parent.get_span_context())] if parent is not None else None,
            attributes={
                "parley.run": self.options.run,
                "parley.game": self.spec.game,
                "parley.episode": self.spec.id,
                "parley.seed": self.spec.seed,
                "parley.pairing": self.spec.pairing_label,
            },
        )
        self.result.started_at = time.time()
        span = self._episode_span
        # Current while the episode runs: what it publishes, and its actors' tasks, hang under it.
        with UseSpan(span, end_on_exit=False, record=True, set_status=True):
            try:
                await self._start()
                if not self.done.done():
                    await self._until_done(self.options.timeout_s)
            except TimeoutError:
                self.fail(
                    f"episode timed out after {self.options.timeout_s} s",
                    None,
                    code=ReasonCode.TIMEOUT,
                )
            except Exception as exc:
                self.fail(f"{type(exc).__name__}: {exc}", exc)
            finally:
                try:
                    if self.done.done():  # ended (not torn down by a cancelled task)
                        await self._keep_memories()
                finally:
                    await self._release()
            self.result.finished_at = time.time()
            span.set_attribute("parley.outcome", self.result.outcome)
            span.set_attribute("parley.turns", self.result.turns)
            if tracing.record_content() and span.is_recording():
                # Content opted in: the record and transcript ride on the episode's span, so an
                # exported trace set alone serves `parley leaks` and `parley errors`.
                record = self.result.record(self.options.run)
                span.set_attributes(tracing.episode_content(record, self.result.transcript))
            if self.result.outcome == "error":
                span.set_status(Status(StatusCode.ERROR, self.result.reason[:200]))
            await self._publish_finished()
            await self._publish_final_state()
            span.end()
        return self.result

    async def _until_done(self, timeout_s: float | None) -> None:
        """Wait for the episode's end, for at most ``timeout_s`` of time the bus was up.

        While the bus is cut off from its broker the episode cannot go on, through no fault of
        its players, so that time does not count: the deadline moves by each outage, and the
        episode goes on once the broker is back. ``TimeoutError`` when it runs out."""
        if timeout_s is None:
            await asyncio.shield(self.done)
            return
        loop = asyncio.get_running_loop()
        started, outage_before = loop.time(), self.bus.outage_s()
        remaining = timeout_s
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(self.done), remaining)
                return
            except TimeoutError:
                outage = self.bus.outage_s() - outage_before
                remaining = timeout_s - (loop.time() - started - outage)
                if remaining <= 0:
                    raise
                log.info("episode %s: deadline moved by a %.1f s bus outage", self.spec.id, outage)

    async def _gm_call(self, fn: Any, *args: Any) -> Any:
        """Call into the game (instance, game master); in a worker thread when the game asks
        for it for these settings (``GameInfo.offloads``: it renders or searches there), so the
        event loop never waits on it. Calls of one episode never overlap: the game needs no
        locks."""
        if self._offload:
            return await anyio.to_thread.run_sync(fn, *args)
        return fn(*args)

    async def _start(self) -> None:
        spec, info = self.spec, self.info
        instance = spec.instance or await self._gm_call(info.instance, spec.seed, spec.settings)
        self.gm = await self._gm_call(info.game_master, instance, spec.settings)
        self.result.private_facts = {
            role: facts for role in info.roles if (facts := self.gm.private_facts(role))
        }
        for role in info.roles:
            player = spec.players[role]
            if player.seat:
                self.seats[role] = _SeatActor(self, role, player.turn_timeout_s)
                self.actors.append(self.seats[role])
                continue
            memory = spec.memory.get(role)
            policy = make_policy(
                spec.players[role],
                role,
                info,
                f"{spec.id}:{role}",
                self.options.models,
                {"seed": spec.seed, "repetition": spec.repetition},
            )
            agent = Agent(
                role,
                policy,
                history=HistoryPolicy(memory.policy, memory.k) if memory else None,
                memory_key=f"{spec.id}:{role}",
                record_prompts=self.options.record_prompts,
            )
            if memory is not None and memory.remembers:
                agent.recall = self._recall(role)
                agent.log = []
            self.actors.append(_AgentActor(self, agent))
        gm = _GameMasterActor(self)
        self.actors.append(gm)
        if self.seats:
            # A seat may answer from another process (a dashboard on the broker): then the game
            # master's inbox listens beyond this process too.
            self._gm_host = ActorHost(self.bus, local=False)
        for actor in self.actors:
            host = self._gm_host if actor is gm and self._gm_host is not None else self.host
            await host.start(actor, self._actor_failed)
        self.result.spec_json = spec.model_dump(mode="json", exclude={"instance"})
        started = EpisodeStarted(
            run=self.options.run,
            episode=spec.id,
            sender="gm",
            game=spec.game,
            spec=self.result.spec_json,
        )
        await self._emit(self._events_topic, started)
        await self._advance()

    def _recall(self, role: str) -> list[MemoryEntry]:
        """What ``role`` remembers of the earlier episodes of its key, as the prompt shows it."""
        across = self.spec.memory[role].across
        store = self.options.memory_store
        assert across is not None
        if store is None:
            raise RuntimeError("no memory store is open for memory across episodes")
        earlier = store.before(self.spec.memory_keys()[role], self.spec.position, across.k)
        text = render(earlier, across.policy, across.max_tokens)
        return [MemoryEntry("memory", False, (TextPart(text=text),))] if text else []

    async def _keep_memories(self) -> None:
        """At the end: each role with ``notes`` writes its note (one more call of its policy,
        recorded like a turn), and every role with memory across episodes leaves what it
        keeps of this episode in ``result.memories`` (written by the scheduler)."""
        result = self.result
        keys = self.spec.memory_keys()
        if not keys or result.outcome not in ("success", "lost", "aborted", "error"):
            return
        for actor in self.actors:
            if not isinstance(actor, _AgentActor) or actor.agent.role not in keys:
                continue
            agent = actor.agent
            across = self.spec.memory[agent.role].across
            if across is not None and across.policy == "notes" and result.outcome != "error":
                await self._write_note(agent)
            result.memories.append(
                EpisodeMemory(
                    keys[agent.role],
                    self.spec.id,
                    self.spec.seed,
                    self.spec.repetition,
                    tuple(agent.log or ()),
                    result.outcome,
                    result.main_score,
                )
            )

    async def _write_note(self, agent: Agent) -> None:
        request = TurnRequest(
            run=self.options.run,
            episode=self.spec.id,
            sender="gm",
            recipient=agent.role,
            turn=self.requests + 1,
            role=agent.role,
        )
        try:
            response = await agent.write_note(request, self.result.outcome, self.result.main_score)
        except Exception as exc:  # the episode is over: its result stands, without the note
            log.warning("episode %s: %s wrote no note: %s", self.spec.id, agent.role, exc)
            await self._emit(
                self._events_topic,
                self._note(f"{agent.role} wrote no memory note: {type(exc).__name__}: {exc}"),
            )
            return
        response.raw = {**(response.raw or {}), "memory_note": True}
        self.result.transcript.append(response)
        self._count(response)

    async def _release(self) -> None:
        await self.host.stop_all(self.actors)
        if self._gm_host is not None:
            await self._gm_host.stop_all(self.actors)
        for actor in self.actors:
            if isinstance(actor, _AgentActor):
                actor.agent.forget()
                await actor.agent.policy.aclose()
            elif isinstance(actor, _SeatActor):
                await actor.close()
        self.actors = []
        if self._turn_span is not None:
            self._turn_span.end()
            self._turn_span = None

    def cancel(self, reason: str = "run interrupted") -> None:
        self._finish("cancelled", reason, ReasonCode.CANCELLED)

    def abort(self, reason: str = "") -> None:
        """End the episode now as ``aborted`` (``operator_abort``): someone watching stopped it."""
        self._finish(
            "aborted",
            f"aborted from the dashboard: {reason}" if reason else "aborted from the dashboard",
            ReasonCode.OPERATOR_ABORT,
        )

    def end_outside(self, reason: str, code: ReasonCode) -> None:
        """End the episode now as ``aborted`` for a reason outside the game (a seat's person
        timed out or left): like an operator's abort, it gets no main score."""
        self._finish("aborted", reason, code)

    def fail(
        self,
        reason: str,
        exc: BaseException | None,
        *,
        code: ReasonCode = ReasonCode.EXCEPTION,
    ) -> None:
        if self.done.done():
            return
        if exc is not None:
            self.result.error = "".join(traceback.format_exception(exc))
        self._finish("error", reason, code)

    def _actor_failed(self, actor: Actor, exc: BaseException) -> None:
        who = actor.agent.role if isinstance(actor, _AgentActor) else "game master"
        calls = getattr(exc, "calls", None)  # a model call that gave up (ModelUnavailable)
        if calls and isinstance(actor, _AgentActor) and not self.done.done():
            self._count_calls(who, calls)
        # A model call's own code (context_exceeded) where it has one; a server's reply that
        # is no reply (too large, redirected away) its own; else the runtime's.
        code = getattr(exc, "reason_code", None)
        if code is None and calls and calls[-1].get("outcome") in _BAD_RESPONSES:
            code = ReasonCode.BAD_RESPONSE
        self.fail(
            f"{who} failed: {type(exc).__name__}: {exc}",
            exc,
            code=ReasonCode(code) if code in _CODES else ReasonCode.EXCEPTION,
        )

    def _finish(self, outcome: str, reason: str, code: ReasonCode | None) -> None:
        if self.done.done():
            return
        result = self.result
        result.outcome = outcome
        result.reason = reason
        result.reason_code = None if code is None else ReasonCode(code).value
        if self.gm is not None and outcome in ("success", "lost", "aborted"):
            scores = Scores.of(self.gm.scores())
            # An episode stopped from outside has no main score, whatever the game thinks of
            # its position (clembench's convention for aborted episodes).
            operator = code in _FROM_OUTSIDE
            result.main_score = None if operator else scores.main
            result.scores = dict(scores)
            result.role_results = {} if operator else dict(self.gm.role_results)
        self.done.set_result(None)

    async def _publish_finished(self) -> None:
        finished = EpisodeFinished(
            run=self.options.run,
            episode=self.spec.id,
            sender="gm",
            game=self.spec.game,
            outcome=self.result.outcome,  # type: ignore[arg-type]
            scores=self.result.scores,
            turns=self.result.turns,
            reason=self.result.reason,
            reason_code=self.result.reason_code,
            main_score=self.result.main_score,
            role_results=self.result.role_results,
        )
        if self.options.signer is not None:
            try:
                finished.signature = self.options.signer.sign(finished)
            except SigningError as exc:  # observers will drop it; the record still counts
                log.warning("episode %s: result not signed: %s", self.spec.id, exc)
        self.result.transcript.append(finished)
        # The record is what counts; observers may miss this one if the bus fails.
        with contextlib.suppress(Exception):
            await self.bus.publish(topics.results(self.options.run), finished)

    # --- the game's state, for dashboards ---------------------------------------------------

    async def _publish_state(self, view: ObserverView) -> None:
        """The observer's view after a step, retained on the state topic (``state: every_step``)."""
        state = self._state_update(view, final=False)
        # Not local: the retained state is for observers in other processes too.
        await self.bus.publish(self._state_topic_of(state), state, retain=True)

    async def _publish_final_state(self) -> None:
        """The last state, with the episode's scores; then the retained one is cleared.

        Its view is the one drawn with the game's last turn (the game is over, nothing changes
        it); an episode ended from outside (aborted, timed out, cancelled, failed) may still
        have a call into the game running in its thread, so the game is not asked again."""
        if not self._state_on or self.gm is None:
            return
        view = self._last_view or ObserverView()
        result = self.result
        # Like the results, this is for observers only: a failing bus must not fail the record.
        with contextlib.suppress(Exception):
            state = self._state_update(view, final=True)
            state.scores = {"main": result.main_score, **result.scores}
            topic = self._state_topic_of(state)
            await self.bus.publish(topic, state)
            if self.options.state == "every_step":
                await self.bus.clear_retained(topic)

    def _state_topic_of(self, state: StateUpdate) -> str:
        """A state that shows what a role keeps from others goes where spectators cannot read."""
        if state.visibility == Visibility.PRIVATE:
            return topics.private_state(self.options.run, self.spec.id)
        return self._state_topic

    def _next_turn_and_view(self) -> tuple[Turn | None, ObserverView | None]:
        """The game's next turn and, where states are published, its observer view now: one
        call into the game (one trip to a worker thread, for a game that offloads)."""
        assert self.gm is not None
        turn = self.gm.next_turn()
        wanted = self.options.state == "every_step" or turn is None  # "end": the last only
        if not self._state_on or not wanted:
            return turn, None
        try:
            view = self.gm.observer_view(self.options.state_images)
        except Exception as exc:
            # A view that cannot be drawn costs the dashboard its board, not the episode.
            log.warning(
                "episode %s: no observer view (%s: %s)", self.spec.id, type(exc).__name__, exc
            )
            self._state_on = False
            return turn, None
        self._last_view = view
        return turn, view

    def _state_update(self, view: ObserverView, *, final: bool) -> StateUpdate:
        sent = self.options.sent_images
        if len(sent) > MAX_SENT_IMAGES:
            sent.clear()
        content: list[TextPart | ImagePart] = [TextPart(text=view.text)]
        for data in view.images:
            # A game that keeps its picture (COMMA) hands the same bytes again: hash them once.
            last = self._last_image
            image = last[1] if last is not None and last[0] is data else ImagePart.from_bytes(data)
            self._last_image = (data, image)
            if self._images_by_reference:
                if image.sha256 in sent:
                    image = image.by_reference()
                else:
                    sent.add(image.sha256)
            content.append(image)
        step, self._state_step = self._state_step, self._state_step + 1
        return StateUpdate(
            run=self.options.run,
            episode=self.spec.id,
            sender="gm",
            turn=self.requests,
            game=self.spec.game,
            step=step,
            final=final,
            content=content,
            visibility=Visibility(view.visibility),
            progress=view.progress,
            scores=dict(view.scores),
            data=view.data,
        )

    # --- the turn loop ---------------------------------------------------------------------

    async def _emit_event(self, event: TranscriptEvent) -> None:
        """A transcript event on its topic: private ones only where their role (and the run's own
        processes) may read them, never on the events topic every observer reads."""
        if event.visibility != Visibility.PRIVATE:
            await self._emit(self._events_topic, event)
            return
        owner = event.from_role if event.from_role not in _NOT_ROLES else event.to_role
        await self._emit(topics.private(self.options.run, self.spec.id, owner or "gm"), event)

    async def _emit(
        self, topic: str, message: Message, *, local: bool = False, retain: bool = False
    ) -> None:
        self.result.transcript.append(message)
        await self.bus.publish(topic, message, local=local, retain=retain)

    async def _advance(self) -> None:
        gm = self.gm
        assert gm is not None
        try:
            if self._offload:
                turn, view = await self._gm_call(self._next_turn_and_view)
            else:
                turn, view = self._next_turn_and_view()
        except Exception as exc:
            self.fail(f"game master failed: {type(exc).__name__}: {exc}", exc)
            return
        if self.done.done():  # cancelled while the game master worked
            return
        if view is not None and turn is not None:  # at the end, the final state follows
            await self._publish_state(view)
        # What the game recorded while preparing the turn (a question put, a target noted)
        # goes into the transcript before the request it belongs to.
        for event in gm.drain_events():
            await self._emit_event(self._transcript_event(event))
        if turn is None:
            if gm.outcome is None:  # a game that stops without ending itself
                gm.end("lost", "the game master had no next turn", code=ReasonCode.NO_TURN)
            self._finish(gm.outcome or "lost", gm.reason, gm.reason_code)
            return
        self.expected = turn.role
        self.requests += 1
        images = self.result.images
        system = None
        if turn.role not in self.system_sent:
            system = gm.system_prompt(turn.role)
            self.system_sent.add(turn.role)
        request = turn_request(
            turn,
            run=self.options.run,
            episode=self.spec.id,
            n=self.requests,
            system=system,
            images=images,
        )
        seat = turn.role in self.seats
        if seat and self.seats[turn.role].timeout_s is not None:
            request.deadline = time.time() + float(self.seats[turn.role].timeout_s or 0)
        inbox = self._inboxes.get(turn.role)
        if inbox is None:
            inbox = self._inboxes[turn.role] = topics.agent_inbox(
                self.options.run, self.spec.id, turn.role
            )
        # A seat's dashboard may be another process: its requests reach the broker, retained,
        # so that a seat opened (or opened again) later still gets its turn.
        local = not (self.options.mirror_turns or seat)
        if not tracing.enabled():  # untraced: no turn span (see _AgentActor.handle)
            await self._emit(inbox, request, local=local, retain=seat)
            return
        self._turn_span = tracing.child_span(
            self._episode_span,
            f"turn {self.requests} {turn.role}",
            {
                "parley.episode": self.spec.id,
                "parley.turn": self.requests,
                "parley.role": turn.role,
            },
        )
        # trace.use_span's behaviour without a generator-based context manager on every turn;
        # the bus stamps the request with the turn span's traceparent.
        with UseSpan(self._turn_span, end_on_exit=False, record=True, set_status=True):
            await self._emit(inbox, request, local=local, retain=seat)

    async def on_response(self, response: TurnResponse, seat_role: str | None = None) -> None:
        """Apply a reply; ``seat_role``: the role whose seat topic it came on, if one did."""
        if self.done.done():
            return
        if response.sender != response.role or (
            seat_role is not None and (seat_role != response.role or seat_role not in self.seats)
        ):
            # A role's agent (agents/agent.py) and its seat (dashboard/seats.py) send its
            # replies as that role, a seat on its role's own topic (which a secure broker lets
            # only that seat write): anything else in the game master's inbox (another seat, a
            # program on the broker) is not its player, whatever role and turn it names.
            self.result.refused_replies += 1
            came = f" on the seat topic of {seat_role[:60]!r}" if seat_role is not None else ""
            await self._emit(
                self._events_topic,
                self._note(
                    f"refused a reply for {response.role[:60]!r} sent by "
                    f"{response.sender[:60]!r}{came}: only the role's own player answers its turns"
                ),
            )
            return
        if response.role != self.expected or response.turn != self.requests:
            await self._emit(
                self._events_topic, self._note(f"ignored an unexpected reply from {response.role}")
            )
            return
        seat = self.seats.get(response.role)
        if seat is not None:
            await seat.replied()
            left = (response.raw or {}).get("left")
            if left:  # the seat stayed empty past its rejoin time (observability/.../seats.py)
                self.result.transcript.append(response)
                self._end_turn()
                self.end_outside(str(left), ReasonCode.HUMAN_LEFT)
                return
        self.result.transcript.append(response)
        self.result.turns += 1
        self._count(response)
        text = response.text
        if len(text) > self.options.max_reply_chars:
            text = text[: self.options.max_reply_chars]
            await self._emit(
                self._events_topic,
                self._note(
                    f"reply of {response.role} cut to {self.options.max_reply_chars} characters"
                ),
            )
        gm = self.gm
        assert gm is not None
        try:
            if self._offload:
                await self._gm_call(gm.on_reply, response.role, text)
            else:  # called in place: no coroutine to make and await on every turn
                gm.on_reply(response.role, text)
            events = gm.drain_events()
        except Exception as exc:
            self._end_turn()
            self.fail(f"game master failed on a reply: {type(exc).__name__}: {exc}", exc)
            return
        for event in events:
            await self._emit_event(self._transcript_event(event))
        self._end_turn()
        await self._advance()

    def _end_turn(self) -> None:
        """End the turn's span, after its events went out (they belong to the turn)."""
        span, self._turn_span = self._turn_span, None
        if span is None:
            return
        if self.gm is not None and self.gm.outcome is not None:
            span.set_attribute("parley.outcome", self.gm.outcome)
        span.end()

    def _count(self, response: TurnResponse) -> None:
        role = response.role
        self.result.model_time_s += response.latency_s
        tokens = self.result.tokens.setdefault(role, {"input": 0, "output": 0})
        if response.usage is not None:
            tokens["input"] += response.usage.input_tokens
            tokens["output"] += response.usage.output_tokens
            source = response.usage.source
        else:
            # Without a backend's usage only what the role wrote is counted (COMMA's measure).
            tokens["output"] += count_tokens(response.text)
            source = "counted"
        previous = self.result.token_source.get(role)
        self.result.token_source[role] = source if previous in (None, source) else "mixed"
        if response.calls:
            self._count_calls(role, response.calls)

    def _count_calls(self, role: str, calls: list[dict[str, Any]]) -> None:
        """Per role: model requests, attempts, retries by cause, time spent in calls, and
        (when there were any) characters repaired in replies and replies cut.

        ``calls`` are the attempts of one request in order; a failed attempt is a retry only
        when another attempt followed it (the last one of a request that gave up, or a refusal
        that is never tried again, is not). A request never sent (a prompt over the context)
        makes no attempt: it counts as ``not_sent``; replies outside the legal set under a
        constraint that was sent count as ``not_honoured``."""
        stats = self.result.model_calls.setdefault(
            role, {"requests": 0, "attempts": 0, "retries": {}, "call_s": 0.0}
        )
        stats["requests"] += 1
        for n, call in enumerate(calls, 1):
            if call.get("sent") is False:
                # Never sent (a prompt over the context): no attempt was made.
                stats["not_sent"] = stats.get("not_sent", 0) + 1
                continue
            stats["attempts"] += 1
            outcome = call.get("outcome", "ok")
            if outcome != "ok" and n < len(calls):
                stats["retries"][outcome] = stats["retries"].get(outcome, 0) + 1
            stats["call_s"] = round(stats["call_s"] + float(call.get("latency_s") or 0.0), 4)
            # Replies that were not valid text, or too long (agents/backends/formats.py).
            if call.get("repaired"):
                stats["repaired"] = stats.get("repaired", 0) + int(call["repaired"])
            if call.get("cut"):
                stats["cut"] = stats.get("cut", 0) + 1
            # Reasoning tokens (part of the output) and prompt-cache reads/writes (apart from
            # the input, priced apart), and replies replayed from the response cache.
            extra = call.get("usage") or {}
            for key in ("reasoning", "cache_read", "cache_write"):
                if extra.get(key):
                    tokens = self.result.tokens.setdefault(role, {"input": 0, "output": 0})
                    tokens[key] = tokens.get(key, 0) + int(extra[key])
            if call.get("cached"):
                stats["cached"] = stats.get("cached", 0) + 1
            # Replies held to the legal actions, or asked to be and not expressible
            # (agents/backends/constrain.py); replies served from a batch (batch.py).
            if "constrained" in call:
                key = "constrained" if call["constrained"] else "unconstrained"
                stats[key] = stats.get(key, 0) + 1
            # A constraint that was sent and a reply outside the legal set: the server did not
            # apply it (a field it does not know, ignored).
            if call.get("constraint_honoured") is False:
                stats["not_honoured"] = stats.get("not_honoured", 0) + 1
            if call.get("batch_fallback"):
                stats["batch_fallback"] = stats.get("batch_fallback", 0) + 1
            if call.get("batch"):
                batch = stats.setdefault("batch", {"requests": 0, "input": 0, "output": 0})
                batch["requests"] += 1
                batch["input"] += int((call.get("usage") or {}).get("input", 0))
                batch["output"] += int((call.get("usage") or {}).get("output", 0))

    def _note(self, text: str) -> TranscriptEvent:
        return TranscriptEvent(
            run=self.options.run,
            episode=self.spec.id,
            sender="gm",
            turn=self.requests,
            event="note",
            from_role="gm",
            visibility=Visibility.PUBLIC,
            content=[TextPart(text=text)],
        )

    def _transcript_event(self, event: Event) -> TranscriptEvent:
        message = TranscriptEvent(
            run=self.options.run,
            episode=self.spec.id,
            sender="gm",
            turn=self.requests,
            event=event.kind,
            from_role=event.role,
            to_role=event.to,
            visibility=event.visibility,  # type: ignore[arg-type]
            data=event.data,
        )
        # Assigned, not validated again (as in turn_request).
        message.content = _parts(event.text, event.images, self.result.images)
        return message
