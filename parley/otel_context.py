"""The current OpenTelemetry context and its baggage, through the OpenTelemetry API.

Both the observability layer and the agents (their chat spans) read the context, so this
lives in the package root, where every layer may import it.

    >>> from parley.otel_context import SPAN_KEY, baggage_value, current_context, current_span
    >>> current_context().get(SPAN_KEY) is None   # outside any span
    True
    >>> current_span().get_span_context().is_valid
    False
    >>> baggage_value("parley.content") is None
    True
"""

from __future__ import annotations

from opentelemetry import baggage as otel_baggage
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context.context import Context


def _span_key() -> str:
    """The key a context holds its current span under, learnt from what the API's own
    ``set_span_in_context`` writes into an empty context (the API exports no name for it)."""
    keys = list(trace.set_span_in_context(trace.INVALID_SPAN, Context()))
    if len(keys) != 1:  # an API that stores more than the span: no key to offer
        return ""
    return keys[0]


# Kept for readers of ``current_context().get(SPAN_KEY)``; :func:`current_span` says the same
# through the API.
SPAN_KEY = _span_key()


def current_context() -> Context:
    """The current context (``opentelemetry.context.get_current()``)."""
    return otel_context.get_current()


def current_span() -> trace.Span:
    """The current span (``opentelemetry.trace.get_current_span()``)."""
    return trace.get_current_span()


def baggage_value(name: str) -> object:
    """``baggage.get_baggage(name)`` of the current context."""
    return otel_baggage.get_baggage(name)
