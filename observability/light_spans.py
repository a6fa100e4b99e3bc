"""The OpenTelemetry accelerator: a lean tracer for the run's own spans.

This is the one module of parley that reaches into the OpenTelemetry SDK's and API's
internals (``ReadableSpan``'s fields, the API's context key and context variable). It is used
only where :data:`ACTIVE` is true: the installed ``opentelemetry-api`` and
``opentelemetry-sdk`` lie in :data:`TESTED` (the range the differential tests ran on), the
runtime context is the API's usual context variable, and ``PARLEY_OTEL_FAST`` is not ``0``.
Otherwise parley traces through the SDK's own ``TracerProvider`` tracer and the public API,
which give the same spans, and the log says why once: at debug level for a supported release
outside :data:`TESTED` (an ordinary install), as a warning where ``PARLEY_OTEL_FAST=1`` asked
for the accelerator or where a tested release lacks what it expects (nothing for
``PARLEY_OTEL_FAST=0``).

Why it exists: the SDK's tracer does per span what parley's spans do not need. It checks and
copies every attribute (``BoundedAttributes``), takes a lock per attribute set, asks a
sampler for spans that always record, and copies the span into a fresh ``ReadableSpan`` when
it ends; a traced model request makes several spans.

:class:`LightTracer` hands out :class:`LightSpan` objects: real ``trace.Span`` s for the API
(context propagation, ``use_span``, traceparents) that are at the same time SDK
``ReadableSpan`` s, so they go as they are to any SDK span processor — the run's OTLP JSON
writer, or a ``BatchSpanProcessor`` with the OTLP exporter. Attributes are taken as given:
parley's own code sets them, with the types OpenTelemetry allows (``None`` values dropped).
Sampling follows the parent (a span under an unsampled parent records nothing) and, for
roots, an optional sampler (the episode sampler).
"""

from __future__ import annotations

import logging
import os
import random
import time
import traceback
from collections.abc import Iterator, Sequence
from importlib import metadata
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.sampling import Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util import types

log = logging.getLogger("parley.observability.tracing")

# The OpenTelemetry releases (api and sdk, [low, high)) the accelerator was tested on; a
# release outside it may lay out spans or contexts differently, so the public path is used.
TESTED = ((1, 25), (1, 46))
FORCE_PUBLIC_VARIABLE = "PARLEY_OTEL_FAST"


def _release(package: str) -> tuple[int, int] | None:
    try:
        parts = metadata.version(package).split(".")
        return int(parts[0]), int(parts[1])
    except (metadata.PackageNotFoundError, ValueError, IndexError):
        return None


def _dotted(release: tuple[int, int]) -> str:
    return f"{release[0]}.{release[1]}"


def check(tested: tuple[tuple[int, int], tuple[int, int]] = TESTED) -> tuple[bool, str]:
    """Whether the accelerator may be used here (with releases in ``tested`` only), and why
    not (empty when it may)."""
    if os.environ.get(FORCE_PUBLIC_VARIABLE, "").strip() == "0":
        return False, ""
    for package in ("opentelemetry-api", "opentelemetry-sdk"):
        found = _release(package)
        if found is None or not tested[0] <= found < tested[1]:
            version = "unknown" if found is None else _dotted(found)
            return False, (
                f"{package} {version} is outside the range parley's fast tracing was tested "
                f"on ({_dotted(tested[0])} to before {_dotted(tested[1])}): spans go through "
                "the OpenTelemetry SDK's own tracer"
            )
    return True, ""


def _internals() -> tuple[Any, Any] | None:
    """The API's context key of the current span and its context variable, or None where
    this API does not have them where the accelerator looks (then it stays off)."""
    try:
        from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
        from opentelemetry.trace.propagation import _SPAN_KEY

        runtime = otel_context._RUNTIME_CONTEXT
        if not isinstance(runtime, ContextVarsRuntimeContext):
            return None  # OTEL_PYTHON_CONTEXT names another runtime context
        return _SPAN_KEY, runtime._current_context
    except (ImportError, AttributeError):
        return None


def asked() -> bool:
    """Whether ``PARLEY_OTEL_FAST=1`` asks for the accelerator by name."""
    return os.environ.get(FORCE_PUBLIC_VARIABLE, "").strip() == "1"


