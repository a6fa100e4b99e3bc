"""Hostile replies through the real stand-in server and a whole run: valid JSON of the wrong
shape is a bad response (retried, counted); a reply with a lone surrogate and a 2 MB reply each
end in a recorded episode, repaired or cut, with that written in the records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends.formats import MAX_REPLY_CHARS, cut_marker
from parley.agents.backends.simserver import SimServerProcess
from tests.backends.conftest import FAST_RETRY, failed_calls, model, play, transcript, wire_config

pytestmark = pytest.mark.anyio

COMPLETION = {
    "id": "chatcmpl-x",
    "object": "chat.completion",
    "model": "solver-m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1},
}
WRONG_SHAPES = {
    "usage_lots": {**COMPLETION, "usage": {"prompt_tokens": "lots", "completion_tokens": 1}},
    "message_string": {**COMPLETION, "choices": [{"index": 0, "message": "cut wire one"}]},
}
SEEDS = [0, 1]


@pytest.mark.parametrize(
    ("shape", "transport", "named"),
    [("usage_lots", "sdk", "usage.prompt_tokens"), ("message_string", "direct", "message")],
)
async def test_wrong_shapes_are_retried_as_bad_responses(
    sim: SimServerProcess, tmp_path: Path, shape: str, transport: str, named: str
) -> None:
    # The solver's first two requests get valid JSON of the wrong shape.
    sim.configure(
        faults=[{"kind": "body", "first": 2, "models": ["solver-m"], "body": WRONG_SHAPES[shape]}]
    )
    extra = {"retry": FAST_RETRY, "transport": transport}
    models = {
        "solver": model(sim, "solver-m", images=False, **extra),
        "expert": model(sim, "expert-m", **extra),
    }
    config = wire_config(models, [{"solver": "solver", "expert": "expert"}], seeds=SEEDS)
    records = await play(config, tmp_path)
    assert [r["outcome"] for r in records] == ["success"] * len(SEEDS), [
        (r["reason"], r["error"]) for r in records
    ]
    assert sim.stats()["fault_body"] == 2
    retried = sum(r["model_calls"]["solver"]["retries"].get("bad_response", 0) for r in records)
    assert retried == 2
    failed = failed_calls(tmp_path, records)
    assert [c["outcome"] for c in failed] == ["bad_response"] * 2
    assert all(named in c["error"] for c in failed), failed


async def test_a_model_that_only_sends_wrong_shapes_gives_up_counted(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    sim.configure(
        faults=[{"kind": "body", "models": ["solver-m"], "body": WRONG_SHAPES["usage_lots"]}]
    )
    models = {
        "solver": model(sim, "solver-m", images=False, retry={**FAST_RETRY, "max_attempts": 3})
    }
    config = wire_config(models, [{"solver": "solver", "expert": "scripted"}], seeds=[0])
    (record,) = await play(config, tmp_path)
    assert record["outcome"] == "error"
    assert "gave up after 3 attempts" in record["reason"] and "bad_response" in record["reason"]
    calls = record["model_calls"]["solver"]
    assert calls["requests"] == 1 and calls["attempts"] == 3
    assert calls["retries"] == {"bad_response": 2}  # the third was not tried again


def _solver_only(sim: SimServerProcess, reply: str) -> None:
    sim.configure(
        models={"solver-m": {"text": reply}, "expert-m": {"text": "Cut wire 1."}}, faults=[]
    )


def _responses(run: Path, record: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        m
        for m in transcript(run, record["episode"])
        if m["kind"] == "turn_response" and m["role"] == "solver"
    ]


@pytest.mark.parametrize(
    ("backend", "stream", "transport"),
    [("openai", False, "sdk"), ("anthropic", True, "direct")],
)
async def test_a_lone_surrogate_is_repaired_and_the_episode_recorded(
    sim: SimServerProcess, tmp_path: Path, backend: str, stream: bool, transport: str
) -> None:
    _solver_only(sim, "cut wire one \ud800 please")
    extra = {"stream": stream, "transport": transport}
    models = {
        "solver": model(sim, "solver-m", backend, images=False, **extra),
        "expert": model(sim, "expert-m", backend, **extra),
    }
    config = wire_config(
        models, [{"solver": "solver", "expert": "expert"}], seeds=[0], settings={"max_turns": 2}
    )
    (record,) = await play(config, tmp_path)
    assert record["outcome"] in ("lost", "aborted"), (record["reason"], record["error"])
    responses = _responses(tmp_path, record)
    assert len(responses) == 2  # max_turns
    assert record["model_calls"]["solver"]["repaired"] == len(responses)
    for response in responses:
        assert response["text"] == "cut wire one \ufffd please"
        assert response["calls"][-1]["repaired"] == 1
    # Every line of the run folder is valid UTF-8 JSON.
    for name in ("episodes.jsonl", "transcripts.jsonl"):
        for line in (tmp_path / name).read_bytes().splitlines():
            json.loads(line.decode("utf-8"))


async def test_a_2mb_reply_is_cut_everywhere_and_the_episode_recorded(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    huge = "cut " * 500_000
    _solver_only(sim, huge)
    models = {
        "solver": model(sim, "solver-m", images=False),
        "expert": model(sim, "expert-m"),
    }
    config = wire_config(
        models, [{"solver": "solver", "expert": "expert"}], seeds=[0], settings={"max_turns": 3}
    )
    (record,) = await play(config, tmp_path)
    assert record["outcome"] in ("lost", "aborted"), (record["reason"], record["error"])
    assert record["model_calls"]["solver"]["cut"] == len(_responses(tmp_path, record)) == 3
    kept = huge[:MAX_REPLY_CHARS] + cut_marker(len(huge))
    for response in _responses(tmp_path, record):
        assert response["text"] == kept
        assert response["raw"]["choices"][0]["message"]["content"] == kept
        assert response["calls"][-1]["cut"] == {"from": len(huge), "to": MAX_REPLY_CHARS}
        # The solver's own earlier replies in its recorded prompt are the cut ones.
        history = json.dumps(response["prompt"])
        assert huge[: MAX_REPLY_CHARS + 10] not in history
    events = [m for m in transcript(tmp_path, record["episode"]) if m["kind"] == "transcript_event"]
    assert any("cut to 100000 characters" in json.dumps(e) for e in events)
    # Three 2 MB replies, each in the text, the raw response and later prompts, would be
    # 10 MB and more; cut, the whole transcript stays near a megabyte.
    assert (tmp_path / "transcripts.jsonl").stat().st_size < 2_000_000
