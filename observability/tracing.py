"""OpenTelemetry setup: a JSONL span file in the run folder, and OTLP when OTEL_* asks for it."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
_tracer: trace.Tracer = trace.NoOpTracer()
_content = False


def tracer() -> trace.Tracer:
    """The tracer of the run in progress (a no-op one when tracing is off)."""
    return _tracer


def record_content() -> bool:
    """Whether the run opted in to message content in spans."""
    return _content


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_id": format(parent.span_id, "016x") if parent else None,
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "status_message": span.status.description,
        "attributes": dict(span.attributes or {}),
        "events": [
            {"name": e.name, "time_ns": e.timestamp, "attributes": dict(e.attributes or {})}
            for e in span.events
        ],
        "links": [
            {
                "trace_id": format(link.context.trace_id, "032x"),
                "span_id": format(link.context.span_id, "016x"),
            }
            for link in span.links
        ],
        "resource": dict(span.resource.attributes),
    }


class JsonlSpanExporter(SpanExporter):
    """Appends one JSON object per finished span to a file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_to_dict(s), default=str) + "\n" for s in spans)
        with self._lock:
            if self._file.closed:
                return SpanExportResult.FAILURE
            self._file.write(lines)
            self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            self._file.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _otlp_exporter() -> SpanExporter | None:
    if not (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return None
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()


class Tracing:
    """A tracer provider for one run; ``close()`` flushes every exporter."""

    def __init__(
        self,
        run_dir: str | Path | None,
        *,
        enabled: bool = True,
        content: bool = False,
        service: str = "parley",
        attributes: dict[str, Any] | None = None,
    ) -> None:
        self.provider: TracerProvider | None = None
        self.content = content
        if not enabled:
            self.tracer: trace.Tracer = trace.NoOpTracer()
            return
        resource = Resource.create({"service.name": service, **(attributes or {})})
        self.provider = TracerProvider(resource=resource)
        if run_dir is not None:
            self.provider.add_span_processor(
                BatchSpanProcessor(
                    JsonlSpanExporter(Path(run_dir) / "traces.jsonl"), max_queue_size=65536
                )
            )
        otlp = _otlp_exporter()
        if otlp is not None:
            self.provider.add_span_processor(BatchSpanProcessor(otlp, max_queue_size=65536))
        self.tracer = self.provider.get_tracer("parley")

    def activate(self) -> None:
        """Make this the tracer :func:`tracer` returns."""
        global _tracer, _content
        _tracer, _content = self.tracer, self.content

    def close(self) -> None:
        global _tracer, _content
        if _tracer is self.tracer:
            _tracer, _content = trace.NoOpTracer(), False
        if self.provider is not None:
            self.provider.force_flush()
            self.provider.shutdown()


def inject(span: trace.Span) -> str | None:
    """The W3C traceparent of ``span``."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def extract(traceparent: str | None) -> Any:
    """An OpenTelemetry context whose parent is the span named by ``traceparent``."""
    if not traceparent:
        return None
    return _PROPAGATOR.extract({"traceparent": traceparent})
