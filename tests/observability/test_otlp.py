"""OTLP export through the standard OTEL_* variables, to receivers the tests start: OTLP/HTTP
(protobuf, decoded with opentelemetry-proto) and OTLP/gRPC (grpcio)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.observability.tracing import read_spans
from parley.runtime.scheduler import run_experiment
from tests.observability.conftest import config

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_spans_and_metrics_reach_an_otlp_receiver(
    protocol: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, got = request.getfixturevalue(
        "http_receiver" if protocol == "http/protobuf" else "grpc_receiver"
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    cfg = config(
        "comma.wire",
        [0, 1, 2],
        [{"solver": "scripted", "expert": "scripted"}],
        tracing={"messages": True},  # bus spans on the local bus too (default: only over MQTT)
    )
    outcome = await run_experiment(cfg, tmp_path)
    assert len(outcome.records) == 3
    # The same spans as the run folder's file, in the same traces.
    written = {(s["trace_id"], s["span_id"], s["name"]) for s in read_spans(tmp_path)}
    assert written and set(got.spans) == written
    names = {name.split(" ")[0] for _, _, name in got.spans}
    assert {"run", "episode", "turn", "publish", "receive", "invoke_agent"} <= names
    assert {
        "parley.episodes",
        "parley.turns",
        "parley.tokens",
        "parley.episode.duration",
    } <= got.metrics
    assert got.episodes == 3
    assert (tmp_path / "metrics.jsonl").stat().st_size > 0


def test_otlp_is_off_without_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    from parley.observability.tracing import otlp_settings

    assert otlp_settings("traces")[0] is False
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    assert otlp_settings("traces") == (True, "http/protobuf")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert otlp_settings("traces")[0] is False
