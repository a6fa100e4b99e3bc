"""The lean tracer's hot paths (issue 20, item 4) keep what they made: ``traces.jsonl`` in the
same OTLP JSON (every attribute type, whatever the cached shape), spans that do not share
their events or status, the bus's traceparents and parents, the parsed-traceparent cache."""

from __future__ import annotations

import asyncio
import enum
import json
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource

from parley.bus.local import LocalBus
from parley.bus.messages import TranscriptEvent, TurnRequest
from parley.observability.light_spans import LightSpan, LightTracer, current_span, known
from parley.observability.otlp_json import Encoder, OtlpJsonSpanWriter, any_value
from parley.observability.traced_bus import TracedBus
from parley.observability.tracing import Tracing, inject, read_spans, span_context


class Sink:
    def __init__(self) -> None:
        self.spans: list[Any] = []

    def on_end(self, span: Any) -> None:
        self.spans.append(span)


class Level(enum.Enum):
    HIGH = 2


class Name(enum.StrEnum):
    ALICE = "alice"


class OldName(str, enum.Enum):  # noqa: UP042 (str() gives "OldName.ALICE", yet it equals "alice")
    ALICE = "alice"


def note(text: str) -> TranscriptEvent:
    return TranscriptEvent(
        run="r", episode="e", sender="gm", turn=1, event="note", from_role="gm", data={"t": text}
    )


def spans_of(line: bytes) -> list[dict[str, Any]]:
    (group,) = json.loads(line)["resourceSpans"]
    (scope,) = group["scopeSpans"]
    return scope["spans"]


