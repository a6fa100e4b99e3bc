"""The model-response parsers are closed: whatever a server sends — valid replies with fields of
the wrong type, lone surrogates, huge or deeply nested values — they return a reply that can be
written anywhere, or raise BadResponse; nothing else. Pure functions, no network."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parley.agents.backends.formats import (
    MAX_REPLY_CHARS,
    AnthropicStream,
    BadResponse,
    OpenAIStream,
    Reply,
    cut_marker,
    load_body,
    parse_anthropic,
    parse_openai,
    repair_text,
)

# Strings a hostile or broken server may send: ordinary text, lone surrogate halves, empty.
hostile_text = st.text(max_size=12) | st.sampled_from(
    ["\ud800", "a\udc00b", "\ud83d", "\ude00", "\ufffd", "", "lots", "12", "-1"]
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | hostile_text
    | st.builds(dict)
    | st.builds(list),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
    max_leaves=6,
)

OPENAI = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": "cut wire one"}],
                "refusal": None,
            },
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}
ANTHROPIC = {
    "id": "msg_1",
    "type": "message",
    "model": "m",
    "content": [{"type": "text", "text": "cut wire one"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 12, "output_tokens": 3, "cache_read_input_tokens": 0},
}
OPENAI_CHUNKS = [
    {"id": "c", "model": "m", "choices": [{"delta": {"role": "assistant", "content": ""}}]},
    {"id": "c", "model": "m", "choices": [{"delta": {"content": "cut wire"}}]},
    {"id": "c", "model": "m", "choices": [{"delta": {}, "finish_reason": "stop"}]},
    {"id": "c", "model": "m", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}},
]
ANTHROPIC_EVENTS = [
    {"type": "message_start", "message": {"id": "m", "model": "m", "usage": {"input_tokens": 1}}},
    {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "cut wire"}},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
    {"type": "message_stop"},
]


@st.composite
def mutated(draw: st.DrawFn, template: Any) -> Any:
    """``template`` with some of its values (at any depth) replaced by arbitrary JSON values
    or dropped: replies that are nearly right, where parsers trip."""
    if isinstance(template, dict):
        out = {}
        for key, value in template.items():
            fate = draw(_fates)
            if fate == _DROP:
                continue
            out[key] = draw(json_values) if fate == _REPLACE else draw(mutated(value))
        return out
    if isinstance(template, list):
        return [
            draw(json_values) if draw(_fates) == _REPLACE else draw(mutated(v)) for v in template
        ]
    return template


# What becomes of a template's field: mostly kept (and looked into), sometimes replaced or dropped.
_REPLACE, _DROP = 0, 1
_fates = st.integers(0, 9)


def _deep(depth: int, leaf: Any = "x") -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def check_reply(reply: Reply) -> None:
    """A reply that every writer downstream can take: its text and labels are valid UTF-8,
    its raw record encodes with orjson (the result writer), and everything is bounded."""
    assert isinstance(reply.text, str) and isinstance(reply.model, str)
    reply.text.encode("utf-8")
    reply.model.encode("utf-8")
    if reply.finish_reason is not None:
        reply.finish_reason.encode("utf-8")
    assert len(reply.text) <= MAX_REPLY_CHARS + len(cut_marker(reply.length or 0))
    assert len(orjson.dumps(reply.raw)) < 8 * MAX_REPLY_CHARS
    if reply.usage is not None:
        assert reply.usage.input_tokens >= 0 and reply.usage.output_tokens >= 0


def closed(parse: Callable[[], Reply]) -> None:
    try:
        reply = parse()
    except BadResponse as exc:
        assert str(exc)  # says what was wrong
        return
    check_reply(reply)


FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.one_of(mutated(OPENAI), json_values))
def test_parse_openai_is_closed(data: Any) -> None:
    closed(lambda: parse_openai(data))


@FUZZ
@given(mutated(ANTHROPIC) | json_values)
def test_parse_anthropic_is_closed(data: Any) -> None:
    closed(lambda: parse_anthropic(data))


def _streamed(acc: OpenAIStream | AnthropicStream, items: list[Any]) -> Reply:
    for item in items:
        acc.add(item)
    return acc.reply(None)


@FUZZ
@given(st.tuples(*map(mutated, OPENAI_CHUNKS)).map(list) | st.lists(json_values, max_size=3))
def test_openai_stream_is_closed(chunks: Any) -> None:
    closed(lambda: _streamed(OpenAIStream(), chunks))


@FUZZ
@given(st.tuples(*map(mutated, ANTHROPIC_EVENTS)).map(list) | st.lists(json_values, max_size=3))
def test_anthropic_stream_is_closed(events: Any) -> None:
    closed(lambda: _streamed(AnthropicStream(), events))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | st.builds(lambda v: json.dumps(v).encode(), json_values))
def test_load_body_is_closed(body: bytes) -> None:
    with contextlib.suppress(BadResponse):
        data, repaired = load_body(body)
        assert repaired >= 0 and data is not body


@pytest.mark.parametrize(
    "data",
    [
        # The cases of issue 13, and what fuzzing found before the parsers were closed.
        {**OPENAI, "usage": {"prompt_tokens": "lots"}},
        {**OPENAI, "choices": [{"message": "cut wire one", "finish_reason": "stop"}]},
        {**OPENAI, "choices": [{"message": {"content": 5}}]},
        {**OPENAI, "choices": [{"message": {"content": [{"text": 5}]}}]},
        {**OPENAI, "choices": [{"message": {"content": "x"}, "finish_reason": ["stop"]}]},
        {**OPENAI, "usage": "lots"},
        {**OPENAI, "model": _deep(5000)},
    ],
)
def test_wrong_shapes_are_bad_responses(data: dict[str, Any]) -> None:
    with pytest.raises(BadResponse):
        parse_openai(data)


def test_deep_nesting_is_bad_json_or_left_out() -> None:
    with pytest.raises(BadResponse):
        load_body(b"[" * 100_000 + b"]" * 100_000)
    # Nesting JSON can hold is kept only to a depth every writer takes.
    reply = parse_openai({**OPENAI, "extra": _deep(900)})
    check_reply(reply)
    assert "nested too deep" in orjson.dumps(reply.raw).decode()
    with pytest.raises(BadResponse, match="a text delta"):
        AnthropicStream().add(
            {"type": "content_block_delta", "delta": {"type": "text_delta", "text": _deep(3000)}}
        )


def test_lone_surrogates_are_repaired_and_counted() -> None:
    body = json.dumps(
        {**OPENAI, "choices": [{"message": {"content": "cut wire one \ud800 please"}}]}
    ).encode()
    data, _ = load_body(body)
    reply = parse_openai(data)
    assert reply.text == "cut wire one \ufffd please"
    assert reply.repaired == 1
    check_reply(reply)
    # Halves of one pair streamed apart come back together.
    acc = OpenAIStream()
    for piece in ("smile \ud83d", "\ude00 \udc00", ""):
        acc.add({"choices": [{"delta": {"content": piece}}]})
    acc.add({"choices": [{"delta": {}, "finish_reason": "stop"}]})
    reply = acc.reply(None)
    assert reply.text == "smile \U0001f600 \ufffd"
    assert reply.repaired == 1
    assert repair_text("fine") == ("fine", 0)


def test_a_huge_reply_is_cut_everywhere_with_its_length_kept() -> None:
    text = "word " * 400_000  # 2 MB
    reply = parse_openai({**OPENAI, "choices": [{"message": {"content": text}}]})
    assert reply.length == len(text)
    assert reply.text == text[:MAX_REPLY_CHARS] + cut_marker(len(text))
    assert reply.raw["choices"][0]["message"]["content"] == reply.text
    check_reply(reply)
    # Many medium strings: the raw record as a whole stays bounded too.
    many = {**OPENAI, "logprobs": ["y" * 90_000] * 40}
    reply = parse_openai(many)
    check_reply(reply)
    assert "more items left out" in orjson.dumps(reply.raw).decode()
