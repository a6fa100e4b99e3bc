"""Chat requests and replies in the two wire formats: OpenAI chat completions (also vLLM,
SGLang, llama.cpp…) and Anthropic messages. Pure functions, no network."""

from __future__ import annotations

import base64
import io
import json
import re
import reprlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson

from parley.agents.backends.spec import GenerationParams, ModelSpec
from parley.bus.messages import ImagePart, PromptMessage, TextPart, Usage
from parley.tokens import count_tokens

IMAGE_TOKENS = 85  # a rough per-image cost, for the context-size check only
TURN_PROMPT = "(Your turn.)"
# Opens a conversation whose history starts with the model's own reply: chat APIs and
# templates want the first turn after the system text to be the user's.
OPENER = "(The conversation so far.)"
NO_IMAGES = "[image left out: this model takes no images]"
EARLIER_IMAGE = "[earlier image left out: over this model's image limit]"
MISSING_IMAGE = "[image not available]"

# A reply's text is cut past this many characters (the game sees no more; see
# EpisodeOptions.max_reply_chars), and so is every string of the raw response kept with it.
MAX_REPLY_CHARS = 100_000
# The raw response kept in the transcript: characters of text in all (each node counts one
# too), and how deep its containers may nest, beyond which parts are left out, marked.
RAW_BUDGET = 3 * MAX_REPLY_CHARS
RAW_DEPTH = 32


class BadResponse(ValueError):
    """A reply that is not what the API promises (not JSON, cut short, no text, a field of the
    wrong type). The parsers here raise nothing else, whatever the input."""


@dataclass
class Reply:
    """One successful model call.

    ``repaired``: characters replaced with U+FFFD because they were not valid text (lone
    surrogates, bytes that are not UTF-8); ``length``: the text's length before it was cut
    to :data:`MAX_REPLY_CHARS` (``None`` when it was not cut).
    """

    text: str
    usage: Usage | None
    finish_reason: str | None
    model: str
    raw: dict[str, Any]
    ttft_s: float | None = None
    repaired: int = 0
    length: int | None = None


# --- text hygiene ---------------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")
_SHOWN = reprlib.Repr()  # (keyword arguments only from Python 3.12)
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 2, 60, 60


def shown(value: Any) -> str:
    """A short, safe ``repr`` of a value from a response, for error messages (bounded in
    length and depth: a deeply nested value cannot blow the stack)."""
    return _SHOWN.repr(value)


def repair_text(text: str) -> tuple[str, int]:
    """``text`` with lone surrogates replaced by U+FFFD, and how many were replaced.

    JSON may escape half a surrogate pair (``"\\ud800"``), which Python decodes to a string
    that cannot be written as UTF-8. Halves of one pair that arrived apart (two streamed
    chunks) are joined back into their character.

    >>> repair_text("cut wire one \\ud800 please")
    ('cut wire one \ufffd please', 1)
    """
    if _SURROGATE.search(text) is None:
        return text, 0
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return fixed, fixed.count("\ufffd") - text.count("\ufffd")


def cut_marker(length: int) -> str:
    return f"[… cut here: {length} characters in all]"


def cut_text(text: str, limit: int = MAX_REPLY_CHARS) -> str:
    """``text`` if it is at most ``limit`` characters, else its first ``limit`` and a marker
    with the original length."""
    if len(text) <= limit:
        return text
    return text[:limit] + cut_marker(len(text))


