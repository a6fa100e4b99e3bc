"""A tiny OTLP/HTTP trace receiver, run as a process by the tests (no Collector binary here).

    python tests/observability/otlp_receiver.py OUT.jsonl

Accepts ``POST /v1/traces`` in protobuf (``application/x-protobuf``, decoded with
opentelemetry-proto) or JSON (``application/json``), and appends one line per span it got to
``OUT.jsonl``: ``{"content_type", "authorization", "trace_id", "span_id", "parent_id", "name",
"attributes"}`` (ids as hex, attribute values plain; the request's Authorization header). Prints ``listening PORT`` once it accepts requests.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path
from typing import Any

from aiohttp import web
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def _value(value: dict[str, Any]) -> Any:
    if not value:
        return None
    (kind, inner), *_ = value.items()
    if kind == "intValue":
        return int(inner)
    if kind == "arrayValue":
        return [_value(v) for v in inner.get("values", [])]
    return inner


def spans_of(request: dict[str, Any], ids: str) -> list[dict[str, Any]]:
    """Spans of a request in JSON; ``ids``: "hex" (OTLP JSON) or "base64" (protobuf's JSON)."""

    def hex_id(value: str) -> str:
        return base64.b64decode(value).hex() if ids == "base64" and value else value

    out = []
    for rs in request.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                out.append(
                    {
                        "trace_id": hex_id(span.get("traceId", "")),
                        "span_id": hex_id(span.get("spanId", "")),
                        "parent_id": hex_id(span.get("parentSpanId", "")) or None,
                        "name": span.get("name", ""),
                        "attributes": {
                            a["key"]: _value(a.get("value", {})) for a in span.get("attributes", [])
                        },
                    }
                )
    return out


def main() -> None:
    out = Path(sys.argv[1])

    async def traces(request: web.Request) -> web.Response:
        body = await request.read()
        content_type = request.headers.get("Content-Type", "")
        authorization = request.headers.get("Authorization")
        if content_type.startswith("application/json"):
            spans = spans_of(json.loads(body), "hex")
            reply = web.json_response({})
        else:
            message = ExportTraceServiceRequest()
            message.ParseFromString(body)
            spans = spans_of(json_format.MessageToDict(message), "base64")
            reply = web.Response(
                body=ExportTraceServiceResponse().SerializeToString(),
                content_type="application/x-protobuf",
            )
        with out.open("a", encoding="utf-8") as f:
            for span in spans:
                said = {"content_type": content_type, "authorization": authorization}
                f.write(json.dumps({**said, **span}) + "\n")
        return reply

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_post("/v1/traces", traces)

    async def serve() -> None:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"listening {port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
