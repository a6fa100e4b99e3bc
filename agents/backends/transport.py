"""How a request body reaches a server and its reply comes back: the two APIs (OpenAI chat
completions, Anthropic messages) through their official SDKs, whose own retries are off, and
``transport: direct``: the same request over an aiohttp session of parley's own.

Requests go through the SDK's generic ``client.post`` (documented for endpoints the typed
methods do not cover) with a ready JSON body: the typed ``create`` methods walk every message
of the request to transform it, which costs a share of a whole turn's CPU at thousands of
requests a second. ``transport: direct`` (:class:`DirectTransport`) reaches an
OpenAI-compatible server without importing the SDK at all. Both take the proxy and TLS
settings from :mod:`parley.agents.backends.network`."""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import orjson
import yarl

from parley.agents.backends import dialect
from parley.agents.backends.bodies import (
    ACCEPT_ENCODING,
    PIECE,
    REDIRECTS,
    BodyLimit,
    Redirected,
    limited,
    redirect_target,
    redirected_again,
)
from parley.agents.backends.formats import (
    AnthropicStream,
    Block,
    OpenAIStream,
    Reply,
    anthropic_body,
    estimate_tokens,
    fit_max_tokens,
    load_body,
    openai_body,
    parse_anthropic,
    parse_openai,
    prepare,
)
from parley.agents.backends.spec import (
    PARAM_PRESETS,
    GenerationParams,
    ModelSpec,
    has_credentials,
)

if TYPE_CHECKING:
    import httpx2

from parley.agents.backends.network import basic_auth, proxy_for, tls_context
from parley.agents.backends.retry import Failure, status_failure
from parley.bus.messages import PromptMessage


