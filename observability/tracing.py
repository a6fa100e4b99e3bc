"""OpenTelemetry setup: a JSONL span file in the run folder, and OTLP when OTEL_* asks for it.

One :class:`Tracing` per run holds a tracer provider (spans) and a meter provider (metrics);
``activate()`` makes it what :func:`tracer`, :func:`consume` and :func:`record_episode` use.
The active one is carried by a context variable, not a module global: ``activate()`` sets it in
the task that calls it, every task started from there on (the run's episodes, actors, bus and
writer) inherits it, and a run in another task of the same process sees its own. So two runs
in one process, one after the other or at once, each trace to their own folder.
Both signals go to files in the run folder (``traces.jsonl``, ``metrics.jsonl``) and, when an
OTLP endpoint is configured through the standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
the per-signal ``OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT``, protocol from
``OTEL_EXPORTER_OTLP[_{SIGNAL}]_PROTOCOL``: ``http/protobuf`` by default, or ``grpc``), to that
collector as well. ``OTEL_TRACES_EXPORTER=none`` / ``OTEL_METRICS_EXPORTER=none`` turn OTLP off
for one signal.

Spans of one episode form one trace (see ``docs/observability.md``)::

    episode {game}                          (root; linked to the run span)
    └─ turn {n} {role}
       └─ publish …/agent/{role}            PRODUCER: the TurnRequest carries its traceparent
          └─ receive …/agent/{role}         CONSUMER: where the agent's actor takes it
             └─ invoke_agent {role}
                ├─ chat {model}             CLIENT, GenAI conventions (model players)
                └─ publish …/gm             PRODUCER: the TurnResponse
                   └─ receive …/gm          CONSUMER: the game master applies the reply

The publish/receive pairs are the bus spans (``tracing: {messages: false}`` leaves them out:
messages still carry traceparents, a turn costs four spans less). Every message carries the
traceparent of the span that sent it, so a consumer in another process — over MQTT, where it
also travels as a user property — continues the same trace. Message text goes into spans only
when the run opts in (``tracing: {content: true}``); images are referenced by sha256, never
inlined. ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` with ``OTEL_TRACES_SAMPLER_ARG``
samples whole episodes.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from parley.observability import light_spans
from parley.observability.light_spans import (
    LightSpan,
    LightTracer,
    UseSpan,
    current_span,
    known,
    remember,
    stamp,
)
from parley.observability.otlp_json import TRACES_FILE, OtlpJsonSpanWriter
from parley.records import EpisodeRecord

# A run folder's metric exports (observability/metrics.py writes them).
METRICS_FILE = "metrics.jsonl"

if TYPE_CHECKING:
    from parley.bus.base import Bus
    from parley.observability.metrics import RunMetrics

_PROPAGATOR = TraceContextTextMapPropagator()


class OffTracer(trace.NoOpTracer):
    """The tracer when tracing is off: hands out the invalid span without touching the
    OpenTelemetry context (the API's no-op tracer still attaches and detaches a context for
    every ``start_as_current_span``, which costs on every turn)."""

    _current = contextlib.nullcontext(trace.INVALID_SPAN)

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return trace.INVALID_SPAN

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._current


def _kept(attributes: Any) -> Any:
    """``attributes`` without None values: parley's spans leave an unknown value out, and
    SDK releases differ on what they do with None (some warn and drop it, some keep it)."""
    if attributes and None in attributes.values():
        return {k: v for k, v in attributes.items() if v is not None}
    return attributes


class PublicSpan(trace.Span):
    """An SDK span as parley's code uses it on the public path: None attribute values left
    out, as the lean spans do; everything else is the SDK span's (its processors get it)."""

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    @property
    def attributes(self) -> Any:
        return getattr(self.span, "attributes", None)

    def end(self, end_time: int | None = None) -> None:
        self.span.end(end_time)

    def get_span_context(self) -> SpanContext:
        return self.span.get_span_context()

    def set_attributes(self, attributes: Any) -> None:
        if attributes:
            self.span.set_attributes(_kept(attributes))

    def set_attribute(self, key: str, value: Any) -> None:
        if value is not None:
            self.span.set_attribute(key, value)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        self.span.add_event(name, _kept(attributes), timestamp)

    def add_link(self, context: SpanContext, attributes: Any = None) -> None:
        self.span.add_link(context, _kept(attributes))

    def update_name(self, name: str) -> None:
        self.span.update_name(name)

    def is_recording(self) -> bool:
        return self.span.is_recording()

    def set_status(self, status: Any, description: str | None = None) -> None:
        self.span.set_status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Any = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self.span.record_exception(exception, _kept(attributes), timestamp, escaped)

    def __repr__(self) -> str:
        return f"PublicSpan({self.span!r})"


