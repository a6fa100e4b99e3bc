"""One base URL of a model: its client and connections, its limiter of requests in flight, its
load and health, and what the server is (its dialect, probed once)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import time
from collections import Counter, deque
from typing import TYPE_CHECKING, Any

import aiohttp
import yarl

from parley.agents.backends import dialect
from parley.agents.backends.bodies import Redirected
from parley.agents.backends.dialect import ServerInfo
from parley.agents.backends.formats import (
    Reply,
)
from parley.agents.backends.limiter import AdaptiveLimiter
from parley.agents.backends.spec import ModelSpec

if TYPE_CHECKING:
    import httpx2

from parley.agents.backends.retry import _SDKS, Failure, _loaded_sdk_errors, _short
from parley.agents.backends.transport import (
    Backend,
    DirectTransport,
    _http_client,
    transport_for,
)

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
        if transport_for(spec, url) == "direct":
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
    # of the SDK and an SSL context that loads every CA certificate.
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
            response = await self.http.get(dialect.root(self.url) + path, timeout=5.0)
            return response.status_code == 200
        except Exception as exc:
            # One handler, as mypy cannot type a starred tuple in an except clause.
            connection = (aiohttp.ClientError, OSError, TimeoutError)
            if isinstance(exc, connection + _loaded_sdk_errors().connection):
                return False
            if isinstance(exc, (Failure, Redirected)):  # a reply too large, a redirect
                return False
            if type(exc).__module__.split(".")[0] in _SDKS:  # the SDK's HTTP client's own errors
                return False  # (httpx2.HTTPError)
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
