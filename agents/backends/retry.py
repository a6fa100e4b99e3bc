"""What a failed attempt at a model call means: its kind (overload, server error, timeout,
connection, a broken reply, a refusal, a prompt over the context), whether retrying can help,
and how long the server asked to wait (``Retry-After``)."""

from __future__ import annotations

import email.utils
import functools
import json
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from parley.agents.backends.formats import (
    BadResponse,
)


@dataclass
class Failure(Exception):
    """One failed attempt, classified."""

    kind: str
    message: str
    status: int | None = None
    retryable: bool = True
    retry_after_s: float | None = None
    overload: bool = False
    # What the attempt's record shows besides (the bytes a reply too large had read).
    details: dict[str, Any] | None = None

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


def _wrapped_failure(exc: BaseException) -> Failure | None:
    seen: BaseException | None = exc
    for _ in range(8):
        seen = seen.__cause__ or seen.__context__ if seen is not None else None
        if seen is None or isinstance(seen, Failure):
            return seen
    return None


def classify(exc: BaseException) -> Failure:
    """What a failed attempt means for retrying."""
    if isinstance(exc, Failure):
        return exc
    # parley's own checks inside the SDK's HTTP client (bodies.py) come back wrapped in the
    # SDK's connection error.
    inner = _wrapped_failure(exc)
    if inner is not None:
        return inner
    cause = exc if isinstance(exc, aiohttp.ClientError) else _cause(exc)
    if isinstance(cause, aiohttp.ClientPayloadError):
        return Failure("bad_response", f"body cut short: {_short(cause)}")
    if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(
        cause, aiohttp.ServerTimeoutError
    ):
        return Failure("connection", _short(cause))
    if isinstance(cause, aiohttp.ClientResponseError):
        # A response whose head could not be read (too many headers, a line too long).
        return Failure("bad_response", f"unreadable response head: {_short(cause)}")
    sdk = _loaded_sdk_errors()
    if isinstance(exc, sdk.status):
        status = exc.status_code  # type: ignore[attr-defined]
        return status_failure(status, exc.response.headers, _short(exc))  # type: ignore[attr-defined]
    if isinstance(exc, (*_TIMEOUTS, *sdk.timeouts)):
        return Failure("timeout", _short(exc) or "no answer in time")
    if isinstance(exc, (*_CONNECTION, *sdk.connection)):
        message = _short(exc) or type(exc).__name__
        under = exc.__cause__
        if isinstance(exc, sdk.connection) and under is not None:
            # The SDK's own text is only "Connection error.": what its HTTP client said too.
            message = f"{message} ({_short(under)})"
        return Failure("connection", message)
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
