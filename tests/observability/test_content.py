"""Message content in spans only on request; images by hash; API keys nowhere."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from parley.agents.backends.simserver import SimServerProcess
from parley.observability.tracing import read_spans
from parley.runtime.report import write_report
from parley.runtime.results import RunFolder
from parley.runtime.scheduler import run_experiment
from tests.observability.conftest import (
    KEY_ENV,
    SECRET,
    Received,
    config,
    everything_written,
    model_entry,
)

pytestmark = pytest.mark.anyio


def utterances(run: Path) -> list[str]:
    folder = RunFolder(run)
    texts = []
    for record in folder.records():
        for m in folder.iter_transcript(record["episode"]):
            if m.get("event") == "utterance":
                texts += [
                    p["text"] for p in m["content"] if p["type"] == "text" and len(p["text"]) > 20
                ]
    return texts


@pytest.mark.parametrize("content", [False, True])
async def test_content_only_when_the_run_opts_in(tmp_path: Path, content: bool) -> None:
    cfg = config(
        "comma.wire",
        [0, 1],
        [{"solver": "scripted", "expert": "scripted"}],
        settings={"variant": "image"},
        tracing={"content": content},
    )
    outcome = await run_experiment(cfg, tmp_path)
    assert {r["outcome"] for r in outcome.records} == {"success"}
    traces = (tmp_path / "traces.jsonl").read_text()
    said = utterances(tmp_path)
    assert said  # the solver described the wires, the expert answered
    agents = [s for s in read_spans(tmp_path) if s["name"].startswith("invoke_agent")]
    assert agents
    if not content:
        assert "gen_ai.input.messages" not in traces and "gen_ai.output.messages" not in traces
        assert not [t for t in said if json.dumps(t)[1:-1] in traces]
        return
    for span in agents:
        attrs = span["attributes"]
        output = json.loads(attrs["gen_ai.output.messages"])
        assert output[0]["role"] == "assistant" and output[0]["parts"][0]["content"]
        inputs = json.loads(attrs["gen_ai.input.messages"])
        assert inputs[0]["role"] == "system"
    # What the roles said is in the spans; the solver's picture only by its hash.
    assert all(json.dumps(t)[1:-1] in traces for t in said)
    images = list((tmp_path / "images").glob("*.png"))
    assert images
    for image in images:
        assert image.stem in traces
        data = base64.b64encode(image.read_bytes()).decode()
        assert data[:40] not in traces
    assert "iVBORw0KGgo" not in traces  # no PNG anywhere, inlined as base64


async def test_an_api_key_is_never_written(
    sim: SimServerProcess,
    http_receiver: tuple[str, Received],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint, got = http_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = config(
        "comma.atm",
        [0],
        [{"solver": "leaky", "expert": "scripted"}],
        models={"leaky": model_entry(sim, "leaky-solver")},
        settings={"variant": "text", "max_turns": 2},
        tracing={"content": True},  # content on: the most that can be written
    )
    outcome = await run_experiment(cfg, tmp_path)
    assert outcome.records[0]["outcome"] == "lost", outcome.records[0]["reason"]
    assert sim.stats().get("unauthorised", 0) == 0  # the key was sent, and right
    write_report(tmp_path)
    written = everything_written(tmp_path)
    assert "chat leaky-solver" in written and KEY_ENV in written  # the variable's name only
    assert SECRET not in written and SECRET[-12:] not in written
    assert "authorization" not in written.lower() and "bearer" not in written.lower()
    # Nor in what went to the OTLP collector (spans with content, metrics, request headers).
    sent = b"".join(got.raw)
    assert b"chat leaky-solver" in sent and b"parley.episodes" in sent
    assert SECRET.encode() not in sent and b"bearer" not in sent.lower()
