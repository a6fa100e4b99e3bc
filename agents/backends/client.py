"""Calling a model: endpoints shared across a run, least-outstanding balancing, health,
adaptive concurrency, retries with backoff that honour Retry-After, a per-request deadline.

The official SDKs (``openai``, ``anthropic``) do the HTTP: authentication, headers, base URLs,
error types. Their own retries are off (``max_retries=0``) because retrying is done here, per
endpoint and with the limiter's view of overload. Requests go through the SDK's generic
``client.post`` (documented for endpoints the typed methods do not cover) with a ready JSON body:
the typed ``create`` methods walk every message of the request to transform it, which costs
about a millisecond of CPU per call — the budget of a whole turn at 1000 requests/s.
``transport: direct`` (:class:`DirectTransport`) sends the same requests over connections of
parley's own, and to an OpenAI-compatible server without importing the SDK at all.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import functools
import importlib
import json
import os
import random
import socket
import sys
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import yarl
from opentelemetry import trace

from parley.agents.backends import spans as genai_spans
from parley.agents.backends.cache import request_key
from parley.agents.backends.formats import (
    MAX_REPLY_CHARS,
    AnthropicStream,
    BadResponse,
    OpenAIStream,
    Reply,
    anthropic_body,
    fit_max_tokens,
    load_body,
    openai_body,
    parse_anthropic,
    parse_openai,
    prepare,
)
from parley.agents.backends.limiter import AdaptiveLimiter
from parley.agents.backends.spec import PARAM_PRESETS, GenerationParams, ModelSpec

if TYPE_CHECKING:
    import httpx2

    from parley.agents.backends.batch import ReplyStore
    from parley.agents.backends.cache import ResponseCache
    from parley.agents.backends.constrain import Constraint
from parley.bus.messages import PromptMessage, Usage

TracerFn = Callable[[], trace.Tracer]


def _dumps(value: Any) -> bytes:
    """A request body as JSON bytes (orjson: several times less CPU than the standard library,
    which still takes what orjson refuses, such as integers over 64 bits)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(value).encode()


