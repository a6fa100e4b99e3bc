"""Fixtures for the observability tests: a stand-in model server (a real HTTP process) whose
models leak, judge or answer, behind an API key; helpers to read a run's traces."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections import defaultdict
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from parley.agents.backends.simserver import SimServerProcess
from parley.observability.tracing import read_spans
from parley.runtime.config import ExperimentConfig, load_config
from tests.conftest import require

CHROMIUM = "/usr/bin/chromium"  # Debian's: Playwright cannot download its own browsers here


def playwright_api() -> Any:
    """Playwright's sync API, or a skip (a failure in CI) naming what is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    require(sync_playwright is not None, "needs Playwright (pip install playwright)")
    require(
        shutil.which(CHROMIUM) is not None or Path(CHROMIUM).exists(),
        "needs chromium (apt-get install chromium)",
    )
    return sync_playwright


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's chromium under Playwright's sync API, for one test; every browser test uses
    this one. One per test, not per module: while the sync API is open its event loop counts
    as running in the main thread, so an async test of the same module, or ``asyncio.run``,
    would fail there ("Cannot run the event loop while another loop is running")."""
    sync_playwright = playwright_api()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass  # no loop running: the sync API may start its own
    else:
        pytest.fail("the browser fixture is Playwright's sync API: use it from a sync test")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


# A fake key: the sim server demands it, the models name its variable; it must never be written.
SECRET = "sk-obs-test-9f3c-never-write-me-41d2"
KEY_ENV = "PARLEY_OBS_TEST_KEY"
JUDGE_REPLY = '{"category": "repetition", "turn": 3, "evidence": "press_1 again"}'


def sim_config() -> dict[str, Any]:
    return {
        "latency": {"ttft_s": 0.0},
        "replies": {"text": "OK"},
        "api_key_env": "PARLEY_OBS_SIM_KEY",
        "models": {
            # An ATM solver that tells the expert its PIN (read off its text observation).
            "leaky-solver": {
                "rules": [
                    {"match": r"PIN (\d{4})", "reply": r"Hi expert! My PIN is \1, what now?"}
                ],
                "text": "What should I do?",
            },
            "judge-m": {"text": JUDGE_REPLY},
            "garbled-judge": {"text": "It is probably roleplay, I think."},
        },
    }


@pytest.fixture(scope="session")
def sim() -> Iterator[SimServerProcess]:
    with SimServerProcess(sim_config(), env={"PARLEY_OBS_SIM_KEY": SECRET}) as server:
        yield server


def model_entry(sim: SimServerProcess, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "backend": "openai",
        "model": name,
        "base_url": sim.openai_url,
        "api_key_env": KEY_ENV,
        "retry": {"max_attempts": 3, "backoff_s": 0.01, "backoff_max_s": 0.02},
        **extra,
    }


def config(game: str, seeds: list[int], pairings: list[Any], **top: Any) -> ExperimentConfig:
    settings = top.pop("settings", {"variant": "text"})
    return load_config(
        {
            "name": "obs",
            "games": [{"game": game, "seeds": seeds, "pairings": pairings, "settings": settings}],
            **top,
        }
    )


def traces(run: Path) -> dict[str, list[dict[str, Any]]]:
    """trace id → spans of a run folder."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in read_spans(run):
        out[span["trace_id"]].append(span)
    return out


def everything_written(run: Path) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in run.rglob("*") if p.is_file()
    )


# --- OTLP receivers (no Collector binary here: the tests decode the protobuf themselves) ---


class Received:
    """What a receiver got: span (trace id, span id, name) triples and metric names."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, str]] = []
        self.raw: list[bytes] = []  # every request body, as sent
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
            got.raw.append(body + repr(dict(self.headers)).encode())
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
