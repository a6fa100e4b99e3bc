"""Request and reply formats of the two APIs, image handling, the adaptive limiter, and the
reading of Retry-After — pure functions, no network."""

from __future__ import annotations

import asyncio
import base64
import email.utils
import io
import itertools
import time

import pytest
from PIL import Image

from parley.agents.backends.formats import (
    EARLIER_IMAGE,
    NO_IMAGES,
    TURN_PROMPT,
    AnthropicStream,
    BadResponse,
    OpenAIStream,
    anthropic_body,
    fit_max_tokens,
    openai_body,
    parse_anthropic,
    parse_openai,
    prepare,
)
from parley.agents.backends.limiter import AdaptiveLimiter
from parley.agents.backends.retry import retry_after
from parley.agents.backends.spec import GenerationParams, ModelSpec
from parley.bus.messages import ImagePart, PromptMessage, TextPart


def _png(width: int, height: int, colour: tuple[int, int, int] = (200, 30, 30)) -> ImagePart:
    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, format="PNG")
    return ImagePart.from_bytes(out.getvalue())


def _msg(role: str, *parts: str | ImagePart) -> PromptMessage:
    return PromptMessage(
        role=role,  # type: ignore[arg-type]
        content=[TextPart(text=p) if isinstance(p, str) else p for p in parts],
    )


SPEC = ModelSpec(model="m", base_url="http://h/v1")
PROMPT = [
    _msg("system", "You are the solver."),
    _msg("user", "Expert: hello"),
    _msg("assistant", "I see wires."),
    _msg("user", "Expert: cut wire 2"),
    _msg("user", "Wire module", _png(40, 20)),
]


def test_openai_body_uses_data_urls_and_merges_same_role_messages() -> None:
    system, turns, report = prepare(PROMPT, SPEC)
    params = GenerationParams(
        temperature=0.3,
        max_tokens=64,
        stop=["\n\n"],
        seed=7,
        extra_body={"structured_outputs": {"regex": "cut_wire_[1-6]"}},
    )
    body = openai_body(system, turns, "m", params, 64, stream=False)
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert body["messages"][0]["content"] == "You are the solver."
    assert body["messages"][1]["content"] == "Expert: hello"  # text only: a plain string
    last = body["messages"][3]["content"]
    assert [p["type"] for p in last] == ["text", "text", "image_url"]
    url = last[2]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == PROMPT[4].content[1].data  # type: ignore[union-attr]
    assert body["temperature"] == 0.3 and body["stop"] == ["\n\n"] and body["seed"] == 7
    assert body["structured_outputs"] == {"regex": "cut_wire_[1-6]"}
    assert "stream" not in body
    assert report.record() == {"sent": 1, "resized": 0, "dropped": 0}
    streamed = openai_body(system, turns, "m", params, 64, stream=True)
    assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}


def test_anthropic_body_has_a_system_parameter_base64_blocks_and_alternating_roles() -> None:
    system, turns, _ = prepare(PROMPT, SPEC)
    params = GenerationParams(temperature=1.5, max_tokens=100, stop=["END"])
    body = anthropic_body(system, turns, "claude", params, 100, stream=False)
    assert body["system"] == "You are the solver."
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert all(a != b for a, b in itertools.pairwise(roles))
    image = body["messages"][2]["content"][2]
    assert image["type"] == "image"
    assert image["source"]["type"] == "base64" and image["source"]["media_type"] == "image/png"
    assert body["temperature"] == 1.0  # clamped to Anthropic's range
    assert body["stop_sequences"] == ["END"] and body["max_tokens"] == 100


def test_a_conversation_that_opens_or_ends_with_our_own_reply_is_made_valid() -> None:
    prompt = [_msg("system", "sys"), _msg("assistant", "I start.")]
    system, turns, _ = prepare(prompt, SPEC)
    assert turns[-1] == ("user", [("text", TURN_PROMPT)])
    body = anthropic_body(system, turns, "c", GenerationParams(), 10, stream=False)
    assert body["messages"][0]["role"] == "user"


def test_images_are_scaled_to_the_models_maximum_and_limited_to_the_latest() -> None:
    big = [_png(800, 400, (i * 40, 0, 0)) for i in range(3)]
    prompt = [_msg("system", "s"), _msg("user", "a", big[0]), _msg("assistant", "ok")]
    prompt += [_msg("user", "b", big[1], big[2])]
    spec = ModelSpec(model="m", base_url="http://h/v1", max_image_side=100, max_images=2)
    _, turns, report = prepare(prompt, spec)
    assert report.record() == {"sent": 2, "resized": 2, "dropped": 1}
    first = turns[0][1]
    assert first[1] == ("text", EARLIER_IMAGE)  # the oldest image went
    sent = [b for _, blocks in turns for b in blocks if b[0] == "image"]
    for block in sent:
        with Image.open(io.BytesIO(base64.b64decode(block[1]))) as img:
            assert max(img.size) == 100 and img.size == (100, 50)


