"""Chat spans after the current GenAI conventions: the conversation (opt-in), the request's
parameters, the response id, server host and port, the cost; and the W3C traceparent of the
chat span sent to the model server (the sim server, a real HTTP process, records it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yarl

from parley.agents.backends.simserver import SimServerProcess
from parley.agents.backends.spec import PriceSpec
from parley.runtime.scheduler import run_experiment
from tests.observability.conftest import KEY_ENV, SECRET, config, model_entry, traces

pytestmark = pytest.mark.anyio

PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}


def chat_spans(run: Path) -> list[tuple[dict[str, Any], dict[str, dict[str, Any]]]]:
    found = []
    for spans in traces(run).values():
        by_id = {s["span_id"]: s for s in spans}
        found += [(s, by_id) for s in spans if s["name"].startswith("chat ")]
    return found


async def play(sim: SimServerProcess, run: Path, content: bool) -> dict[str, Any]:
    entry = model_entry(
        sim,
        "leaky-solver",
        params={"temperature": 0.7, "top_p": 0.9, "seed": 11, "max_tokens": 64},
        price=PRICE,
    )
    cfg = config(
        "comma.atm",
        [3],
        [{"solver": "leaky", "expert": "scripted"}],
        models={"leaky": entry},
        settings={"variant": "text", "max_turns": 2},
        tracing={"content": content},
    )
    outcome = await run_experiment(cfg, run)
    return outcome.records[0]


@pytest.mark.parametrize("content", [True, False])
async def test_chat_spans_carry_parameters_server_cost_and_opt_in_content(
    sim: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bool
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    record = await play(sim, tmp_path, content)
    chats = chat_spans(tmp_path)
    assert len(chats) == 2, record  # two solver turns
    url = yarl.URL(sim.openai_url)
    price = PriceSpec(**PRICE)
    ids = set()
    for span, by_id in chats:
        attrs = span["attributes"]
        assert by_id[span["parent_id"]]["name"] == "invoke_agent solver"
        assert attrs["gen_ai.request.temperature"] == pytest.approx(0.7)
        assert attrs["gen_ai.request.top_p"] == pytest.approx(0.9)
        assert attrs["gen_ai.request.seed"] == 11
        assert attrs["gen_ai.request.max_tokens"] == 64
        assert attrs["server.address"] == url.host and attrs["server.port"] == url.port
        assert attrs["gen_ai.response.id"]
        ids.add(attrs["gen_ai.response.id"])
        tokens = {
            "input": attrs["gen_ai.usage.input_tokens"],
            "output": attrs["gen_ai.usage.output_tokens"],
        }
        assert attrs["parley.cost_usd"] == pytest.approx(price.cost(tokens))
        assert attrs["parley.cost_usd"] > 0
        if not content:
            assert not any(
                k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.system")) for k in attrs
            )
            continue
        system = json.loads(attrs["gen_ai.system_instructions"])
        assert system and system[0]["type"] == "text" and system[0]["content"]
        inputs = json.loads(attrs["gen_ai.input.messages"])
        assert inputs and all(m["role"] in ("user", "assistant") for m in inputs)
        assert all(p["type"] == "text" for m in inputs for p in m["parts"])
        assert "PIN" in inputs[-1]["parts"][-1]["content"]  # what the sim server read it from
        (output,) = json.loads(attrs["gen_ai.output.messages"])
        assert output["role"] == "assistant" and output["finish_reason"] == "stop"
        assert output["parts"] == [{"type": "text", "content": output["parts"][0]["content"]}]
        assert output["parts"][0]["content"].startswith("Hi expert! My PIN is")
    assert len(ids) == 2  # one id per response


async def test_model_requests_carry_the_chat_spans_traceparent(
    sim: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    before = set(sim.stats()["traceparents"])
    await play(sim, tmp_path, content=False)
    received = [t for t in sim.stats()["traceparents"] if t not in before]
    chats = chat_spans(tmp_path)
    assert len(received) == len(chats) == 2
    sent = {}
    for header in received:
        version, trace_id, parent_id, flags = header.split("-")
        assert version == "00" and int(flags, 16) & 1  # sampled
        sent[parent_id] = trace_id
    # The header's parent id is the chat span's own id, in the chat span's trace.
    assert sent == {span["span_id"]: span["trace_id"] for span, _ in chats}


async def test_histograms_aggregated_by_the_run_reach_the_metrics_file(
    sim: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Histograms are aggregated by parley itself (metrics.py, LocalHistogram) and added to the
    # SDK's export: the file holds them beside the SDK's counters, consistent with the record.
    monkeypatch.setenv(KEY_ENV, SECRET)
    record = await play(sim, tmp_path, content=False)
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    metrics = {
        m["name"]: m["data"]
        for rm in last["resource_metrics"]
        for sm in rm["scope_metrics"]
        for m in sm["metrics"]
    }
    assert metrics["parley.episodes"]["data_points"][0]["value"] == 1
    calls = record["model_calls"]["solver"]
    (point,) = metrics["gen_ai.client.operation.duration"]["data_points"]
    assert point["attributes"] == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "leaky-solver",
    }
    assert point["count"] == calls["attempts"] == sum(point["bucket_counts"])
    assert point["sum"] == pytest.approx(calls["call_s"], abs=1e-3)
    assert 0 < point["min"] <= point["max"] <= point["sum"]
    bounds = point["explicit_bounds"]
    filled = [i for i, n in enumerate(point["bucket_counts"]) if n]
    assert bounds[filled[0] - 1] < point["min"] if filled[0] else True
    assert point["max"] <= bounds[filled[-1]] if filled[-1] < len(bounds) else True
    turns = metrics["parley.turn.duration"]["data_points"]
    assert sum(p["count"] for p in turns) == 2  # the model's two turns (scripted ones untimed)
    usage = {
        p["attributes"]["gen_ai.token.type"]: p
        for p in metrics["gen_ai.client.token.usage"]["data_points"]
    }
    assert usage["input"]["count"] == usage["output"]["count"] == 2
    assert usage["input"]["sum"] == record["tokens"]["solver"]["input"]
    assert sum(p["value"] for p in metrics["parley.turns"]["data_points"]) == record["turns"]
    tokens = {
        (p["attributes"]["parley.role"], p["attributes"]["gen_ai.token.type"]): p["value"]
        for p in metrics["parley.tokens"]["data_points"]
    }
    assert tokens[("solver", "output")] == record["tokens"]["solver"]["output"]
