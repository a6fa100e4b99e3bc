"""Chat requests and replies in the two wire formats: OpenAI chat completions (also vLLM,
SGLang, llama.cpp…) and Anthropic messages. Pure functions, no network."""

from __future__ import annotations

import base64
import io
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from parley.agents.backends.spec import GenerationParams, ModelSpec
from parley.bus.messages import ImagePart, PromptMessage, TextPart, Usage
from parley.tokens import count_tokens

IMAGE_TOKENS = 85  # a rough per-image cost, for the context-size check only
TURN_PROMPT = "(Your turn.)"
NO_IMAGES = "[image left out: this model takes no images]"
EARLIER_IMAGE = "[earlier image left out: over this model's image limit]"
MISSING_IMAGE = "[image not available]"


class BadResponse(ValueError):
    """A reply that is not what the API promises (not JSON, cut short, no text)."""


@dataclass
class Reply:
    """One successful model call."""

    text: str
    usage: Usage | None
    finish_reason: str | None
    model: str
    raw: dict[str, Any]
    ttft_s: float | None = None


@dataclass
class ImageReport:
    """What happened to the prompt's images on the way to a model."""

    sent: int = 0
    resized: int = 0
    dropped: int = 0
    notes: list[str] = field(default_factory=list)

    def record(self) -> dict[str, int]:
        return {"sent": self.sent, "resized": self.resized, "dropped": self.dropped}


class _Lru(OrderedDict[tuple[str, int], tuple[str, str, bool]]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: tuple[str, int], value: tuple[str, str, bool]) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


# Images come back turn after turn (history): encode each once per size.
_ENCODED = _Lru(512)


def _encoded(image: ImagePart, max_side: int | None) -> tuple[str, str, bool]:
    """(base64 data, media type, resized?) of an image, scaled to fit ``max_side``."""
    assert image.data is not None
    key = (image.sha256, max_side or 0)
    hit = _ENCODED.get(key)
    if hit is not None:
        return hit
    data, media, resized = image.data, image.media_type, False
    if max_side is not None:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            if max(img.size) > max_side:
                img.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
                out = io.BytesIO()
                img.save(out, format="PNG")
                data, media, resized = out.getvalue(), "image/png", True
    value = (base64.b64encode(data).decode("ascii"), media, resized)
    _ENCODED.put(key, value)
    return value


Block = tuple[str, str] | tuple[str, str, str]  # ("text", text) | ("image", b64, media type)


def prepare(
    messages: list[PromptMessage], spec: ModelSpec
) -> tuple[str, list[tuple[str, list[Block]]], ImageReport]:
    """System text, then (role, blocks) with same-role neighbours merged, images scaled and
    limited for ``spec``; a last message that is not the user's gets a short turn prompt."""
    report = ImageReport()
    system_parts: list[str] = []
    keep_from = 0
    if spec.images and spec.max_images is not None:
        total_images = sum(
            1 for m in messages if m.role != "system" for p in m.content if isinstance(p, ImagePart)
        )
        if total_images > spec.max_images:
            keep_from = total_images - spec.max_images  # keep the most recent ones
    seen_images = 0
    out: list[tuple[str, list[Block]]] = []
    for message in messages:
        if message.role == "system":
            system_parts += [p.text for p in message.content if isinstance(p, TextPart) and p.text]
            continue
        blocks: list[Block] = []
        for part in message.content:
            if isinstance(part, TextPart):
                if part.text:
                    blocks.append(("text", part.text))
                continue
            seen_images += 1
            if not spec.images:
                report.dropped += 1
                blocks.append(("text", NO_IMAGES))
            elif seen_images <= keep_from:
                report.dropped += 1
                blocks.append(("text", EARLIER_IMAGE))
            elif part.data is None:
                report.dropped += 1
                blocks.append(("text", MISSING_IMAGE))
            else:
                data, media, resized = _encoded(part, spec.max_image_side)
                report.sent += 1
                report.resized += int(resized)
                blocks.append(("image", data, media))
        if not blocks:
            continue
        if out and out[-1][0] == message.role:
            out[-1][1].extend(blocks)
        else:
            out.append((message.role, blocks))
    if not out or out[-1][0] != "user":
        out.append(("user", [("text", TURN_PROMPT)]))
    return "\n\n".join(system_parts), out, report


def estimate_tokens(system: str, turns: list[tuple[str, list[Block]]]) -> int:
    total = count_tokens(system)
    for _, blocks in turns:
        for block in blocks:
            total += count_tokens(block[1]) if block[0] == "text" else IMAGE_TOKENS
    return total


def fit_max_tokens(
    params: GenerationParams, spec: ModelSpec, system: str, turns: list[tuple[str, list[Block]]]
) -> int:
    """``max_tokens``, lowered so that prompt + reply fit the model's context (if declared)."""
    if spec.context_size is None:
        return params.max_tokens
    # The estimate is approximate (±15 %): leave that much room.
    room = spec.context_size - int(estimate_tokens(system, turns) * 1.15)
    return max(16, min(params.max_tokens, room))


# --- OpenAI chat completions ----------------------------------------------------------------


def _openai_content(blocks: list[Block]) -> str | list[dict[str, Any]]:
    for block in blocks:
        if block[0] != "text":
            break
    else:
        # Plain strings work with every OpenAI-compatible server, also text-only ones.
        return blocks[0][1] if len(blocks) == 1 else "\n\n".join(b[1] for b in blocks)
    content: list[dict[str, Any]] = []
    for block in blocks:
        if block[0] == "text":
            content.append({"type": "text", "text": block[1]})
        else:
            content.append(
                {"type": "image_url", "image_url": {"url": f"data:{block[2]};base64,{block[1]}"}}
            )
    return content


