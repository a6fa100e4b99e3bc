"""The models of one run: clients and endpoints created once, shared by every episode."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from typing import Any

from parley.agents.backends.cache import ResponseCache, resolve_path
from parley.agents.backends.client import ModelClient, ModelUnavailable, TracerFn, api_key
from parley.agents.backends.dialect import ServerInfo
from parley.agents.backends.endpoint import Endpoint
from parley.agents.backends.spec import ModelSpec
from parley.agents.backends.transport import BACKENDS


class ModelPool:
    """Model name → :class:`ModelClient`, created on first use.

    Endpoints are keyed by (backend, base URL, API-key variable): two registry entries served
    by one server (two LoRA adapters on one vLLM, or the sim server) share one connection pool
    and one concurrency limit, configured by whichever entry is used first. ``urls`` adds base
    URLs per model (the launcher's servers, one per replica: each an endpoint of the model's
    balancer). Models with ``cache:`` get the response cache of their file, one per file.
    ``aclose()`` closes every connection and cache.
    """

    def __init__(
        self,
        specs: Mapping[str, ModelSpec],
        *,
        tracer: TracerFn | None = None,
        urls: Mapping[str, list[str]] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        # Specs may arrive as plain dicts (a config read back from JSON by a worker).
        self.specs = {
            name: spec if isinstance(spec, ModelSpec) else ModelSpec.model_validate(spec)
            for name, spec in specs.items()
        }
        self.tracer = tracer
        self.urls = {name: list(u) for name, u in (urls or {}).items()}
        self.environ = environ if environ is not None else os.environ
        self.failed: dict[str, str] = {}
        self._clients: dict[str, ModelClient] = {}
        self._endpoints: dict[tuple[str, str, str | None], Endpoint] = {}
        # Response caches by file: models that name one file share one cache (one writer).
        self._caches: dict[str, ResponseCache] = {}

    def mark_failed(self, name: str, reason: str) -> None:
        """Every call to ``name`` fails at once with ``reason`` (e.g. its server never started)."""
        self.failed[name] = reason
        if name in self._clients:
            self._clients[name].unavailable = reason

    def add_urls(self, name: str, urls: list[str]) -> None:
        self.urls.setdefault(name, []).extend(urls)

    def client(self, name: str) -> ModelClient:
        client = self._clients.get(name)
        if client is not None:
            return client
        spec = self.specs.get(name)
        if spec is None:
            raise ModelUnavailable(
                f"no model {name!r} in the registry; known: {', '.join(self.specs) or 'none'}"
            )
        if name in self.failed:
            client = ModelClient(name, spec, [], tracer=self.tracer, unavailable=self.failed[name])
            self._clients[name] = client
            return client
        key = api_key(spec, self.environ)
        urls = list(dict.fromkeys([*spec.base_urls, *self.urls.get(name, [])]))
        if not urls:
            raise ModelUnavailable(f"model {name} has no base URL (and no running launch:)")
        endpoints = []
        for url in urls:
            ident = (spec.backend, url, spec.api_key_env)
            endpoint = self._endpoints.get(ident)
            if endpoint is None:
                endpoint = Endpoint(url, BACKENDS[spec.backend], spec, key)
                self._endpoints[ident] = endpoint
            endpoints.append(endpoint)
        client = ModelClient(
            name, spec, endpoints, secrets=(key,) if key else (), tracer=self.tracer
        )
        client.cache = self.cache_for(spec)
        self._clients[name] = client
        return client

    async def server_info(self, name: str, url: str) -> ServerInfo | None:
        """What the server of ``name``'s endpoint at ``url`` is, as its model calls know it
        (one probe, shared with them); None where the run made no such endpoint."""
        spec = self.specs.get(name)
        endpoint = (
            None if spec is None else self._endpoints.get((spec.backend, url, spec.api_key_env))
        )
        return None if endpoint is None else await endpoint.identify()

    def warm(self, names: Iterable[str]) -> None:
        """Make the clients of ``names`` now, before the first episode: the SDK's import (a
        second or more) and the connection pools are then not paid by the episode that first
        asks. A model that cannot be made is left for its episodes to report (each episode
        that asks gets the same error)."""
        for name in sorted(set(names)):
            with contextlib.suppress(Exception):
                self.client(name)

    def cache_for(self, spec: ModelSpec) -> ResponseCache | None:
        """The response cache of a model (its ``cache:``, which the run's fills in), if any."""
        path = resolve_path(spec.cache)
        if path is None:
            return None
        ident = str(path.resolve())
        cache = self._caches.get(ident)
        if cache is None:
            cache = self._caches[ident] = ResponseCache(path)
        return cache

    def cache_counts(self) -> dict[str, int]:
        """Replies replayed from and stored in the response caches so far."""
        caches = self._caches.values()
        return {
            "hits": sum(c.hits for c in caches),
            "misses": sum(c.misses for c in caches),
            "stored": sum(c.stored for c in caches),
        }

    def policy(
        self,
        name: str,
        params: dict[str, Any] | None = None,
        role: str = "",
        draw: Mapping[str, Any] | None = None,
    ) -> Any:
        """An :class:`~parley.agents.backends.policy.LlmPolicy` for one role of one episode;
        ``draw`` (the episode's seed and repetition) keeps its cached replies its own."""
        from parley.agents.backends.policy import LlmPolicy

        try:
            client = self.client(name)
        except ModelUnavailable as exc:
            return LlmPolicy.unavailable(name, str(exc))
        return LlmPolicy(client, client.spec.params.merged(params or {}), role=role, draw=draw)

    def stats(self) -> dict[str, Any]:
        """Per endpoint: limit now, peak in flight, shrinks, outcomes."""
        return {f"{b}:{url}": e.stats() for (b, url, _), e in self._endpoints.items()}

    def endpoint_status(self) -> list[dict[str, Any]]:
        """Per endpoint, for the run status: :meth:`Endpoint.status` and ``model``, the
        registry names it serves (read-only; nothing is counted for it)."""
        names: dict[int, list[str]] = {}
        for name, client in self._clients.items():
            for endpoint in client.endpoints:
                names.setdefault(id(endpoint), []).append(name)
        return [
            {"model": ", ".join(names.get(id(e), [e.spec.model])), **e.status()}
            for e in self._endpoints.values()
        ]

    async def aclose(self) -> None:
        endpoints, self._endpoints = list(self._endpoints.values()), {}
        caches, self._caches = list(self._caches.values()), {}
        self._clients = {}
        for endpoint in endpoints:
            await endpoint.aclose()
        for cache in caches:
            await cache.aclose()

    async def __aenter__(self) -> ModelPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