class ModelUnavailable(RuntimeError):
    """A model call that cannot succeed: gave up after retries, a refusal that retrying cannot
    fix (400, 401…), a missing API key, a server that never came up. Raised from the policy,
    it ends the episode as ``error`` with this message as the reason; ``calls`` holds the
    record of each attempt (the episode counts them in ``model_calls``)."""

    def __init__(self, message: str, calls: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.calls = calls or []


@dataclass
class Failure(Exception):
    """One failed attempt, classified."""

    kind: str
    message: str
    status: int | None = None
    retryable: bool = True
    retry_after_s: float | None = None
    overload: bool = False

    def __str__(self) -> str:
        status = f" {self.status}" if self.status else ""
        return f"{self.kind}{status}: {self.message}"


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


_TIMEOUTS: tuple[type[BaseException], ...] = (TimeoutError,)
_CONNECTION: tuple[type[BaseException], ...] = (aiohttp.ClientError, ConnectionError, OSError)
_BAD: tuple[type[BaseException], ...] = (
    BadResponse,
    json.JSONDecodeError,
    UnicodeDecodeError,
    # The SDK's stream decoder parses each event with json.loads: deep nesting ends here.
    RecursionError,
)
# The SDKs (and httpx2 under them) are imported only by a run that talks to a model through
# them: they take seconds to import, which every worker process and every scripted-only run
# would otherwise pay. Their exceptions can only exist once they are imported.
_SDKS = ("openai", "anthropic", "httpx2")


@dataclass(frozen=True)
class _SdkErrors:
    status: tuple[type[BaseException], ...]
    timeouts: tuple[type[BaseException], ...]
    connection: tuple[type[BaseException], ...]
    bad: tuple[type[BaseException], ...]


@functools.cache
def _sdk_errors() -> _SdkErrors:
    import anthropic
    import httpx2
    import openai

    return _SdkErrors(
        status=(openai.APIStatusError, anthropic.APIStatusError),
        timeouts=(openai.APITimeoutError, anthropic.APITimeoutError, httpx2.TimeoutException),
        connection=(openai.APIConnectionError, anthropic.APIConnectionError, httpx2.TransportError),
        bad=(
            openai.APIResponseValidationError,
            anthropic.APIResponseValidationError,
            openai.APIError,
            anthropic.APIError,
        ),
    )


_NO_SDK_ERRORS = _SdkErrors((), (), (), ())


def _loaded_sdk_errors() -> _SdkErrors:
    if any(name in sys.modules for name in _SDKS):
        return _sdk_errors()
    return _NO_SDK_ERRORS


def _cause(exc: BaseException) -> BaseException | None:
    """The aiohttp error under an SDK error, if any (the SDKs' aiohttp adapter maps every
    connection error, a dropped connection included, to a connect timeout)."""
    seen: BaseException | None = exc
    for _ in range(8):
        seen = seen.__cause__ or seen.__context__ if seen is not None else None
        if seen is None:
            return None
        if isinstance(seen, aiohttp.ClientError):
            return seen
    return None


def classify(exc: BaseException) -> Failure:
    """What a failed attempt means for retrying."""
    if isinstance(exc, Failure):
        return exc
    cause = exc if isinstance(exc, aiohttp.ClientError) else _cause(exc)
    if isinstance(cause, aiohttp.ClientPayloadError):
        return Failure("bad_response", f"body cut short: {_short(cause)}")
    if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(
        cause, aiohttp.ServerTimeoutError
    ):
        return Failure("connection", _short(cause))
    sdk = _loaded_sdk_errors()
    if isinstance(exc, sdk.status):
        status = exc.status_code  # type: ignore[attr-defined]
        return status_failure(status, exc.response.headers, _short(exc))  # type: ignore[attr-defined]
    if isinstance(exc, (*_TIMEOUTS, *sdk.timeouts)):
        return Failure("timeout", _short(exc) or "no answer in time")
    if isinstance(exc, (*_CONNECTION, *sdk.connection)):
        return Failure("connection", _short(exc) or type(exc).__name__)
    if isinstance(exc, (*_BAD, *sdk.bad)):
        return Failure("bad_response", _short(exc) or type(exc).__name__)
    raise exc


def status_failure(status: int, headers: Mapping[str, str] | None, message: str) -> Failure:
    """An HTTP error status, classified: overload (429, 503, 529) shrinks the limit; 5xx, 408
    and 409 are retried; other 4xx (bad request, wrong key) are not."""
    after = retry_after(headers)
    if status == 429:
        return Failure("rate_limit", message, status, True, after, overload=True)
    if status in (503, 529):
        return Failure("overloaded", message, status, True, after, overload=True)
    if status in (408, 409) or status >= 500:
        return Failure("server_error", message, status, True, after)
    kind = "auth" if status in (401, 403) else "refused"
    return Failure(kind, message, status, retryable=False)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ")
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


# --- the two SDKs ---------------------------------------------------------------------------


class Backend:
    """How one API is reached: its SDK, its path, its reply format."""

    provider = ""
    path = ""
    sdk_name = ""  # the SDK's module, imported when a client is first made
    client_name = ""  # its async client class
    # Sent when no API key is configured: local servers (vLLM…) take any key; the SDK insists
    # on one.
    placeholder_key = ""

    @staticmethod
    def parse(data: Any) -> Reply:
        raise NotImplementedError

    @staticmethod
    def accumulator() -> OpenAIStream | AnthropicStream:
        raise NotImplementedError

    @property
    def sdk(self) -> Any:
        return importlib.import_module(self.sdk_name)

    def direct_headers(self, api_key: str | None, spec: ModelSpec) -> dict[str, str] | None:
        """The headers ``transport: direct`` sends, made without the SDK; None where they are
        taken from the SDK's client (its authentication and API version)."""
        return None

    def make_client(
        self, url: str, api_key: str | None, spec: ModelSpec, http: httpx2.AsyncClient
    ) -> Any:
        client_cls = getattr(self.sdk, self.client_name)
        return client_cls(
            base_url=url,
            api_key=api_key or self.placeholder_key,
            max_retries=0,
            timeout=spec.timeout_s,
            default_headers=spec.headers or None,
            http_client=http,
        )

    def body(
        self, messages: list[PromptMessage], spec: ModelSpec, params: GenerationParams
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        raise NotImplementedError

    async def send(
        self, client: Any, body: dict[str, Any], stream: bool, headers: dict[str, str] | None = None
    ) -> Reply:
        """One request through the SDK's generic ``client.post``: the whole reply, or the
        streamed chunks (OpenAI) or events (Anthropic) gathered by the backend's accumulator;
        ``headers`` added to the request (the chat span's traceparent)."""
        options: Any = {"headers": headers} if headers else {}
        if not stream:
            import httpx2

            response = await client.post(
                self.path, body=body, cast_to=httpx2.Response, options=options
            )
            return _parsed(self.parse, response.content)
        start = time.monotonic()
        ttft: float | None = None
        acc = self.accumulator()
        items = await client.post(
            self.path,
            body=body,
            cast_to=object,
            options=options,
            stream=True,
            stream_cls=self.sdk.AsyncStream[object],
        )
        try:
            async for item in items:
                if ttft is None:
                    ttft = time.monotonic() - start
                acc.add(item)
        finally:
            await items.close()
        return acc.reply(ttft)

    @staticmethod
    def root(url: str) -> str:
        """The server root of a base URL (``…/v1`` removed), where ``/health`` lives."""
        return url[: -len("/v1")] if url.endswith("/v1") else url


def _parsed(parse: Callable[[Any], Reply], body: bytes) -> Reply:
    """A whole response body parsed by ``parse``, with the bytes that were not UTF-8 counted
    among the repaired characters."""
    data, repaired = load_body(body)
    reply = parse(data)
    reply.repaired += repaired
    return reply


def _error_status(status: int, headers: Mapping[str, str], body: bytes) -> Failure:
    """An error response of direct transport, classified, with the start of its body."""
    text = body.decode("utf-8", "replace").strip()
    return status_failure(status, headers, f"HTTP {status}: {text[:300]}")


def _http_client(module: Any, spec: ModelSpec) -> httpx2.AsyncClient:
    import httpx2

    # One connection pool per endpoint, big enough for the concurrency limit at its maximum.
    connections = spec.concurrency.max + 16
    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    timeout = httpx2.Timeout(spec.timeout_s, connect=min(10.0, spec.timeout_s))
    if spec.http == "aiohttp":
        return module.DefaultAioHttpClient(limits=limits, timeout=timeout)
    return module.DefaultAsyncHttpxClient(limits=limits, timeout=timeout)


def _common(messages: list[PromptMessage], spec: ModelSpec, params: GenerationParams):  # type: ignore[no-untyped-def]
    system, turns, images = prepare(messages, spec)
    max_tokens = fit_max_tokens(params, spec, system, turns)
    notes: dict[str, Any] = {}
    if images.sent or images.dropped:
        notes["images"] = images.record()
    if max_tokens != params.max_tokens:
        notes["max_tokens"] = max_tokens
    return system, turns, max_tokens, notes


_CHAT = PARAM_PRESETS["chat"]
_SAMPLING = (("temperature", "temperature"), ("top_p", "top_p"), ("seed", "seed"))


def _accepted_only(
    body: dict[str, Any], spec: ModelSpec, params: GenerationParams, stop_key: str, openai: bool
) -> dict[str, Any]:
    """``body`` with only the generation parameters the model accepts (``ModelSpec.accepts``):
    a reasoning model gets ``max_completion_tokens`` (and ``reasoning_effort``) and no
    ``temperature``, ``top_p`` or ``stop``, which OpenAI's o-series and gpt-5 refuse."""
    accepted = spec.accepted()
    if accepted == _CHAT and params.max_completion_tokens is None:
        return body  # the classic request, as built
    limit = params.max_completion_tokens or body.pop("max_tokens", None)
    body.pop("max_tokens", None)
    for name, key in (*_SAMPLING, ("stop", stop_key)):
        if name not in accepted:
            body.pop(key, None)
    if not openai or "max_completion_tokens" not in accepted:
        # Anthropic's messages API requires max_tokens; chat servers read it.
        body["max_tokens"] = limit
    else:
        body["max_completion_tokens"] = limit
    if openai and params.reasoning_effort and "reasoning_effort" in accepted:
        body["reasoning_effort"] = params.reasoning_effort
    return body


def usage_details(raw: Any) -> dict[str, int]:
    """Token counts a response reports beyond input and output: ``reasoning`` (OpenAI's
    ``completion_tokens_details.reasoning_tokens``, part of the output), ``cache_read`` and
    ``cache_write`` (Anthropic's ``cache_read_input_tokens`` / ``cache_creation_input_tokens``,
    OpenAI's ``prompt_tokens_details.cached_tokens``: apart from the other input tokens).
    Values that are not whole numbers are ignored."""
    usage = raw.get("usage") if isinstance(raw, dict) else None
    if not isinstance(usage, dict):
        return {}
    out: dict[str, int] = {}
    details = usage.get("completion_tokens_details")
    prompt = usage.get("prompt_tokens_details")
    found = [
        ("reasoning", details.get("reasoning_tokens") if isinstance(details, dict) else None),
        ("cache_read", usage.get("cache_read_input_tokens")),
        # OpenAI (and vLLM with --enable-prompt-tokens-details): prompt tokens its prefix
        # cache served, which parse_openai takes out of the input.
        ("cache_read", prompt.get("cached_tokens") if isinstance(prompt, dict) else None),
        ("cache_write", usage.get("cache_creation_input_tokens")),
    ]
    for key, value in found:
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63:
            out[key] = value
    return out


class OpenAIBackend(Backend):
    provider = "openai"
    path = "/chat/completions"
    sdk_name = "openai"
    client_name = "AsyncOpenAI"
    placeholder_key = "EMPTY"
    parse = staticmethod(parse_openai)
    accumulator = staticmethod(OpenAIStream)

    def direct_headers(self, api_key: str | None, spec: ModelSpec) -> dict[str, str] | None:
        # An OpenAI-compatible server needs the key as a bearer token and nothing of the SDK's
        # (its User-Agent and X-Stainless-* describe the SDK): a direct run then never imports
        # the SDK, about 0.3 s of CPU in every process of the run.
        return {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": _user_agent(),
            **spec.headers,
            "Authorization": f"Bearer {api_key or self.placeholder_key}",
        }

    def body(
        self, messages: list[PromptMessage], spec: ModelSpec, params: GenerationParams
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        system, turns, max_tokens, notes = _common(messages, spec, params)
        body = openai_body(system, turns, spec.model, params, max_tokens, spec.stream)
        return _accepted_only(body, spec, params, "stop", openai=True), notes


class AnthropicBackend(Backend):
    provider = "anthropic"
    path = "/v1/messages"
    sdk_name = "anthropic"
    client_name = "AsyncAnthropic"
    placeholder_key = "none"
    parse = staticmethod(parse_anthropic)
    accumulator = staticmethod(AnthropicStream)

    def body(
        self, messages: list[PromptMessage], spec: ModelSpec, params: GenerationParams
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        system, turns, max_tokens, notes = _common(messages, spec, params)
        if params.seed is not None:
            notes["seed"] = "not supported by the Anthropic API; not sent"
        body = anthropic_body(system, turns, spec.model, params, max_tokens, spec.stream)
        return _accepted_only(body, spec, params, "stop_sequences", openai=False), notes


BACKENDS: dict[str, Backend] = {"openai": OpenAIBackend(), "anthropic": AnthropicBackend()}


def uses_sdk(spec: ModelSpec) -> bool:
    """Whether calling ``spec``'s model needs its SDK: all but ``transport: direct`` to an
    OpenAI-compatible server (streams and ``https://`` included, over aiohttp)."""
    backend = BACKENDS.get(spec.backend)
    return (
        backend is None or spec.transport != "direct" or backend.direct_headers(None, spec) is None
    )


@functools.cache
def _user_agent() -> str:
    from parley import __version__

    return f"parley/{__version__}"


class DirectTransport:
    """``transport: direct``: the request the SDK would make — its URL and authentication
    (for OpenAI-compatible servers the key as a bearer token and the entry's ``headers``; for
    Anthropic every header the SDK's client sends) — over connections of parley's own.

    For self-hosted servers at thousands of requests a second: the SDK's request machinery
    (option models, URL parsing, httpx request objects) costs about five times the CPU of the
    HTTP exchange itself, and a run's event loop has one core. The URL is parsed once and the
    body encoded to bytes here (orjson), which spares aiohttp both per request.
    """

    def __init__(
        self, url: str, backend: Backend, headers: Mapping[str, Any], spec: ModelSpec
    ) -> None:
        self.backend = backend
        self.target = yarl.URL(url + backend.path)
        headers = {k: v for k, v in headers.items() if isinstance(v, str)}
        connections = spec.concurrency.max + 16
        connect_s = min(10.0, spec.timeout_s)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, limit_per_host=connections),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_s),
        )
        # Whole (not streamed) replies from a plain http:// server: over connections of our own.
        self.http1 = (
            _Http1(self.target, headers, connect_s) if _Http1.fits(self.target, headers) else None
        )

    async def send(
        self, body: dict[str, Any], stream: bool, headers: dict[str, str] | None = None
    ) -> Reply:
        if self.http1 is not None and not stream:
            got = await self.http1.post(_dumps(body), headers)
            if got.status >= 400:
                raise _error_status(got.status, got.headers, got.body)
            return _parsed(self.backend.parse, got.body)
        start = time.monotonic()
        async with self.session.post(self.target, data=_dumps(body), headers=headers) as response:
            if response.status >= 400:
                raise _error_status(response.status, response.headers, await response.read())
            if not stream:
                return _parsed(self.backend.parse, await response.read())
            acc = self.backend.accumulator()
            ttft: float | None = None
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue  # event names, comments, keep-alives
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                if ttft is None:
                    ttft = time.monotonic() - start
                item, repaired = load_body(data)
                acc.repaired += repaired
                acc.add(item)
            return acc.reply(ttft)

    async def aclose(self) -> None:
        if self.http1 is not None:
            self.http1.close()
        await self.session.close()


# --- plain HTTP/1.1 for direct transport --------------------------------------------------------

# Idle keep-alive connections older than this are closed rather than reused (aiohttp's default).
KEEPALIVE_S = 15.0
# A host name's addresses are looked up again after this long (aiohttp's ttl_dns_cache).
DNS_TTL_S = 10.0
_MAX_HEAD = 64 * 1024  # a response's status line and headers, at most
# Request headers this client writes itself.
_OWN_HEADERS = frozenset(
    ("host", "content-length", "content-type", "connection", "transfer-encoding", "accept-encoding")
)


class _Response:
    """One HTTP response as read off a connection."""

    __slots__ = ("body", "headers", "keep_alive", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes, keep_alive: bool) -> None:
        self.status = status
        self.headers = headers  # names lower-cased
        self.body = body
        self.keep_alive = keep_alive


class _Connection(asyncio.Protocol):
    """One keep-alive connection: a request written, its response read (status, headers, then a
    body of Content-Length bytes, chunked, or up to the end of the connection)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._buffer = bytearray()
        self._waiter: asyncio.Future[_Response] | None = None
        self._head: tuple[int, dict[str, str], int, bool] | None = None  # status, headers, at, ka
        self._chunks: _Chunks | None = None  # a chunked body, as far as it is read
        self._eof = False
        self._got_bytes = False

    # asyncio's protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            # Bytes no request asked for (on an idle connection, after a whole response): its
            # framing cannot be trusted, so it is not used again.
            self.close()
            return
        self._got_bytes = True
        self._buffer += data
        self._parse()

    def eof_received(self) -> bool:
        self._eof = True
        if self._waiter is not None:
            self._parse()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._eof = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self._parse()
            if not waiter.done():
                waiter.set_exception(self._cut_short(exc))

    # the exchange

    async def exchange(self, request: list[bytes]) -> _Response:
        """Write ``request`` (its byte pieces), and read its response."""
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._buffer.clear()
        self._head = None
        self._chunks = None
        self._got_bytes = False
        self.transport.writelines(request)
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _cut_short(self, exc: Exception | None) -> Exception:
        if not self._got_bytes:
            # As aiohttp reports it: a connection error (the response never began).
            return aiohttp.ServerDisconnectedError()
        # A response that began and did not end: a body cut short (bad_response).
        return aiohttp.ClientPayloadError(f"Response payload is not completed: {exc!r}")

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.close()

    def _parse(self) -> None:
        waiter = self._waiter
        assert waiter is not None
        if waiter.done():
            return
        buffer = self._buffer
        if self._head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > _MAX_HEAD:
                    self._fail(BadResponse("the response's headers are too long"))
                return
            try:
                head = _parse_head(bytes(buffer[:end]))
            except ValueError as exc:
                self._fail(BadResponse(f"not an HTTP response: {exc}"))
                return
            status, headers, keep_alive = head
            if 100 <= status < 200:  # an interim response (100 Continue): the real one follows
                del buffer[: end + 4]
                self._parse()
                return
            self._head = (status, headers, end + 4, keep_alive)
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._chunks = _Chunks(end + 4)
        status, headers, at, keep_alive = self._head
        try:
            body = _body(buffer, at, headers, status, self._eof, self._chunks)
        except aiohttp.ClientPayloadError as exc:  # cut short: classified as aiohttp's
            self._fail(exc)
            return
        except ValueError as exc:
            self._fail(BadResponse(f"bad response body: {exc}"))
            return
        if body is None:
            return  # more to come
        if body is _UNTIL_CLOSE:
            keep_alive = False
            body = bytes(buffer[at:])
        elif len(buffer) > at + len(body) and "content-length" in headers:
            keep_alive = False  # more than the response: not used again (see data_received)
        try:
            body = _decoded(body, headers.get("content-encoding"))
        except ValueError as exc:
            self._fail(BadResponse(f"bad response body: {exc}"))
            return
        waiter.set_result(_Response(status, headers, body, keep_alive))


_UNTIL_CLOSE = b"\x00until-close"  # a marker: the body is what came before the end


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """Status, headers (lower-case names) and whether the connection stays open."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(f"status line {lines[0][:80]!r}")
    status = int(rest[:3])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise ValueError(f"header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    # HTTP/1.1 keeps the connection unless told to close; 1.0 closes it unless told to keep it.
    keep_alive = "close" not in connection if version != "HTTP/1.0" else "keep-alive" in connection
    return status, headers, keep_alive


def _body(
    buffer: bytearray,
    at: int,
    headers: dict[str, str],
    status: int,
    eof: bool,
    chunks: _Chunks | None = None,
) -> bytes | None:
    """The body once it is all in ``buffer`` (from ``at``); None while more is to come;
    ``_UNTIL_CLOSE`` when it ended with the connection. ``chunks``: a chunked body's reader,
    which keeps its place between reads."""
    if status in (204, 304):
        return b""
    if chunks is not None:
        return chunks.body(buffer, eof)
    length = headers.get("content-length")
    if length is not None:
        n = int(length)
        if n < 0:
            raise ValueError(f"Content-Length {length}")
        if len(buffer) - at >= n:
            return bytes(buffer[at : at + n])
        if eof:
            raise aiohttp.ClientPayloadError(
                f"Response payload is not completed: {len(buffer) - at} of {n} bytes"
            )
        return None
    return _UNTIL_CLOSE if eof else None


class _Chunks:
    """A chunked body read as it arrives: each complete chunk is taken once, so a body of many
    small chunks over many reads is not parsed again from its start on every read."""

    __slots__ = ("at", "pieces")

    def __init__(self, at: int) -> None:
        self.at = at  # where the next chunk's size line starts in the buffer
        self.pieces: list[bytes] = []

    def body(self, buffer: bytearray, eof: bool) -> bytes | None:
        """The whole body once the last chunk and the trailers are in ``buffer``; None while
        more is to come. ``ValueError`` for a bad size line, ``ClientPayloadError`` for a body
        cut short by the end of the connection."""
        at = self.at
        while True:
            line_end = buffer.find(b"\r\n", at)
            if line_end < 0:
                break
            size = int(bytes(buffer[at:line_end]).split(b";", 1)[0].strip(), 16)
            if size == 0:
                # The last chunk, then trailers (if any) up to an empty line.
                if buffer.find(b"\r\n\r\n", line_end) >= 0:
                    return b"".join(self.pieces)
                break
            start = line_end + 2
            if len(buffer) < start + size + 2:
                break
            self.pieces.append(bytes(buffer[start : start + size]))
            at = self.at = start + size + 2
        if eof:
            raise aiohttp.ClientPayloadError("Response payload is not completed: chunked body cut")
        return None


def _decoded(body: bytes, encoding: str | None) -> bytes:
    """The body with its Content-Encoding (gzip, deflate) undone (none is asked for)."""
    if not encoding or encoding.lower() == "identity":
        return body
    kind = encoding.lower()
    try:
        if kind in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if kind == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)
    except zlib.error as exc:
        raise ValueError(f"{encoding} body: {exc}") from None
    raise ValueError(f"Content-Encoding {encoding!r}")


class _Http1:
    """Requests to one plain ``http://`` URL over keep-alive connections of its own.

    aiohttp's client spends more CPU on a small JSON request (URL and header objects, cookie
    and trace hooks, its response and payload objects) than the rest of a model call; this
    writes the request's bytes (a header block made once) and reads the response with a few
    ``bytes.find`` calls. Connections are reused most recently used first; idle ones older
    than :data:`KEEPALIVE_S` are closed. The endpoint's limiter bounds how many are open.
    """

    def __init__(self, target: yarl.URL, headers: Mapping[str, str], connect_s: float) -> None:
        assert target.host is not None and target.port is not None
        self.host = target.raw_host or target.host
        self.port = target.port
        self.connect_s = connect_s
        host = f"[{self.host}]" if ":" in self.host else self.host
        if target.explicit_port is not None:
            host = f"{host}:{target.port}"
        lines = [f"POST {target.raw_path_qs} HTTP/1.1", f"Host: {host}"]
        lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in _OWN_HEADERS]
        lines += ["Content-Type: application/json", "Content-Length: "]
        self._head = "\r\n".join(lines).encode("latin-1")
        self._idle: deque[_Connection] = deque()
        self._open: set[_Connection] = set()
        # The host's addresses, looked up once for every connection made meanwhile (a ramp
        # opens a thousand at once), and when.
        self._addresses: asyncio.Future[list[tuple[Any, ...]]] | None = None
        self._looked_up = 0.0

    @staticmethod
    def fits(target: yarl.URL, headers: Mapping[str, str]) -> bool:
        """Whether a URL and headers can go this way: plain http without credentials in the
        URL, and header values that are one line of Latin-1 (others go through aiohttp)."""
        if target.scheme != "http" or target.user or target.password or not target.host:
            return False
        for k, v in headers.items():
            text = f"{k}{v}"
            if "\r" in text or "\n" in text or not text.isascii():
                return False
        return True

    def _request(self, body: bytes, headers: Mapping[str, str] | None) -> list[bytes]:
        extra = ""
        if headers:
            # A list, not a generator: this runs on every traced request (its traceparent).
            extra = "".join([f"\r\n{k}: {v}" for k, v in headers.items() if "\n" not in k + v])
        head = b"%s%d%s\r\n\r\n" % (self._head, len(body), extra.encode("latin-1"))
        return [head, body]

    async def _connection(self) -> _Connection:
        now = time.monotonic()
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < KEEPALIVE_S:
                return conn
            self._drop(conn)
        async with asyncio.timeout(self.connect_s):
            conn = await self._connect()
        self._open.add(conn)
        return conn

    async def _connect(self) -> _Connection:
        """A new connection to the first of the host's addresses that takes one."""
        loop = asyncio.get_running_loop()
        if self._addresses is None or time.monotonic() - self._looked_up > DNS_TTL_S:
            self._looked_up = time.monotonic()
            self._addresses = asyncio.ensure_future(
                loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            )
        lookup = self._addresses
        try:
            # Shielded: one caller's deadline does not end the lookup the others wait for.
            addresses = await asyncio.shield(lookup)
        except OSError:
            if self._addresses is lookup:
                self._addresses = None  # a failed lookup is not kept: the next one tries again
            raise
        error: OSError | None = None
        for family, _, proto, _, address in addresses:
            try:
                _, conn = await loop.create_connection(
                    _Connection, address[0], address[1], family=family, proto=proto
                )
                return conn
            except OSError as exc:
                error = exc
        raise error or OSError(f"no address for {self.host}")

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        self._open.discard(conn)

    async def post(self, body: bytes, headers: Mapping[str, str] | None = None) -> _Response:
        conn = await self._connection()
        try:
            response = await conn.exchange(self._request(body, headers))
        except BaseException:
            # Cancelled (the call's deadline), cut short, or refused: the connection's state is
            # unknown, so it is not reused.
            self._drop(conn)
            raise
        if response.keep_alive and not conn.closed:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
            # The oldest idle connections, which the most recently used ones stand in front of.
            while self._idle and conn.idle_since - self._idle[0].idle_since >= KEEPALIVE_S:
                self._drop(self._idle.popleft())
        else:
            self._drop(conn)
        return response

    def close(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()


# --- endpoints ------------------------------------------------------------------------------


class Endpoint:
    """One base URL: its SDK client and connection pool, limiter, load and health."""

    def __init__(self, url: str, backend: Backend, spec: ModelSpec, api_key: str | None) -> None:
        self.url = url
        # How records, stats and spans name it: a password in the URL masked.
        parsed = yarl.URL(url)
        self.label = str(parsed.with_password("***")) if parsed.password else url
        # What of the URL's credentials may come back in a server's error: the password, and
        # the Basic authorization made of them.
        self.credentials: tuple[str, ...] = ()
        if parsed.password:
            basic = base64.b64encode(f"{parsed.user or ''}:{parsed.password}".encode()).decode()
            self.credentials = (parsed.password, basic)
        self.backend = backend
        self.spec = spec
        self._api_key = api_key
        c = spec.concurrency
        self.limiter = AdaptiveLimiter(c.start, c.min, c.max, c.decrease)
        self.direct: DirectTransport | None = None
        if spec.transport == "direct":
            headers = backend.direct_headers(api_key, spec)
            if headers is None:
                headers = {**self.client.default_headers, **self.client.auth_headers}
            self.direct = DirectTransport(url, backend, headers, spec)
        self.outstanding = 0
        self.failures = 0
        self.down_until = 0.0
        self.counts: Counter[str] = Counter()
        # For the run status: the latest successful latencies, and requests given up here.
        self.latencies: deque[float] = deque(maxlen=512)
        self.gave_up = 0
        self._health: asyncio.Task[None] | None = None
        if spec.health.path:
            self._health = asyncio.get_running_loop().create_task(
                self._probe_forever(spec.health.path), name=f"health:{url}"
            )

    # The SDK's client and its HTTP client are made when first used: a direct endpoint to an
    # OpenAI-compatible server uses neither (unless it probes health), and each costs an import
    # of the SDK and an SSL context that loads every CA certificate (about 20 ms).
    @functools.cached_property
    def http(self) -> httpx2.AsyncClient:
        return _http_client(self.backend.sdk, self.spec)

    @functools.cached_property
    def client(self) -> Any:
        return self.backend.make_client(self.url, self._api_key, self.spec, self.http)

    @property
    def healthy(self) -> bool:
        return time.monotonic() >= self.down_until

    def succeeded(self) -> None:
        self.failures = 0
        self.down_until = 0.0
        self.counts["ok"] += 1
        self.limiter.succeeded()

    def failed(self, failure: Failure) -> None:
        self.counts[failure.kind] += 1
        if failure.overload:
            self.limiter.overloaded()
        if failure.kind in ("connection", "timeout", "server_error", "bad_response"):
            self.failures += 1
            if self.failures >= self.spec.health.failures:
                self.down_until = time.monotonic() + self.spec.health.cooldown_s

    async def probe(self, path: str) -> bool:
        try:
            response = await self.http.get(self.backend.root(self.url) + path, timeout=5.0)
            return response.status_code == 200
        except (aiohttp.ClientError, OSError, TimeoutError, *_loaded_sdk_errors().connection):
            return False
        except Exception as exc:  # the SDK's HTTP client's own errors (httpx2.HTTPError)
            if type(exc).__module__.split(".")[0] in _SDKS:
                return False
            raise

    async def _probe_forever(self, path: str) -> None:
        interval = self.spec.health.interval_s
        while True:
            if await self.probe(path):
                if self.down_until:
                    self.down_until = 0.0
                    self.failures = 0
            else:
                self.counts["health_failed"] += 1
                self.down_until = time.monotonic() + 1.5 * interval
            await asyncio.sleep(interval)

    def stats(self) -> dict[str, Any]:
        return {
            "url": self.label,
            "limit": self.limiter.current,
            "peak_in_flight": self.limiter.peak,
            "shrinks": self.limiter.shrinks,
            "healthy": self.healthy,
            **self.counts,
        }

    def status(self) -> dict[str, Any]:
        """What a run status shows of this endpoint, read from its counters: the limit and
        load now, the latest successful latencies (seconds), and attempts by what became of
        them. ``retries`` are failed attempts that were tried again; ``errors`` requests given
        up after their last attempt here."""
        counts = self.counts
        requests = sum(n for kind, n in counts.items() if kind != "health_failed")
        return {
            "url": self.label,
            "limit": self.limiter.current,
            "in_flight": self.limiter.in_flight,
            "latencies": list(self.latencies),
            "requests": requests,
            "rate_limited": counts["rate_limit"],
            "retries": max(0, requests - counts["ok"] - self.gave_up),
            "errors": self.gave_up,
        }

    async def send(
        self, body: dict[str, Any], stream: bool, headers: dict[str, str] | None = None
    ) -> Reply:
        if self.direct is not None:
            return await self.direct.send(body, stream, headers)
        return await self.backend.send(self.client, body, stream, headers)

    async def aclose(self) -> None:
        if self.direct is not None:
            await self.direct.aclose()
        if self._health is not None:
            self._health.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health
        if "client" in self.__dict__:
            await self.client.close()
        if "http" in self.__dict__:
            await self.http.aclose()


@dataclass
class Completion:
    """A model's reply with everything it took to get it."""

    reply: Reply
    calls: list[dict[str, Any]] = field(default_factory=list)
    latency_s: float = 0.0


class ModelClient:
    """One model of the registry, over one or more shared endpoints."""

    def __init__(
        self,
        name: str,
        spec: ModelSpec,
        endpoints: list[Endpoint],
        *,
        secrets: tuple[str, ...] = (),
        tracer: TracerFn | None = None,
        unavailable: str | None = None,
    ) -> None:
        self.name = name
        self.spec = spec
        self.backend = BACKENDS[spec.backend]
        self.endpoints = endpoints
        # Header values (an Authorization header of the config) are secrets as much as the key.
        # (Short values such as "1" would mask ordinary words of error messages.)
        header_values = [v.split()[-1] for v in spec.headers.values() if len(v.strip()) >= 6]
        credentials = [c for e in endpoints for c in e.credentials]
        self.secrets = tuple(s for s in (*secrets, *header_values, *credentials) if s)
        self.tracer = tracer or (lambda: trace.get_tracer("parley.agents"))
        self.unavailable = unavailable
        self._rng = random.Random()
        self._turn = 0
        # Replies fetched ahead through a batch API (batch.py), consulted before calling.
        self.replies: ReplyStore | None = None
        # The response cache (cache.py), consulted before calling, filled by successes.
        self.cache: ResponseCache | None = None

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def pick(self) -> Endpoint:
        """The healthy endpoint with the fewest requests outstanding (ties taken in turn);
        when none is healthy, the one that comes back soonest."""
        endpoints = self.endpoints
        if len(endpoints) == 1:
            return endpoints[0]
        healthy = [e for e in endpoints if e.healthy]
        if not healthy:
            return min(endpoints, key=lambda e: e.down_until)
        self._turn += 1
        n = len(healthy)
        order = [healthy[(self._turn + i) % n] for i in range(n)]
        return min(order, key=lambda e: e.outstanding)

    def backoff(self, attempt: int, failure: Failure) -> float:
        retry = self.spec.retry
        if failure.retry_after_s is not None:
            wait = min(failure.retry_after_s, retry.retry_after_max_s)
            return wait + self._rng.uniform(0.0, 0.1 * wait + 0.01)
        ceiling = min(retry.backoff_max_s, retry.backoff_s * 2 ** (attempt - 1))
        return self._rng.uniform(0.0, ceiling)  # full jitter

    def body(
        self,
        messages: list[PromptMessage],
        params: GenerationParams,
        constraint: Constraint | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The request body of a call, and notes for its record (images, max_tokens)."""
        body, notes = self.backend.body(messages, self.spec, params)
        if constraint is not None:
            body = constraint.apply(body)
        return body, notes

    async def complete(
        self,
        messages: list[PromptMessage],
        params: GenerationParams,
        *,
        constraint: Constraint | None = None,
    ) -> Completion:
        """Ask the model, retrying what can be retried; raises :class:`ModelUnavailable`.
        ``constraint`` holds the reply to the turn's legal actions (constrain.py); a reply
        the run's batch fetched for this very request (batch.py) is served without a call."""
        if self.unavailable:
            raise ModelUnavailable(f"model {self.name} is unavailable: {self.unavailable}")
        spec = self.spec
        body, notes = self.body(messages, params, constraint)
        if self.replies is not None:
            stored = self.replies.take(body, notes)
            if stored is not None:
                return stored
        key: str | None = None
        if self.cache is not None:
            key = request_key(self.backend.provider, body)
            entry = await self.cache.get(key)
            if entry is not None:
                done = _replayed(entry, notes)
                self._trace_replay(body, done)
                return done
        calls: list[dict[str, Any]] = []
        start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            endpoint = self.pick()
            record: dict[str, Any] = {"attempt": attempt, "endpoint": endpoint.label}
            if attempt == 1 and notes:
                record.update(notes)
            calls.append(record)
            try:
                reply = await self._attempt(endpoint, body, record)
            except Failure as failure:
                record["outcome"] = failure.kind
                if failure.status:
                    record["status"] = failure.status
                record["error"] = self.redact(failure.message)
                if failure.retry_after_s is not None:
                    record["retry_after_s"] = round(failure.retry_after_s, 3)
                elapsed = time.monotonic() - start
                delay = self.backoff(attempt, failure)
                if (
                    not failure.retryable
                    or attempt >= spec.retry.max_attempts
                    or elapsed + delay > spec.retry.max_elapsed_s
                ):
                    endpoint.gave_up += 1
                    raise ModelUnavailable(self._give_up(calls, elapsed, failure), calls) from None
                record["backoff_s"] = round(delay, 3)
                await asyncio.sleep(delay)
                continue
            record["outcome"] = "ok"
            done = Completion(reply, calls, time.monotonic() - start)
            if key is not None and self.cache is not None:
                # Only successes reach here: errors are never cached.
                await self.cache.put(key, spec.model, _cache_entry(reply, record))
            return done

    def _trace_replay(self, body: dict[str, Any], done: Completion) -> None:
        """A chat span for a reply the response cache served (``parley.cached``), so that a
        replayed turn keeps its model call in the trace; no server is named."""
        tracer = self.tracer()
        if isinstance(tracer, trace.NoOpTracer):
            return
        usage = done.reply.usage
        details = done.calls[0].get("usage") or {}
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.backend.provider,
            "gen_ai.request.model": self.spec.model,
            "parley.model": self.name,
            "parley.cached": True,
        }
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = (
                usage.input_tokens + details.get("cache_read", 0) + details.get("cache_write", 0)
            )
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        if done.reply.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = [done.reply.finish_reason]
        conversation = genai_spans.conversation_id()
        if conversation:
            attributes["gen_ai.conversation.id"] = conversation
        with tracer.start_as_current_span(
            f"chat {self.spec.model}", kind=trace.SpanKind.CLIENT, attributes=attributes
        ):
            pass

    def _give_up(self, calls: list[dict[str, Any]], elapsed: float, failure: Failure) -> str:
        kinds = Counter(c.get("outcome", "?") for c in calls)
        summary = ", ".join(f"{k} ×{n}" for k, n in kinds.items())
        last = self.redact(str(failure))
        if not failure.retryable:
            return f"model {self.name} refused the request ({last})"
        return (
            f"model {self.name} unreachable: gave up after {len(calls)} attempts in "
            f"{elapsed:.1f} s ({summary}); last: {last}"
        )

    async def _attempt(
        self, endpoint: Endpoint, body: dict[str, Any], record: dict[str, Any]
    ) -> Reply:
        spec = self.spec
        limiter = endpoint.limiter
        endpoint.outstanding += 1
        queued = time.monotonic()
        try:
            if not limiter.try_acquire():
                await limiter.acquire()
            try:
                sent = time.monotonic()
                if sent - queued > 0.0005:
                    record["queued_s"] = round(sent - queued, 4)
                tracer = self.tracer()
                content = False
                if isinstance(tracer, trace.NoOpTracer):
                    # Tracing off: no span, and no attributes built for one.
                    span_context: Any = _NO_SPAN
                else:
                    attributes: dict[str, Any] = {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": self.backend.provider,
                        "gen_ai.request.model": spec.model,
                        "parley.model": self.name,
                        "parley.attempt": int(record["attempt"]),
                        # Sampling parameters, max tokens, server host and port (spans.py).
                        **genai_spans.request_attributes(body, endpoint.url),
                    }
                    content = genai_spans.record_content()  # the conversation: opt-in only
                    if content:
                        attributes.update(genai_spans.content_attributes(body))
                    # The episode: on the agent's span this call runs under (or as baggage).
                    conversation = genai_spans.conversation_id()
                    if conversation:
                        attributes["gen_ai.conversation.id"] = conversation
                    # parley's own HTTP client (direct) reads no current span, the traceparent
                    # going as a header: its span is only started (a context set and reset less
                    # a call) and, used as a context manager, ends on the way out. Through the
                    # SDK it is current, for instrumentation of the SDK's HTTP client.
                    start = (
                        tracer.start_as_current_span
                        if endpoint.direct is None
                        else tracer.start_span
                    )
                    span_context = start(
                        f"chat {spec.model}",
                        kind=trace.SpanKind.CLIENT,
                        attributes=attributes,
                        # Exceptions carry server messages: the span gets the scrubbed kind only.
                        record_exception=False,
                        set_status_on_exception=False,
                    )
                with span_context as span:
                    try:
                        async with asyncio.timeout(spec.timeout_s):
                            # The chat span's traceparent: a tracing server joins the trace.
                            reply = await endpoint.send(
                                body, spec.stream, genai_spans.traceparent(span)
                            )
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        failure = classify(exc)
                        # Servers may echo the key in an error: scrub it before it goes anywhere.
                        failure.message = self.redact(failure.message)
                        record["latency_s"] = round(time.monotonic() - sent, 4)
                        span.set_status(trace.Status(trace.StatusCode.ERROR, failure.kind))
                        span.set_attribute("error.type", failure.kind)
                        endpoint.failed(failure)
                        raise failure from None
                    latency = time.monotonic() - sent
                    record["latency_s"] = round(latency, 4)
                    endpoint.latencies.append(latency)
                    if reply.ttft_s is not None:
                        record["ttft_s"] = round(reply.ttft_s, 4)
                    usage = reply.usage
                    if usage is not None:
                        record["usage"] = {
                            "input": usage.input_tokens,
                            "output": usage.output_tokens,
                            # Reasoning tokens (part of the output) and prompt-cache reads and
                            # writes (apart from the input), where the response reports them.
                            **usage_details(reply.raw),
                        }
                    if reply.finish_reason:
                        record["finish_reason"] = reply.finish_reason
                    if reply.repaired:
                        record["repaired"] = reply.repaired
                    if reply.length is not None:
                        record["cut"] = {"from": reply.length, "to": MAX_REPLY_CHARS}
                    if span.is_recording():
                        # One call: the SDK takes its lock once per call.
                        done: dict[str, Any] = {}
                        if usage is not None:
                            details = record["usage"]
                            read = details.get("cache_read", 0)
                            write = details.get("cache_write", 0)
                            # GenAI conventions: input tokens include those the provider's
                            # prompt cache served or stored, which are also given apart.
                            done["gen_ai.usage.input_tokens"] = usage.input_tokens + read + write
                            done["gen_ai.usage.output_tokens"] = usage.output_tokens
                            if read:
                                done["gen_ai.usage.cache_read.input_tokens"] = read
                            if write:
                                done["gen_ai.usage.cache_creation.input_tokens"] = write
                            if details.get("reasoning"):
                                done["parley.usage.reasoning_tokens"] = details["reasoning"]
                        if reply.finish_reason:
                            done["gen_ai.response.finish_reasons"] = [reply.finish_reason]
                        if reply.model:
                            done["gen_ai.response.model"] = reply.model
                        done.update(genai_spans.reply_attributes(reply, content, spec.price))
                        span.set_attributes(done)
                    endpoint.succeeded()
                    return reply
            finally:
                limiter.release()
        finally:
            endpoint.outstanding -= 1


def _cache_entry(reply: Reply, record: dict[str, Any]) -> dict[str, Any]:
    """What the response cache keeps of a successful call: the reply as parsed, and the
    call's usage and finish reason as its record had them."""
    usage = reply.usage
    return {
        "text": reply.text,
        "usage": None
        if usage is None
        else {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "source": usage.source,
        },
        "finish_reason": reply.finish_reason,
        "model": reply.model,
        "raw": reply.raw,
        "repaired": reply.repaired,
        "length": reply.length,
        "call": {
            k: record[k] for k in ("usage", "finish_reason", "repaired", "cut") if k in record
        },
    }


def _replayed(entry: dict[str, Any], notes: dict[str, Any]) -> Completion:
    """A cached reply as a completion: one attempt, ``cached``, taking no time."""
    usage = entry.get("usage")
    reply = Reply(
        text=entry["text"],
        usage=Usage(**usage) if usage is not None else None,
        finish_reason=entry.get("finish_reason"),
        model=entry.get("model") or "",
        raw=entry.get("raw") or {},
        repaired=int(entry.get("repaired") or 0),
        length=entry.get("length"),
    )
    record: dict[str, Any] = {"attempt": 1, "endpoint": "cache", **notes}
    record.update(entry.get("call") or {})
    record.update(outcome="ok", cached=True, latency_s=0.0)
    return Completion(reply, [record], 0.0)


# What a model call runs in when tracing is off (the tracer is a no-op one).
_NO_SPAN = contextlib.nullcontext(trace.INVALID_SPAN)


def api_key(spec: ModelSpec, environ: Mapping[str, str] | None = None) -> str | None:
    """The API key from the variable the entry names; raises when it is named but unset."""
    if spec.api_key_env is None:
        return None
    value = (environ if environ is not None else os.environ).get(spec.api_key_env)
    if not value:
        raise ModelUnavailable(
            f"environment variable {spec.api_key_env} (api_key_env of model {spec.model}) is not set"
        )
    return value
