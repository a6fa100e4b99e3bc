"""``parley sim-server``: a stand-in model server over real HTTP, for tests and benchmarks.

It speaks OpenAI chat completions (``POST /v1/chat/completions``, streamed or not) and Anthropic
messages (``POST /v1/messages``, streamed or not), answers ``GET /health`` and ``GET /v1/models``,
and behaves like a batched GPU server: each sequence waits ``ttft_s`` for its first token, then
produces ``tokens_per_s`` tokens a second, and at most ``max_seqs`` sequences run at once (the
rest queue). Replies are configurable per model (fixed, cycling, from a file, the k-th reply of a
conversation, or chosen by regular expressions on the last user message), and faults can be
injected (429 with Retry-After, 500, 503, hangs, truncated bodies, garbage, dropped connections).

Control while it runs: ``GET /sim/stats`` (counters; ``?brief=1``: the counters alone;
``?window_from=K``: the active window from the K-th request since the reset, timed by the
server), ``POST /sim/config`` (replace parts of the config, e.g. faults), ``POST /sim/reset``
(zero the counters).

Start it as its own process (``python -m parley.agents.backends.simserver --port 0``, or
:class:`SimServerProcess`); it prints ``listening on http://HOST:PORT`` once it accepts requests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter, deque
from pathlib import Path
from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from parley import event_loop
from parley.agents.backends import constrain, processes
from parley.agents.backends.batch_sim import SimBatchConfig, SimBatches
from parley.agents.backends.spec import is_reasoning_name
from parley.event_loop import LoopLagProbe, responsive_gc
from parley.records import loads
from parley.tokens import count_tokens
from parley.user_files import YamlFileError, read_mapping

IMAGE_TOKENS = 85  # what one image counts for in the reported usage
MAX_ARRIVALS = 1_000_000  # request arrival times kept since a reset (for /sim/stats)
# Prompts repeat (the system text of every episode, the history of each turn again in the
# next): counting each text once saves most of the server's CPU, which a benchmark shares.
_tokens_of = functools.lru_cache(maxsize=1 << 16)(count_tokens)
# Asked twice a request, of a handful of model names.
_reasoning = functools.lru_cache(maxsize=1024)(is_reasoning_name)


def _id(prefix: str) -> str:
    """A response id as the real APIs make them: a prefix and 24 random hex digits."""
    return prefix + os.urandom(12).hex()


def _json_response(data: Any) -> web.Response:
    """``web.json_response`` encoded by orjson (the same JSON, a fraction of the CPU); the
    standard library's for what orjson refuses (a lone surrogate, which a test's reply holds)."""
    try:
        body = orjson.dumps(data)
    except TypeError:  # orjson.JSONEncodeError
        return web.json_response(data)
    return web.Response(body=body, content_type="application/json", charset="utf-8")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Latency(_Strict):
    """A batched server: ``ttft_s`` to the first token, then ``tokens_per_s`` per sequence
    (0: the whole reply at once), at most ``max_seqs`` sequences at once, ``jitter_s`` of
    uniform noise added to the first token."""

    ttft_s: float = Field(default=0.0, ge=0.0)
    tokens_per_s: float = Field(default=0.0, ge=0.0)
    max_seqs: int = Field(default=1024, ge=1)
    jitter_s: float = Field(default=0.0, ge=0.0)


class Rule(_Strict):
    """If ``match`` (a regular expression) is found in the last user message, reply
    ``reply``; ``\\1`` or ``\\g<name>`` in the reply insert the match's groups."""

    match: str
    reply: str

    @field_validator("match")
    @classmethod
    def _compiles(cls, value: str) -> str:
        re.compile(value)
        return value


class Replies(_Strict):
    """How a model replies, tried in this order: the first matching ``rules`` entry; else the
    k-th of ``turns`` (k = assistant messages already in the conversation; the last repeats);
    else the next of ``cycle`` / the blocks of ``file`` (round robin over requests); else
    ``text``."""

    text: str = "OK"
    cycle: list[str] = Field(default_factory=list)
    file: str | None = None
    turns: list[str] = Field(default_factory=list)
    rules: list[Rule] = Field(default_factory=list)


class Fault(_Strict):
    """A fault injected into a share of requests.

    ``rate``: probability per request; ``first``: only the first n requests (per kind) are
    eligible; ``models``: only requests for these model names. Kinds: ``rate_limit`` (429 with
    Retry-After), ``overloaded`` (503 with Retry-After), ``server_error`` (500), ``timeout``
    (no answer for ``hang_s``), ``truncated`` (the body stops half-way), ``garbage`` (200 with a
    body that is not JSON), ``disconnect`` (the connection is closed without an answer),
    ``body`` (200 with ``body`` as the JSON answer: valid JSON of the wrong shape).

    Hostile servers, whose bytes written are counted (``/sim/stats``: ``hostile_bytes``):
    ``gzip_bomb`` (a small gzip body that decompresses to ``size`` bytes), ``huge`` (a body
    of ``size`` bytes, written as the client reads it, with no Content-Length), ``endless``
    (a body, or a stream of events, that never ends), ``endless_headers`` (headers that never
    end), ``redirect`` (307 to ``location``).
    """

    kind: Literal[
        "rate_limit",
        "overloaded",
        "server_error",
        "timeout",
        "truncated",
        "garbage",
        "disconnect",
        "body",
        "gzip_bomb",
        "huge",
        "endless",
        "endless_headers",
        "redirect",
    ]
    rate: float = Field(default=1.0, ge=0.0, le=1.0)
    first: int | None = Field(default=None, ge=0)
    models: list[str] = Field(default_factory=list)
    retry_after_s: float | None = 1.0
    hang_s: float = Field(default=60.0, ge=0.0)
    body: Any = None
    size: int = Field(default=200 * 1024 * 1024, ge=0)
    location: str = "/"