class PublicTracer(trace.Tracer):
    """The SDK's tracer, its spans as :class:`PublicSpan` s."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def start_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        if links:
            links = [trace.Link(link.context, _kept(link.attributes)) for link in links]
        span = self.tracer.start_span(
            name,
            context,
            kind,
            _kept(attributes),
            links,
            start_time,
            record_exception,
            set_status_on_exception,
        )
        return PublicSpan(span) if span.is_recording() else span

    def start_as_current_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Any:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        return UseSpan(span, end_on_exit, record_exception, set_status_on_exception)


# The key under which the current model call finds its conversation (the episode id); read by
# agents/backends/client.py through the OpenTelemetry baggage API, so agents need not import
# this module.
CONVERSATION_KEY = "gen_ai.conversation.id"
# Whether chat spans record the conversation (read by agents/backends/spans.py, the same way).
CONTENT_KEY = "parley.content"


def current() -> Tracing:
    """The tracing of the run this code runs in (one with tracing off outside any run)."""
    return _active.get()


def tracer() -> trace.Tracer:
    """The tracer of the run in progress (a no-op one when tracing is off)."""
    return _active.get().tracer


def record_content() -> bool:
    """Whether the run opted in to message content in spans."""
    return _active.get().content


def enabled() -> bool:
    """Whether a run with tracing on is active (cheap check for hot paths)."""
    return _active.get().enabled


def message_spans() -> bool:
    """Whether bus messages get publish and receive spans (``tracing: {messages: …}``)."""
    return _active.get().message_spans


# --- the span file ------------------------------------------------------------------------------


def read_spans(path: str | Path) -> list[dict[str, Any]]:
    """The spans of a run folder's ``traces.jsonl``, of that file, or of a folder of OTLP JSON
    files, each as a flat dict (see :mod:`parley.observability.otlp_json`); torn lines skipped,
    older run folders' lines (one flat span each) read as they are."""
    from parley.observability.otlp_json import read_trace_set

    return read_trace_set(path)


# --- OTLP through the standard variables ---------------------------------------------------------