class _Bounded:
    """A copy of a parsed JSON value that can be written anywhere: strings repaired and cut,
    at most :data:`RAW_BUDGET` characters and :data:`RAW_DEPTH` levels, plain JSON types only."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = RAW_BUDGET
        self.repaired = 0

    def text(self, value: str) -> str:
        value, repaired = repair_text(value)
        self.repaired += repaired
        keep = max(0, min(self.limit, self.left))
        self.left -= min(len(value), keep) + 1
        return cut_text(value, keep)

    def value(self, value: Any, depth: int = 0) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bool) or value is None:
            self.left -= 1
            return value
        if isinstance(value, int):
            self.left -= 1
            # orjson writes integers up to 64 bits; a bigger one is kept as text.
            return value if -(2**63) <= value < 2**64 else str(value)
        if isinstance(value, float):
            self.left -= 1
            return value
        if isinstance(value, dict | list):
            if depth >= RAW_DEPTH:
                return "[… nested too deep: left out]"
            return self.container(value, depth + 1)
        return self.text(type(value).__name__)  # not a JSON type: only its name is kept

    def container(self, value: dict[Any, Any] | list[Any], depth: int) -> Any:
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if self.left <= 0:
                    out["…"] = f"[… {len(value) - len(out)} more fields left out]"
                    break
                out[self.text(str(key))] = self.value(item, depth)
            return out
        items: list[Any] = []
        for item in value:
            if self.left <= 0:
                items.append(f"[… {len(value) - len(items)} more items left out]")
                break
            items.append(self.value(item, depth))
        return items


def bounded(data: dict[str, Any], limit: int = MAX_REPLY_CHARS) -> tuple[dict[str, Any], int]:
    """A response as it is kept in the transcript: every string repaired and cut at ``limit``,
    the whole bounded; and the number of characters repaired."""
    # Most responses need nothing: orjson refuses lone surrogates and integers over 64 bits,
    # and a body this small, with this few brackets, has no long string and no deep nesting.
    try:
        body = orjson.dumps(data)
    except (TypeError, orjson.JSONEncodeError):
        body = None
    if body is not None and len(body) <= limit and body.count(b"[") + body.count(b"{") <= RAW_DEPTH:
        return data, 0
    walker = _Bounded(limit)
    return walker.value(data), walker.repaired


def load_body(data: bytes) -> tuple[Any, int]:
    """A response body parsed as JSON, and how many characters were read as U+FFFD because
    their bytes were not UTF-8; raises :class:`BadResponse` when it is not JSON.

    orjson first (several times less CPU); the standard library for what orjson refuses (NaN,
    huge integers, lone surrogates), so that a body is refused only when it is not JSON at all.
    """
    try:
        return orjson.loads(data), 0
    except orjson.JSONDecodeError:
        pass
    try:
        text = data.decode("utf-8")
        repaired = 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        repaired = text.count("\ufffd") - data.count("\ufffd".encode())
    try:
        return json.loads(text), repaired
    except (ValueError, RecursionError) as exc:
        raise BadResponse(f"the body is not JSON: {type(exc).__name__}: {str(exc)[:200]}") from None


def _label(value: str) -> str:
    """A short string of a response (model name, finish reason), repaired and cut (a response
    that needs neither is left as it is: see bounded)."""
    return cut_text(repair_text(value)[0], 200)


def _int(value: Any, where: str) -> int:
    """A token count: a whole number ≥ 0, or absent."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
        return value
    raise BadResponse(f"{where} is {shown(value)}, expected a whole number of tokens")