def expected_attributes(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    """What the OTLP JSON of ``attributes`` is, built the slow, obvious way (a NaN is null,
    as orjson writes it)."""
    out = []
    for key, value in attributes.items():
        if type(value) is int:  # not a bool, nor an int subclass (an IntEnum)
            out.append({"key": key, "value": {"intValue": str(value)}})
        else:
            out.append({"key": key, "value": any_value(value)})
    return out


def test_every_attribute_type_encodes_as_otlp_json_whatever_the_shape() -> None:
    sink = Sink()
    tracer = LightTracer(Resource.create({"service.name": "t"}), [sink])
    cases: list[dict[str, Any]] = [
        {"s": "x", "i": 1, "f": 1.5, "b": True, "l": ["stop"], "t": (1, "a")},
        {"s": 'q"uo\\te %s %b\n', "i": -(2**63), "f": 0.0, "b": False, "l": [], "t": ()},
        # The same keys with other types: another shape, not the first one's template.
        {"s": 7, "i": "seven", "f": True, "b": 2.5, "l": "no list", "t": [[1], [2]]},
        {'%key"': "v%", "big": 2**70, "enum": Level.HIGH, "strenum": Name.ALICE},
        {"bytes": b"raw", "nan": float("nan")},
    ]
    for attributes in cases:
        tracer.start_span("case", attributes=attributes).end()
    encoder = Encoder()
    for _ in range(2):  # the second time through the cached shapes
        for span, attributes in zip(spans_of(encoder.line(sink.spans)), cases, strict=True):
            assert span["attributes"] == json.loads(orjson.dumps(expected_attributes(attributes)))
    # A lone surrogate, which orjson refuses: the span is still written, escaped.
    tracer.start_span("odd", attributes={"text": "a\ud800b", "n": 1}).end()
    (odd,) = spans_of(encoder.line(sink.spans[-1:]))
    assert odd["attributes"] == [
        {"key": "text", "value": {"stringValue": "a\ud800b"}},
        {"key": "n", "value": {"intValue": "1"}},
    ]


def test_lean_spans_keep_their_own_events_status_and_links() -> None:
    sink = Sink()
    tracer = LightTracer(Resource.create({}), [sink])
    first, second = tracer.start_span("first"), tracer.start_span("second")
    first.add_event("one", {"k": 1})
    first.set_status(trace.StatusCode.ERROR, "bad")
    first.add_link(second.get_span_context(), {"why": "test"})
    assert second.events == () and second.links == ()  # type: ignore[attr-defined]
    assert second.status.status_code is trace.StatusCode.UNSET  # type: ignore[attr-defined]
    second.add_event("two")
    assert [e.name for e in first.events] == ["one"]  # type: ignore[attr-defined]
    assert [e.name for e in second.events] == ["two"]  # type: ignore[attr-defined]
    first.end()
    second.end()
    encoded = {s["name"]: s for s in spans_of(Encoder().line(sink.spans))}
    assert encoded["first"]["status"] == {"code": 2, "message": "bad"}
    assert encoded["first"]["events"][0]["name"] == "one"
    assert encoded["first"]["links"][0]["spanId"] == f"{second.get_span_context().span_id:016x}"
    assert "status" not in encoded["second"] and encoded["second"]["events"][0]["name"] == "two"
    # Ids in range, and a child under its parent, through the context as through start_child.
    ctx = first.get_span_context()
    assert 0 < ctx.trace_id < 2**128 and 0 < ctx.span_id < 2**64 and ctx.is_valid
    with tracer.start_as_current_span("parent") as parent:
        assert current_span() is parent
        child = tracer.start_span("child")
    assert child.parent == parent.get_span_context()  # type: ignore[attr-defined]
    other = tracer.start_child("other", parent.get_span_context())  # type: ignore[attr-defined]
    assert other.parent == parent.get_span_context()  # type: ignore[attr-defined]
    assert not current_span().get_span_context().is_valid


def test_a_span_from_the_sdk_and_a_lean_one_go_to_the_same_file(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    writer = OtlpJsonSpanWriter(tmp_path / "traces.jsonl")
    provider = TracerProvider(resource=Resource.create({"service.name": "sdk"}))
    provider.add_span_processor(writer)
    with provider.get_tracer("other", "1.0").start_as_current_span("sdk", attributes={"a": [1]}):
        pass
    LightTracer(Resource.create({"service.name": "lean"}), [writer]).start_span("lean").end()
    writer.shutdown()
    spans = {s["name"]: s for s in read_spans(tmp_path)}
    assert spans["sdk"]["attributes"] == {"a": [1]} and spans["sdk"]["scope"] == "other"
    assert spans["sdk"]["resource"]["service.name"] == "sdk"
    assert spans["lean"]["resource"]["service.name"] == "lean"


def test_spans_ended_on_the_writers_thread_are_encoded_there_in_order(tmp_path: Path) -> None:
    writer = OtlpJsonSpanWriter(tmp_path / "traces.jsonl", interval_s=3600, inline=8)
    tracer = LightTracer(Resource.create({}), [writer])
    names = []

    def end(name: str) -> None:
        names.append(name)
        tracer.start_span(name).end()

    for n in range(7):
        end(f"a{n}")
    assert len(writer._queue) == 7 and not writer._lines  # fewer than ``inline``: waiting
    # Ended on another thread: queued, not encoded there; the next span on the writer's own
    # thread takes them along, in the order they ended.
    other = threading.Thread(target=lambda: [end(f"b{n}") for n in range(12)])
    other.start()
    other.join()
    assert len(writer._queue) == 19 and not writer._lines
    end("c0")
    assert len(writer._queue) == 12 and len(writer._lines) == 1  # one line of eight
    assert writer._lines[0][1] == 8
    assert not (tmp_path / "traces.jsonl").read_bytes()  # written by the writer thread
    writer.force_flush()
    assert not writer._queue and not writer._lines
    assert [s["name"] for s in read_spans(tmp_path)] == names
    writer.shutdown()


def test_large_spans_are_encoded_a_few_at_a_time_on_the_loop(tmp_path: Path) -> None:
    writer = OtlpJsonSpanWriter(tmp_path / "traces.jsonl", interval_s=3600, inline=8)
    tracer = LightTracer(Resource.create({}), [writer])

    def end(n: int, size: int) -> None:
        for _ in range(n):
            tracer.start_span("chat", attributes={"content": "x" * size}).end()

    end(8, 100_000)  # one line of eight, 800 KB: the next lines hold two each (256 KB)
    end(4, 100_000)
    end(2, 100)  # small again: back to eight at a time
    end(8, 100)
    assert [n for _, n in writer._lines] == [8, 2, 2, 2, 8]
    writer.force_flush()
    assert len(read_spans(tmp_path)) == 8 + 4 + 2 + 8
    writer.shutdown()


def test_a_span_the_encoder_cannot_write_is_dropped_alone_and_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for inline in (1, 0):  # encoded as it ends, and by the writer's drain
        writer = OtlpJsonSpanWriter(tmp_path / f"{inline}.jsonl", interval_s=3600, inline=inline)
        tracer = LightTracer(Resource.create({}), [writer])
        bad = tracer.start_span("bad")
        bad.set_attribute(object(), "a key that is not text")  # type: ignore[arg-type]
        tracer.start_span("before").end()
        bad.end()  # no exception here
        tracer.start_span("after").end()
        worse = tracer.start_span("worse")
        worse.set_attribute(object(), "x")  # type: ignore[arg-type]
        worse.end()
        writer.force_flush()
        assert writer.dropped == 2
        writer.shutdown()
        names = [s["name"] for s in read_spans(tmp_path / f"{inline}.jsonl")]
        assert names == ["before", "after"]
    # One error a writer: the first span it could not encode.
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 2 and all("could not encode the span" in e for e in errors)


def test_traceparents_parse_once_and_refuse_the_malformed() -> None:
    good = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    ctx = span_context(good)
    assert ctx is not None and ctx.trace_id == int("ab" * 16, 16) and ctx.trace_flags.sampled
    assert span_context(good) is ctx  # the cached one
    for bad in ("", None, "00-xyz", "01-" + "ab" * 16 + "-" + "cd" * 8 + "-01",
                "00-" + "0" * 32 + "-" + "cd" * 8 + "-01", "00-" + "zz" * 16 + "-" + "cd" * 8 + "-01"):  # fmt: skip
        assert span_context(bad) is None
        assert span_context(bad) is None


def test_the_traced_bus_stamps_and_parents_as_before(tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        tracing = Tracing(tmp_path, metrics=False, messages=True)
        tracing.activate()
        bus = TracedBus(LocalBus())
        sub = bus.subscribe("parley/r/e/#")
        tracer = tracing.tracer
        got: dict[str, Any] = {}
        with tracer.start_as_current_span("turn") as turn:
            event = note("hi")
            await bus.publish("parley/r/e/transcript", event)
            got["event"] = (event.traceparent, inject(turn))
        request = TurnRequest(run="r", episode="e", sender="gm", turn=1, role="solver")
        request.traceparent = inject(turn)
        await bus.publish("parley/r/e/agent/solver", request)  # no current span: a publish
        got["request"] = request.traceparent  # span under the traceparent it came with
        plain = note("later")
        plain.traceparent = inject(turn)
        await bus.publish("parley/r/e/transcript", plain)  # no span: as it came
        got["plain"] = plain.traceparent
        untraced = note("none")
        await bus.publish("parley/r/e/transcript", untraced)
        got["untraced"] = untraced.traceparent
        # Under a span that is not a lean one (the SDK's: a user's own tracer), the event
        # carries that span's traceparent, made the API's way.
        from opentelemetry.sdk.trace import TracerProvider

        with TracerProvider().get_tracer("user").start_as_current_span("theirs") as theirs:
            foreign = note("theirs")
            await bus.publish("parley/r/e/transcript", foreign)
        ctx = theirs.get_span_context()
        got["foreign"] = (
            foreign.traceparent,
            f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}",
        )
        got["turn"] = turn.get_span_context()
        got["delivered"] = [(await asyncio.wait_for(sub.get(), 1)).message for _ in range(5)]
        await bus.close()
        tracing.close()
        return got

    got = asyncio.run(main())
    assert got["event"][0] == got["event"][1]
    assert got["plain"] == got["event"][1] and got["untraced"] is None
    assert got["foreign"][0] == got["foreign"][1]
    spans = read_spans(tmp_path)
    (publish,) = [s for s in spans if s["name"].startswith("publish ")]
    assert publish["name"] == "publish parley/{run}/{episode}/agent/solver"
    assert publish["parent_id"] == f"{got['turn'].span_id:016x}"
    assert got["request"].split("-")[2] == publish["span_id"]
    assert publish["attributes"]["messaging.destination.name"] == "parley/r/e/agent/solver"
    assert all(isinstance(m, (TranscriptEvent, TurnRequest)) for m in got["delivered"])


def test_light_span_is_what_the_writer_checks_for() -> None:
    span = LightTracer(Resource.create({}), []).start_span("x")
    assert type(span) is LightSpan and span.is_recording()


def test_a_lean_span_encodes_as_the_same_span_read_through_the_sdk() -> None:
    from opentelemetry.sdk.trace import ReadableSpan

    sink = Sink()
    tracer = LightTracer(Resource.create({"service.name": "t"}), [sink])
    root = tracer.start_span("root", attributes={"n": 1})
    kinds = (trace.SpanKind.CLIENT, trace.SpanKind.PRODUCER, trace.SpanKind.CONSUMER)
    for kind in kinds:
        tracer.start_child("child", root.get_span_context(), kind, {"s": "x"}).end()
    unset = tracer.start_span("unset")
    unset.set_status(trace.Status(trace.StatusCode.UNSET))  # another UNSET than the shared one
    unset.end()
    failed = tracer.start_span("failed")
    failed.set_status(trace.StatusCode.ERROR, "bad")
    failed.end()
    root.end()
    # The same spans as the SDK's ReadableSpan: the writer reads them through the properties.
    readable = [
        ReadableSpan(
            name=s.name,
            context=s.get_span_context(),
            parent=s.parent,
            resource=s.resource,
            attributes=dict(s.attributes),
            events=s.events,
            links=s.links,
            kind=s.kind,
            status=s.status,
            start_time=s.start_time,
            end_time=s.end_time,
            instrumentation_scope=s.instrumentation_scope,
        )
        for s in sink.spans
    ]
    encoder = Encoder()
    for _ in range(2):  # the second time with the trace id's hex cached
        assert encoder.line(sink.spans) == encoder.line(readable)
    spans = spans_of(encoder.line(sink.spans))
    assert [s["kind"] for s in spans[:3]] == [3, 4, 5]
    assert all(s["parentSpanId"] == f"{root.get_span_context().span_id:016x}" for s in spans[:3])
    assert "parentSpanId" not in spans[-1] and spans[-1]["name"] == "root"


def test_traceparents_with_any_flags_and_odd_digits_parse_as_the_api_would() -> None:
    from opentelemetry.trace import SpanContext, TraceFlags

    ids = "ab" * 16 + "-" + "cd" * 8
    for flags in ("00", "01", "03", "ff"):
        ctx = span_context(f"00-{ids}-{flags}")
        expected = SpanContext(
            int("ab" * 16, 16), int("cd" * 8, 16), True, TraceFlags(int(flags, 16))
        )
        assert ctx == expected and ctx is not None
        assert ctx.is_valid and ctx.is_remote and ctx.trace_flags == int(flags, 16)
        assert ctx.trace_flags.sampled == bool(int(flags, 16) & 1)
    # Shapes and digits that name no valid span: an empty trace id, a trace or span id of
    # zeros (well-formed, so only the range check refuses them).
    for bad in ("00-" + "-" + "1" * 31 + "-" + "cd" * 8 + "-01", "00-" + "ab" * 16 + "-" + "0" * 16 + "-01", "00-" + "0" * 32 + "-" + "cd" * 8 + "-01"):  # fmt: skip
        assert span_context(bad) is None


def test_a_traceparent_made_here_comes_back_as_the_context_parsing_would_give() -> None:
    from parley.observability.tracing import _parsed

    span = LightTracer(Resource.create({}), []).start_span("turn")
    traceparent = inject(span)
    assert traceparent is not None
    kept, parsed = span_context(traceparent), _parsed(traceparent)
    assert kept is not None and parsed is not None and kept == parsed
    assert known(traceparent) is kept  # taken from what this process stamped, not parsed
    assert kept.is_remote and kept.is_valid and kept.trace_flags.sampled
    assert (kept.trace_id, kept.span_id) == (
        span.get_span_context().trace_id,
        span.get_span_context().span_id,
    )
    assert kept.trace_state == parsed.trace_state
    # A traceparent that leaves the process and never comes back (a model request's header,
    # agents/backends/spans.py) is made but not kept.
    header = LightTracer(Resource.create({}), []).start_span("chat").traceparent()  # type: ignore[attr-defined]
    assert known(header) is None
    assert span_context(header) is not None and known(header) is not None  # parsed, then kept


def test_lists_of_strings_encode_the_same_from_the_cache() -> None:
    sink = Sink()
    tracer = LightTracer(Resource.create({}), [sink])
    cases: list[Any] = [["stop"], ("stop",), [], ["a", "b"], ["a", 1], [1], [True], [1.0], [-0.0]]
    # An item of a str subclass equals its string: not served what ["alice"] left cached.
    cases += [["alice"], [OldName.ALICE]]
    for value in cases * 2:  # the second time from the cache
        tracer.start_span("s", attributes={"v": value, "n": 1}).end()
    encoded = spans_of(Encoder().line(sink.spans))
    for span, value in zip(encoded, cases * 2, strict=True):
        assert span["attributes"][0]["value"] == json.loads(orjson.dumps(any_value(value)))
