"""The current OpenTelemetry context's span and baggage, read in one step.

The API reaches the current span through three calls (``get_current_span``, ``get_value``,
``get_current``) and a baggage value through five; a traced model request asks for them half
a dozen times (issue 20). Where the runtime context is the SDK's usual context variable (it is
unless ``OTEL_PYTHON_CONTEXT`` names another), these read it directly; otherwise they go
through the API. Both the observability layer (its lean tracer) and the agents (their chat
spans) read the context, so this lives in the package root, where every layer may import it.

    >>> from parley.otel_context import baggage_value, current_span
    >>> current_span().get_span_context().is_valid   # outside any span
    False
    >>> baggage_value("parley.content") is None
    True
"""

from __future__ import annotations

from typing import Any

from opentelemetry import baggage as otel_baggage
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace.propagation import _SPAN_KEY

_runtime = otel_context._RUNTIME_CONTEXT
# The context variable the SDK keeps the current context in (None: another runtime context).
context_var: Any = (
    _runtime._current_context if isinstance(_runtime, ContextVarsRuntimeContext) else None
)
_BAGGAGE_KEY = otel_baggage._BAGGAGE_KEY
_INVALID_SPAN = trace.INVALID_SPAN
_get_current_span = trace.get_current_span
_get_baggage = otel_baggage.get_baggage
SPAN_KEY = _SPAN_KEY


def current_context() -> Context:
    """The current context (``opentelemetry.context.get_current()``)."""
    if context_var is None:
        return otel_context.get_current()
    return context_var.get()  # type: ignore[no-any-return]


def current_span(context: Context | None = None) -> trace.Span:
    """``trace.get_current_span(context)``, read straight from the context."""
    if context is None:
        if context_var is None:
            return _get_current_span()
        context = context_var.get()
    span = context.get(_SPAN_KEY)
    if span is None:
        return _INVALID_SPAN
    return span if isinstance(span, trace.Span) else _INVALID_SPAN


def baggage_value(name: str) -> object:
    """``baggage.get_baggage(name)`` of the current context."""
    if context_var is None:
        return _get_baggage(name)
    found = context_var.get().get(_BAGGAGE_KEY)
    return found.get(name) if found else None
