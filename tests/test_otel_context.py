"""parley.otel_context reads what the OpenTelemetry API reads: the current context, its span
and its baggage, inside and outside a span."""

from __future__ import annotations

from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider

from parley import otel_context as ours


def test_span_and_baggage_read_as_the_api_reads_them() -> None:
    assert ours.current_context().get(ours.SPAN_KEY) is None
    assert not ours.current_span().get_span_context().is_valid
    assert ours.baggage_value("parley.content") is None
    span = TracerProvider().get_tracer("t").start_span("s")
    token = otel_context.attach(baggage.set_baggage("parley.content", "1"))
    try:
        with trace.use_span(span, end_on_exit=True):
            assert ours.current_context().get(ours.SPAN_KEY) is trace.get_current_span() is span
            assert ours.current_span() is span
            assert ours.current_context() == otel_context.get_current()
            assert ours.baggage_value("parley.content") == baggage.get_baggage("parley.content")
            assert ours.baggage_value("parley.content") == "1"
            assert ours.baggage_value("absent") is None
    finally:
        otel_context.detach(token)
    assert ours.current_context().get(ours.SPAN_KEY) is None
    assert ours.baggage_value("parley.content") is None


def test_the_span_key_is_the_one_the_api_writes() -> None:
    span = trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)
    context = trace.set_span_in_context(span, otel_context.Context())
    assert ours.SPAN_KEY in context
    assert context[ours.SPAN_KEY] is span
