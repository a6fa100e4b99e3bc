"""What a ``chat {model}`` span records, after the OpenTelemetry GenAI conventions.

Always: the request's sampling parameters (``gen_ai.request.temperature``, ``top_p``, ``seed``,
``max_tokens``), where it went (``server.address`` as the host alone, ``server.port``), the
response's id and, when the model entry declares a price, what the call cost
(``parley.cost_usd``, in the price's currency when it is not USD: ``parley.cost`` and
``parley.cost_currency``).

Only when the run opts in to content (``tracing: {content: true}``; the runtime says so
through the OpenTelemetry baggage, :data:`CONTENT_KEY`, so agents need not import the
observability package): the conversation as sent, ``gen_ai.system_instructions``,
``gen_ai.input.messages`` and ``gen_ai.output.messages``, JSON strings in the conventions'
shape (``{role, parts: [{type: "text", content}]}``; images as ``{type: "image", sha256,
mime_type}``, never their bytes). Built from the request body itself, so what a viewer shows
is what the server got.
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache
from typing import Any

import orjson
import yarl

from parley.otel_context import baggage_value, current_span

# Set (to "1") in the baggage around an agent's turn when the run records message content.
CONTENT_KEY = "parley.content"

_PARAMS = (
    ("temperature", "gen_ai.request.temperature", float),
    ("top_p", "gen_ai.request.top_p", float),
    ("seed", "gen_ai.request.seed", int),
)


def conversation_id() -> str | None:
    """The conversation (the episode) a model call belongs to: the ``gen_ai.conversation.id`` of
    the span it runs under (the agent's ``invoke_agent``), else the baggage's."""
    # A recording span's ``attributes`` (the SDK's and parley's lean ones: a read-only view of
    # its dict, no copy); a non-recording span has none.
    attributes = getattr(current_span(), "attributes", None)
    found = attributes.get("gen_ai.conversation.id") if attributes else None
    if found is None:
        found = baggage_value("gen_ai.conversation.id")
    return str(found) if found else None


def record_content() -> bool:
    """Whether the run in progress records message content (read from the baggage)."""
    return bool(baggage_value(CONTENT_KEY))


@lru_cache(maxsize=256)
def server_attributes(url: str) -> tuple[tuple[str, Any], ...]:
    """``server.address`` (host only) and ``server.port`` of an endpoint URL."""
    parsed = yarl.URL(url)
    out: list[tuple[str, Any]] = []
    if parsed.host:
        out.append(("server.address", parsed.host))
    if parsed.port:
        out.append(("server.port", int(parsed.port)))
    return tuple(out)


def request_attributes(body: dict[str, Any], url: str) -> dict[str, Any]:
    """The request's parameters and server, as span attributes (content not included)."""
    out: dict[str, Any] = dict(server_attributes(url))
    limit = body.get("max_tokens") or body.get("max_completion_tokens")
    if limit:
        out["gen_ai.request.max_tokens"] = int(limit)
    for key, name, kind in _PARAMS:
        value = body.get(key)
        if value is not None and not isinstance(value, bool):
            out[name] = kind(value)
    return out


def _image_part(data: str, mime_type: str) -> dict[str, Any]:
    try:
        digest = hashlib.sha256(base64.b64decode(data)).hexdigest()
    except ValueError:
        digest = ""
    return {"type": "image", "sha256": digest, "mime_type": mime_type}


def _parts(content: Any) -> list[dict[str, Any]]:
    """Provider content (OpenAI or Anthropic shape) as GenAI parts."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[dict[str, Any]] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "content": block.get("text", "")})
        elif kind == "image_url":  # OpenAI: a data URL
            url = str((block.get("image_url") or {}).get("url", ""))
            head, _, data = url.partition(",")
            mime = head.removeprefix("data:").split(";")[0] if head.startswith("data:") else ""
            parts.append(_image_part(data, mime) if data else {"type": "uri", "uri": url})
        elif kind == "image":  # Anthropic: a base64 source
            source = block.get("source") or {}
            parts.append(_image_part(str(source.get("data", "")), source.get("media_type", "")))
    return parts


def content_attributes(body: dict[str, Any]) -> dict[str, str]:
    """``gen_ai.system_instructions`` and ``gen_ai.input.messages`` of a request body."""
    system: list[dict[str, Any]] = []
    if body.get("system"):  # Anthropic: apart from the messages
        system += _parts(body["system"])
    messages = []
    for message in body.get("messages") or []:
        role = message.get("role", "user")
        if role in ("system", "developer"):
            system += _parts(message.get("content"))
            continue
        messages.append({"role": role, "parts": _parts(message.get("content"))})
    out = {"gen_ai.input.messages": orjson.dumps(messages).decode()}
    if system:
        out["gen_ai.system_instructions"] = orjson.dumps(system).decode()
    return out


def reply_attributes(reply: Any, content: bool, price: Any = None) -> dict[str, Any]:
    """The response's id, its cost when priced, and (with content) ``gen_ai.output.messages``."""
    out: dict[str, Any] = {}
    raw = reply.raw if isinstance(reply.raw, dict) else {}
    if raw.get("id"):
        out["gen_ai.response.id"] = str(raw["id"])
    usage = reply.usage
    if price is not None and usage is not None:
        tokens = {"input": usage.input_tokens, "output": usage.output_tokens}
        given = raw.get("usage")
        extra = given if isinstance(given, dict) else {}
        for key, field in (
            ("cache_read", "cache_read_input_tokens"),
            ("cache_write", "cache_creation_input_tokens"),
        ):
            if isinstance(extra.get(field), int):
                tokens[key] = extra[field]
        cost = float(price.cost(tokens))
        if str(getattr(price, "currency", "USD")).upper() == "USD":
            out["parley.cost_usd"] = cost
        else:
            out["parley.cost"] = cost
            out["parley.cost_currency"] = str(price.currency)
    if content:
        message: dict[str, Any] = {
            "role": "assistant",
            "parts": [{"type": "text", "content": reply.text}],
            "finish_reason": reply.finish_reason or "stop",
        }
        out["gen_ai.output.messages"] = orjson.dumps([message]).decode()
    return out


def traceparent(span: Any) -> dict[str, str] | None:
    """The W3C ``traceparent`` header naming ``span`` (None for an invalid one), so a server
    that traces (vLLM with ``--otlp-traces-endpoint``) joins the run's trace."""
    made = getattr(span, "traceparent", None)
    if made is not None:  # parley's lean span: made once, for the messages it sends too
        return {"traceparent": made()}
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return {"traceparent": f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"}
