"""Spans as OTLP JSON: the run folder's ``traces.jsonl``, reading trace sets back, replaying them.

``traces.jsonl`` holds one OTLP ``ExportTraceServiceRequest`` per line, as the OpenTelemetry
Collector's file exporter writes them (``resourceSpans`` → ``scopeSpans`` → ``spans``, hex trace
and span ids, times as decimal strings of nanoseconds, typed attribute values). Any tool that
reads the collector's files reads a run's traces, and :func:`export` replays them to a
collector or viewer over OTLP/HTTP.

Readers (:func:`read_trace_set`) take a run folder, one such file, or a folder of OTLP JSON
files (an exported trace set), and give each span as a flat dict (``name``, ``trace_id``,
``span_id``, ``parent_id``, ``kind``, ``start_ns``, ``end_ns``, ``status``, ``attributes``,
``events``, ``links``, ``resource``). Run folders written before the switch hold one such flat
dict per line; they are read as they are.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanKind, StatusCode

from parley.observability.light_spans import LightSpan

log = logging.getLogger("parley.observability.traces")
TRACES_FILE = "traces.jsonl"  # a run folder's spans
_UNSET_STATUS = LightSpan._status
# OTLP's enum numbers (opentelemetry/proto/trace/v1/trace.proto).
_KIND = {
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}
# By identity: an enum member's hash is a Python call, a span per lookup.
_KIND_OF = {id(kind): number for kind, number in _KIND.items()}
_KIND_NAME = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER", 0: "INTERNAL"}
_KIND_NUMBER = {name: number for number, name in _KIND_NAME.items() if number}
_STATUS = {StatusCode.UNSET: 0, StatusCode.OK: 1, StatusCode.ERROR: 2}
_STATUS_NAME = {0: "UNSET", 1: "OK", 2: "ERROR"}
_STATUS_NUMBER = {name: number for number, name in _STATUS_NAME.items()}

# --- encoding ------------------------------------------------------------------------------------


def any_value(value: Any) -> dict[str, Any]:
    """An attribute value as an OTLP ``AnyValue`` (JSON mapping)."""
    kind = type(value)
    if kind is str:
        return {"stringValue": value}
    if kind is bool:
        return {"boolValue": value}
    if kind is int:
        return {"intValue": str(value)}
    if kind is float:
        return {"doubleValue": value}
    if kind in (list, tuple):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if value is None:
        return {}
    return {"stringValue": str(value)}


# A span's JSON up to its attributes; they, and the rest, follow as pieces of their own.
_HEAD = (
    b'{"traceId":"%032x","spanId":"%016x",%b"name":%b,"kind":%d,'
    b'"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":['
)
# The same for a LightSpan: the trace id as its (cached) hex, with and without a parent.
_HEAD_CHILD = (
    b'{"traceId":"%b","spanId":"%016x","parentSpanId":"%016x","name":%b,"kind":%d,'
    b'"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":['
)
_HEAD_ROOT = (
    b'{"traceId":"%b","spanId":"%016x","name":%b,"kind":%d,'
    b'"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":['
)
_dumps = orjson.dumps
_NOTHING = object()
# The AnyValue of a value of these exact types is its orjson encoding, wrapped (ints as
# strings, as OTLP JSON has 64-bit integers).
_WRAP = {
    str: (b'{"stringValue":', b"}"),
    int: (b'{"intValue":"', b'"}'),
    float: (b'{"doubleValue":', b"}"),
    bool: (b'{"boolValue":', b"}"),
}


def _json(obj: Any) -> bytes:
    """``obj`` as JSON, whatever it holds: orjson's, or the standard library's where orjson
    refuses (a lone surrogate comes out escaped, an int beyond 64 bits as it is)."""
    try:
        return _dumps(obj, default=str)
    except orjson.JSONEncodeError:
        return json.dumps(obj, default=str).encode()


def _any_json(value: Any) -> bytes:
    """A value's ``AnyValue`` JSON, whatever it holds."""
    return _json(any_value(value))