def _opt_str(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise BadResponse(f"{where} is {shown(value)}, expected a string")


def _obj(value: Any, where: str) -> dict[str, Any]:
    """An object field that may be absent (``None`` reads as empty)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise BadResponse(f"{where} is {shown(value)}, expected an object")


def _finish(
    text: str,
    data: dict[str, Any],
    usage: Usage | None,
    finish_reason: Any,
    model: Any,
    where: str,
) -> Reply:
    """The reply of a parsed response: its raw record bounded, its text repaired and cut."""
    finish_reason = _opt_str(finish_reason, f"{where}finish_reason")
    model = _opt_str(model, "model")
    raw, repaired = bounded(data)
    length = len(text)
    if raw is not data:  # something in it needed repair or cutting: the text may too
        text = repair_text(text)[0]
        finish_reason = _label(finish_reason) if finish_reason else None
        model = _label(model) if model else ""
    return Reply(
        text=cut_text(text),
        usage=usage,
        finish_reason=finish_reason or None,
        model=model or "",
        raw=raw,
        repaired=repaired,
        length=length if length > MAX_REPLY_CHARS else None,
    )


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
    """System text, then (role, blocks) that alternate user/assistant from a user turn, as
    the Anthropic API and strict chat templates require: same-role neighbours merged, a
    history that opens with the model's own reply preceded by a neutral opener, a last
    message that is not the user's followed by a short turn prompt; images scaled and limited
    for ``spec`` (a note in their place for a model that takes none)."""
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
    if out and out[0][0] != "user":
        out.insert(0, ("user", [("text", OPENER)]))
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
    params: GenerationParams,
    spec: ModelSpec,
    system: str,
    turns: list[tuple[str, list[Block]]],
    estimate: int | None = None,
) -> int:
    """``max_tokens``, lowered so that prompt + reply fit the model's context (if declared);
    ``estimate``: the prompt's tokens, where already counted."""
    if spec.context_size is None:
        return params.max_tokens
    if estimate is None:
        estimate = estimate_tokens(system, turns)
    # The estimate is approximate (±15 %): leave that much room.
    room = spec.context_size - int(estimate * 1.15)
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
        if len(block) == 2:  # ("text", text); the length, not the tag, is what types narrow by
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
    """A chat completions request of ``system`` and ``turns`` as :func:`prepare` gives them
    (already alternating: sent in that order)."""
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
    """A chat completion; raises :class:`BadResponse` for anything that is not one."""
    if not isinstance(data, dict):
        raise BadResponse(f"expected a JSON object, got {type(data).__name__}")
    choices = data.get("choices")
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise BadResponse("the response has no choices")
    choice = choices[0]
    message = _obj(choice.get("message"), "choices[0].message")
    text = message.get("content")
    if text is None:
        # Reasoning servers may put everything in reasoning_content; a refusal has its own field.
        text = _opt_str(message.get("refusal"), "choices[0].message.refusal") or ""
    if isinstance(text, list):
        text = "".join(_part_text(p, i) for i, p in enumerate(text))
    elif not isinstance(text, str):
        raise BadResponse(
            f"choices[0].message.content is {shown(text)}, expected a string or a list of parts"
        )
    usage = _obj(data.get("usage"), "usage") if data.get("usage") is not None else None
    return _finish(
        text,
        data,
        Usage(
            # Prompt tokens the server's prompt cache served are counted apart (priced apart:
            # client.usage_details, PriceSpec).
            input_tokens=max(
                0,
                _int(usage.get("prompt_tokens"), "usage.prompt_tokens") - _cached_prompt(usage),
            ),
            output_tokens=_int(usage.get("completion_tokens"), "usage.completion_tokens"),
        )
        if usage
        else None,
        choice.get("finish_reason"),
        data.get("model"),
        "choices[0].",
    )


def _cached_prompt(usage: dict[str, Any]) -> int:
    """OpenAI's ``usage.prompt_tokens_details.cached_tokens`` (0 when absent or not a count)."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if isinstance(cached, int) and not isinstance(cached, bool) and 0 < cached < 2**63:
        return cached
    return 0


def _part_text(part: Any, index: int) -> str:
    if not isinstance(part, dict):
        return ""
    text = part.get("text", "")
    if not isinstance(text, str):
        raise BadResponse(
            f"choices[0].message.content[{index}].text is {shown(text)}, expected a string"
        )
    return text


class OpenAIStream:
    """Accumulates streamed chunks into one reply (and a raw record like a full response)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []  # vLLM/DeepSeek-style reasoning_content deltas
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model = ""
        self.id = ""
        self.chunks = 0
        self.repaired = 0  # characters repaired while the chunks were read (load_body)

    def add(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            raise BadResponse("a streamed chunk is not a JSON object")
        self.chunks += 1
        self.id = self.id or _opt_str(chunk.get("id"), "a chunk's id") or ""
        self.model = self.model or _opt_str(chunk.get("model"), "a chunk's model") or ""
        if chunk.get("usage"):
            self.usage = _obj(chunk["usage"], "a chunk's usage")
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise BadResponse(f"a chunk's choices is {shown(choices)}, expected a list")
        for choice in choices:
            choice = _obj(choice, "a chunk's choice")
            delta = _obj(choice.get("delta"), "a chunk's delta")
            content = _opt_str(delta.get("content"), "a chunk's delta.content")
            if content:
                self.text.append(content)
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(thought, str):
                self.reasoning.append(thought)
            finish = _opt_str(choice.get("finish_reason"), "a chunk's finish_reason")
            if finish:
                self.finish = finish

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
                    "message": {
                        "role": "assistant",
                        "content": text,
                        # Kept in the raw response (the turn's record), never in the reply.
                        **(
                            {"reasoning_content": "".join(self.reasoning)} if self.reasoning else {}
                        ),
                    },
                    "finish_reason": self.finish,
                }
            ],
            "usage": self.usage,
            "stream": {"chunks": self.chunks},
        }
        reply = parse_openai(raw)
        reply.ttft_s = ttft_s
        reply.repaired += self.repaired
        return reply