def openai_body(
    system: str,
    turns: list[tuple[str, list[Block]]],
    model: str,
    params: GenerationParams,
    max_tokens: int,
    stream: bool,
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    messages += [{"role": role, "content": _openai_content(blocks)} for role, blocks in turns]
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
    if params.temperature is not None:
        body["temperature"] = params.temperature
    if params.top_p is not None:
        body["top_p"] = params.top_p
    if params.stop:
        body["stop"] = list(params.stop)
    if params.seed is not None:
        body["seed"] = params.seed
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(params.extra)
    body.update(params.extra_body)
    return body


def parse_openai(data: Any) -> Reply:
    if not isinstance(data, dict):
        raise BadResponse(f"expected a JSON object, got {type(data).__name__}")
    choices = data.get("choices")
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise BadResponse("the response has no choices")
    message = choices[0].get("message") or {}
    text = message.get("content")
    if text is None:
        # Reasoning servers may put everything in reasoning_content; a refusal has its own field.
        text = message.get("refusal") or ""
    if isinstance(text, list):
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    usage = data.get("usage") or None
    return Reply(
        text=str(text),
        usage=Usage(
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
        )
        if isinstance(usage, dict)
        else None,
        finish_reason=choices[0].get("finish_reason"),
        model=str(data.get("model") or ""),
        raw=data,
    )


class OpenAIStream:
    """Accumulates streamed chunks into one reply (and a raw record like a full response)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model = ""
        self.id = ""
        self.chunks = 0

    def add(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            raise BadResponse("a streamed chunk is not a JSON object")
        self.chunks += 1
        self.id = self.id or str(chunk.get("id") or "")
        self.model = self.model or str(chunk.get("model") or "")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def reply(self, ttft_s: float | None) -> Reply:
        if self.finish is None:
            raise BadResponse(
                f"the stream ended without a finish reason after {self.chunks} chunks"
            )
        text = "".join(self.text)
        raw = {
            "id": self.id,
            "object": "chat.completion",
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": self.finish,
                }
            ],
            "usage": self.usage,
            "stream": {"chunks": self.chunks},
        }
        reply = parse_openai(raw)
        reply.ttft_s = ttft_s
        return reply


# --- Anthropic messages ---------------------------------------------------------------------


def _anthropic_content(blocks: list[Block]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for block in blocks:
        if block[0] == "text":
            content.append({"type": "text", "text": block[1]})
        else:
            content.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": block[2], "data": block[1]},
                }
            )
    return content


def anthropic_body(
    system: str,
    turns: list[tuple[str, list[Block]]],
    model: str,
    params: GenerationParams,
    max_tokens: int,
    stream: bool,
) -> dict[str, Any]:
    if turns and turns[0][0] != "user":
        # The messages API starts with the user; history that opens with our own reply gets a
        # neutral opener.
        turns = [("user", [("text", "(The conversation so far.)")]), *turns]
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [
            {"role": role, "content": _anthropic_content(blocks)} for role, blocks in turns
        ],
    }
    if system:
        body["system"] = system
    if params.temperature is not None:
        body["temperature"] = min(params.temperature, 1.0)  # Anthropic's range is 0–1
    if params.top_p is not None:
        body["top_p"] = params.top_p
    if params.stop:
        body["stop_sequences"] = list(params.stop)
    if stream:
        body["stream"] = True
    body.update(params.extra)
    body.update(params.extra_body)
    return body


def parse_anthropic(data: Any) -> Reply:
    if not isinstance(data, dict):
        raise BadResponse(f"expected a JSON object, got {type(data).__name__}")
    content = data.get("content")
    if not isinstance(content, list):
        raise BadResponse("the response has no content")
    text = "".join(
        b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
    )
    usage = data.get("usage")
    return Reply(
        text=text,
        usage=Usage(
            input_tokens=int(usage.get("input_tokens") or 0)
            + int(usage.get("cache_read_input_tokens") or 0)
            + int(usage.get("cache_creation_input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
        )
        if isinstance(usage, dict)
        else None,
        finish_reason=data.get("stop_reason"),
        model=str(data.get("model") or ""),
        raw=data,
    )


class AnthropicStream:
    """Accumulates streamed events into one reply."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.text: list[str] = []
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.stopped = False
        self.events = 0

    def add(self, event: Any) -> None:
        if not isinstance(event, dict):
            raise BadResponse("a streamed event is not a JSON object")
        self.events += 1
        kind = event.get("type")
        if kind == "message_start":
            self.message = dict(event.get("message") or {})
            self.usage.update(self.message.get("usage") or {})
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                self.text.append(delta.get("text", ""))
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update(
                {k: v for k, v in (event.get("usage") or {}).items() if v is not None}
            )
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise BadResponse(f"the stream reported an error: {event.get('error')}")

    def reply(self, ttft_s: float | None) -> Reply:
        if not self.stopped:
            raise BadResponse(f"the stream ended without message_stop after {self.events} events")
        raw = {
            **self.message,
            "content": [{"type": "text", "text": "".join(self.text)}],
            "stop_reason": self.stop_reason,
            "usage": self.usage,
            "stream": {"events": self.events},
        }
        reply = parse_anthropic(raw)
        reply.ttft_s = ttft_s
        return reply