def _start(tested: tuple[tuple[int, int], tuple[int, int]] = TESTED) -> tuple[bool, Any, Any]:
    usable, why = check(tested)
    # Off at a release it was not tested on is the normal state of a supported install, so
    # that is said at debug level unless the user asked for the accelerator; a tested release
    # where the check still fails is unexpected, and a warning.
    level = logging.WARNING if asked() else logging.DEBUG
    found = _internals() if usable else None
    if usable and found is None:
        why = "the OpenTelemetry runtime context is not the usual context variable"
        level = logging.WARNING
    if why:
        log.log(level, "%s", why)
    if found is None:
        return False, None, None
    return True, found[0], found[1]


# Decided once, at import: every span of a process comes from one kind of tracer.
ACTIVE, _SPAN_KEY, _context_var = _start()

_attach = otel_context.attach
_detach = otel_context.detach
_INVALID_SPAN = trace.INVALID_SPAN
_NON_RECORDING = trace.NonRecordingSpan
_get_current_span = trace.get_current_span


def current_span(context: Any = None) -> trace.Span:
    """``trace.get_current_span``, read straight from the context where the accelerator is
    active (the API goes through three calls to get there; the bus and every span ask on
    every message)."""
    if not ACTIVE:
        return _get_current_span(context)
    if context is None:
        if _context_var is None:
            return _get_current_span()
        context = _context_var.get()
    span = context.get(_SPAN_KEY)
    # isinstance against the Span ABC costs more than the rest: the usual kinds first (a
    # non-recording span carries a parent parsed from a message's traceparent).
    if type(span) is LightSpan or type(span) is _NON_RECORDING:
        return span
    return span if span is not None and isinstance(span, trace.Span) else _INVALID_SPAN


_in_context = trace.set_span_in_context
_RANDOM = 0x02  # W3C trace-context level 2: the trace id is random