# --- Anthropic messages ---------------------------------------------------------------------


def _anthropic_content(blocks: list[Block]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for block in blocks:
        if len(block) == 2:  # ("text", text), as in _openai_content
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
    """A messages API request of ``system`` and ``turns`` as :func:`prepare` gives them
    (already alternating from a user turn, as the API requires)."""
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
    """A messages API reply; raises :class:`BadResponse` for anything that is not one."""
    if not isinstance(data, dict):
        raise BadResponse(f"expected a JSON object, got {type(data).__name__}")
    content = data.get("content")
    if not isinstance(content, list):
        raise BadResponse("the response has no content")
    texts: list[str] = []
    for i, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text", "")
            if not isinstance(text, str):
                raise BadResponse(f"content[{i}].text is {shown(text)}, expected a string")
            texts.append(text)
    usage = _obj(data.get("usage"), "usage") if data.get("usage") is not None else None
    if usage is not None:
        # Prompt-cache reads and writes are counted apart from the input (and priced apart:
        # client.usage_details, PriceSpec), but must still be token counts.
        for key in ("cache_read_input_tokens", "cache_creation_input_tokens"):
            _int(usage.get(key), f"usage.{key}")
    return _finish(
        "".join(texts),
        data,
        Usage(
            input_tokens=_int(usage.get("input_tokens"), "usage.input_tokens"),
            output_tokens=_int(usage.get("output_tokens"), "usage.output_tokens"),
        )
        if usage is not None
        else None,
        data.get("stop_reason"),
        data.get("model"),
        "",
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
        self.repaired = 0  # characters repaired while the events were read (load_body)

    def add(self, event: Any) -> None:
        if not isinstance(event, dict):
            raise BadResponse("a streamed event is not a JSON object")
        self.events += 1
        kind = event.get("type")
        if kind == "message_start":
            self.message = dict(_obj(event.get("message"), "message_start.message"))
            self.usage.update(_obj(self.message.get("usage"), "message_start.message.usage"))
        elif kind == "content_block_delta":
            delta = _obj(event.get("delta"), "content_block_delta.delta")
            if delta.get("type") == "text_delta":
                text = delta.get("text", "")
                if not isinstance(text, str):
                    raise BadResponse(f"a text delta is {shown(text)}, expected a string")
                self.text.append(text)
        elif kind == "message_delta":
            delta = _obj(event.get("delta"), "message_delta.delta")
            stop = _opt_str(delta.get("stop_reason"), "message_delta.delta.stop_reason")
            self.stop_reason = stop or self.stop_reason
            usage = _obj(event.get("usage"), "message_delta.usage")
            self.usage.update({k: v for k, v in usage.items() if v is not None})
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise BadResponse(f"the stream reported an error: {shown(event.get('error'))}")

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
        reply.repaired += self.repaired
        return reply