class SimConfig(_Strict):
    """The whole server: latency model, replies (default and per model name), faults, and an
    optional API key that requests must carry (read from the environment variable named)."""

    latency: Latency = Field(default_factory=Latency)
    replies: Replies = Field(default_factory=Replies)
    models: dict[str, Replies] = Field(default_factory=dict)
    faults: list[Fault] = Field(default_factory=list)
    api_key_env: str | None = None
    healthy: bool = True
    seed: int = 0
    # False: constraints on the reply are received and counted but not applied, as a server
    # does with fields of another server's dialect (llama.cpp with vLLM's structured_outputs).
    honour_constraints: bool = True
    # Prompt caching: a system prompt seen before is read from the cache, a new one written to
    # it (Anthropic: cache_read_input_tokens / cache_creation_input_tokens; OpenAI:
    # prompt_tokens_details.cached_tokens, reads only).
    prompt_cache: bool = False
    # The batch APIs (OpenAI files + batches, Anthropic message batches): agents/backends/batch.py.
    batch: SimBatchConfig = Field(default_factory=SimBatchConfig)


class SimConfigError(ValueError):
    """A stand-in server config that cannot be used (one line for the user)."""


def load_sim_config(source: str | Path | dict[str, Any] | None) -> SimConfig:
    """The stand-in server's config from a dict or a YAML/JSON file (None: the defaults);
    raises :class:`SimConfigError` saying what is wrong and where."""
    if source is None:
        return SimConfig()
    label = "config" if isinstance(source, dict) else str(source)
    try:
        data = source if isinstance(source, dict) else read_mapping(source)
    except YamlFileError as exc:
        raise SimConfigError(f"{label}: {exc}") from None
    try:
        return SimConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors()
        )
        raise SimConfigError(f"{label}: {problems}") from None


def _reply_files(config: SimConfig) -> set[str]:
    return {r.file for r in (config.replies, *config.models.values()) if r.file}


