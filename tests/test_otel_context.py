"""parley.otel_context reads what the OpenTelemetry API would: the current context's span and
baggage, directly from the SDK's context variable and through the API where there is none."""

from __future__ import annotations

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider

from parley import otel_context as fast


@pytest.mark.parametrize("direct", [True, False], ids=["context-variable", "api"])
def test_span_and_baggage_read_as_the_api_reads_them(
    direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not direct:  # another runtime context: every read goes through the API
        monkeypatch.setattr(fast, "context_var", None)
    else:
        assert fast.context_var is not None  # the SDK's usual runtime context
    assert fast.current_context().get(fast.SPAN_KEY) is None
    assert fast.baggage_value("parley.content") is None
    span = TracerProvider().get_tracer("t").start_span("s")
    token = otel_context.attach(baggage.set_baggage("parley.content", "1"))
    try:
        with trace.use_span(span, end_on_exit=True):
            assert fast.current_context().get(fast.SPAN_KEY) is trace.get_current_span() is span
            assert fast.current_context() == otel_context.get_current()
            assert fast.baggage_value("parley.content") == baggage.get_baggage("parley.content")
            assert fast.baggage_value("parley.content") == "1"
            assert fast.baggage_value("absent") is None
    finally:
        otel_context.detach(token)
    assert fast.current_context().get(fast.SPAN_KEY) is None
    assert fast.baggage_value("parley.content") is None
