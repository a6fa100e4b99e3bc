"""OTLP export through the standard OTEL_* variables, to receivers the tests start: OTLP/HTTP
(protobuf, decoded with opentelemetry-proto) and OTLP/gRPC (grpcio)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from observability.tracing import read_spans
from runtime.scheduler import run_experiment
from tests.conftest import require
from tests.observability.conftest import config

pytestmark = pytest.mark.anyio


class Received:
    """What a receiver got: span (trace id, span id, name) triples and metric names."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, str]] = []
        self.metrics: set[str] = set()
        self.episodes = 0
        self.lock = threading.Lock()

    def traces(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.lock:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        self.spans.append((span.trace_id.hex(), span.span_id.hex(), span.name))

    def metric_data(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        with self.lock:
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        self.metrics.add(metric.name)
                        if metric.name == "parley.episodes":
                            self.episodes = max(
                                self.episodes, sum(int(p.as_int) for p in metric.sum.data_points)
                            )


@pytest.fixture
def http_receiver() -> Iterator[tuple[str, Received]]:
    got = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/v1/traces":
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                got.traces(request)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                request = metrics_service_pb2.ExportMetricsServiceRequest()
                request.ParseFromString(body)
                got.metric_data(request)
                reply = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def grpc_receiver() -> Iterator[tuple[str, Received]]:
    try:
        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
    except ImportError:
        require(False, "grpcio is needed for the OTLP/gRPC receiver")
        raise
    got = Received()

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            got.traces(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            got.metric_data(request)
            return metrics_service_pb2.ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", got
    finally:
        server.stop(0)


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
    cfg = config("comma.wire", [0, 1, 2], [{"solver": "scripted", "expert": "scripted"}])
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
    from observability.tracing import otlp_settings

    assert otlp_settings("traces")[0] is False
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    assert otlp_settings("traces") == (True, "http/protobuf")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert otlp_settings("traces")[0] is False
