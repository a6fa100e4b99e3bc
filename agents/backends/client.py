"""Calling a model: endpoints shared across a run, least-outstanding balancing, health,
adaptive concurrency, retries with backoff that honour Retry-After, a per-request deadline.

The official SDKs (``openai``, ``anthropic``) do the HTTP: authentication, headers, base URLs,
error types. Their own retries are off (``max_retries=0``) because retrying is done here, per
endpoint and with the limiter's view of overload. Requests go through the SDK's generic
``client.post`` (documented for endpoints the typed methods do not cover) with a ready JSON body:
the typed ``create`` methods walk every message of the request to transform it, which costs
about a millisecond of CPU per call — the budget of a whole turn at 1000 requests/s.
``transport: direct`` (:class:`DirectTransport`) sends the same requests over an aiohttp session
of its own, and to an OpenAI-compatible server without importing the SDK at all. Both transports
take the proxy and TLS settings from one place (:func:`proxy_for`, :func:`tls_context`).
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
import re
import ssl
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import yarl
from opentelemetry import trace

from parley.agents.backends import dialect
from parley.agents.backends import spans as genai_spans
from parley.agents.backends.cache import request_key
from parley.agents.backends.dialect import ServerInfo
from parley.agents.backends.formats import (
    MAX_REPLY_CHARS,
    AnthropicStream,
    BadResponse,
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

    # The episode's reason code when this ends it (environments/base.py ReasonCode); None:
    # the runtime's own (``exception``).
    reason_code: str | None = None

    def __init__(self, message: str, calls: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.calls = calls or []


class ContextExceeded(ModelUnavailable):
    """A prompt longer than the model's context: never sent when parley can tell beforehand
    (``context_size``, or the size the server reports), and what a server's refusal of the
    same is classified as. Ends the episode with reason code ``context_exceeded``."""

    reason_code = "context_exceeded"

    def __init__(
        self,
        message: str,
        calls: list[dict[str, Any]] | None = None,
        *,
        prompt_tokens: int | None = None,
        context_size: int | None = None,
    ) -> None:
        super().__init__(message, calls)
        self.prompt_tokens = prompt_tokens
        self.context_size = context_size


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


# How servers word a prompt over the context (llama.cpp, vLLM, OpenAI, Anthropic, TGI, Ollama)
# and an image sent to a model without vision (llama.cpp, vLLM): neither is retried, as
# neither can succeed on another attempt.
_CONTEXT_WORDS = re.compile(
    r"exceed_context_size|context_length_exceeded|maximum context length|exceeds the "
    r"(available )?context|prompt is too long|input validation error: `inputs` tokens|"
    r"context window|too many tokens",
    re.IGNORECASE,
)
_NO_IMAGES_WORDS = re.compile(
    r"image input is not supported|not a multimodal model|does not support (image|vision|"
    r"multimodal)|at most 0 image|mmproj",
    re.IGNORECASE,
)


def status_failure(status: int, headers: Mapping[str, str] | None, message: str) -> Failure:
    """An HTTP error status, classified: overload (429, 503, 529) shrinks the limit; 5xx, 408
    and 409 are retried; other 4xx (bad request, wrong key) are not, nor a prompt over the
    context (``context_exceeded``) or an image to a model that takes none, whatever status
    the server gives them."""
    if status in (400, 413, 422, 500) and _CONTEXT_WORDS.search(message):
        return Failure("context_exceeded", message, status, retryable=False)
    if status in (400, 422, 500) and _NO_IMAGES_WORDS.search(message):
        return Failure("refused", message, status, retryable=False)
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


def _http_client(module: Any, spec: ModelSpec, url: str) -> httpx2.AsyncClient:
    import httpx2

    # One connection pool per endpoint, big enough for the concurrency limit at its maximum.
    connections = spec.concurrency.max + 16
    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    timeout = httpx2.Timeout(spec.timeout_s, connect=min(10.0, spec.timeout_s))
    # The proxy and TLS settings are the ones direct transport uses: the client's own reading
    # of the environment is off, so that the two cannot differ.
    options: dict[str, Any] = {
        "limits": limits,
        "timeout": timeout,
        "trust_env": False,
        "verify": tls_context(),
        "proxy": proxy_for(url),
    }
    if spec.http == "aiohttp":
        return module.DefaultAioHttpClient(**options)
    return module.DefaultAsyncHttpxClient(**options)


def proxy_for(url: str) -> str | None:
    """The proxy that requests to ``url`` go through, on either transport: ``HTTPS_PROXY`` for
    an https URL, ``HTTP_PROXY`` for an http one, else ``ALL_PROXY`` (either case, as
    :func:`urllib.request.getproxies` reads them); None where ``NO_PROXY`` covers the host.

    ``NO_PROXY`` is read as curl and the SDKs' own HTTP client read it: a comma-separated list
    of ``*`` (every host), host names (each covers itself and its subdomains; ``.example.com``
    and ``*.example.com`` only the subdomains), IP addresses and networks (``10.0.0.0/8``),
    each with an optional ``:port``. Loopback is proxied like any host unless it is listed.
    """
    import urllib.request

    found = urllib.request.getproxies()
    target = yarl.URL(url)
    proxy = found.get(target.scheme) or found.get("all")
    if not proxy or _bypassed(target, found.get("no", "")):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _bypassed(target: yarl.URL, no_proxy: str) -> bool:
    """Whether an entry of ``NO_PROXY``'s list covers ``target``'s host (and its port, where
    the entry names one)."""
    import ipaddress

    host = (target.host or "").lower().rstrip(".")
    address: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*":
            return True
        scheme, sep, rest = entry.partition("://")
        if sep:
            if scheme not in ("all", target.scheme):
                continue
            entry = rest
        name, port = _host_port(entry)
        if not name or (port is not None and port != target.port):
            continue
        if "/" in name or _is_address(name):
            with contextlib.suppress(ValueError):
                if address is not None and address in ipaddress.ip_network(name, strict=False):
                    return True
            continue
        name = name.removeprefix("*")
        if name.startswith("."):
            if host.endswith(name):
                return True
        elif host == name or host.endswith("." + name):
            return True
    return False


def _host_port(entry: str) -> tuple[str, int | None]:
    """A ``NO_PROXY`` entry's host (an IPv6 address without its brackets) and port."""
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        if rest.startswith("/"):
            return name + rest, None
        port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        name, _, port = entry.partition(":")
    else:  # a name, or an IPv6 address without brackets
        name, port = entry, ""
    return name.rstrip("."), int(port) if port.isdigit() else None