def otlp_settings(signal: str) -> tuple[bool, str]:
    """Whether OTLP is configured for ``signal`` (``traces`` or ``metrics``), and its protocol."""
    upper = signal.upper()
    if os.environ.get(f"OTEL_{upper}_EXPORTER", "").strip().lower() == "none":
        return False, ""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False, ""
    configured = bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get(f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT")
    )
    protocol = (
        os.environ.get(f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    return configured, protocol


def _otlp_exporter() -> SpanExporter | None:
    configured, protocol = otlp_settings("traces")
    if not configured:
        return None
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()


class EpisodeSampler(Sampler):
    """Records a share of the episodes, each whole: the same episodes every time a config runs.

    An episode's span is the root of its trace; whether it is recorded is decided from its
    episode id (a stable hash against ``share``), and every span under it (turns, agents, model
    calls, on whichever process) follows its parent's decision through the traceparent. Other
    root spans (the run) are always recorded. A span not recorded costs far less than one that is.
    """

    def __init__(self, share: float) -> None:
        self.share = share

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if parent.is_valid:
            keep = parent.trace_flags.sampled
        else:
            episode = (attributes or {}).get("parley.episode")
            keep = episode is None or zlib.crc32(str(episode).encode()) < self.share * 2**32
        if keep:
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
        return SamplingResult(Decision.DROP)

    def get_description(self) -> str:
        return f"EpisodeSampler({self.share})"


class Tracing:
    """Tracer and meter providers for one run; ``close()`` flushes every exporter.

    ``activate()`` makes it the tracing of the calling task and of the tasks it starts::

        tracing = Tracing(run_dir, content=False)
        tracing.activate()
        try:
            ...  # play the run: tracer(), consume() and record_episode() use this one
        finally:
            tracing.close()
    """

    def __init__(
        self,
        run_dir: str | Path | None,
        *,
        enabled: bool = True,
        content: bool = False,
        service: str = "parley",
        attributes: dict[str, Any] | None = None,
        metrics: bool = True,
        messages: bool = True,
        sample: float = 1.0,
        processors: Sequence[SpanProcessor] = (),
    ) -> None:
        """``processors``: span processors beyond the run folder's file and OTLP (an
        exporter of the caller's own), flushed and shut down with the others."""
        self.provider: TracerProvider | None = None
        self.content = content
        self.messages = messages
        self.enabled = enabled
        self.message_spans = enabled and messages
        self.metrics: RunMetrics | None = None
        self._token: contextvars.Token[Tracing] | None = None
        if not enabled:
            self.tracer: trace.Tracer = OffTracer()
            return
        resource = Resource.create({"service.name": service, **(attributes or {})})
        # A share of episodes only, when asked (OTEL_TRACES_SAMPLER applies otherwise).
        sampler: Sampler | None = EpisodeSampler(sample) if sample < 1.0 else None
        self.provider = TracerProvider(resource=resource, sampler=sampler)
        chain: list[SpanProcessor] = []
        if run_dir is not None:
            # OTLP JSON lines, encoded and written by a thread of its own (otlp_json.py).
            chain.append(OtlpJsonSpanWriter(Path(run_dir) / TRACES_FILE))
        otlp = _otlp_exporter()
        if otlp is not None:
            chain.append(BatchSpanProcessor(otlp, max_queue_size=65536))
        chain.extend(processors)
        for processor in chain:  # the provider flushes and shuts them down
            self.provider.add_span_processor(processor)
        if light_spans.ACTIVE:
            # The accelerator's lean tracer (light_spans.py), which skips the SDK's per-span
            # checks and copies. A sampler only where one is asked for (the SDK's default
            # records all).
            if sampler is None and os.environ.get("OTEL_TRACES_SAMPLER"):
                sampler = self.provider.sampler
            self.tracer = LightTracer(resource, chain, sampler=sampler)
        else:  # the public path: the SDK's own spans, the same processors
            self.tracer = PublicTracer(self.provider.get_tracer("parley"))
        if metrics:
            from parley.observability.metrics import RunMetrics

            self.metrics = RunMetrics(run_dir, resource)

    def activate(self) -> None:
        """Make this the run's tracing in the current task and every task it starts."""
        self._token = _active.set(self)

    def wrap_bus(self, bus: Bus) -> Bus:
        """``bus`` with publish spans and traceparents on every message (when tracing is on)."""
        if self.provider is None:
            return bus
        from parley.observability.traced_bus import TracedBus

        return TracedBus(bus)

    def close(self) -> None:
        token, self._token = self._token, None
        if token is not None and _active.get() is self:
            try:
                _active.reset(token)  # whatever was active before, e.g. an enclosing run's
            except ValueError:  # closed in another context than it was activated in
                _active.set(_OFF)
        if self.provider is not None:
            self.provider.force_flush()
            self.provider.shutdown()
        if self.metrics is not None:
            self.metrics.close()


_OFF = Tracing(None, enabled=False)
# The tracing of the run the current task belongs to (asyncio copies it into every new task).
_active: contextvars.ContextVar[Tracing] = contextvars.ContextVar("parley_tracing", default=_OFF)


# --- traceparents --------------------------------------------------------------------------------


def inject(span: trace.Span) -> str | None:
    """The W3C traceparent of ``span`` (None for a non-recording, invalid one), for a message:
    a lean span's is kept with its context, for when the message comes back to this process."""
    if type(span) is LightSpan:
        return stamp(span)
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def span_context(traceparent: str | None) -> SpanContext | None:
    """The remote span context a traceparent names; None when absent or malformed."""
    if not traceparent:
        return None
    context = known(traceparent)
    if context is None:
        context = _parsed(traceparent)
        if context is not None:  # a span's traceparent comes back on every message it sent
            remember(traceparent, context)
    return context


def _parsed(traceparent: str) -> SpanContext | None:
    parts = traceparent.split("-")
    if not (
        len(parts) == 4
        and parts[0] == "00"
        and len(parts[1]) == 32
        and len(parts[2]) == 16
        and len(parts[3]) == 2
    ):
        return None
    try:
        trace_id = int(parts[1], 16)
        span_id = int(parts[2], 16)
        flags = int(parts[3], 16) & 0xFF
    except ValueError:
        return None
    trace_flags = _FLAGS[flags] if flags < 2 else TraceFlags(flags)
    context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace_flags)
    return context if context.is_valid else None  # ids out of range read as invalid


_FLAGS = (TraceFlags(TraceFlags.DEFAULT), TraceFlags(TraceFlags.SAMPLED))


def handler_span(name: str, traceparent: str | None, attributes: dict[str, Any]) -> Any:
    """The current span a message's handler works in (an agent's ``invoke_agent``), as a
    context manager: ``tracer().start_as_current_span(name, attributes=attributes)`` under the
    right parent.

    With message spans on, the actor host opened a receive span under the message's
    traceparent and made it current: the span goes under it. Without them, the traceparent
    itself (the sender's span: a turn request's turn span) is the parent — not whatever span
    happened to be current when the actor's task started (the episode's), so the hierarchy is
    episode → turn → invoke_agent on every transport. A message without a (valid)
    traceparent: under the current span.

    The lean tracer takes the parent's span context as it is: no OpenTelemetry context is
    built to carry it (this runs on every turn).
    """
    active = _active.get()
    parent: SpanContext | None = None
    if active.message_spans:
        parent = current_span().get_span_context()
        if not parent.is_valid:
            parent = None
    if parent is None:
        parent = span_context(traceparent)
    tracer = active.tracer
    if type(tracer) is LightTracer:
        if parent is None:
            parent = current_span().get_span_context()
        span = tracer.start_child(name, parent, SpanKind.INTERNAL, attributes)
        return UseSpan(span, True, True, True)
    context = None if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))
    return tracer.start_as_current_span(name, context=context, attributes=attributes)