def test_a_text_only_model_gets_no_image_but_a_note() -> None:
    spec = ModelSpec(model="m", base_url="http://h/v1", images=False)
    _, turns, report = prepare(PROMPT, spec)
    assert report.record() == {"sent": 0, "resized": 0, "dropped": 1}
    assert ("text", NO_IMAGES) in turns[-1][1]
    assert openai_body("", turns, "m", GenerationParams(), 5, False)["messages"][-1]["content"]


def test_max_tokens_is_lowered_to_fit_the_context() -> None:
    spec = ModelSpec(model="m", base_url="http://h/v1", context_size=300)
    system, turns, _ = prepare([_msg("system", "word " * 200), _msg("user", "hi")], spec)
    fitted = fit_max_tokens(GenerationParams(max_tokens=512), spec, system, turns)
    assert 16 <= fitted < 100
    roomy = ModelSpec(model="m", base_url="http://h/v1", context_size=100_000)
    assert fit_max_tokens(GenerationParams(max_tokens=512), roomy, system, turns) == 512


def test_replies_are_parsed_and_malformed_ones_rejected() -> None:
    reply = parse_openai(
        {
            "model": "m",
            "choices": [{"message": {"content": "cut_wire_2"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        }
    )
    assert (reply.text, reply.usage.input_tokens, reply.usage.output_tokens) == (
        "cut_wire_2",
        10,
        2,
    )  # type: ignore[union-attr]
    reply = parse_anthropic(
        {"model": "c", "content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": 3}}
    )
    assert reply.text == "hi" and reply.usage is not None and reply.usage.output_tokens == 0
    for bad in ([], {"choices": []}, {"choices": ["x"]}, "text"):
        with pytest.raises(BadResponse):
            parse_openai(bad)
    with pytest.raises(BadResponse):
        parse_anthropic({"content": "nope"})


def test_streams_must_finish() -> None:
    openai_stream = OpenAIStream()
    openai_stream.add({"model": "m", "choices": [{"delta": {"content": "cut_"}}]})
    with pytest.raises(BadResponse):
        openai_stream.reply(0.1)
    openai_stream.add({"choices": [{"delta": {"content": "wire_1"}, "finish_reason": "stop"}]})
    assert openai_stream.reply(0.1).text == "cut_wire_1"
    anthropic_stream = AnthropicStream()
    anthropic_stream.add(
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "a"}}
    )
    with pytest.raises(BadResponse):
        anthropic_stream.reply(None)
    with pytest.raises(BadResponse):
        anthropic_stream.add({"type": "error", "error": {"type": "overloaded_error"}})


def test_retry_after_in_seconds_milliseconds_and_dates() -> None:
    assert retry_after({"retry-after": "2.5"}) == 2.5
    assert retry_after({"retry-after-ms": "150", "retry-after": "9"}) == 0.15
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= (retry_after({"retry-after": future}) or 0) <= 31
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None


def test_the_limiter_shrinks_once_per_overload_and_grows_back_slowly() -> None:
    limiter = AdaptiveLimiter(start=20, minimum=2, maximum=24, decrease=0.8, cooldown_s=60)
    limiter.overloaded()
    limiter.overloaded()  # the same overload, within the cooldown: counted once
    assert limiter.current == 16 and limiter.shrinks == 1
    # Growth only while the limit holds requests back: +1 after about `limit` successes.
    limiter.in_flight = 16
    for _ in range(15):
        limiter.succeeded()
    assert limiter.current == 16
    for _ in range(2):
        limiter.succeeded()
    assert limiter.current == 17
    limiter.in_flight = 0
    for _ in range(100):
        limiter.succeeded()  # not limited: no growth
    assert limiter.current == 17
    limiter.cooldown_s = 0
    for _ in range(30):
        limiter.overloaded()
    assert limiter.current == 2  # never below the minimum


@pytest.mark.anyio
async def test_the_limiter_caps_requests_in_flight_first_come_first_served() -> None:
    limiter = AdaptiveLimiter(start=3)
    order: list[int] = []
    peak = 0

    async def job(i: int) -> None:
        nonlocal peak
        async with limiter:
            peak = max(peak, limiter.in_flight)
            order.append(i)
            await asyncio.sleep(0.01)

    await asyncio.gather(*(job(i) for i in range(12)))
    assert peak == 3 and order == list(range(12)) and limiter.in_flight == 0


@pytest.mark.anyio
async def test_try_acquire_takes_a_free_slot_but_never_one_a_waiter_is_owed() -> None:
    limiter = AdaptiveLimiter(start=1)
    assert limiter.try_acquire() and limiter.in_flight == 1 and limiter.peak == 1
    assert not limiter.try_acquire()
    waiter = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0)
    limiter.limit = 2.0  # a slot frees up, but the waiter came first
    assert not limiter.try_acquire()
    limiter.release()  # hands the freed slot to the waiter
    await waiter
    assert limiter.in_flight == 1 and limiter.waiting == 0
    assert limiter.try_acquire() and limiter.in_flight == 2