class Encoder:
    """Finished SDK spans → OTLP JSON lines, fast.

    A span's attributes are encoded in one go: the keys of a span and the types of their
    values (its *shape*) repeat across a run — every chat span has the same fifteen — so each
    shape is turned once into a ``%``-template holding the keys and the ``{"stringValue": …}``
    wrappers; a span then costs one orjson call per value (``map``, no Python loop) and one
    formatting. Lists and other types go through :func:`any_value`. Not thread-safe: one
    thread at a time (the span writer's lock).
    """

    CACHE_MAX = 10_000
    PAUSE_EVERY = 32

    def __init__(self) -> None:
        # shape (keys, value types) -> (template, positions encoded through any_value)
        self._shapes: dict[
            tuple[tuple[str, ...], tuple[type, ...]], tuple[bytes, tuple[int, ...]]
        ] = {}
        self._names: dict[str, bytes] = {}
        # shape (keys, value types, root) -> a lean span's whole template, positions as above
        self._whole: dict[
            tuple[tuple[str, ...], tuple[type, ...], bool], tuple[bytes, tuple[int, ...]]
        ] = {}
        # a list of strings, as a tuple -> its AnyValue JSON
        self._arrays: dict[tuple[str, ...], bytes] = {}
        # trace id -> its hex (an episode's spans share one)
        self._trace_ids: dict[int, bytes] = {}
        self._resources: dict[int, tuple[Any, bytes]] = {}
        self._scopes: dict[tuple[str, str], bytes] = {}

    def _shape(
        self, keys: tuple[str, ...], types: tuple[type, ...]
    ) -> tuple[bytes, tuple[int, ...]]:
        parts = []
        others = []
        for i, (key, kind) in enumerate(zip(keys, types, strict=True)):
            prefix = (b'{"key":' + _dumps(key) + b',"value":').replace(b"%", b"%%")
            wrap = _WRAP.get(kind)
            if wrap is None:
                others.append(i)
                parts.append(prefix + b"%b}")
            else:
                parts.append(prefix + wrap[0] + b"%b" + wrap[1] + b"}")
        if len(self._shapes) >= self.CACHE_MAX:
            self._shapes.clear()
        found = self._shapes[keys, types] = (b",".join(parts), tuple(others))
        return found

    def attributes(self, attributes: Any) -> bytes:
        """The ``KeyValue`` list of ``attributes`` (without its brackets)."""
        if not attributes:
            return b""
        values = tuple(attributes.values())
        keys = tuple(attributes)
        types = tuple(map(type, values))
        found = self._shapes.get((keys, types))
        template, others = found if found is not None else self._shape(keys, types)
        try:
            if not others:
                return template % tuple(map(_dumps, values))
            encoded = list(map(_dumps, values))
        except orjson.JSONEncodeError:  # an int beyond 64 bits, a lone surrogate …
            encoded = [_any_json(v) for v in values]
            others = ()
            template = b",".join(
                b'{"key":' + _dumps(k).replace(b"%", b"%%") + b',"value":%b}' for k in keys
            )
        for i in others:
            encoded[i] = self._other(values[i])
        return template % tuple(encoded)

    def _other(self, value: Any) -> bytes:
        """The ``AnyValue`` JSON of a value the templates do not wrap: a list of strings (a
        chat span's finish reasons) encoded once, others each time."""
        if type(value) in (list, tuple) and all(type(v) is str for v in value):
            key = tuple(value)
            found = self._arrays.get(key)
            if found is None:
                if len(self._arrays) >= self.CACHE_MAX:
                    self._arrays.clear()
                found = self._arrays[key] = _any_json(value)
            return found
        return _any_json(value)

    def _resource(self, resource: Any) -> bytes:
        found = self._resources.get(id(resource))
        if found is None or found[0] is not resource:
            found = (resource, b'{"attributes":[' + self.attributes(resource.attributes) + b"]}")
            self._resources[id(resource)] = found
        return found[1]

    def _extras(self, span: ReadableSpan) -> bytes:
        """Status, events and links (few spans have any)."""
        out: dict[str, Any] = {}
        status = span.status
        if status.status_code is not StatusCode.UNSET:
            out["status"] = {"code": _STATUS[status.status_code]}
            if status.description:
                out["status"]["message"] = status.description
        if span.events:
            out["events"] = [
                {
                    "timeUnixNano": str(e.timestamp),
                    "name": e.name,
                    "attributes": [
                        {"key": k, "value": any_value(v)} for k, v in (e.attributes or {}).items()
                    ],
                }
                for e in span.events
            ]
        if span.links:
            out["links"] = [
                {
                    "traceId": f"{link.context.trace_id:032x}",
                    "spanId": f"{link.context.span_id:016x}",
                    "attributes": [
                        {"key": k, "value": any_value(v)}
                        for k, v in (link.attributes or {}).items()
                    ],
                }
                for link in span.links
            ]
        if not out:
            return b""
        return b"," + _json(out)[1:-1]  # a lone surrogate in an exception message, too

    def _whole_shape(
        self, shape: tuple[tuple[str, ...], tuple[type, ...], bool]
    ) -> tuple[bytes, tuple[int, ...]]:
        """The template of a whole lean span of ``shape`` (keys, value types, root or not),
        and the positions of the values that go through :meth:`_other`."""
        keys, types, root = shape
        attributes, others = self._shapes.get((keys, types)) or self._shape(keys, types)
        head = _HEAD_ROOT if root else _HEAD_CHILD
        if len(self._whole) >= self.CACHE_MAX:
            self._whole.clear()
        found = self._whole[shape] = (head + attributes + b"]}", others)
        return found

    def _name(self, name: str) -> bytes:
        if len(self._names) >= self.CACHE_MAX:
            self._names.clear()
        found = self._names[name] = orjson.dumps(name)
        return found

    def _span(self, span: ReadableSpan, out: list[bytes]) -> None:
        """Append the pieces of one span's OTLP JSON to ``out`` (joined once per line: each
        span's bytes copied once, not again for its scope, its resource and the line)."""
        if type(span) is LightSpan:  # its fields as they are (the properties copy some)
            ctx = span._context
            parent = span._parent
            name = span._name
            trace_id = ctx[0]
            hex_id = self._trace_ids.get(trace_id)
            if hex_id is None:
                if len(self._trace_ids) >= self.CACHE_MAX:
                    self._trace_ids.clear()
                hex_id = self._trace_ids[trace_id] = b"%032x" % trace_id
            kind = span._kind
            rest = (
                self._names.get(name) or self._name(name),
                _KIND_OF.get(id(kind)) or _KIND[kind],
                span._start_time or 0,
                span._end_time or 0,
            )
            attributes = span._attributes
            # The shared UNSET status of a span never given one (another goes to _extras).
            lean = span._status is _UNSET_STATUS and not span._events and not span._links
            if lean:
                # Most spans: one template for the whole span (head, attributes, end), by its
                # shape; one formatting, one piece.
                values = tuple(attributes.values())
                shape = (tuple(attributes), tuple(map(type, values)), parent is None)
                found = self._whole.get(shape)
                if found is None:
                    found = self._whole_shape(shape)
                template, others = found
                try:
                    encoded: Iterable[bytes]
                    if others:  # a chat span's finish reasons (a list): through _other
                        listed = list(map(_dumps, values))
                        for i in others:
                            listed[i] = self._other(values[i])
                        encoded = listed
                    else:
                        encoded = map(_dumps, values)
                    if parent is None:
                        out.append(template % (hex_id, ctx[1], *rest, *encoded))
                    else:
                        out.append(template % (hex_id, ctx[1], parent[1], *rest, *encoded))
                    return
                except orjson.JSONEncodeError:  # an int beyond 64 bits …: as below
                    pass
            head = (
                _HEAD_CHILD % (hex_id, ctx[1], parent[1], *rest)
                if parent is not None
                else _HEAD_ROOT % (hex_id, ctx[1], *rest)
            )
            out.append(head)
            out.append(self.attributes(attributes))
            if lean:
                out.append(b"]}")
            else:
                out.append(b"]" + self._extras(span) + b"}")
            return
        context = span.get_span_context()
        assert context is not None
        parent = span.parent
        name = span.name
        out.append(
            _HEAD
            % (
                context.trace_id,
                context.span_id,
                b'"parentSpanId":"%016x",' % parent.span_id if parent is not None else b"",
                self._names.get(name) or self._name(name),
                _KIND_OF.get(id(span.kind)) or _KIND[span.kind],
                span.start_time or 0,
                span.end_time or 0,
            )
        )
        out.append(self.attributes(span.attributes))
        out.append(b"]" + self._extras(span) + b"}")

    def line(self, spans: Iterable[ReadableSpan], pause: Callable[[], None] | None = None) -> bytes:
        """One ``ExportTraceServiceRequest`` of ``spans`` (grouped by resource and scope), as a
        line of JSON; ``pause`` is called every :attr:`PAUSE_EVERY` spans."""
        # resource id -> (resource, scope (name, version) -> pieces of its spans' JSON)
        groups: dict[int, tuple[Any, dict[tuple[str, str], list[bytes]]]] = {}
        last: tuple[Any, Any] = (_NOTHING, _NOTHING)
        pieces: list[bytes] = []
        every = self.PAUSE_EVERY
        encode = self._span
        for n, span in enumerate(spans, 1):
            if pause is not None and n % every == 0:
                pause()
            if type(span) is LightSpan:  # the fields, not the properties
                resource, scope = span._resource, span._instrumentation_scope
            else:
                resource, scope = span.resource, span.instrumentation_scope
            if resource is not last[0] or scope is not last[1]:  # a run's spans share both
                last = (resource, scope)
                key = (scope.name, scope.version or "") if scope is not None else ("", "")
                group = groups.get(id(resource))
                if group is None:
                    group = groups[id(resource)] = (resource, {})
                pieces = group[1].setdefault(key, [])
            if pieces:
                pieces.append(b",")
            encode(span, pieces)
        out = [b'{"resourceSpans":[']
        for i, (resource, scopes) in enumerate(groups.values()):
            out.append(b'{"resource":' if i == 0 else b',{"resource":')
            out.append(self._resource(resource))
            out.append(b',"scopeSpans":[')
            for j, (key, scope_pieces) in enumerate(scopes.items()):
                scope_json = self._scopes.get(key)
                if scope_json is None:
                    named = {"name": key[0], **({"version": key[1]} if key[1] else {})}
                    scope_json = self._scopes[key] = orjson.dumps(named)
                out.append(b'{"scope":' if j == 0 else b',{"scope":')
                out.append(scope_json)
                out.append(b',"spans":[')
                out.extend(scope_pieces)
                out.append(b"]}")
            out.append(b"]}")
        out.append(b"]}\n")
        return b"".join(out)