def child_span(parent: trace.Span | None, name: str, attributes: dict[str, Any]) -> trace.Span:
    """A span under ``parent`` (None: under the current span), not made current: an episode's
    turn under its episode span. The lean tracer takes the parent's span context as it is."""
    tracer = _active.get().tracer
    if parent is not None and type(tracer) is LightTracer:
        return tracer.start_child(name, parent.get_span_context(), SpanKind.INTERNAL, attributes)
    context = trace.set_span_in_context(parent) if parent is not None else None
    return tracer.start_span(name, context=context, attributes=attributes)


@functools.lru_cache(maxsize=4096)
def topic_template(topic: str) -> str:
    """A topic with its run and episode levels as placeholders (span names stay few)."""
    parts = topic.split("/")
    if len(parts) >= 3 and parts[0] == "parley":
        parts[1] = "{run}"
        if len(parts) >= 4:
            parts[2] = "{episode}"
    return "/".join(parts)


def messaging_attributes(topic: str, message: Any, operation: str, system: str) -> dict[str, Any]:
    """OpenTelemetry messaging attributes of a publish or receive span (kept few: each costs
    the SDK time on every turn; episode, turn and role are on the spans around them)."""
    return {
        "messaging.system": system,
        "messaging.operation.type": "send" if operation == "publish" else "process",
        "messaging.destination.name": topic,
        "messaging.message.id": message.id,
    }