def _root_flags() -> int:
    """The flags the installed SDK gives a new sampled root span (some releases mark its
    trace id as random): the lean spans carry the same, so both paths' traceparents agree."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    probe = TracerProvider(sampler=ALWAYS_ON).get_tracer("parley").start_span("probe")
    return int(probe.get_span_context().trace_flags)


_ROOT = _root_flags() if ACTIVE else TraceFlags.SAMPLED
# Flags of a sampled span and of an unsampled one, by whether the trace id is random.
_SAMPLED = (TraceFlags(_ROOT & ~_RANDOM | 1), TraceFlags(_ROOT | 1))
_NOT_SAMPLED = (TraceFlags(TraceFlags.DEFAULT), TraceFlags(_ROOT & _RANDOM))
_time_ns = time.time_ns
_UNSET = Status(StatusCode.UNSET)  # shared: a Status is never changed, only replaced
_new_span = object.__new__
_new_context = tuple.__new__
_DEFAULT_STATE = trace.DEFAULT_TRACE_STATE


# Traceparents with their (remote) span contexts: those this process's spans stamped on
# messages (a message comes back with one to a handler in this process: a turn request to its
# agent, which would parse it) and those parsed (a span's traceparent comes back on every
# message it sent). One bounded table, emptied when full.
_KNOWN: dict[str, SpanContext] = {}
_KNOWN_MAX = 4096


def known(traceparent: str) -> SpanContext | None:
    """The span context of a traceparent stamped or parsed lately in this process."""
    return _KNOWN.get(traceparent)


def remember(traceparent: str, context: SpanContext) -> None:
    """Keep ``context`` as what ``traceparent`` names, for :func:`known`."""
    if len(_KNOWN) >= _KNOWN_MAX:
        _KNOWN.clear()
    _KNOWN[traceparent] = context


def stamp(span: LightSpan) -> str:
    """``span``'s traceparent, for a message that may come back to this process: kept with
    its span context (as a remote one, as the traceparent parsed would give it)."""
    found = span.traceparent()
    if not span._stamped:
        span._stamped = True
        ctx = span._context
        if len(_KNOWN) >= _KNOWN_MAX:  # remember()'s work, without its call
            _KNOWN.clear()
        _KNOWN[found] = _new_context(SpanContext, (ctx[0], ctx[1], True, *ctx[3:]))
    return found


def _clean(attributes: types.Attributes) -> dict[str, Any]:
    if not attributes:
        return {}
    out = dict(attributes)
    if None in out.values():
        out = {k: v for k, v in out.items() if v is not None}
    return out


def _bounded(attributes: types.Attributes) -> BoundedAttributes:
    """An event's or link's attributes as the SDK gives them: exporters read their
    ``dropped`` count (some releases' OTLP encoders without a check)."""
    return BoundedAttributes(maxlen=None, attributes=_clean(attributes), immutable=True)


def _link(link: Link) -> Link:
    attributes = link.attributes
    return (
        link
        if isinstance(attributes, BoundedAttributes)
        else Link(link.context, _bounded(attributes))
    )


class LightSpan(ReadableSpan, trace.Span):
    """A recording span that is its own readable (exported) form.

    What most spans never change is a class attribute (no events, links or status, not ended):
    a span's own fields are set in one go (:meth:`LightTracer.start_child`, the only maker of
    one, fills its ``__dict__``), a third of what ``ReadableSpan.__init__`` would set and copy.
    """

    # Always set by start_child, so narrower than ReadableSpan's optional fields.
    _context: SpanContext
    _attributes: dict[str, types.AttributeValue]
    _processors: tuple[SpanProcessor, ...]
    _instrumentation_info = None
    _end_time: int | None = None
    _events: Sequence[Event] = ()  # a list from the first event on
    _links: tuple[Link, ...] = ()
    _status = _UNSET
    _record_exception = True
    _set_status_on_exception = True
    _traceparent: str | None = None
    _stamped = False  # its traceparent kept by stamp()

    def traceparent(self) -> str:
        """This span's W3C traceparent, made once (every message it sends carries it; the ids
        by index: SpanContext's properties are Python calls). Where the traceparent may come
        back to this process (a message the bus carries), :func:`stamp` it instead."""
        found = self._traceparent
        if found is None:
            ctx = self._context
            found = self._traceparent = f"00-{ctx[0]:032x}-{ctx[1]:016x}-{ctx[3]:02x}"
        return found

    # --- ReadableSpan extras the SDK's exporters read -----------------------------------------

    @property
    def dropped_attributes(self) -> int:
        return 0

    @property
    def dropped_events(self) -> int:
        return 0

    @property
    def dropped_links(self) -> int:
        return 0

    # --- the API ---------------------------------------------------------------------------

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self._end_time is None and value is not None:
            self._attributes[key] = value

    def set_attributes(self, attributes: dict[str, types.AttributeValue]) -> None:  # type: ignore[override]
        if self._end_time is None and attributes:
            if None in attributes.values():  # _clean's work, its call only where needed
                attributes = _clean(attributes)
            self._attributes.update(attributes)

    def add_event(
        self,
        name: str,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
    ) -> None:
        if self._end_time is None:
            event = Event(name, _bounded(attributes), timestamp or _time_ns())
            if self._events:
                self._events.append(event)  # type: ignore[attr-defined]
            else:
                self._events = [event]

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self._end_time is None and context.is_valid:
            self._links = (*self._links, Link(context, _bounded(attributes)))

    def update_name(self, name: str) -> None:
        if self._end_time is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end_time is not None:
            return
        if isinstance(status, Status):
            self._status = status
        else:
            self._status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        stack = "".join(
            traceback.format_exception(type(exception), exception, exception.__traceback__)
        )
        event = {
            "exception.type": type(exception).__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": stack,
            "exception.escaped": str(escaped),
            **_clean(attributes),
        }
        self.add_event("exception", event, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end_time is not None:
            return
        self._end_time = end_time if end_time is not None else _time_ns()
        for processor in self._processors:
            processor.on_end(self)

    def __repr__(self) -> str:
        return f'LightSpan(name="{self._name}", context={self._context})'


class LightTracer(trace.Tracer):
    """Starts :class:`LightSpan` s that end into ``processors``."""

    def __init__(
        self,
        resource: Resource,
        processors: Sequence[SpanProcessor],
        *,
        sampler: Sampler | None = None,
        name: str = "parley",
    ) -> None:
        self.resource = resource
        self.processors = tuple(processors)
        self.sampler = sampler
        self.scope = InstrumentationScope(name)
        self._bits = random.SystemRandom().getrandbits  # ids as the SDK makes them
        rng = random.Random(self._bits(64))
        self._fast_bits = rng.getrandbits

    def start_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        found = current_span(context)
        parent = found._context if type(found) is LightSpan else found.get_span_context()
        span = self.start_child(name, parent, kind, attributes, links, start_time, context)
        if type(span) is LightSpan:
            if not record_exception:
                span._record_exception = False
            if not set_status_on_exception:
                span._set_status_on_exception = False
        return span

    def start_child(
        self,
        name: str,
        parent: SpanContext,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        context: Any = None,
    ) -> trace.Span:
        """A span under ``parent`` (a span context: the bus's spans have one at hand, parsed
        from a traceparent), without building an OpenTelemetry context to carry it;
        ``context`` only goes to the sampler."""
        bits = self._fast_bits
        if parent[5]:  # is_valid
            if not parent[3] & 1:  # not sampled
                return trace.NonRecordingSpan(
                    SpanContext(parent[0], bits(64) or 1, False, _NOT_SAMPLED[parent[3] >> 1 & 1])
                )
            trace_id = parent[0]
            parent_context: SpanContext | None = parent
            flags = _SAMPLED[parent[3] >> 1 & 1]
        else:
            trace_id = bits(128) or 1
            parent_context = None
            flags = _SAMPLED[_ROOT >> 1 & 1]
            if self.sampler is not None:
                decision = self.sampler.should_sample(
                    context, trace_id, name, kind, attributes, links
                )
                if not decision.decision.is_sampled():
                    return trace.NonRecordingSpan(
                        SpanContext(trace_id, bits(64) or 1, False, _NOT_SAMPLED[_ROOT >> 1 & 1])
                    )
        # The span and its context built directly: ids from getrandbits are in range, so
        # SpanContext's checks (and LightSpan.__init__'s call) would only cost.
        # _clean's work, without its call: the caller's dict copied, None values dropped.
        attrs = dict(attributes) if attributes else {}
        if None in attrs.values():
            attrs = _clean(attrs)
        span = _new_span(LightSpan)
        span.__dict__ = {
            "_name": name,
            "_context": _new_context(
                SpanContext, (trace_id, bits(64) or 1, False, flags, _DEFAULT_STATE, True)
            ),
            "_kind": kind,
            "_instrumentation_scope": self.scope,
            "_parent": parent_context,
            "_start_time": start_time if start_time is not None else _time_ns(),
            "_attributes": attrs,
            "_resource": self.resource,
            "_processors": self.processors,
        }
        if links:
            span._links = tuple(map(_link, links))
        return span

    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        found = current_span(context)
        parent = found._context if type(found) is LightSpan else found.get_span_context()
        # Not through start_span (a call less on every model call and agent turn): the
        # exception flags go to UseSpan, which applies them.
        span = self.start_child(name, parent, kind, attributes, links, start_time, context)
        return UseSpan(  # type: ignore[return-value]
            span, end_on_exit, record_exception, set_status_on_exception
        )


class UseSpan:
    """``trace.use_span`` as a plain class: the same behaviour (the span current inside,
    an escaping exception recorded and set as the status, the span ended on exit), without a
    generator-based context manager's cost on every model call and agent turn."""

    __slots__ = ("end_on_exit", "record", "set_status", "span", "token")

    def __init__(self, span: trace.Span, end_on_exit: bool, record: bool, set_status: bool) -> None:
        self.span = span
        self.end_on_exit = end_on_exit
        self.record = record
        self.set_status = set_status

    def __enter__(self) -> trace.Span:
        span = self.span
        if _context_var is None:
            self.token = _attach(_in_context(span))
        else:  # what set_span_in_context and attach do
            self.token = _context_var.set(Context({**_context_var.get(), _SPAN_KEY: span}))
        return span

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if _context_var is None:
            _detach(self.token)
        else:
            try:
                _context_var.reset(self.token)
            except Exception:  # as the API's detach: logged, not raised
                _detach(self.token)
        span = self.span
        if isinstance(exc, Exception) and span.is_recording():
            if self.record:
                span.record_exception(exc)
            if self.set_status:
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        if self.end_on_exit:
            span.end()