_get_ident = threading.get_ident


def _yield_gil() -> None:
    time.sleep(0.0001)


class OtlpJsonSpanWriter(SpanProcessor):
    """Writes finished spans to a file as OTLP JSON lines; the file is written off the event loop.

    Ending a span appends it to a queue (a ``deque``: thread-safe, no lock). Spans ended on
    the thread that made the writer (the run's event loop) are encoded there, ``inline`` at a
    time (64; fewer while spans are large, a line of about ``INLINE_BYTES``: a short hold of
    the loop), while they are still in that CPU's caches: encoding them on the writer
    thread cost more CPU per traced model request for the same instructions (likely the
    span objects read cold on another core, and the threads trading the GIL;
    docs/performance.md, thirteenth window). A writer thread wakes every
    ``interval_s`` (or once about ``batch`` spans wait, encoded or not), encodes what other
    threads ended, and appends the lines to the file in order, one ``write`` a line (whole
    lines even with several processes appending to one file; a line holds at most ``batch``
    spans). ``force_flush`` and ``shutdown`` write everything that waits before they return; a
    process killed outright loses at most the last ``interval_s`` of spans, and never leaves
    half a line.

    A file that cannot be written (a full disk) costs the traces, never the run: one warning
    says so, and from then on spans are counted and dropped (readers skip the line a failed
    write may have cut). A span the encoder cannot write (an attribute key that is not text) is
    dropped with a logged error (the first only), never raised to the code that ended it.
    ``dropped`` says how many spans were lost either way.
    """

    # Spans the loop encodes in one go (0: none, the writer thread encodes every span; what
    # ``tracing_cost.py --writer-thread`` compares against), and about as many bytes at most.
    INLINE = 64
    INLINE_BYTES = 256 * 1024

    def __init__(
        self,
        path: str | Path,
        *,
        batch: int = 512,
        interval_s: float = 0.5,
        inline: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.batch = batch
        self.interval_s = interval_s
        self.inline = min(self.INLINE if inline is None else inline, batch)
        self._inline_now = self.inline  # fewer while spans are large (INLINE_BYTES)
        self._owner = threading.get_ident()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._queue: deque[ReadableSpan] = deque()
        # Encoded lines and their span counts, waiting for the writer thread.
        self._lines: deque[tuple[bytes, int]] = deque()
        self._wake_at = max(1, batch // max(1, self.inline))  # lines: about ``batch`` spans
        self._lock = threading.Lock()  # one encoder at a time: lines in the order spans ended
        self._write_lock = threading.Lock()  # one writer at a time: lines in that order
        self._wake = threading.Event()
        self._stop = False
        self._encoder = Encoder()
        self.dropped = 0  # spans not written: a write failed, or they could not be encoded
        self._failed = False
        self._unencodable = False  # an encoding failed (logged once)
        self._thread = threading.Thread(target=self._run, name="parley-span-writer", daemon=True)
        self._thread.start()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if self._failed:
            self.dropped += 1
            return
        queue = self._queue
        queue.append(span)
        waiting = len(queue)
        if waiting >= self._inline_now > 0 and _get_ident() == self._owner and not self._stop:
            if self._lock.acquire(blocking=False):  # else the writer thread is encoding them
                try:
                    spans, size = self._encode(self._inline_now)
                finally:
                    self._lock.release()
                if size:
                    # A burst near INLINE_BYTES: spans with long attributes (content: true on
                    # a long conversation) go a few at a time, not 64 (that many would hold up
                    # the loop).
                    self._inline_now = max(1, min(self.inline, spans * self.INLINE_BYTES // size))
                if len(self._lines) >= self._wake_at:
                    self._wake.set()
        elif waiting == self.batch:
            self._wake.set()

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            # Encoding holds the GIL: hand it back to the event loop every few spans, so a
            # burst of encoding never stalls the loop for more than a fraction of a ms.
            self._drain(_yield_gil)

    def _encode(self, most: int, pause: Callable[[], None] | None = None) -> tuple[int, int]:
        """Encode up to ``most`` waiting spans into lines for the writer (hold the lock); the
        spans and bytes encoded."""
        queue = self._queue
        done = size = 0
        while queue and most > 0:
            n = min(len(queue), self.batch, most)
            spans = [queue.popleft() for _ in range(n)]
            most -= n
            try:
                line = self._encoder.line(spans, pause)
            except Exception:
                # One by one, so that only what cannot be encoded is lost (never raised: this
                # runs inside span.end() on the loop).
                self._encode_each(spans)
                continue
            self._lines.append((line, n))
            done += n
            size += len(line)
        return done, size

    def _encode_each(self, spans: list[ReadableSpan]) -> None:
        for span in spans:
            try:
                self._lines.append((self._encoder.line([span]), 1))
            except Exception:
                if not self._unencodable:
                    self._unencodable = True
                    log.exception("could not encode the span %r for %s: dropped", span, self.path)
                self.dropped += 1

    def _write(self) -> None:
        """Append the encoded lines to the file, in order."""
        lines = self._lines
        with self._write_lock:
            while lines and self._fd is not None:
                data, n = lines.popleft()
                view = memoryview(data)
                try:
                    while view:  # a regular file takes it in one write; loop for a short one
                        view = view[os.write(self._fd, view) :]
                except OSError as exc:
                    self._fail(exc, n)

    def _drain(self, pause: Callable[[], None] | None = None) -> None:
        # What waits now: spans the loop ends meanwhile are for its own inline encoding (the
        # thread chasing them would encode them all, cold, as it used to).
        with self._lock:
            self._encode(len(self._queue), pause)
        self._write()

    def _fail(self, exc: OSError, spans: int) -> None:
        """Drop ``spans`` (the line that failed) and what waits; later spans drop in on_end."""
        if not self._failed:
            self._failed = True
            log.warning(
                "cannot write spans to %s (%s): this process's traces from here on are "
                "dropped (the run's records are not affected)",
                self.path,
                exc.strerror or exc,
            )
        queue, lines = self._queue, self._lines
        while queue:  # popped one by one: on_end may still append one meanwhile
            queue.popleft()
            spans += 1
        while lines:
            spans += lines.popleft()[1]
        self.dropped += spans

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._drain()
        return True

    def shutdown(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        self._drain()
        with self._write_lock:
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)


# --- reading -------------------------------------------------------------------------------------


def _value(any_value_json: dict[str, Any]) -> Any:
    if not any_value_json:
        return None
    (kind, value), *_ = any_value_json.items()
    if kind == "intValue":
        return int(value)
    if kind == "doubleValue":
        return float(value)
    if kind == "arrayValue":
        return [_value(v) for v in (value or {}).get("values", [])]
    if kind == "kvlistValue":
        return {kv["key"]: _value(kv.get("value") or {}) for kv in (value or {}).get("values", [])}
    if kind == "bytesValue":
        return value
    return value


def attributes_dict(attributes: Iterable[dict[str, Any]] | None) -> dict[str, Any]:
    """OTLP ``KeyValue`` list → plain dict."""
    return {kv["key"]: _value(kv.get("value") or {}) for kv in attributes or ()}


def _hex_id(value: Any, length: int) -> str:
    """A trace or span id as lowercase hex (OTLP JSON uses hex; protobuf's JSON, base64)."""
    text = str(value or "")
    if len(text) == length:
        with contextlib.suppress(ValueError):
            int(text, 16)
            return text.lower()
    with contextlib.suppress(ValueError):
        raw = base64.b64decode(text, validate=True)
        if len(raw) * 2 == length:
            return raw.hex()
    return text


def flat_span(span: dict[str, Any], resource: dict[str, Any], scope: str = "") -> dict[str, Any]:
    """One OTLP JSON span as the flat dict the readers use."""
    parent = span.get("parentSpanId") or ""
    kind = span.get("kind", 1)
    if isinstance(kind, str):  # "SPAN_KIND_CLIENT" is valid JSON mapping too
        kind = _KIND_NUMBER.get(kind.removeprefix("SPAN_KIND_"), 1)
    status = span.get("status") or {}
    code = status.get("code", 0)
    if isinstance(code, str):
        code = _STATUS_NUMBER.get(code.removeprefix("STATUS_CODE_"), 0)
    return {
        "name": span.get("name", ""),
        "trace_id": _hex_id(span.get("traceId"), 32),
        "span_id": _hex_id(span.get("spanId"), 16),
        "parent_id": _hex_id(parent, 16) if parent else None,
        "kind": _KIND_NAME.get(int(kind), "INTERNAL"),
        "start_ns": int(span.get("startTimeUnixNano") or 0),
        "end_ns": int(span.get("endTimeUnixNano") or 0),
        "status": _STATUS_NAME.get(int(code), "UNSET"),
        "status_message": status.get("message") or None,
        "attributes": attributes_dict(span.get("attributes")),
        "events": [
            {
                "name": e.get("name", ""),
                "time_ns": int(e.get("timeUnixNano") or 0),
                "attributes": attributes_dict(e.get("attributes")),
            }
            for e in span.get("events") or []
        ],
        "links": [
            {"trace_id": _hex_id(k.get("traceId"), 32), "span_id": _hex_id(k.get("spanId"), 16)}
            for k in span.get("links") or []
        ],
        "resource": resource,
        "scope": scope,
    }


def spans_of_request(request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The spans of one ``ExportTraceServiceRequest`` (JSON), flat."""
    for rs in request.get("resourceSpans") or request.get("resource_spans") or []:
        resource = attributes_dict((rs.get("resource") or {}).get("attributes"))
        for ss in rs.get("scopeSpans") or rs.get("scope_spans") or []:
            scope = (ss.get("scope") or {}).get("name", "")
            for span in ss.get("spans") or []:
                yield flat_span(span, resource, scope)


def _documents(file: Path) -> Iterator[Any]:
    """The JSON documents of a file: one per line, or the whole file as one (a pretty-printed
    export); torn or foreign lines are skipped."""
    text = file.read_text(encoding="utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n" in stripped.rstrip() and file.suffix != ".jsonl":
        with contextlib.suppress(json.JSONDecodeError):
            yield json.loads(text)
            return
    for line in text.splitlines():
        if not line.strip():
            continue
        with contextlib.suppress(json.JSONDecodeError):
            yield json.loads(line)


def trace_files(path: str | Path) -> list[Path]:
    """The files of a trace set: a run folder's ``traces.jsonl``, a file, or a folder's
    ``*.json``/``*.jsonl`` files (name order)."""
    target = Path(path)
    if target.is_file():
        return [target]
    if not target.is_dir():
        return []
    if (target / TRACES_FILE).exists():
        return [target / TRACES_FILE]
    return sorted(p for p in target.iterdir() if p.suffix in (".json", ".jsonl") and p.is_file())


def _is_flat_span(span: Any) -> bool:
    """Whether ``span`` has the shape of a flat span where its readers look (a damaged file, a
    foreign one: a name that is not text, attributes that are no mapping …)."""
    return (
        isinstance(span, dict)
        and isinstance(span.get("trace_id"), str)
        and isinstance(span.get("span_id"), str)
        and isinstance(span.get("name", ""), str)
        and isinstance(span.get("attributes") or {}, dict)
        and all(type(span.get(k) or 0) is int for k in ("start_ns", "end_ns"))
        and isinstance(span.get("events") or [], list)
        and all(isinstance(e, dict) for e in span.get("events") or [])
        and isinstance(span.get("links") or [], list)
        and all(isinstance(k, dict) and "trace_id" in k for k in span.get("links") or [])
    )


def _spans_of_document(doc: Any) -> list[dict[str, Any]] | None:
    """The flat spans of one JSON document of a trace set: an OTLP request's, or the one flat
    span of an older run folder's line; [] for a document that is neither (skipped as foreign),
    None for one of those shapes that does not read as one (damaged)."""
    if not isinstance(doc, dict):
        return []
    if "resourceSpans" in doc or "resource_spans" in doc:
        try:
            spans = list(spans_of_request(doc))
        except (AttributeError, KeyError, TypeError, ValueError):
            return None
    elif "span_id" in doc and "trace_id" in doc:
        spans = [doc]
    else:
        return []
    return spans if all(_is_flat_span(span) for span in spans) else None


def _warn_damaged(path: str | Path, damaged: int) -> None:
    if damaged:
        log.warning(
            "%s: skipped %d damaged documents that hold no spans of the shape OTLP JSON gives",
            path,
            damaged,
        )


def read_trace_set(path: str | Path) -> list[dict[str, Any]]:
    """Every span of a trace set (run folder, OTLP JSON file, or folder of them), flat; spans
    of older run folders (one flat span per line) as they are. A document of another shape
    is skipped with a warning."""
    spans: list[dict[str, Any]] = []
    damaged = 0
    for file in trace_files(path):
        for doc in _documents(file):
            found = _spans_of_document(doc)
            if found is None:
                damaged += 1
            else:
                spans.extend(found)
    _warn_damaged(path, damaged)
    return spans


# --- replay to a collector -----------------------------------------------------------------------


def flat_to_otlp(span: dict[str, Any]) -> dict[str, Any]:
    """A flat span (an old run folder's line) as OTLP JSON."""
    out: dict[str, Any] = {
        "traceId": span["trace_id"],
        "spanId": span["span_id"],
        "name": span.get("name", ""),
        "kind": _KIND_NUMBER.get(str(span.get("kind") or "INTERNAL"), 1),
        "startTimeUnixNano": str(span.get("start_ns") or 0),
        "endTimeUnixNano": str(span.get("end_ns") or 0),
        "attributes": [
            {"key": k, "value": any_value(v)} for k, v in (span.get("attributes") or {}).items()
        ],
    }
    if span.get("parent_id"):
        out["parentSpanId"] = span["parent_id"]
    code = _STATUS_NUMBER.get(str(span.get("status") or "UNSET"), 0)
    if code:
        out["status"] = {"code": code, "message": span.get("status_message") or ""}
    if span.get("events"):
        out["events"] = [
            {
                "name": e.get("name", ""),
                "timeUnixNano": str(e.get("time_ns") or 0),
                "attributes": [
                    {"key": k, "value": any_value(v)}
                    for k, v in (e.get("attributes") or {}).items()
                ],
            }
            for e in span["events"]
        ]
    if span.get("links"):
        out["links"] = [{"traceId": k["trace_id"], "spanId": k["span_id"]} for k in span["links"]]
    return out


def export_requests(path: str | Path, batch: int = 512) -> Iterator[dict[str, Any]]:
    """A trace set as OTLP JSON ``ExportTraceServiceRequest`` objects, ready to send: lines in
    the OTLP shape as they are, older flat lines gathered ``batch`` spans per request."""
    flat: list[dict[str, Any]] = []

    def gathered() -> dict[str, Any]:
        by_resource: dict[str, list[dict[str, Any]]] = {}
        resources: dict[str, dict[str, Any]] = {}
        for span in flat:
            resource = span.get("resource") or {}
            key = json.dumps(resource, sort_keys=True, default=str)
            resources[key] = resource
            by_resource.setdefault(key, []).append(flat_to_otlp(span))
        return {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [
                            {"key": k, "value": any_value(v)} for k, v in resources[key].items()
                        ]
                    },
                    "scopeSpans": [{"scope": {"name": "parley"}, "spans": spans}],
                }
                for key, spans in by_resource.items()
            ]
        }

    damaged = 0
    for file in trace_files(path):
        for doc in _documents(file):
            found = _spans_of_document(doc)
            if found is None:
                damaged += 1
            elif "resourceSpans" in doc:  # OTLP JSON as a collector takes it: as it is
                yield doc
            elif found:  # flat spans (or protobuf-style names): gathered into requests
                flat.extend(found)
                if len(flat) >= batch:
                    yield gathered()
                    flat = []
    if flat:
        yield gathered()
    _warn_damaged(path, damaged)


def to_protobuf(request: dict[str, Any]) -> bytes:
    """An OTLP JSON request as protobuf bytes (ids: OTLP JSON's hex → protobuf's bytes)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    def b64(hex_id: str) -> str:
        return base64.b64encode(bytes.fromhex(hex_id)).decode() if hex_id else ""

    copy = json.loads(json.dumps(request))
    for rs in copy.get("resourceSpans") or []:
        for ss in rs.get("scopeSpans") or []:
            for span in ss.get("spans") or []:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = b64(span[key])
                for link in span.get("links") or []:
                    for key in ("traceId", "spanId"):
                        if link.get(key):
                            link[key] = b64(link[key])
    message = ExportTraceServiceRequest()
    json_format.ParseDict(copy, message, ignore_unknown_fields=True)
    return message.SerializeToString()


def traces_url(url: str) -> str:
    """The OTLP/HTTP traces URL of an endpoint (``http://host:4318`` → ``…/v1/traces``)."""
    url = url.rstrip("/")
    return url if url.endswith("/v1/traces") else url + "/v1/traces"


async def export(
    path: str | Path,
    url: str,
    *,
    protocol: str = "http/protobuf",
    headers: dict[str, str] | None = None,
    timeout_s: float = 30.0,
) -> tuple[int, int]:
    """Replay a trace set to an OTLP/HTTP receiver; returns (requests, spans) sent.

    Raises :class:`ExportError` with one line on a refused request or an unreachable URL.
    """
    import aiohttp

    target = traces_url(url)
    if not target.startswith(("http://", "https://")):
        raise ExportError(f"{url} is not an OTLP/HTTP endpoint: give http(s)://host:port")
    content_type = "application/json" if protocol == "http/json" else "application/x-protobuf"
    sent = spans = 0
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for request in export_requests(path):
                count = sum(
                    len(ss.get("spans") or [])
                    for rs in request.get("resourceSpans") or []
                    for ss in rs.get("scopeSpans") or []
                )
                body = orjson.dumps(request) if protocol == "http/json" else to_protobuf(request)
                async with session.post(
                    target, data=body, headers={"Content-Type": content_type, **(headers or {})}
                ) as response:
                    if response.status >= 300:
                        text = (await response.text())[:200].strip()
                        raise ExportError(f"{target} answered HTTP {response.status}: {text}")
                sent += 1
                spans += count
    except aiohttp.ClientError as exc:
        raise ExportError(f"could not send to {target}: {exc}") from None
    except TimeoutError:
        raise ExportError(f"{target} did not answer within {timeout_s:g} s") from None
    return sent, spans


class ExportError(Exception):
    """A replay that could not be delivered (one line for the user)."""


def count_spans(requests: Sequence[dict[str, Any]]) -> int:
    return sum(
        len(ss.get("spans") or [])
        for r in requests
        for rs in r.get("resourceSpans") or []
        for ss in rs.get("scopeSpans") or []
    )
