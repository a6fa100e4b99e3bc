"""The ``models:`` registry of a config: one entry per model, referenced by name in pairings.

An entry says how to reach a model (backend, model id, one or more base URLs, the *name* of the
environment variable that holds its API key — never the key), what it can take (context size,
images and their limits), how to ask it (generation parameters), how hard to push it
(per-endpoint adaptive concurrency, retries, timeout), what it costs, and optionally how to
start it (``launch:``, a vLLM server the run starts and stops).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GenerationParams(_Strict):
    """How to sample. ``extra_body`` goes into the request body as is (vLLM's
    ``structured_outputs``, ``top_k``, ``repetition_penalty``…); ``extra`` holds further
    top-level SDK arguments (``response_format``, ``reasoning_effort``…)."""

    temperature: float | None = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int = Field(default=512, ge=1)
    stop: list[str] = Field(default_factory=list)
    seed: int | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def merged(self, overrides: dict[str, Any]) -> GenerationParams:
        """These parameters with a pairing's ``params:`` on top (validated the same way)."""
        if not overrides:
            return self
        data = self.model_dump()
        for key, value in overrides.items():
            if key in ("extra_body", "extra") and isinstance(value, dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return GenerationParams.model_validate(data)


class ConcurrencySpec(_Strict):
    """Requests in flight per endpoint: starts at ``start``, shrinks ×``decrease`` on 429/503,
    grows back by one after ``limit`` successes in a row while requests are waiting."""

    start: int = Field(default=32, ge=1)
    min: int = Field(default=1, ge=1)
    max: int = Field(default=1024, ge=1)
    decrease: float = Field(default=0.8, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _ordered(self) -> ConcurrencySpec:
        if not self.min <= self.start <= self.max:
            raise ValueError(
                f"expected min <= start <= max, got {self.min}, {self.start}, {self.max}"
            )
        return self


class RetrySpec(_Strict):
    """Retries of one request: exponential backoff with full jitter, Retry-After honoured.

    A request is given up after ``max_attempts`` attempts or ``max_elapsed_s`` seconds, and
    the episode then ends as ``error`` with the last failure as the reason.
    """

    max_attempts: int = Field(default=8, ge=1)
    backoff_s: float = Field(default=0.5, ge=0.0)
    backoff_max_s: float = Field(default=30.0, ge=0.0)
    max_elapsed_s: float = Field(default=600.0, gt=0.0)
    retry_after_max_s: float = Field(default=120.0, ge=0.0)


class HealthSpec(_Strict):
    """Endpoint health. ``path`` (relative to the server root, e.g. ``/health`` for vLLM) is
    probed every ``interval_s`` when set; without it health is judged from requests alone. An
    endpoint that fails ``failures`` times in a row is avoided for ``cooldown_s``."""

    path: str | None = None
    interval_s: float = Field(default=5.0, gt=0.0)
    failures: int = Field(default=3, ge=1)
    cooldown_s: float = Field(default=5.0, ge=0.0)


class PriceSpec(_Strict):
    """Prices per million tokens, for the cost table of the report."""

    input_per_mtok: float = Field(ge=0.0)
    output_per_mtok: float = Field(ge=0.0)
    currency: str = "USD"


class LaunchSpec(_Strict):
    """A server the run starts before the first episode and stops after the last.

    By default ``vllm serve <model> --port <port> …args`` with ``CUDA_VISIBLE_DEVICES`` set to
    ``gpus``; ``command`` replaces it (a list or a string, with ``{model}``, ``{port}``,
    ``{host}``, ``{gpus}`` and ``{python}`` — this interpreter — filled in). The run waits
    for ``health_path`` to answer 200. ``model`` is what the server loads (a path or hub id;
    default: the entry's ``model``, which is then the served name).
    """

    model: str | None = None
    gpus: list[int] = Field(default_factory=list)
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=0, le=65535)
    args: list[str] = Field(default_factory=list)
    command: list[str] | str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    health_path: str = "/health"
    startup_timeout_s: float = Field(default=900.0, gt=0.0)
    stop_timeout_s: float = Field(default=30.0, ge=0.0)


class ModelSpec(_Strict):
    """One model of the registry. ``base_urls`` may be given as a single ``base_url``."""

    backend: Literal["openai", "anthropic"] = "openai"
    model: str
    base_urls: list[str] = Field(default_factory=list)
    api_key_env: str | None = None
    context_size: int | None = Field(default=None, ge=1)
    images: bool = True
    max_images: int | None = Field(default=None, ge=0)
    max_image_side: int | None = Field(default=None, ge=16)
    params: GenerationParams = Field(default_factory=GenerationParams)
    concurrency: ConcurrencySpec = Field(default_factory=ConcurrencySpec)
    retry: RetrySpec = Field(default_factory=RetrySpec)
    health: HealthSpec = Field(default_factory=HealthSpec)
    timeout_s: float = Field(default=120.0, gt=0.0)
    stream: bool = False
    # sdk: requests through the SDK's client (``http``: its aiohttp or httpx transport);
    # direct: the SDK's URL, headers and key over a plain aiohttp session, ~5x less CPU per
    # request — for self-hosted servers at thousands of requests a second.
    transport: Literal["sdk", "direct"] = "sdk"
    http: Literal["aiohttp", "httpx"] = "aiohttp"
    headers: dict[str, str] = Field(default_factory=dict)
    price: PriceSpec | None = None
    launch: LaunchSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_base_url(cls, value: Any) -> Any:
        if isinstance(value, dict) and "base_url" in value:
            value = dict(value)
            url = value.pop("base_url")
            if "base_urls" in value:
                raise ValueError("give `base_url` or `base_urls`, not both")
            value["base_urls"] = [url] if isinstance(url, str) else url
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        # A config file is shared and stored with the results: it names the variable only.
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError(
                "the NAME of an environment variable holding the key (e.g. OPENAI_API_KEY), "
                "never the key itself"
            )
        return value

    @field_validator("base_urls")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"base URLs start with http:// or https://, got {url!r}")
        return [u.rstrip("/") for u in value]

    @model_validator(mode="after")
    def _reachable(self) -> ModelSpec:
        if self.backend == "openai" and not self.base_urls and self.launch is None:
            # The SDK's default (api.openai.com) when nothing else is said.
            self.base_urls = ["https://api.openai.com/v1"]
        if self.backend == "anthropic" and not self.base_urls and self.launch is None:
            self.base_urls = ["https://api.anthropic.com"]
        if self.launch is not None and self.backend != "openai":
            raise ValueError("`launch:` starts an OpenAI-compatible server: use backend: openai")
        return self
