"""The stand-in server's batch APIs: OpenAI's files + batches and Anthropic's message batches.

Endpoints (what the official SDKs call):

- OpenAI: ``POST /v1/files`` (multipart, ``purpose=batch``), ``POST /v1/batches``,
  ``GET /v1/batches/{id}``, ``GET /v1/files/{id}/content``;
- Anthropic: ``POST /v1/messages/batches``, ``GET /v1/messages/batches/{id}``,
  ``GET /v1/messages/batches/{id}/results``.

A batch is done ``delay_s`` after it was created (checked when it is read: no timers), and its
lines are answered then, each as the live endpoint would answer it (the server's reply logic,
constraints included). ``fail`` makes whole batches end ``failed`` or ``expired``;
``failed_lines`` makes the first n lines of each batch fail. Counters go to ``/sim/stats``:
``batches``, ``batch_lines``, ``batch_files``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from parley.agents.backends.simserver import SimServer


class SimBatchConfig(BaseModel):
    """How the sim's batches behave: ``delay_s`` until done, whole-batch ``fail``ures
    (``failed``, ``expired``), the first ``failed_lines`` lines of each batch failing."""

    model_config = ConfigDict(extra="forbid")
    delay_s: float = Field(default=0.0, ge=0.0)
    fail: Literal["failed", "expired"] | None = None
    failed_lines: int = Field(default=0, ge=0)


class _Batch:
    def __init__(self, api: str, lines: list[dict[str, Any]], delay_s: float) -> None:
        self.api = api
        self.id = ("msgbatch_" if api == "anthropic" else "batch_") + uuid.uuid4().hex[:24]
        self.lines = lines
        self.created = time.time()
        self.ready_at = time.monotonic() + delay_s
        self.input_file_id = ""
        self.output_file_id: str | None = None
        self.error_file_id: str | None = None
        self.status = "in_progress"
        self.results: list[dict[str, Any]] = []
        self.ok = 0
        self.failed = 0


class SimBatches:
    """The batch endpoints of one :class:`SimServer`."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, _Batch] = {}

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/files", self.upload)
        app.router.add_get("/v1/files/{id}/content", self.file_content)
        app.router.add_post("/v1/batches", self.openai_create)
        app.router.add_get("/v1/batches/{id}", self.openai_get)
        app.router.add_post("/v1/batches/{id}/cancel", self.cancel)
        app.router.add_post("/v1/messages/batches", self.anthropic_create)
        app.router.add_get("/v1/messages/batches/{id}", self.anthropic_get)
        app.router.add_post("/v1/messages/batches/{id}/cancel", self.cancel)
        app.router.add_get("/v1/messages/batches/{id}/results", self.anthropic_results)

    # --- shared -------------------------------------------------------------------------------

    def _refused(self, request: web.Request, api: str) -> web.Response | None:
        from parley.agents.backends.simserver import _error

        if not self.server._authorised(request):
            self.server.stats["unauthorised"] += 1
            return _error(api, 401, "authentication_error", "invalid API key", {})
        return None

    def _finish(self, batch: _Batch) -> None:
        """Answer the batch's lines once its delay has passed."""
        if batch.status != "in_progress" or time.monotonic() < batch.ready_at:
            return
        from parley.agents.backends.simserver import _full

        config = self.server.config.batch
        if config.fail is not None:
            batch.status = config.fail
            self.server.stats[f"batches_{config.fail}"] += 1
            return
        for i, line in enumerate(batch.lines):
            custom_id = str(line.get("custom_id", ""))
            body = line.get("params" if batch.api == "anthropic" else "body") or {}
            if i < config.failed_lines or not isinstance(body, dict):
                batch.failed += 1
                batch.results.append(self._line_error(batch.api, custom_id))
                continue
            model = str(body.get("model", ""))
            reply, n_in, n_out = self.server.answer(body, model)
            response = _full(batch.api, model, reply, n_in, n_out)
            batch.ok += 1
            if batch.api == "anthropic":
                batch.results.append(
                    {"custom_id": custom_id, "result": {"type": "succeeded", "message": response}}
                )
            else:
                batch.results.append(
                    {
                        "id": f"batch_req_{uuid.uuid4().hex[:24]}",
                        "custom_id": custom_id,
                        "response": {
                            "status_code": 200,
                            "request_id": uuid.uuid4().hex,
                            "body": response,
                        },
                        "error": None,
                    }
                )
        self.server.stats["batch_lines"] += len(batch.lines)
        batch.status = "ended" if batch.api == "anthropic" else "completed"
        if batch.api == "openai":
            good = [r for r in batch.results if r.get("response")]
            bad = [r for r in batch.results if not r.get("response")]
            if good:
                batch.output_file_id = self._store(good)
            if bad:
                batch.error_file_id = self._store(bad)

    @staticmethod
    def _line_error(api: str, custom_id: str) -> dict[str, Any]:
        if api == "anthropic":
            return {
                "custom_id": custom_id,
                "result": {
                    "type": "errored",
                    "error": {
                        "type": "error",
                        "error": {"type": "api_error", "message": "simulated line failure"},
                    },
                },
            }
        return {
            "id": f"batch_req_{uuid.uuid4().hex[:24]}",
            "custom_id": custom_id,
            "response": None,
            "error": {"code": "server_error", "message": "simulated line failure"},
        }

    def _store(self, lines: list[dict[str, Any]]) -> str:
        file_id = f"file-{uuid.uuid4().hex[:24]}"
        self.files[file_id] = "".join(json.dumps(x) + "\n" for x in lines).encode()
        return file_id

    # --- OpenAI -------------------------------------------------------------------------------

    async def upload(self, request: web.Request) -> web.Response:
        refused = self._refused(request, "openai")
        if refused is not None:
            return refused
        form = await request.post()
        field = form.get("file")
        data = getattr(field, "file", None)
        content = data.read() if data is not None else None
        if content is None or form.get("purpose") != "batch":
            return web.json_response(
                {"error": {"message": "expected a file with purpose=batch", "code": 400}},
                status=400,
            )
        file_id = f"file-{uuid.uuid4().hex[:24]}"
        self.files[file_id] = content
        self.server.stats["batch_files"] += 1
        return web.json_response(
            {
                "id": file_id,
                "object": "file",
                "bytes": len(content),
                "created_at": int(time.time()),
                "filename": getattr(field, "filename", "batch.jsonl") or "batch.jsonl",
                "purpose": "batch",
                "status": "processed",
            }
        )

    async def file_content(self, request: web.Request) -> web.Response:
        refused = self._refused(request, "openai")
        if refused is not None:
            return refused
        content = self.files.get(request.match_info["id"])
        if content is None:
            return web.json_response(
                {"error": {"message": "no such file", "code": 404}}, status=404
            )
        return web.Response(body=content, content_type="application/octet-stream")

    async def openai_create(self, request: web.Request) -> web.Response:
        refused = self._refused(request, "openai")
        if refused is not None:
            return refused
        body = await request.json()
        content = self.files.get(str(body.get("input_file_id")))
        if content is None:
            return web.json_response(
                {"error": {"message": "no such input file", "code": 400}}, status=400
            )
        lines = [json.loads(x) for x in content.decode().splitlines() if x.strip()]
        batch = _Batch("openai", lines, self.server.config.batch.delay_s)
        batch.input_file_id = str(body["input_file_id"])
        self.batches[batch.id] = batch
        self.server.stats["batches"] += 1
        self._finish(batch)
        return web.json_response(self._openai_object(batch, body))

    async def openai_get(self, request: web.Request) -> web.Response:
        refused = self._refused(request, "openai")
        if refused is not None:
            return refused
        batch = self.batches.get(request.match_info["id"])
        if batch is None or batch.api != "openai":
            return web.json_response(
                {"error": {"message": "no such batch", "code": 404}}, status=404
            )
        self._finish(batch)
        return web.json_response(self._openai_object(batch, {}))

    async def cancel(self, request: web.Request) -> web.Response:
        """Either API's cancel: a batch still in progress ends with nothing answered."""
        api = "anthropic" if "/messages/" in request.path else "openai"
        refused = self._refused(request, api)
        if refused is not None:
            return refused
        batch = self.batches.get(request.match_info["id"])
        if batch is None or batch.api != api:
            from parley.agents.backends.simserver import _error

            return _error(api, 404, "not_found_error", "no such batch", {})
        if batch.status == "in_progress":
            batch.status = "cancelled"
            self.server.stats["batches_cancelled"] += 1
        if api == "anthropic":
            return web.json_response(self._anthropic_object(batch, request))
        return web.json_response(self._openai_object(batch, {}))

    @staticmethod
    def _openai_object(batch: _Batch, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": body.get("endpoint", "/v1/chat/completions"),
            "errors": None,
            "input_file_id": batch.input_file_id,
            "completion_window": body.get("completion_window", "24h"),
            "status": batch.status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": int(batch.created),
            "request_counts": {
                "total": len(batch.lines),
                "completed": batch.ok,
                "failed": batch.failed,
            },
            "metadata": body.get("metadata"),
        }

    # --- Anthropic ----------------------------------------------------------------------------

    async def anthropic_create(self, request: web.Request) -> web.Response:
        refused = self._refused(request, "anthropic")
        if refused is not None:
            return refused
        body = await request.json()
        lines = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(lines, list) or not lines:
            from parley.agents.backends.simserver import _error

            return _error("anthropic", 400, "invalid_request_error", "expected requests", {})
        batch = _Batch("anthropic", lines, self.server.config.batch.delay_s)
        self.batches[batch.id] = batch
        self.server.stats["batches"] += 1
        self._finish(batch)
        return web.json_response(self._anthropic_object(batch, request))

    async def anthropic_get(self, request: web.Request) -> web.Response:
        refused = self._refused(request, "anthropic")
        if refused is not None:
            return refused
        batch = self.batches.get(request.match_info["id"])
        if batch is None or batch.api != "anthropic":
            from parley.agents.backends.simserver import _error

            return _error("anthropic", 404, "not_found_error", "no such batch", {})
        self._finish(batch)
        return web.json_response(self._anthropic_object(batch, request))

    async def anthropic_results(self, request: web.Request) -> web.Response:
        refused = self._refused(request, "anthropic")
        if refused is not None:
            return refused
        batch = self.batches.get(request.match_info["id"])
        if batch is None or batch.status == "in_progress":
            from parley.agents.backends.simserver import _error

            return _error("anthropic", 404, "not_found_error", "no results (yet)", {})
        lines = batch.results or [
            {"custom_id": str(x.get("custom_id", "")), "result": {"type": "expired"}}
            for x in batch.lines
        ]
        return web.Response(
            body="".join(json.dumps(x) + "\n" for x in lines).encode(),
            content_type="application/binary",
        )

    @staticmethod
    def _anthropic_object(batch: _Batch, request: web.Request) -> dict[str, Any]:
        ended = batch.status != "in_progress"
        expired = batch.status in ("expired", "failed")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(batch.created))
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": {
                "processing": 0 if ended else len(batch.lines),
                "succeeded": batch.ok,
                "errored": batch.failed,
                "canceled": len(batch.lines) if batch.status == "cancelled" else 0,
                "expired": len(batch.lines) if expired else 0,
            },
            "ended_at": stamp if ended else None,
            "created_at": stamp,
            "expires_at": stamp,
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": (
                f"{request.url.origin()}/v1/messages/batches/{batch.id}/results" if ended else None
            ),
        }