def _read_reply_file(path: str) -> list[str]:
    """A JSON list of strings, or blocks of text separated by lines holding only ``---``."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return [str(x) for x in json.loads(text)]
    return [b.strip("\n") for b in re.split(r"(?m)^---\s*$", text) if b.strip()]


class _Model:
    """The reply logic of one model name."""

    def __init__(self, replies: Replies) -> None:
        self.replies = replies
        self.rules = [
            (re.compile(r.match, re.IGNORECASE | re.DOTALL), r.reply) for r in replies.rules
        ]
        self.pool = list(replies.cycle) + (_read_reply_file(replies.file) if replies.file else [])
        self.next = 0

    def reply(self, last_user: str, assistant_turns: int) -> str:
        for pattern, template in self.rules:
            match = pattern.search(last_user)
            if match:
                # match.expand(template) parses the template on every call (Python 3.11);
                # sub() caches it. The first match sub() replaces is the one search() found,
                # so what stands in its place is the expansion.
                out = pattern.sub(template, last_user, count=1)
                return out[match.start() : len(out) - (len(last_user) - match.end())]
        if self.replies.turns:
            return self.replies.turns[min(assistant_turns, len(self.replies.turns) - 1)]
        if self.pool:
            text = self.pool[self.next % len(self.pool)]
            self.next += 1
            return text
        return self.replies.text


def _text_of(content: Any) -> tuple[str, int]:
    """The text of an OpenAI or Anthropic message content, and its number of images."""
    if isinstance(content, str):
        return content, 0
    texts, images = [], 0
    for part in content or []:
        kind = part.get("type")
        if kind == "text":
            texts.append(part.get("text", ""))
        elif kind in ("image_url", "image"):
            images += 1
    return "\n".join(texts), images


class SimServer:
    """The server's state and handlers."""

    def __init__(self, config: SimConfig) -> None:
        self.stats: Counter[str] = Counter()
        self.in_flight = 0
        self.peak_in_flight = 0
        self.peak_queued = 0
        self.running = 0
        self.peak_running = 0
        self.waiting = 0
        # How late the server's own loop runs (started by serve()): a benchmark whose replies
        # come late because the stand-in server is short of CPU should be able to tell.
        self.lag: LoopLagProbe | None = None
        # The latest requests' constraints on the reply, as /sim/stats shows them.
        self.constraints: deque[dict[str, Any]] = deque(maxlen=50)
        # The latest W3C traceparent headers received, as /sim/stats shows them (a traced
        # client sends the chat span's, as to a vLLM started with --otlp-traces-endpoint).
        self.traceparents: deque[str] = deque(maxlen=200)
        # When each request since the reset arrived (the first MAX_ARRIVALS), and when the
        # latest reply went: a benchmark's active window, timed here and not by its sampling.
        self.arrivals: list[float] = []
        self.last_reply_at: float | None = None
        self.batches = SimBatches(self)
        self.configure(config)

    def configure(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.default = _Model(config.replies)
        self.by_model = {name: _Model(r) for name, r in config.models.items()}
        self.slots = asyncio.Semaphore(config.latency.max_seqs)
        self.fault_counts: Counter[int] = Counter()
        self.cached_prompts: set[str] = set()
        key_env = config.api_key_env
        self.api_key = os.environ.get(key_env) if key_env else None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.openai)
        app.router.add_post("/chat/completions", self.openai)
        app.router.add_post("/v1/messages", self.anthropic)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        app.router.add_get("/sim/stats", self.get_stats)
        app.router.add_post("/sim/config", self.set_config)
        app.router.add_post("/sim/reset", self.reset)
        self.batches.add_routes(app)
        return app

    # --- control ----------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        if not self.config.healthy:
            return web.json_response({"status": "unhealthy"}, status=503)
        return web.json_response({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        names = sorted(self.by_model) or ["sim"]
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "parley-sim"} for n in names]
        return web.json_response({"object": "list", "data": data})

    async def version(self, request: web.Request) -> web.Response:
        # As vLLM answers GET /version: run provenance records it (runtime/provenance.py).
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as installed

        try:
            parley = installed("parley")
        except PackageNotFoundError:
            parley = "0+unknown"
        return web.json_response({"version": f"parley-sim {parley}"})

    async def get_stats(self, request: web.Request) -> web.Response:
        first = request.query.get("window_from")
        if first is not None and not first.isdigit():
            return web.json_response({"error": "window_from must be a request number"}, status=400)
        counters = {**self.stats, "in_flight": self.in_flight}
        if request.query.get("brief"):
            # The counters only, for a benchmark that polls them: no lag summary (which sorts
            # every sample so far) and no lists of recent requests.
            return _json_response(counters)
        return web.json_response(
            {
                **counters,
                "peak_in_flight": self.peak_in_flight,
                "peak_queued": self.peak_queued,
                "peak_running": self.peak_running,
                "loop_lag": self.lag.summary() if self.lag is not None else None,
                "constraints": list(self.constraints),
                "traceparents": list(self.traceparents),
                **self._window(None if first is None else int(first)),
            }
        )

    def _window(self, k: int | None) -> dict[str, Any]:
        """``window``: from the arrival of request number ``k`` (1-based, since the reset)
        to the latest reply, the seconds and the requests that arrived in it (all of which were
        answered in it, once nothing is in flight); None until that request has come and a reply
        has gone. ``complete``: no arrival went unrecorded (past :data:`MAX_ARRIVALS`)."""
        if k is None:
            return {}
        if k < 1 or k > len(self.arrivals) or self.last_reply_at is None:
            return {"window": None}
        opened = self.arrivals[k - 1]
        return {
            "window": {
                "from_request": k,
                "seconds": max(0.0, self.last_reply_at - opened),
                "requests": len(self.arrivals) - k + 1,
                "complete": len(self.arrivals) == self.stats["requests"],
            }
        }

    async def set_config(self, request: web.Request) -> web.Response:
        try:
            update = await request.json()
            if not isinstance(update, dict):
                raise ValueError("expected a JSON object of config fields")
            config = SimConfig.model_validate({**self.config.model_dump(), **update})
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        # Any caller may reach this API: it must not make the server read (and then serve)
        # files of its choosing. Reply files come only from the config the server started with.
        named = _reply_files(config) - _reply_files(self.config)
        if named:
            return web.json_response(
                {
                    "error": f"replies.file {sorted(named)[0]!r}: reply files cannot be named "
                    "through the control API; give them in the --config the server starts with"
                },
                status=403,
            )
        self.configure(config)
        return web.json_response({"ok": True})

    async def reset(self, request: web.Request) -> web.Response:
        self.stats.clear()
        self.traceparents.clear()
        self.constraints.clear()
        self.peak_in_flight = self.in_flight
        self.peak_queued = 0
        self.peak_running = self.running
        self.arrivals.clear()
        self.last_reply_at = None
        if self.lag is not None:
            self.lag.samples.clear()
        return web.json_response({"ok": True})

    # --- the APIs -----------------------------------------------------------------------------

    def _authorised(self, request: web.Request) -> bool:
        if not self.api_key:
            return True
        bearer = request.headers.get("Authorization", "")
        return (
            bearer == f"Bearer {self.api_key}" or request.headers.get("x-api-key") == self.api_key
        )

    def _fault(self, model: str) -> Fault | None:
        for i, fault in enumerate(self.config.faults):
            if fault.models and model not in fault.models:
                continue
            if fault.first is not None:
                if self.fault_counts[i] >= fault.first:
                    continue
                self.fault_counts[i] += 1
            if self.rng.random() < fault.rate:
                return fault
        return None

    async def _inject(
        self, request: web.Request, fault: Fault, api: str, stream: bool
    ) -> web.StreamResponse:
        self.stats[f"fault_{fault.kind}"] += 1
        headers = {}
        if fault.retry_after_s is not None:
            headers["Retry-After"] = f"{fault.retry_after_s:g}"
        if fault.kind == "rate_limit":
            return _error(api, 429, "rate_limit_error", "simulated rate limit", headers)
        if fault.kind == "overloaded":
            return _error(api, 503, "overloaded_error", "simulated overload", headers)
        if fault.kind == "server_error":
            return _error(api, 500, "api_error", "simulated server error", {})
        if fault.kind == "timeout":
            await asyncio.sleep(fault.hang_s)
            return _error(api, 504, "timeout", "simulated hang ended", {})
        if fault.kind == "body":
            return web.json_response(fault.body)
        if fault.kind == "redirect":
            return web.Response(status=307, headers={"Location": fault.location})
        if fault.kind in ("gzip_bomb", "huge", "endless", "endless_headers"):
            return await self._hostile(request, fault, api, stream)
        if fault.kind == "garbage":
            if stream:
                return web.Response(body=b"data: {not json\n\n", content_type="text/event-stream")
            return web.Response(
                body=b"\x00\xffnot json <html>oops", content_type="application/json"
            )
        response = web.StreamResponse(status=200)
        if fault.kind == "truncated":
            if stream:
                # A few events of a real stream, then the connection drops.
                response.content_type = "text/event-stream"
                await response.prepare(request)
                for event in _stream_events(api, "sim", ["cut ", "short"], 1, 2)[:3]:
                    event.pop("_piece", None)
                    await response.write(_sse(api, event))
            else:
                response.content_type = "application/json"
                body = json.dumps({"id": "x", "object": "chat.completion", "choices": []}).encode()
                response.content_length = len(body) + 64
                await response.prepare(request)
                await response.write(body[: len(body) // 2])
        # truncated and disconnect: drop the connection without finishing the answer
        if request.transport is not None:
            request.transport.close()
        return response

    async def _hostile(
        self, request: web.Request, fault: Fault, api: str, stream: bool
    ) -> web.StreamResponse:
        """A hostile answer, written until it is done or the client goes away."""
        response = web.StreamResponse(status=200)
        written = 0
        try:
            if fault.kind == "endless_headers":
                transport = request.transport
                head = b"HTTP/1.1 200 OK\r\n"
                n = 0
                while transport is not None and not transport.is_closing():
                    transport.write(head)
                    written += len(head)
                    self.stats["hostile_bytes"] += len(head)
                    n += 1
                    head = f"X-Pad-{n}: {'x' * 64}\r\n".encode()
                    # As a socket's writer would: wait while the client reads no more.
                    while transport.get_write_buffer_size() > 64 * 1024:
                        if transport.is_closing():
                            break
                        await asyncio.sleep(0.01)
                return response
            response.content_type = "text/event-stream" if stream else "application/json"
            if fault.kind == "gzip_bomb":
                response.headers["Content-Encoding"] = "gzip"
                body = _bomb(fault.size)
                response.content_length = len(body)
                await response.prepare(request)
                await response.write(body)
                self.stats["hostile_bytes"] += len(body)
                await response.write_eof()
                return response
            await response.prepare(request)
            if fault.kind == "endless" and stream:
                # A real stream's start, then its one content event again and again.
                events = _stream_events(api, "sim", ["more "], 1, 1)
                first = next(i for i, e in enumerate(events) if e.pop("_piece", False))
                for event in events[:first]:
                    await response.write(_sse(api, event))
                piece = _sse(api, events[first])
                while True:
                    await response.write(piece)
                    self.stats["hostile_bytes"] += len(piece)
            chunk = b'{"choices": [' + b" " * (64 * 1024 - 13)
            while fault.kind == "endless" or written < fault.size:
                piece = chunk[: fault.size - written] if fault.kind == "huge" else chunk
                await response.write(piece)
                written += len(piece)
                self.stats["hostile_bytes"] += len(piece)
                chunk = b" " * len(chunk)
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client went away (aiohttp's ClientConnectionResetError is both)
        if request.transport is not None:
            request.transport.close()
        return response

    async def _generate(
        self, request: web.Request, api: Literal["openai", "anthropic"]
    ) -> tuple[dict[str, Any], str, str, int, int] | web.StreamResponse:
        """Parse a request and choose the reply; or an error response."""
        self.stats["requests"] += 1
        self.stats[f"requests_{api}"] += 1
        traceparent = request.headers.get("traceparent")
        if traceparent:
            self.traceparents.append(traceparent)
        if not self._authorised(request):
            self.stats["unauthorised"] += 1
            # Like some real servers, it echoes the key it got: clients must not record it.
            given = request.headers.get("x-api-key") or request.headers.get("Authorization", "")
            return _error(api, 401, "authentication_error", f"invalid API key {given}", {})
        try:
            body = loads(await request.read())
            if not isinstance(body["messages"], list):
                raise TypeError("messages is not a list")
            model = str(body.get("model", ""))
        except (ValueError, KeyError, TypeError):
            self.stats["bad_requests"] += 1
            return _error(
                api, 400, "invalid_request_error", "expected a JSON body with messages", {}
            )
        self.stats[f"model_{model}"] += 1
        for name in ("temperature", "max_tokens", "max_completion_tokens", "reasoning_effort"):
            if body.get(name) is not None:
                self.stats[f"param_{name}"] += 1  # which parameters requests carried
        refused = unsupported_params(api, body, model)
        if refused is not None:
            # As OpenAI answers a reasoning model asked for sampling it does not do.
            self.stats["unsupported_params"] += 1
            return _error(api, 400, "invalid_request_error", refused, {})
        fault = self._fault(model)
        if fault is not None:
            return await self._inject(request, fault, api, bool(body.get("stream")))
        reply, n_in, n_out = self.answer(body, model)
        return body, model, reply, n_in, n_out

    def answer(self, body: dict[str, Any], model: str) -> tuple[str, int, int]:
        """The reply to a request body, its input and output tokens; a constraint on the reply
        (vLLM's ``structured_outputs``, OpenAI's ``json_schema``) is honoured and recorded."""
        messages = body.get("messages") or []
        input_tokens, last_user, assistant_turns = 0, "", 0
        system = body.get("system")
        if system:
            text, _ = _text_of(system)
            input_tokens += _tokens_of(text)
        for message in messages:
            text, images = _text_of(message.get("content"))
            input_tokens += _tokens_of(text) + IMAGE_TOKENS * images
            if images:
                self.stats[f"images_{model}"] += images
            if message.get("role") == "user":
                last_user = text
            elif message.get("role") == "assistant":
                assistant_turns += 1
        logic = self.by_model.get(model, self.default)
        reply = logic.reply(last_user, assistant_turns)
        asked = constrain.requested(body)
        if asked is not None:
            self.stats["constrained"] += 1
            self.constraints.append(asked)
            try:
                if self.config.honour_constraints:
                    reply = constrain.honour(body, reply, self.config.seed)
            except ValueError:
                self.stats["constraint_unsupported"] += 1
        return reply, input_tokens, _tokens_of(reply)  # replies repeat too

    async def _slot(self) -> None:
        if self.slots.locked():
            self.waiting += 1
            self.peak_queued = max(self.peak_queued, self.waiting)
            try:
                await self.slots.acquire()
            finally:
                self.waiting -= 1
        else:
            await self.slots.acquire()
        self.running += 1
        self.peak_running = max(self.peak_running, self.running)

    def _free(self) -> None:
        self.running -= 1
        self.slots.release()

    def _first_token_delay(self) -> float:
        lat = self.config.latency
        return lat.ttft_s + (self.rng.uniform(0, lat.jitter_s) if lat.jitter_s else 0.0)

    def _decode_time(self, tokens: int) -> float:
        tps = self.config.latency.tokens_per_s
        return tokens / tps if tps > 0 else 0.0

    async def openai(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "openai")

    async def anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "anthropic")

    async def _serve(
        self, request: web.Request, api: Literal["openai", "anthropic"]
    ) -> web.StreamResponse:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        if len(self.arrivals) < MAX_ARRIVALS:
            self.arrivals.append(time.monotonic())
        try:
            chosen = await self._generate(request, api)
            if isinstance(chosen, web.StreamResponse):
                return chosen
            body, model, reply, n_in, n_out = chosen
            extra = self._extra_usage(api, body, model, n_in)
            await self._slot()
            try:
                if body.get("stream"):
                    self.stats["streamed"] += 1
                    return await self._stream(request, api, model, reply, n_in, n_out, extra)
                await asyncio.sleep(self._first_token_delay() + self._decode_time(n_out))
                self.stats["completed"] += 1
                return _json_response(_full(api, model, reply, n_in, n_out, extra))
            finally:
                self._free()
        finally:
            self.in_flight -= 1
            self.last_reply_at = time.monotonic()

    def _extra_usage(self, api: str, body: dict[str, Any], model: str, n_in: int) -> dict[str, Any]:
        """What a reply carries beyond its text: a reasoning model's reasoning (OpenAI API),
        and with ``prompt_cache`` the system prompt's tokens as cache reads (seen before) or
        writes (Anthropic API; OpenAI's ``prompt_tokens_details.cached_tokens`` has reads)."""
        extra: dict[str, Any] = {}
        if api == "openai" and _reasoning(model):
            extra["reasoning"] = _reasoning_text(body)
            self.stats["reasoning_replies"] += 1
        if self.config.prompt_cache:
            if api == "anthropic":
                system, _ = _text_of(body.get("system"))
            else:
                messages = body.get("messages") or []
                first = messages[0] if messages and isinstance(messages[0], dict) else {}
                system = _text_of(first.get("content"))[0] if first.get("role") == "system" else ""
            tokens = min(n_in, _tokens_of(system)) if system else 0
            if tokens:
                key = "cache_read" if system in self.cached_prompts else "cache_write"
                self.cached_prompts.add(system)
                # OpenAI reports reads only (writing its prefix cache costs nothing extra).
                if api == "anthropic" or key == "cache_read":
                    extra[key] = tokens
                self.stats[f"prompt_{key}"] += 1
        return extra

    async def _stream(
        self,
        request: web.Request,
        api: Literal["openai", "anthropic"],
        model: str,
        reply: str,
        n_in: int,
        n_out: int,
        extra: dict[str, Any] | None = None,
    ) -> web.StreamResponse:
        await asyncio.sleep(self._first_token_delay())
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        pieces = _pieces(reply)
        per_piece = self._decode_time(n_out) / max(1, len(pieces))
        events = _stream_events(api, model, pieces, n_in, n_out, extra)
        for i, event in enumerate(events):
            if i > 1 and per_piece and event.get("_piece"):
                await asyncio.sleep(per_piece)
            event.pop("_piece", None)
            await response.write(_sse(api, event))
        if api == "openai":
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        self.stats["completed"] += 1
        return response


def _error(api: str, status: int, kind: str, message: str, headers: dict[str, str]) -> web.Response:
    if api == "anthropic":
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        body = {"error": {"message": message, "type": kind, "code": status}}
    return web.json_response(body, status=status, headers=headers)


# What OpenAI's reasoning models refuse, and what they take instead.
_REASONING_REFUSED = {
    "max_tokens": "use 'max_completion_tokens' instead",
    "temperature": "only the default (1) is supported",
    "top_p": "only the default (1) is supported",
    "stop": "not supported with this model",
}


def unsupported_params(api: str, body: dict[str, Any], model: str) -> str | None:
    """Why OpenAI would refuse this request (400), for a reasoning model (o1, o3, o4, gpt-5)
    asked for parameters it does not take; None when it would not."""
    if api != "openai" or not _reasoning(model):
        return None
    for name, instead in _REASONING_REFUSED.items():
        if body.get(name) is not None:
            return f"Unsupported parameter: '{name}' is not supported with model {model}: {instead}"
    return None


def _reasoning_text(body: dict[str, Any]) -> str:
    """A reasoning model's (deterministic) thoughts on a request."""
    messages = body.get("messages") or []
    last = _text_of(messages[-1].get("content"))[0] if messages else ""
    words = " ".join(last.split()[:8])
    return f"Let me think about this: {words}"


def _usage(api: str, n_in: int, n_out: int, extra: dict[str, Any] | None) -> dict[str, Any]:
    extra = extra or {}
    if api == "anthropic":
        read, write = extra.get("cache_read", 0), extra.get("cache_write", 0)
        usage: dict[str, Any] = {"input_tokens": n_in - read - write, "output_tokens": n_out}
        if "cache_read" in extra or "cache_write" in extra:
            usage["cache_read_input_tokens"] = read
            usage["cache_creation_input_tokens"] = write
        return usage
    reasoning = _tokens_of(extra["reasoning"]) if extra.get("reasoning") else 0
    out = n_out + reasoning  # reasoning tokens are part of the completion, as OpenAI counts
    usage = {"prompt_tokens": n_in, "completion_tokens": out, "total_tokens": n_in + out}
    if "cache_read" in extra:
        usage["prompt_tokens_details"] = {"cached_tokens": extra["cache_read"]}
    if "reasoning" in extra:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def _full(
    api: str, model: str, reply: str, n_in: int, n_out: int, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    if api == "anthropic":
        return {
            "id": _id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": reply}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": _usage(api, n_in, n_out, extra),
        }
    message: dict[str, Any] = {"role": "assistant", "content": reply}
    if extra and extra.get("reasoning"):
        message["reasoning_content"] = extra["reasoning"]  # as vLLM's reasoning parsers send
    return {
        "id": _id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "stop",
            }
        ],
        "usage": _usage(api, n_in, n_out, extra),
    }


def _pieces(text: str, most: int = 16) -> list[str]:
    """The reply cut into at most ``most`` pieces, as a server would stream it."""
    words = re.findall(r"\S+\s*|\s+", text) or [""]
    step = max(1, -(-len(words) // most))
    return ["".join(words[i : i + step]) for i in range(0, len(words), step)]


def _stream_events(
    api: str,
    model: str,
    pieces: list[str],
    n_in: int,
    n_out: int,
    extra: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    if api == "anthropic":
        msg_id = _id("msg_")
        events: list[dict[str, Any]] = [
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**_usage(api, n_in, n_out, extra), "output_tokens": 0},
                },
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ]
        for piece in pieces:
            events.append(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": piece},
                    "_piece": True,
                }
            )
        events += [
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": n_out},
            },
            {"type": "message_stop"},
        ]
        return events
    chunk_id = _id("chatcmpl-")
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }

    out = [chunk({"role": "assistant", "content": ""})]
    if extra and extra.get("reasoning"):
        out += [chunk({"reasoning_content": p}) for p in _pieces(extra["reasoning"], 4)]
    out += [{**chunk({"content": p}), "_piece": True} for p in pieces]
    out.append(chunk({}, "stop"))
    out.append(
        {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": _usage(api, n_in, n_out, extra),
        }
    )
    return out


