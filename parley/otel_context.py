"""The current OpenTelemetry context and its baggage, read in one step.

The API reaches the current context through two calls (``get_current``, then the runtime
context's) and a baggage value through five; a traced model request asks for them several
times (issue 20). Where the runtime context is the SDK's usual context variable (it is unless
``OTEL_PYTHON_CONTEXT`` names another), these read it directly; otherwise they go through the
API. Both the observability layer (its lean tracer) and the agents (their chat spans) read the
context, so this lives in the package root, where every layer may import it.

    >>> from parley.otel_context import SPAN_KEY, baggage_value, current_context
    >>> current_context().get(SPAN_KEY) is None   # outside any span
    True
    >>> baggage_value("parley.content") is None
    True
"""

from __future__ import annotations

from typing import Any

from opentelemetry import baggage as otel_baggage
from opentelemetry import context as otel_context
from opentelemetry.context.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace.propagation import _SPAN_KEY

_runtime = otel_context._RUNTIME_CONTEXT
# The context variable the SDK keeps the current context in (None: another runtime context).
context_var: Any = (
    _runtime._current_context if isinstance(_runtime, ContextVarsRuntimeContext) else None
)
# The key a context holds its current span under (the API's own).
SPAN_KEY = _SPAN_KEY
_BAGGAGE_KEY = otel_baggage._BAGGAGE_KEY
_get_baggage = otel_baggage.get_baggage


def current_context() -> Context:
    """The current context (``opentelemetry.context.get_current()``)."""
    if context_var is None:
        return otel_context.get_current()
    found: Context = context_var.get()
    return found


def baggage_value(name: str) -> object:
    """``baggage.get_baggage(name)`` of the current context."""
    if context_var is None:
        return _get_baggage(name)
    found = context_var.get().get(_BAGGAGE_KEY)
    return found.get(name) if found else None