def _dumps(value: Any) -> bytes:
    """A request body as JSON bytes (orjson: several times less CPU than the standard library,
    which still takes what orjson refuses, such as integers over 64 bits)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(value).encode()


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
        ``headers`` added to the request (the chat span's traceparent). A redirect to the same
        server (raised by the HTTP client's response hook) is followed once."""
        path = self.path
        try:
            return await self._post(client, path, body, stream, headers)
        except Exception as exc:
            moved = _redirect_in(exc)
            if moved is None:
                raise
            path = str(moved.target)
        try:
            return await self._post(client, path, body, stream, headers)
        except Exception as exc:
            again = _redirect_in(exc)
            if again is None:
                raise
            raise redirected_again(again.status, again.target) from None

    async def _post(
        self,
        client: Any,
        path: str,
        body: dict[str, Any],
        stream: bool,
        headers: dict[str, str] | None,
    ) -> Reply:
        options: Any = {"headers": headers} if headers else {}
        if not stream:
            import httpx2

            response = await client.post(path, body=body, cast_to=httpx2.Response, options=options)
            return _parsed(self.parse, response.content)
        start = time.monotonic()
        ttft: float | None = None
        acc = self.accumulator()
        items = await client.post(
            path,
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


def _redirect_in(exc: BaseException) -> Redirected | None:
    """The redirect under an SDK's error (the SDK wraps what its HTTP client raises)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None or isinstance(seen, Redirected):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


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


# The replies a batch's results are allowed the size of (the batch API's own downloads).
BATCH_REPLIES = 256


def _http_client(module: Any, spec: ModelSpec, url: str) -> httpx2.AsyncClient:
    import httpx2

    # One connection pool per endpoint, big enough for the concurrency limit at its maximum.
    connections = spec.concurrency.max + 16
    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    timeout = httpx2.Timeout(spec.timeout_s, connect=min(10.0, spec.timeout_s))
    # The proxy and TLS settings are the ones direct transport uses: the client's own reading
    # of the environment is off, so that the two cannot differ. Redirects and the body's size
    # are parley's (the response hook): the client follows none itself.
    options: dict[str, Any] = {
        "limits": limits,
        "timeout": timeout,
        "trust_env": False,
        "verify": tls_context(),
        "proxy": proxy_for(url),
        "follow_redirects": False,
        "headers": {"Accept-Encoding": ACCEPT_ENCODING},
        "event_hooks": {"response": [functools.partial(_on_response, spec.max_response_bytes)]},
    }
    if spec.http == "aiohttp":
        return module.DefaultAioHttpClient(**options)
    return module.DefaultAsyncHttpxClient(**options)


async def _on_response(limit: int, response: httpx2.Response) -> None:
    """Before the SDK reads a response: a redirect raised (:class:`Redirected` where it may be
    followed, else a failure), and the body held to ``limit`` as it is read, decompressed here
    in bounded pieces (the client's own decoder is left nothing to do)."""
    try:
        if response.status_code in REDIRECTS:
            source = yarl.URL(str(response.request.url))
            target = redirect_target(source, response.status_code, response.headers.get("location"))
            raise Redirected(response.status_code, target)
        path = response.request.url.path
        if "/batches" in path or "/files" in path:
            # A batch's results hold all its replies (batch.py): held to that many.
            limit *= BATCH_REPLIES
        body = BodyLimit(limit, response.headers)
    except BaseException:
        await response.aclose()
        raise
    import httpx2

    response.headers.pop("content-encoding", None)
    if isinstance(response.stream, httpx2.AsyncByteStream):  # as an async client's always is
        response.stream = _limited_stream()(response.stream, body)


@functools.cache
def _limited_stream() -> Callable[[httpx2.AsyncByteStream, BodyLimit], httpx2.AsyncByteStream]:
    import httpx2

    class LimitedStream(httpx2.AsyncByteStream):
        """A response's byte stream, decoded and held to its limit by ``body``."""

        def __init__(self, inner: httpx2.AsyncByteStream, body: BodyLimit) -> None:
            self.inner = inner
            self.body = body

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self.inner:
                for piece in self.body.feed(chunk):
                    yield piece
            for piece in self.body.flush():
                yield piece

        async def aclose(self) -> None:
            await self.inner.aclose()

    return LimitedStream


def _common(
    messages: list[PromptMessage], spec: ModelSpec, params: GenerationParams
) -> tuple[str, list[tuple[str, list[Block]]], int, dict[str, Any]]:
    system, turns, images = prepare(messages, spec)
    notes: dict[str, Any] = {}
    max_tokens = params.max_tokens
    if spec.context_size is not None:
        # Counted only where a context is known: the check before sending needs it.
        estimate = estimate_tokens(system, turns)
        notes["prompt_tokens_estimate"] = estimate
        max_tokens = fit_max_tokens(params, spec, system, turns, estimate)
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
        # the SDK, a costly import, in any process of the run.
        headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": _user_agent(),
            **spec.headers,
        }
        # The key, where there is one; else the entry's own Authorization header, if any.
        own = next((k for k in spec.headers if k.lower() == "authorization"), None)
        if api_key is not None or own is None:
            if own is not None:
                del headers[own]
            headers["Authorization"] = f"Bearer {api_key or self.placeholder_key}"
        return headers

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


async def _lines(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The lines of a decoded stream (a line split across pieces joined)."""
    buffer = bytearray()
    async for piece in pieces:
        buffer += piece
        if b"\n" not in piece:
            continue
        lines = bytes(buffer).split(b"\n")
        buffer = bytearray(lines.pop())
        for line in lines:
            yield line
    if buffer:
        yield bytes(buffer)


def transport_for(spec: ModelSpec, url: str) -> Literal["sdk", "direct"]:
    """The transport that reaches ``url`` for ``spec``: its ``transport``, where ``auto`` is
    the SDK for a vendor's own hosted API (``api.openai.com``, and every Anthropic model) and
    ``direct`` for any other OpenAI-compatible server (vLLM, llama.cpp, SGLang, Ollama, a
    proxy). Example::

        transport_for(ModelSpec(model="m"), "http://127.0.0.1:8000/v1")  # "direct"
    """
    if spec.transport != "auto":
        return spec.transport
    backend = BACKENDS.get(spec.backend)
    if backend is None or backend.direct_headers(None, spec) is None:
        return "sdk"
    # No URL: the SDK's own default, the vendor's API. A URL's own ``user:password@`` is
    # HTTP Basic authentication, which the SDK's HTTP client sends and a direct session not.
    if not url or dialect.hosted_api(url) or has_credentials(url):
        return "sdk"
    return "direct"


def uses_sdk(spec: ModelSpec) -> bool:
    """Whether calling ``spec``'s model needs its SDK: all but the direct transport to an
    OpenAI-compatible server (streams and ``https://`` included, over aiohttp)."""
    backend = BACKENDS.get(spec.backend)
    if backend is None or backend.direct_headers(None, spec) is None:
        return True  # its headers come from the SDK's client, on either transport
    return any(transport_for(spec, url) == "sdk" for url in spec.base_urls or [""])


@functools.cache
def _user_agent() -> str:
    from parley import __version__

    return f"parley/{__version__}"


class DirectTransport:
    """``transport: direct``: the request the SDK would make — its URL and authentication
    (for OpenAI-compatible servers the key as a bearer token and the entry's ``headers``; for
    Anthropic every header the SDK's client sends) — over an aiohttp session of the endpoint's
    own, through the proxy and with the TLS settings the SDK's client is given
    (:func:`proxy_for`, :func:`tls_context`).

    For self-hosted servers at thousands of requests a second: the SDK's request machinery
    (option models, URL parsing, httpx request objects) costs several times the CPU of the
    HTTP exchange itself, and a run's event loop has one core. The URL is parsed once and the
    body encoded to bytes here (orjson), which spares aiohttp both per request.
    """

    def __init__(
        self, url: str, backend: Backend, headers: Mapping[str, Any], spec: ModelSpec
    ) -> None:
        self.backend = backend
        self.target = yarl.URL(url + backend.path)
        self.limit = spec.max_response_bytes
        headers = {k: v for k, v in headers.items() if isinstance(v, str)}
        # Only what BodyLimit decodes in bounded pieces (aiohttp's own decoding is off).
        headers["Accept-Encoding"] = ACCEPT_ENCODING
        connections = spec.concurrency.max + 16
        # The proxy is found once, here: aiohttp's trust_env would look it up (and ~/.netrc)
        # again in a thread on every request.
        proxy = proxy_for(url)
        # Through a proxy the headers go with each request: aiohttp hands a session's own
        # headers to the proxy too (its Authorization, the API key, as Proxy-Authorization).
        self.headers: dict[str, str] | None = None
        self.proxy_headers: dict[str, str] | None = None
        if proxy is not None:
            self.headers = headers
            headers = {}
            parsed = yarl.URL(proxy)
            if parsed.user is not None:
                auth = {"Proxy-Authorization": basic_auth(parsed.user, parsed.password or "")}
                # aiohttp sends proxy_headers only with a tunnel's CONNECT: a plain http
                # request carries the proxy's credentials itself.
                if self.target.scheme == "https":
                    self.proxy_headers = auth
                else:
                    self.headers = {**self.headers, **auth}
                proxy = str(parsed.with_user(None))
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=connections,
                limit_per_host=connections,
                # Plain http needs no context, and loading one reads every CA certificate.
                ssl=tls_context() if self.target.scheme == "https" else True,
            ),
            headers=headers,
            proxy=proxy,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(10.0, spec.timeout_s)),
            auto_decompress=False,
        )

    async def send(
        self, body: dict[str, Any], stream: bool, headers: dict[str, str] | None = None
    ) -> Reply:
        start = time.monotonic()
        if self.headers is not None:
            headers = {**self.headers, **headers} if headers else self.headers
        data = _dumps(body)
        target = self.target
        for followed in (False, True):
            async with self.session.post(
                target,
                data=data,
                headers=headers,
                proxy_headers=self.proxy_headers,
                allow_redirects=False,
            ) as response:
                if response.status in REDIRECTS:
                    moved = redirect_target(
                        target, response.status, response.headers.get("Location")
                    )
                    if followed:
                        raise redirected_again(response.status, moved)
                    target = moved
                    continue
                if response.status >= 400:
                    raise _error_status(
                        response.status, response.headers, await self._error_body(response)
                    )
                if not stream:
                    return _parsed(self.backend.parse, await self._read(response))
                return await self._stream(response, start)
        raise AssertionError("unreachable: the second redirect raised")

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        """A whole body, read in chunks and held to the limit."""
        length = response.headers.get("Content-Length", "")
        plain = "Content-Encoding" not in response.headers and length.isdigit()
        if plain and int(length) <= self.limit:
            return await response.read()  # aiohttp reads no more than the length
        pieces = limited(response.content.iter_chunked(PIECE), self.limit, response.headers)
        return b"".join([piece async for piece in pieces])

    async def _error_body(self, response: aiohttp.ClientResponse) -> bytes:
        """The start of an error response's body: all an error message needs."""
        kept = bytearray()
        with contextlib.suppress(Failure):
            async for piece in limited(
                response.content.iter_chunked(PIECE), self.limit, response.headers
            ):
                kept += piece
                if len(kept) >= 4096:
                    break
        return bytes(kept)

    async def _stream(self, response: aiohttp.ClientResponse, start: float) -> Reply:
        acc = self.backend.accumulator()
        ttft: float | None = None
        pieces = limited(response.content.iter_chunked(PIECE), self.limit, response.headers)
        async for raw in _lines(pieces):
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
        await self.session.close()
