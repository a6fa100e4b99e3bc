"""Reasoning models and token accounting against the stand-in server: an OpenAI reasoning
model gets ``max_completion_tokens`` and no sampling parameters (the server refuses them, as
OpenAI does), its reasoning is kept in the turn's record and counted apart, and prompt-cache
tokens (Anthropic's and OpenAI's) are kept apart from the input and priced apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends.simserver import SimServerProcess
from parley.agents.backends.spec import ModelSpec, PriceSpec
from parley.agents.backends.transport import BACKENDS
from parley.bus.messages import PromptMessage, TextPart
from parley.runtime.report import build_report
from tests.backends.conftest import SOLVER_RULES, base_sim, model, play, transcript, wire_config

pytestmark = pytest.mark.anyio

SEEDS = [0, 1, 2]


def _body(spec: dict[str, Any], **params: Any) -> dict[str, Any]:
    model_spec = ModelSpec.model_validate({"base_url": "http://x/v1", **spec})
    messages = [PromptMessage(role="user", content=[TextPart(text="hi")])]
    body, _ = BACKENDS[model_spec.backend].body(
        messages, model_spec, model_spec.params.merged(params)
    )
    return body


def test_each_family_gets_only_the_parameters_it_takes() -> None:
    chat = _body({"model": "gpt-4o"}, max_tokens=100, top_p=0.9)
    assert (chat["max_tokens"], chat["temperature"], chat["top_p"]) == (100, 0.0, 0.9)
    assert "max_completion_tokens" not in chat
    for name in ("o1", "o3-mini", "o4-mini-2025-04-16", "gpt-5", "openai/gpt-5-mini"):
        body = _body({"model": name}, max_tokens=100, top_p=0.9, reasoning_effort="low")
        assert body["max_completion_tokens"] == 100, name
        assert body["reasoning_effort"] == "low"
        assert not {"max_tokens", "temperature", "top_p", "stop"} & set(body), name
    # max_completion_tokens wins where given; gpt-5's chat model is a chat model.
    assert _body({"model": "o3"}, max_completion_tokens=4000)["max_completion_tokens"] == 4000
    assert "temperature" in _body({"model": "gpt-5-chat-latest"})
    # Declared, not guessed: a served model of another name can be a reasoning one, and a
    # list names the parameters one by one.
    assert "temperature" not in _body({"model": "my-r1", "accepts": "reasoning"})
    custom = _body({"model": "m", "accepts": ["max_completion_tokens", "temperature"]})
    assert custom["temperature"] == 0.0 and "max_completion_tokens" in custom
    # Anthropic keeps its required max_tokens.
    assert (
        _body({"model": "claude-x", "backend": "anthropic"}, max_completion_tokens=64)["max_tokens"]
        == 64
    )
    with pytest.raises(ValueError, match="unknown parameter 'temprature'"):
        ModelSpec.model_validate({"model": "m", "accepts": ["temprature"]})


def _reasoning_sim(sim: SimServerProcess, **extra: Any) -> None:
    sim.configure(models={**base_sim()["models"], "o4-mini": {"rules": SOLVER_RULES}}, **extra)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_reasoning_model_plays_and_its_reasoning_is_kept_apart(
    sim: SimServerProcess, tmp_path: Path, stream: bool
) -> None:
    _reasoning_sim(sim)
    models = {
        "o4": model(sim, "o4-mini", images=False, stream=stream),
        "expert": model(sim, "expert-m"),
    }
    records = await play(
        wire_config(models, [{"solver": "o4", "expert": "expert"}], seeds=SEEDS), tmp_path
    )
    assert [r["outcome"] for r in records] == ["success"] * 3, [r["reason"] for r in records]
    stats = sim.stats()
    assert stats.get("unsupported_params", 0) == 0
    assert stats["reasoning_replies"] > 0
    # The chat model (the expert) still got temperature and max_tokens; the reasoning one
    # max_completion_tokens.
    assert stats["param_temperature"] == stats["model_expert-m"]
    assert stats["param_max_tokens"] == stats["model_expert-m"]
    assert stats["param_max_completion_tokens"] == stats["model_o4-mini"]
    for r in records:
        tokens = r["tokens"]["solver"]
        assert tokens["reasoning"] > 0
        assert tokens["output"] > tokens["reasoning"]  # reasoning is part of the output
        assert "reasoning" not in r["tokens"]["expert"]
        responses = [
            m
            for m in transcript(tmp_path, r["episode"])
            if m["kind"] == "turn_response" and m["role"] == "solver"
        ]
        assert responses
        for m in responses:
            thought = m["raw"]["choices"][0]["message"]["reasoning_content"]
            assert thought.startswith("Let me think about this")
            assert "Let me think" not in m["text"]  # the game sees the answer only
        calls = [c for m in responses for c in m["calls"]]
        assert sum(c["usage"]["reasoning"] for c in calls) == tokens["reasoning"]


async def test_the_server_refuses_sampling_parameters_for_a_reasoning_model(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    _reasoning_sim(sim)
    # Declared a chat model, the reasoning model gets temperature and max_tokens: refused.
    models = {"o4": model(sim, "o4-mini", images=False, accepts="chat")}
    records = await play(
        wire_config(models, [{"solver": "o4", "expert": "scripted"}], seeds=[0]), tmp_path
    )
    assert records[0]["outcome"] == "error"
    assert "refused the request" in records[0]["reason"]
    assert "'max_tokens' is not supported" in records[0]["reason"]
    assert sim.stats()["unsupported_params"] == 1  # refused, never retried


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
async def test_prompt_cache_tokens_are_kept_apart_and_priced(
    sim: SimServerProcess, tmp_path: Path, backend: str
) -> None:
    sim.configure(prompt_cache=True)
    price = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
    models = {
        "cached": model(sim, "solver-m", backend=backend, images=False, price=price),
        "expert": model(sim, "expert-m", backend=backend),
    }
    records = await play(
        wire_config(models, [{"solver": "cached", "expert": "expert"}], seeds=SEEDS), tmp_path
    )
    assert [r["outcome"] for r in records] == ["success"] * 3, [r["reason"] for r in records]
    totals = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
    for r in records:
        tokens = r["tokens"]["solver"]
        for key in totals:
            totals[key] += tokens.get(key, 0)
        # Per call: the input excludes what the cache served or stored.
        for m in transcript(tmp_path, r["episode"]):
            if m["kind"] == "turn_response" and m["role"] == "solver":
                usage = m["raw"]["usage"]
                (call,) = m["calls"]
                if backend == "anthropic":
                    assert call["usage"]["input"] == usage["input_tokens"]
                    read = usage["cache_read_input_tokens"]
                else:
                    read = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                    assert call["usage"]["input"] == usage["prompt_tokens"] - read
                assert call["usage"].get("cache_read", 0) == read
    # One system prompt for the game: written once, read after (OpenAI reports reads only).
    assert totals["cache_read"] > 0 and totals["input"] > 0
    if backend == "anthropic":
        assert 0 < totals["cache_write"] < totals["cache_read"]
    else:
        assert totals["cache_write"] == 0
    expected = PriceSpec.model_validate(price).cost(totals)
    # Defaults: reads at 0.1×, writes at 1.25× the input price.
    assert expected == pytest.approx(
        (
            totals["input"] * 3.0
            + totals["output"] * 15.0
            + totals["cache_read"] * 0.3
            + totals["cache_write"] * 3.75
        )
        / 1e6
    )
    report = build_report(tmp_path)
    row = next(line for line in report.splitlines() if line.startswith("| cached "))
    assert f"{expected:,.4f} USD" in row, row
    assert "cache read" in row