def consume(
    topic: str, message: Any, system: str = "parley.local"
) -> contextlib.AbstractContextManager:
    """A CONSUMER span around handling a delivered message, child of the span that sent it.

    A no-op when tracing is off or the message carries no (valid) traceparent, so an actor can
    wrap every delivery in it at no cost.
    """
    active = _active.get()
    if not active.message_spans:
        return contextlib.nullcontext()
    remote = span_context(getattr(message, "traceparent", None))
    if remote is None:
        return contextlib.nullcontext()
    name = f"receive {topic_template(topic)}"
    attributes = messaging_attributes(topic, message, "receive", system)
    tracer = active.tracer
    if type(tracer) is LightTracer:  # the parent as it is, without a context to carry it
        span = tracer.start_child(name, remote, SpanKind.CONSUMER, attributes)
    else:
        context = trace.set_span_in_context(NonRecordingSpan(remote))
        span = tracer.start_span(name, context, SpanKind.CONSUMER, attributes)
    # The handler's own spans (invoke_agent) record the exception; here the status says enough.
    return UseSpan(span, True, False, True)


def conversation_context(conversation_id: str) -> otel_context.Context:
    """The current context with the conversation id as baggage, for model-call spans, and
    (when the run records content) :data:`CONTENT_KEY`, so chat spans carry the messages."""
    from opentelemetry import baggage

    context = baggage.set_baggage(CONVERSATION_KEY, conversation_id)
    if _active.get().content:
        context = baggage.set_baggage(CONTENT_KEY, "1", context)
    return context


# --- content (opt-in) ----------------------------------------------------------------------------


def parts_json(parts: Sequence[Any]) -> list[dict[str, Any]]:
    """Content parts for a span: text as is, images by sha256 (never their bytes)."""
    out: list[dict[str, Any]] = []
    for part in parts:
        kind = getattr(part, "type", None)
        if kind == "text":
            out.append({"type": "text", "content": part.text})
        elif kind == "image":
            out.append(
                {
                    "type": "image",
                    "sha256": part.sha256,
                    "mime_type": part.media_type,
                    "size": part.size,
                }
            )
    return out


def content_attributes(prompt: Sequence[Any] | None, reply: str) -> dict[str, str]:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON, GenAI conventions)."""
    attributes: dict[str, str] = {}
    if prompt:
        messages = [{"role": m.role, "parts": parts_json(m.content)} for m in prompt]
        attributes["gen_ai.input.messages"] = orjson.dumps(messages).decode()
    attributes["gen_ai.output.messages"] = orjson.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": reply}]}]
    ).decode()
    return attributes


def episode_content(
    record: EpisodeRecord | dict[str, Any], transcript: Sequence[Any]
) -> dict[str, str]:
    """An episode's record (``parley.record``, JSON) and transcript (``parley.transcript``,
    JSON Lines, images by sha256) as attributes of its span, for runs that record content:
    an exported trace set then holds what ``parley leaks`` and ``parley errors`` read
    (:mod:`parley.observability.trace_runs`).

    The transcript is encoded as the run folder's (``encode_transcript``): the messages a
    turn's prompt shares with the role's earlier prompts are encoded once, not once a turn."""
    from parley.bus.codec import PayloadTooLarge, encode, encode_transcript

    data = record.json_dict() if isinstance(record, EpisodeRecord) else record
    kept = {k: v for k, v in data.items() if k != "transcript"}  # a byte range of the folder
    try:
        lines = encode_transcript(transcript).rstrip(b"\n")
    except PayloadTooLarge:  # a span takes what the folder's size limit refuses
        lines = b"\n".join(encode(m, inline_images=False, max_bytes=2**62) for m in transcript)
    return {
        "parley.record": orjson.dumps(kept, default=str).decode(),
        "parley.transcript": lines.decode("utf-8"),
    }


# --- metrics ------------------------------------------------------------------------------------


def record_episode(result: Any) -> None:
    """Count a finished episode in the run's metrics (episodes, turns, tokens, latencies)."""
    metrics = _active.get().metrics
    if metrics is not None:
        metrics.record_episode(result)


def record_summary(summary: dict[str, Any]) -> None:
    """Count an episode that finished in a worker process, from its ``episode_summary``."""
    metrics = _active.get().metrics
    if metrics is not None:
        metrics.record(summary)
