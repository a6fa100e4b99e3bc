"""A bus wrapper that traces publishing: PRODUCER spans, and a traceparent on every message.

``TracedBus(inner)`` behaves as ``inner`` (any transport) in every respect except ``publish``:

- a message of a kind in ``span_kinds`` (by default the turn's own messages — turn requests and
  responses — and the episode's start and end, jobs and control) gets a ``publish {topic}``
  PRODUCER span, child of the span that sends it, and carries that span's traceparent;
- any other message (transcript events, state updates: several per turn, read only by
  observers) carries the traceparent of the span that sends it, without a span of its own —
  a span per event would double the cost of tracing a turn for little insight.

"The span that sends it" is the current span when one is active (an actor's handler runs in
its receive span), else the span the message's own ``traceparent`` names (the game master
stamps a turn request with its turn span). The receiving side opens CONSUMER spans under the
message's traceparent (:func:`parley.observability.tracing.consume`, used by the actor host), so a
turn is one connected trace — also through a broker and in another process, since the
traceparent travels inside the message (and, over MQTT 5, as a user property).
"""

from __future__ import annotations

from collections.abc import Awaitable, Collection
from typing import Any, Self

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanKind

from parley.bus.base import Bus, BusStats, Router, SharedScope, Subscription
from parley.bus.messages import Message
from parley.observability import tracing
from parley.observability.light_spans import LightTracer, current_span

# The run's tracing (tracing.current() without its call: this runs for every message).
_active_tracing = tracing._active.get

DEFAULT_SPAN_KINDS = frozenset(
    {
        "turn_request",
        "turn_response",
        "episode_started",
        "episode_finished",
        "control",
        "job",
        "job_result",
    }
)


def messaging_system(bus: Bus) -> str:
    """The ``messaging.system`` value of a transport."""
    name = type(bus).__name__.lower()
    return "mqtt" if "mqtt" in name else "parley.local"


class TracedBus(Bus):
    """``inner`` with publish spans; subscriptions, stats and lifecycle are ``inner``'s own."""

    def __init__(self, inner: Bus, *, span_kinds: Collection[str] = DEFAULT_SPAN_KINDS) -> None:
        # No Bus.__init__: routing state lives in ``inner`` (exposed through the properties).
        self.inner = inner
        self.span_kinds = frozenset(span_kinds)
        self.system = messaging_system(inner)

    # --- what stays inner's ---------------------------------------------------------------------

    @property
    def router(self) -> Router:  # type: ignore[override]
        return self.inner.router

    @property
    def stats(self) -> BusStats:  # type: ignore[override]
        return self.inner.stats

    @property
    def closed(self) -> bool:  # type: ignore[override]
        return self.inner.closed

    def subscribe(self, topic_filter: str, **options: Any) -> Subscription:
        return self.inner.subscribe(topic_filter, **options)

    def outage_s(self) -> float:
        return self.inner.outage_s()

    async def deliver_local(
        self, topic: str, message: Message, *, shared: SharedScope = "all"
    ) -> None:
        await self.inner.deliver_local(topic, message, shared=shared)

    async def _unsubscribe(self, sub: Subscription) -> None:
        await self.inner._unsubscribe(sub)

    async def close(self) -> None:
        await self.inner.close()

    async def __aenter__(self) -> Self:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        # Transport-specific extras (MqttBus.start, .host, .port …).
        return getattr(self.inner, name)

    # --- publishing -------------------------------------------------------------------------------

    @property
    def retained(self) -> dict[str, Message]:  # type: ignore[override]
        return self.inner.retained

    async def clear_retained(self, topic: str) -> None:
        await self.inner.clear_retained(topic)

    def publish(  # type: ignore[override]
        self,
        topic: str,
        message: Message,
        *,
        qos: int = 1,
        local: bool = False,
        retain: bool = False,
    ) -> Awaitable[None]:
        """Stamp ``message`` and hand it on: inner's own publish (awaitable) is returned as it
        is, so a traced message costs no coroutine of its own — but a publish span's, which
        ends when the message is out."""
        active = _active_tracing()
        if not active.enabled:
            return self.inner.publish(topic, message, qos=qos, local=local, retain=retain)
        spans = active.message_spans and message.kind in self.span_kinds
        current = current_span()
        parent = current.get_span_context()
        if parent.is_valid:
            if not spans:
                traceparent = tracing.inject(current)
                if message.traceparent != traceparent:
                    message.traceparent = traceparent
                return self.inner.publish(topic, message, qos=qos, local=local, retain=retain)
        else:
            # No span sends it: the message's own traceparent names its sender, and it
            # goes as it came — with no span of its own, or under a publish span.
            remote = tracing.span_context(message.traceparent) if spans else None
            if remote is None:
                return self.inner.publish(topic, message, qos=qos, local=local, retain=retain)
            parent = remote
        tracer = active.tracer
        name = f"publish {tracing.topic_template(topic)}"
        attributes = tracing.messaging_attributes(topic, message, "publish", self.system)
        if type(tracer) is LightTracer:  # the parent as it is, without a context to carry it
            span = tracer.start_child(name, parent, SpanKind.PRODUCER, attributes)
        else:
            context = trace.set_span_in_context(NonRecordingSpan(parent))
            span = tracer.start_span(name, context, SpanKind.PRODUCER, attributes)
        message.traceparent = tracing.inject(span)
        return self._publish_in(span, topic, message, qos, local, retain)

    async def _publish_in(
        self, span: trace.Span, topic: str, message: Message, qos: int, local: bool, retain: bool
    ) -> None:
        # Not made current: nothing inside starts spans, and attaching a context costs.
        try:
            await self.inner.publish(topic, message, qos=qos, local=local, retain=retain)
        except BaseException as exc:
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            span.end()