@functools.lru_cache(maxsize=4)
def _bomb(size: int) -> bytes:
    """A gzip body that decompresses to ``size`` bytes: the start of a JSON reply, then spaces."""
    import zlib

    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    parts = [packer.compress(b'{"choices": [')]
    block = b" " * (1024 * 1024)
    left = max(0, size - 13)
    while left > 0:
        parts.append(packer.compress(block[:left]))
        left -= len(block)
    parts.append(packer.flush())
    return b"".join(parts)


def _sse(api: str, event: dict[str, Any]) -> bytes:
    data = json.dumps(event)
    if api == "anthropic":
        return f"event: {event['type']}\ndata: {data}\n\n".encode()
    return f"data: {data}\n\n".encode()


# Plain chat completions: what the fast path answers (everything else goes to aiohttp).
_FAST_PATHS = frozenset((b"/v1/chat/completions", b"/chat/completions"))
_MAX_HEAD = 64 * 1024


class _FastRequest:
    """What :meth:`SimServer._serve` reads of a request, for one the fast path parsed."""

    def __init__(self, headers: dict[str, str], body: bytes) -> None:
        self.headers = headers  # names lower-cased
        self.body = body

    async def read(self) -> bytes:
        return self.body


class _FastHttp(asyncio.Protocol):
    """One connection to the server, read and written without aiohttp while its requests are
    plain chat completions (``POST``, a Content-Length body, not streamed) and the server
    injects no faults and checks no key: those are answered by :meth:`SimServer._serve` itself,
    the same counters and replies, for a fraction of aiohttp's CPU per request (a benchmark's
    runtime shares the cores with this server). At the first request that is anything else the
    connection is handed to aiohttp, that request's bytes included, and stays with it."""

    def __init__(self, server: SimServer, fallback: Any, connections: set[_FastHttp]) -> None:
        self.server = server
        self.fallback = fallback  # aiohttp's protocol factory (web.Server)
        self.connections = connections
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.task: asyncio.Task[None] | None = None  # the request being answered
        self.eof = False
        # A plain request's head, parsed, while its body is still coming: its headers and
        # where its body starts and ends in the buffer (a long body arrives over many reads,
        # and the head is neither searched for nor parsed again on each).
        self.waiting: tuple[dict[str, str], int, int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.task is None:
            self._next()

    def eof_received(self) -> bool:
        self.eof = True
        return self.task is not None  # keep the transport open for the answer being made

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self.task is not None:
            self.task.cancel()  # as aiohttp cancels a handler whose client went away

    def _next(self) -> None:
        """Answer the next request in the buffer, or hand the connection over."""
        buffer = self.buffer
        if self.waiting is not None:
            waited, start, stop = self.waiting
            if len(buffer) < stop:
                return  # the body is still coming
            self.waiting = None
            self._take(waited, start, stop)
            return
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > _MAX_HEAD:
                self._hand_over()
            elif self.eof and self.transport is not None:
                self.transport.close()
            return
        lines = bytes(buffer[:end]).split(b"\r\n")
        method, _, rest = lines[0].partition(b" ")
        target, _, version = rest.partition(b" ")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            key = name.strip().lower().decode("latin-1")
            if not colon or key in headers:
                self._hand_over()  # a header line of its own kind, or twice: aiohttp's to judge
                return
            headers[key] = value.strip().decode("latin-1")
        length = headers.get("content-length", "")
        server = self.server
        plain = (
            method == b"POST"
            and target in _FAST_PATHS
            and version == b"HTTP/1.1"
            and length.isdigit()
            and "transfer-encoding" not in headers
            and "expect" not in headers
            and not server.config.faults
            and not server.api_key
        )
        if not plain:
            self._hand_over()
            return
        start = end + 4
        stop = start + int(length)
        if len(buffer) < stop:
            self.waiting = (headers, start, stop)  # the body is still coming
            return
        self._take(headers, start, stop)

    def _take(self, headers: dict[str, str], start: int, stop: int) -> None:
        """Answer the plain request whose body is ``buffer[start:stop]`` (all of it read)."""
        buffer = self.buffer
        body = bytes(buffer[start:stop])
        if b'"stream"' in body:
            self._hand_over()  # maybe streamed: aiohttp's StreamResponse writes those
            return
        del buffer[:stop]
        keep_alive = "close" not in headers.get("connection", "").lower()
        self.task = asyncio.get_running_loop().create_task(
            self._answer(_FastRequest(headers, body), keep_alive)
        )

    async def _answer(self, request: _FastRequest, keep_alive: bool) -> None:
        try:
            response: web.StreamResponse = await self.server._serve(request, "openai")  # type: ignore[arg-type]
        except Exception:  # a bug of the server's: answered 500, as aiohttp does
            response = web.Response(status=500, text="500 Internal Server Error")
            keep_alive = False
        self.task = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if type(response) is not web.Response:
            transport.close()  # (none: faults and streams go to aiohttp)
            return
        body = response.body if isinstance(response.body, bytes) else b""
        head = [f"HTTP/1.1 {response.status} {response.reason}"]
        head += [
            f"{k}: {v}"
            for k, v in response.headers.items()
            if k.lower() not in ("content-length", "connection", "transfer-encoding")
        ]
        head.append(f"Content-Length: {len(body)}")
        if not keep_alive:
            head.append("Connection: close")
        transport.writelines(["\r\n".join(head).encode("latin-1") + b"\r\n\r\n", body])
        if not keep_alive or (self.eof and not self.buffer):
            transport.close()
        elif self.buffer:
            self._next()

    def _hand_over(self) -> None:
        transport = self.transport
        if transport is None:
            return
        self.connections.discard(self)
        handler = self.fallback()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if self.buffer:
            handler.data_received(bytes(self.buffer))
            self.buffer.clear()
        if self.eof:
            handler.eof_received()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def serve(config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
    """Run until SIGTERM/SIGINT; prints ``listening on URL`` once ready."""
    server = SimServer(config)
    server.lag = LoopLagProbe().start()
    runner = web.AppRunner(
        server.app(), access_log=None, handle_signals=False, shutdown_timeout=0.5
    )
    await runner.setup()
    loop = asyncio.get_running_loop()
    aiohttp_server = runner.server
    assert aiohttp_server is not None
    connections: set[_FastHttp] = set()
    listening = await loop.create_server(
        lambda: _FastHttp(server, aiohttp_server, connections), host, port, backlog=4096
    )
    sockets = listening.sockets
    bound = sockets[0].getsockname()[1] if sockets else port
    print(f"listening on http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # Thousands of requests in flight: the same collection policy as a run's (parley.event_loop).
    async with responsive_gc():
        await stop.wait()
    listening.close()
    for connection in list(connections):
        connection.close()
    await server.lag.stop()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parley sim-server", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML/JSON sim config (see configs/sim.yaml)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--ttft", type=float, help="seconds to the first token")
    parser.add_argument("--tokens-per-s", type=float, help="decode speed per sequence")
    parser.add_argument("--max-seqs", type=int, help="sequences at once; the rest queue")
    parser.add_argument("--reply", help="a fixed reply")
    parser.add_argument("--api-key-env", help="require the key held by this environment variable")
    parser.add_argument("--model", help="(ignored; lets the launcher pass vLLM-like arguments)")


def run_from_args(args: argparse.Namespace) -> int:
    try:
        config = load_sim_config(args.config)
    except SimConfigError as exc:
        print(f"parley sim-server: --config {exc}", file=sys.stderr)
        return 2
    latency = config.latency.model_copy(
        update={
            k: v
            for k, v in (
                ("ttft_s", args.ttft),
                ("tokens_per_s", args.tokens_per_s),
                ("max_seqs", args.max_seqs),
            )
            if v is not None
        }
    )
    config = config.model_copy(update={"latency": latency})
    if args.reply is not None:
        config = config.model_copy(update={"replies": Replies(text=args.reply)})
    if args.api_key_env:
        config = config.model_copy(update={"api_key_env": args.api_key_env})
    with contextlib.suppress(KeyboardInterrupt):
        event_loop.run(serve(config, args.host, args.port))
    return 0


class SimServerProcess:
    """The stand-in server as a child process on a free port, for tests and benchmarks.

    ``url`` is the server root (the Anthropic base URL); ``openai_url`` adds ``/v1``.
    ``configure(**fields)`` replaces parts of the running server's config; ``stats()`` reads
    its counters. Use as a context manager, or call ``start()`` / ``stop()``.
    """

    def __init__(
        self,
        config: SimConfig | dict[str, Any] | None = None,
        *,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 30.0,
    ) -> None:
        self.config = config if isinstance(config, SimConfig) else load_sim_config(config)
        self.env = env
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self._config_file: str | None = None
        self.output: deque[str] = deque(maxlen=200)

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    def start(self) -> SimServerProcess:
        fd, self._config_file = tempfile.mkstemp(suffix=".json", prefix="parley-sim-")
        with os.fdopen(fd, "w") as f:
            f.write(self.config.model_dump_json())
        env = {**os.environ, **(self.env or {})}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "parley.agents.backends.simserver",
                "--config",
                self._config_file,
                "--port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        deadline = time.monotonic() + self.startup_timeout_s
        assert self.process.stdout is not None
        seen: list[str] = []
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            seen.append(line)
            if line.startswith("listening on "):
                self.url = line.split()[-1].strip()
                processes.drain(self.process, self.output)
                return self
        self.stop()
        raise RuntimeError("sim server did not start:\n" + "".join(seen[-20:]))

    def _call(self, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method="POST" if data is not None else "GET",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise ValueError(f"sim server refused {path}: {exc.read().decode()}") from None

    def configure(self, **fields: Any) -> None:
        """Replace top-level parts of the config (``faults=[...]``, ``models={...}``…)."""
        self._call("/sim/config", fields)

    def stats(self, window_from: int | None = None) -> dict[str, Any]:
        """The server's counters; with ``window_from``, the active window from that request on
        (``/sim/stats?window_from=K``)."""
        query = "" if window_from is None else f"?window_from={int(window_from)}"
        return self._call("/sim/stats" + query)

    def reset(self) -> None:
        self._call("/sim/reset", {})

    def stop(self) -> None:
        processes.stop(self.process, 5.0)
        self.process = None
        if self._config_file:
            with contextlib.suppress(OSError):
                os.unlink(self._config_file)
            self._config_file = None

    def __enter__(self) -> SimServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
