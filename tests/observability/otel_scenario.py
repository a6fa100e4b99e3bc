"""A fixed tracing scenario for the accelerator's differential test: spans of a turn (episode,
turn, publish, receive, invoke_agent, chat) with links, events, an exception and statuses,
through parley's own tracing functions and the OpenTelemetry API. Run as a script, it prints
what was exported, with ids replaced by their order of appearance and times left out."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from parley.bus.local import LocalBus
from parley.bus.messages import TextPart, TurnRequest
from parley.observability import light_spans, tracing
from parley.observability.tracing import Tracing, read_spans


async def play(run_dir: Path, memory: InMemorySpanExporter) -> None:
    """The scenario: one run span, one episode of one turn, a failing handler."""
    run = Tracing(
        run_dir,
        metrics=False,
        processors=[SimpleSpanProcessor(memory)],
        attributes={"service.instance.id": "scenario"},  # (some SDKs draw one per process)
    )
    run.activate()
    tracer = tracing.tracer()
    root = tracer.start_span("run", attributes={"parley.run": "r1", "empty": None})
    link = trace.Link(root.get_span_context(), {"why": "run", "none": None})
    with tracer.start_as_current_span(
        "episode g", links=[link], attributes={"parley.episode": "e1", "n": 3}
    ) as episode:
        episode.add_event("started", {"seed": 7, "absent": None})
        turn = tracing.child_span(episode, "turn 1 guesser", {"parley.turn": 1, "x": None})
        bus = run.wrap_bus(LocalBus())
        message = TurnRequest(
            run="r1", episode="e1", sender="gm", role="guesser", observation=[TextPart(text="?")]
        )
        with trace.use_span(turn, end_on_exit=False):
            await bus.publish("parley/r1/e1/agent/guesser", message)
        traceparent = message.traceparent
        try:
            with (
                tracing.consume("parley/r1/e1/agent/guesser", message),
                tracing.handler_span("invoke_agent guesser", traceparent, {"role": "g"}),
            ):
                chat = tracer.start_span("chat m", kind=trace.SpanKind.CLIENT)
                chat.set_attributes({"gen_ai.usage.input_tokens": 5, "skip": None})
                chat.set_attribute("gen_ai.response.finish_reasons", ["stop"])
                chat.set_attribute("nothing", None)
                chat.update_name("chat model")
                chat.end()
                raise ValueError("the reply was not a move")
        except ValueError:
            pass
        turn.set_status(trace.Status(trace.StatusCode.OK))
        turn.end()
        await bus.close()
    root.end()
    run.close()


def _ids(text: str) -> str:
    """``text`` with every hex id (32 or 16 digits, or base64 of 16 or 8 bytes) numbered."""
    import re

    seen: dict[str, str] = {}

    def number(match: re.Match[str]) -> str:
        return seen.setdefault(match.group(0), f"<id{len(seen)}>")

    return re.sub(r"\b[0-9a-f]{32}\b|\b[0-9a-f]{16}\b", number, text)


def exported() -> dict[str, Any]:
    """Both exports of the scenario: the SDK's OTLP encoding of the spans its processors
    received, and the run folder's OTLP JSON file, read back."""
    memory = InMemorySpanExporter()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(play(Path(folder), memory))
        spans = memory.get_finished_spans()
        otlp = json_format.MessageToDict(encode_spans(spans))
        for group in otlp["resourceSpans"]:
            for scope in group["scopeSpans"]:
                for span in scope["spans"]:
                    for key in ("startTimeUnixNano", "endTimeUnixNano"):
                        span.pop(key, None)
                    for event in span.get("events", []):
                        event.pop("timeUnixNano", None)
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = bytes.fromhex(_b64_hex(span[key])).hex()
                    for link in span.get("links", []):
                        for key in ("traceId", "spanId"):
                            link[key] = _b64_hex(link[key])
        filed = read_spans(folder)
        for span in filed:
            for key in ("start_time", "end_time", "start_ns", "end_ns", "duration_ms"):
                span.pop(key, None)
            for event in span.get("events", []):
                event.pop("time", None)
                event.pop("time_ns", None)
    text = json.dumps({"otlp": otlp, "file": filed}, sort_keys=True, default=str)
    return {"accelerated": light_spans.ACTIVE, "spans": json.loads(_ids(text))}


def _b64_hex(value: str) -> str:
    import base64

    return base64.b64decode(value).hex()


if __name__ == "__main__":
    json.dump(exported(), sys.stdout)
