"""Server dialects: what each server's answers say it is, what follows from it, and, against
the stand-in server as its own process, the probe, the constraint form a dialect gets, the
config's override, a context that the prompt does not fit (never sent), and the response
cache keeping sampled repetitions apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends import dialect
from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.config import load_config
from tests.backends.conftest import model, play, transcript, wire_config

pytestmark = pytest.mark.anyio

URL = "http://gpu-1:8000/v1"


def _models(owner: str, **fields: Any) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": owner, **fields}]}


@pytest.mark.parametrize(
    ("answers", "expected", "context", "constraint"),
    [
        (  # llama.cpp: /props, and n_ctx of a slot
            {
                "/props": {
                    "default_generation_settings": {"n_ctx": 2048},
                    "modalities": {"vision": False},
                    "build_info": "b6000",
                },
                "/v1/models": _models("llamacpp", meta={"n_ctx": 2048}),
            },
            "llamacpp",
            2048,
            "json_schema",
        ),
        (  # vLLM: /version, and max_model_len in its model list
            {"/version": {"version": "0.11.0"}, "/v1/models": _models("vllm", max_model_len=32768)},
            "vllm",
            32768,
            "choice",
        ),
        ({"/v1/models": _models("sglang", max_model_len=8192)}, "sglang", 8192, "json_schema"),
        (
            {"/api/version": {"version": "0.9.0"}, "/v1/models": _models("library")},
            "ollama",
            None,
            "json_schema",
        ),
        (
            {"/info": {"model_id": "m", "max_total_tokens": 4096, "version": "3.3.0"}},
            "tgi",
            4096,
            "json_schema",
        ),
        ({"/v1/models": _models("organization_owner")}, "lmstudio", None, "json_schema"),
        ({"/v1/models": _models("someone")}, "unknown", None, "json_schema"),
        ({}, "unknown", None, "json_schema"),
    ],
)
def test_answers_name_the_server(
    answers: dict[str, Any], expected: str, context: int | None, constraint: str
) -> None:
    info = dialect.identify("openai", URL, answers, "m")
    assert info.dialect == expected
    assert info.source == "probe"
    assert info.context_size == context
    assert info.constraint == constraint
    assert info.record()["dialect"] == expected


def test_hosts_and_the_config_need_no_probe() -> None:
    assert dialect.known("openai", "https://api.openai.com/v1").dialect == "openai"  # type: ignore[union-attr]
    assert dialect.known("anthropic", "https://example.org").constraint is None  # type: ignore[union-attr]
    assert dialect.known("openai", URL) is None
    fixed = dialect.known("openai", URL, "llamacpp")
    assert fixed is not None and (fixed.dialect, fixed.source) == ("llamacpp", "config")


async def test_the_stand_in_server_is_probed_as_vllm(sim: SimServerProcess) -> None:
    info, answers = await dialect.probe("openai", sim.openai_url, "solver-m")
    assert info.dialect == "vllm" and info.evidence == "GET /version"
    assert answers["/v1/models"]["data"]
    # A server that is not there: unknown, never an exception.
    gone, _ = await dialect.probe("openai", "http://127.0.0.1:9/v1", "m", timeout_s=1.0)
    assert gone.dialect == "unknown"


def _tictactoe(models: dict[str, Any]) -> Any:
    return load_config(
        {
            "name": "dialect",
            "games": [
                {
                    "game": "playground.tictactoe.e2e",
                    "seeds": [0],
                    "pairings": [{"player": "chatty", "opponent": "random"}],
                    "settings": {"variant": "text", "max_invalid": 2},
                    "constrain": "legal_actions",
                }
            ],
            "models": models,
        }
    )


@pytest.mark.parametrize(
    ("setting", "field"),
    [("auto", "structured_outputs.choice"), ("llamacpp", "response_format.json_schema")],
)
async def test_the_constraint_goes_in_the_dialect_of_the_server(
    sim: SimServerProcess, tmp_path: Path, setting: str, field: str
) -> None:
    """``constrain_via: auto`` sends what the server's dialect honours: the stand-in answers
    as vLLM does; told it is llama.cpp (``dialect:``), it gets the JSON schema instead."""
    sim.configure(models={"chatty-m": {"text": "I am thinking about it."}})
    models = {"chatty": model(sim, "chatty-m", images=False, dialect=setting)}
    records = await play(_tictactoe(models), tmp_path)
    stats = sim.stats()
    assert stats["constrained"] == stats["requests"] > 0
    assert {c["field"] for c in stats["constraints"]} == {field}
    via = {"auto": "choice", "llamacpp": "json_schema"}[setting]
    replies = [
        m
        for m in transcript(tmp_path, records[0]["episode"])
        if m["kind"] == "turn_response" and m["role"] == "player"
    ]
    assert replies
    for m in replies:
        assert m["calls"][0]["constraint"]["via"] == via
        assert "constraint_honoured" not in m["calls"][-1]
    endpoints = json.loads((tmp_path / "run.json").read_text())["endpoints"]["chatty"]
    assert endpoints[0]["server"]["dialect"] == ("vllm" if setting == "auto" else setting)


async def test_a_reply_outside_a_sent_constraint_is_flagged(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    """A server that receives the constraint and answers outside it anyway (as llama.cpp
    does with vLLM's fields): every such call record says so."""
    sim.configure(models={"chatty-m": {"text": "No moves from me."}}, honour_constraints=False)
    models = {"chatty": model(sim, "chatty-m", images=False)}
    records = await play(_tictactoe(models), tmp_path)
    calls = [
        call
        for m in transcript(tmp_path, records[0]["episode"])
        if m["kind"] == "turn_response" and m["role"] == "player"
        for call in m["calls"]
    ]
    assert calls and all(c["constrained"] is True for c in calls)
    assert all(c.get("constraint_honoured") is False for c in calls)


async def test_a_prompt_over_the_declared_context_is_never_sent(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    models = {
        "solver": model(sim, "solver-m", images=False, context_size=40),
        "expert": model(sim, "expert-m"),
    }
    config = wire_config(
        models,
        [{"solver": "solver", "expert": "scripted"}],
        seeds=[0],
        settings={"variant": "text"},
    )
    records = await play(config, tmp_path)
    (record,) = records
    assert record["outcome"] == "error"
    assert record["reason_code"] == "context_exceeded"
    assert "over the model's context of 40 tokens" in record["reason"]
    assert sim.stats().get("requests", 0) == 0


@pytest.mark.parametrize("temperature", [0.0, 0.7])
async def test_sampled_repetitions_are_their_own_draws_in_the_cache(
    sim: SimServerProcess, tmp_path: Path, temperature: float
) -> None:
    """With ``temperature > 0`` two repetitions of one seed are two draws: the second does
    not replay the first's reply. Greedy sampling gives one reply, which they share. A rerun
    replays every reply either way."""
    cache = tmp_path / "cache.sqlite"
    params = {"temperature": temperature, "max_tokens": 64}
    models = {
        "solver": model(sim, "solver-m", images=False, params=params),
        "expert": model(sim, "expert-m", params=params),
    }
    config = load_config(
        {
            "name": "draws",
            "cache": str(cache),
            "concurrency": 1,  # one after the other: the first's replies are stored in time
            "games": [
                {
                    "game": "comma.wire",
                    "seeds": [0],
                    "repetitions": 2,
                    "pairings": [{"solver": "solver", "expert": "expert"}],
                    "settings": {"variant": "text"},
                }
            ],
            "models": models,
        }
    )
    first = await play(config, tmp_path / "first")
    assert len(first) == 2
    sent = sim.stats().get("requests", 0)
    per_episode = sum(c["requests"] for r in first for c in r["model_calls"].values()) / 2
    if temperature == 0.0:
        assert sent == per_episode  # the second repetition replayed the first
    else:
        assert sent == 2 * per_episode
    sim.reset()
    again = await play(config, tmp_path / "again")
    assert sim.stats().get("requests", 0) == 0
    assert sorted(r["main_score"] for r in again) == sorted(r["main_score"] for r in first)