def _is_address(name: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings of every model request, on either transport (made once, as loading the
    certificate authorities takes tens of milliseconds): the authorities of ``SSL_CERT_FILE``,
    else of ``SSL_CERT_DIR``, else the system's, as the SDKs' own HTTP client finds them (on
    macOS and Windows the system's trust store, through ``truststore``, where installed)."""
    if cafile := os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=cafile)
    if capath := os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=capath)
    if sys.platform in ("darwin", "win32"):
        with contextlib.suppress(ImportError):
            import truststore

            return truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return ssl.create_default_context()


def _common(messages: list[PromptMessage], spec: ModelSpec, params: GenerationParams):  # type: ignore[no-untyped-def]
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
        headers = {k: v for k, v in headers.items() if isinstance(v, str)}
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
                auth = {
                    "Proxy-Authorization": aiohttp.encode_basic_auth(
                        parsed.user, parsed.password or ""
                    )
                }
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
                # Plain http needs no context: loading one costs tens of milliseconds.
                ssl=tls_context() if self.target.scheme == "https" else True,
            ),
            headers=headers,
            proxy=proxy,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(10.0, spec.timeout_s)),
        )

    async def send(
        self, body: dict[str, Any], stream: bool, headers: dict[str, str] | None = None
    ) -> Reply:
        start = time.monotonic()
        if self.headers is not None:
            headers = {**self.headers, **headers} if headers else self.headers
        async with self.session.post(
            self.target, data=_dumps(body), headers=headers, proxy_headers=self.proxy_headers
        ) as response:
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
        await self.session.close()


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
        # What the server is (dialect.py): known from the config or the host, else probed
        # before the first request that goes out (a reply from the cache needs none).
        self.info: ServerInfo | None = dialect.known(backend.provider, url, spec.dialect)
        self._identifying: asyncio.Future[ServerInfo] | None = None
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
        return _http_client(self.backend.sdk, self.spec, self.url)

    @functools.cached_property
    def client(self) -> Any:
        return self.backend.make_client(self.url, self._api_key, self.spec, self.http)

    @property
    def healthy(self) -> bool:
        return time.monotonic() >= self.down_until

    async def identify(self) -> ServerInfo:
        """The endpoint's :class:`~parley.agents.backends.dialect.ServerInfo`, probed once
        (concurrent callers share the probe); a probe that learns nothing gives ``unknown``."""
        if self.info is not None:
            return self.info
        if self._identifying is None:
            self._identifying = asyncio.ensure_future(self._probe_dialect())
        info = await asyncio.shield(self._identifying)
        self.info = info
        return info

    async def _probe_dialect(self) -> ServerInfo:
        headers = dict(self.spec.headers)
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            info, _ = await dialect.probe(self.backend.provider, self.url, self.spec.model, headers)
        except Exception as exc:  # a probe must never cost a request: unknown, and say why
            return dialect.ServerInfo("unknown", "probe", evidence=f"probe failed: {_short(exc)}")
        return info

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
    # The constraint as sent (its form settled by the server's dialect), or None.
    constraint: Constraint | None = None


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
        # The entry as its server is (identify()): None until the endpoints are known.
        self._served: ModelSpec | None = None

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

    @property
    def info(self) -> ServerInfo:
        """The dialect of the model's first endpoint as known so far (``unknown`` until it is
        probed)."""
        known = self.endpoints[0].info if self.endpoints else None
        return known or dialect.ServerInfo("unknown", "probe", evidence="not probed yet")

    async def identify(self) -> ServerInfo:
        """Probe the endpoints once (those not known from the config or their host), and
        settle what follows for this model: the constraint form, a context size the entry
        does not declare, and no images where the server takes none."""
        if self._served is not None:
            return self.info
        infos = await asyncio.gather(*(e.identify() for e in self.endpoints))
        spec = self.spec
        changes: dict[str, Any] = {}
        if spec.context_size is None:
            sizes = [i.context_size for i in infos if i.context_size]
            if sizes:
                changes["context_size"] = min(sizes)
        if spec.images and any(i.images is False for i in infos):
            changes["images"] = False
        self._served = spec.model_copy(update=changes) if changes else spec
        return self.info

    @property
    def served_spec(self) -> ModelSpec:
        """The entry as the server is: :attr:`spec` with what :meth:`identify` learnt."""
        return self._served or self.spec

    def _held(
        self, body: dict[str, Any], notes: dict[str, Any], constraint: Constraint | None
    ) -> tuple[dict[str, Any], Constraint | None]:
        """``body`` with ``constraint`` in the form the server takes; the call's notes say
        whether it was held, and why not."""
        if constraint is None:
            return body, None
        sent = constraint.resolved(self.info.constraint)
        if sent is None:
            notes.update(
                constrained=False,
                constraint=f"the {self.info.traits.label} server takes no constraint on the reply",
            )
            return body, None
        notes.update(sent.record())
        return sent.apply(body), sent

    def body(
        self,
        messages: list[PromptMessage],
        params: GenerationParams,
        constraint: Constraint | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The request body of a call, and notes for its record (images, max_tokens, the
        constraint as sent)."""
        body, notes = self.backend.body(messages, self.served_spec, params)
        body, _ = self._held(body, notes, constraint)
        return body, notes

    def cache_key(
        self,
        messages: list[PromptMessage],
        params: GenerationParams,
        constraint: Constraint | None = None,
        draw: Mapping[str, Any] | None = None,
    ) -> str:
        """The response cache's key of a call: the request as the entry asks it (before
        anything a server's dialect changes), the legal actions it is held to, and — unless
        sampling is greedy (``temperature: 0``) — the draw (``seed`` and ``repetition`` of
        the episode), so that one repetition never replays another's reply."""
        identity, _ = self.backend.body(messages, self.spec, params)
        return self._key(identity, constraint, draw, params)

    def _key(
        self,
        identity: dict[str, Any],
        constraint: Constraint | None,
        draw: Mapping[str, Any] | None,
        params: GenerationParams,
    ) -> str:
        identity = dict(identity)
        if constraint is not None:
            identity["parley.constrain"] = list(constraint.choices)
        if draw and params.temperature != 0:
            identity["parley.draw"] = dict(draw)
        return request_key(self.backend.provider, identity)

    async def complete(
        self,
        messages: list[PromptMessage],
        params: GenerationParams,
        *,
        constraint: Constraint | None = None,
        draw: Mapping[str, Any] | None = None,
    ) -> Completion:
        """Ask the model, retrying what can be retried; raises :class:`ModelUnavailable`
        (:class:`ContextExceeded` for a prompt over the context, which is never sent).
        ``constraint`` holds the reply to the turn's legal actions (constrain.py), in the
        form the endpoint's dialect takes; a reply the run's batch fetched for this very
        request (batch.py) or the response cache holds is served without a call."""
        if self.unavailable:
            raise ModelUnavailable(f"model {self.name} is unavailable: {self.unavailable}")
        spec = self.spec
        fallback: dict[str, Any] = {}
        if self.replies is not None:
            body, notes = self.body(messages, params, constraint)
            stored = self.replies.take(body, fallback)
            if stored is not None:
                stored.constraint = (
                    constraint.resolved(self.info.constraint) if constraint else None
                )
                return stored
        body, notes = self.backend.body(messages, spec, params)
        key: str | None = None
        if self.cache is not None:
            key = self._key(body, constraint, draw, params)
            entry = await self.cache.get(key)
            if entry is not None:
                done = _replayed(entry, notes, constraint)
                self._trace_replay(body, done)
                return done
        if self._served is None:
            await self.identify()
        if self.served_spec is not spec:
            body, notes = self.backend.body(messages, self.served_spec, params)
        body, sent = self._held(body, notes, constraint)
        notes.update(fallback)  # why a batch that was to answer this did not
        context = self.served_spec.context_size
        estimate = notes.get("prompt_tokens_estimate")
        if context is not None and estimate is not None and estimate > context:
            # Never sent: the server would refuse it, or cut the prompt and answer something.
            record = {"attempt": 1, "endpoint": self.endpoints[0].label, **notes}
            record.update(
                outcome="context_exceeded",
                sent=False,
                error="not sent: the prompt is over the context",
            )
            raise ContextExceeded(
                f"model {self.name}: the prompt is about {estimate} tokens, over the model's "
                f"context of {context} tokens; not sent (keep fewer turns in memory, or give "
                "the model a bigger context)",
                [record],
                prompt_tokens=estimate,
                context_size=context,
            )
        calls: list[dict[str, Any]] = []
        start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            endpoint = self.pick()
            record = {"attempt": attempt, "endpoint": endpoint.label}
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
                    message = self._give_up(calls, elapsed, failure)
                    if failure.kind == "context_exceeded":
                        raise ContextExceeded(
                            message, calls, prompt_tokens=estimate, context_size=context
                        ) from None
                    raise ModelUnavailable(message, calls) from None
                record["backoff_s"] = round(delay, 3)
                await asyncio.sleep(delay)
                continue
            record["outcome"] = "ok"
            done = Completion(reply, calls, time.monotonic() - start, sent)
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
            k: record[k]
            for k in ("usage", "finish_reason", "repaired", "cut", "constrained", "constraint")
            if k in record
        },
    }


def _replayed(
    entry: dict[str, Any], notes: dict[str, Any], constraint: Constraint | None = None
) -> Completion:
    """A cached reply as a completion: one attempt, ``cached``, taking no time; held to
    ``constraint`` in the form it was first sent."""
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
    sent: Constraint | None = None
    held = record.get("constraint")
    if constraint is not None and record.get("constrained") and isinstance(held, dict):
        sent = constraint.resolved(held.get("via"))
    return Completion(reply, [record], 0.0, sent)


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
