"""The ``models:`` registry of a config: one entry per model, referenced by name in pairings.

An entry says how to reach a model (backend, model id, one or more base URLs, the *name* of the
environment variable that holds its API key — never the key), what it can take (context size,
images and their limits), how to ask it (generation parameters), how hard to push it
(per-endpoint adaptive concurrency, retries, timeout), what it costs, and optionally how to
start it (``launch:``, a vLLM server the run starts and stops).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_RESPONSE_BYTES = 8 * 1024 * 1024  # a model entry's max_response_bytes unless told


class _Strict(BaseModel):
    # No infinities: a timeout, price or backoff of .inf passes every bound and breaks later
    # (an overflow in the HTTP client, nan in a cost, a wait that never ends).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class GenerationParams(_Strict):
    """How to sample. ``extra_body`` goes into the request body as is (vLLM's
    ``structured_outputs``, ``top_k``, ``repetition_penalty``…); ``extra`` holds further
    top-level SDK arguments (``response_format``…).

    Which of these a request carries depends on what the model accepts (``ModelSpec.accepts``):
    reasoning models (OpenAI o-series, gpt-5) get ``max_completion_tokens`` (this field, or
    ``max_tokens`` when unset; their hidden reasoning counts against it) and
    ``reasoning_effort``, never ``temperature``, ``top_p`` or ``stop``.
    """

    temperature: float | None = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int = Field(default=512, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    # OpenAI's levels (which a model takes varies: gpt-5 adds minimal, gpt-5.1 none).
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    stop: list[str] = Field(default_factory=list)
    seed: int | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)
    # Hold replies to the turn's legal actions (agents/backends/constrain.py): set per pairing
    # or per game block; None keeps the model's ``constrain``, ``off`` plays free.
    constrain: Literal["legal_actions", "off"] | None = None

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
    grows back by one after ``limit`` successes in a row while requests are waiting.

    ``start`` left out is ``max``: the run's ``concurrency`` (episodes at once) is then what
    bounds the requests in flight, until a server pushes back. A server that refuses load
    (429/503) shrinks the limit within seconds, and one that queues (vLLM, SGLang, llama.cpp)
    takes the requests as they come, so a cautious start would only slow a large run down.
    """

    start: int = Field(default=4096, ge=1)
    min: int = Field(default=1, ge=1)
    max: int = Field(default=4096, ge=1)
    decrease: float = Field(default=0.8, gt=0.0, lt=1.0)

    @model_validator(mode="before")
    @classmethod
    def _start_at_max(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "start" not in data and "max" in data:
            return {**data, "start": data["max"]}
        return data

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


# Anthropic's prompt-caching multipliers of the input price: a cache read costs a tenth, a
# (5-minute) cache write a quarter more. Used when a price gives no cache prices of its own.
CACHE_READ_FACTOR = 0.1
CACHE_WRITE_FACTOR = 1.25


class PriceSpec(_Strict):
    """Prices per million tokens, for the cost table of the report.

    Input tokens read from or written to a provider's prompt cache are counted apart from the
    other input tokens and priced at ``cache_read_per_mtok`` / ``cache_write_per_mtok``;
    unset, they default to 0.1× and 1.25× ``input_per_mtok`` (Anthropic's multipliers).
    Reasoning tokens are output tokens (OpenAI bills them so) and are priced as output.
    """

    input_per_mtok: float = Field(ge=0.0)
    output_per_mtok: float = Field(ge=0.0)
    cache_read_per_mtok: float | None = Field(default=None, ge=0.0)
    cache_write_per_mtok: float | None = Field(default=None, ge=0.0)
    currency: str = "USD"

    def cost(self, tokens: Mapping[str, Any]) -> float:
        """The cost of token counts keyed ``input``, ``output``, ``cache_read``,
        ``cache_write`` (missing keys count 0), in ``currency``."""
        read = self.cache_read_per_mtok
        write = self.cache_write_per_mtok
        if read is None:
            read = self.input_per_mtok * CACHE_READ_FACTOR
        if write is None:
            write = self.input_per_mtok * CACHE_WRITE_FACTOR
        return (
            float(tokens.get("input", 0) or 0) * self.input_per_mtok
            + float(tokens.get("output", 0) or 0) * self.output_per_mtok
            + float(tokens.get("cache_read", 0) or 0) * read
            + float(tokens.get("cache_write", 0) or 0) * write
        ) / 1e6


_PARALLEL_FLAGS = {
    "tp": ("-tp", "--tensor-parallel-size"),
    "dp": ("-dp", "--data-parallel-size"),
}


def parallel_flags(args: list[str]) -> dict[str, int | None]:
    """The tensor- and data-parallel sizes given in vLLM arguments (``-tp 2``,
    ``--tensor-parallel-size=2``, ``-dp 4``…): ``{"tp": n or None, "dp": n or None}``;
    raises ``ValueError`` when a size is not a whole number."""
    found: dict[str, int | None] = {"tp": None, "dp": None}
    for i, arg in enumerate(args):
        for key, names in _PARALLEL_FLAGS.items():
            value: str | None = None
            if arg in names:
                value = args[i + 1] if i + 1 < len(args) else ""
            else:
                name, eq, rest = arg.partition("=")
                if eq and name in names:
                    value = rest
            if value is None:
                continue
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"launch.args: {arg} takes a whole number ≥ 1, got {value!r}")
            found[key] = int(value)
    return found


class LaunchSpec(_Strict):
    """A server the run starts before the first episode and stops after the last.

    By default ``vllm serve <model> --port <port> …args`` with ``CUDA_VISIBLE_DEVICES`` set to
    ``gpus``; ``command`` replaces it (a list or a string, with ``{model}``, ``{port}``,
    ``{host}``, ``{gpus}``, ``{replica}`` and ``{python}`` — this interpreter — filled in). The
    run waits for ``health_path`` to answer 200. ``model`` is what the server loads (a path or
    hub id; default: the entry's ``model``, which is then the served name).

    Replicas: ``gpus`` as a list of lists starts one server per group (``[[0, 1], [2, 3]]``),
    and ``replicas: n`` splits a flat list into n equal groups; each replica gets its own port
    (``port`` + its index when a port is given) and is one endpoint of the model's balancer.
    Within a replica vLLM's tensor-parallel size is the group's GPUs ÷ the data-parallel size
    given in ``args`` (``-dp``/``--data-parallel-size``, default 1); sizes given in ``args``
    are kept, and must multiply to the group's GPUs.
    """

    model: str | None = None
    gpus: list[int] | list[list[int]] = Field(default_factory=list)
    replicas: int = Field(default=1, ge=1, le=256)
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=0, le=65535)
    args: list[str] = Field(default_factory=list)
    command: list[str] | str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    health_path: str = "/health"
    startup_timeout_s: float = Field(default=900.0, gt=0.0)
    stop_timeout_s: float = Field(default=30.0, ge=0.0)

    def gpu_groups(self) -> list[list[int]]:
        """The GPUs of each replica (one empty group per replica when none are given)."""
        gpus = self.gpus
        # Validation made it all ints or all groups, so the filters below drop nothing: they
        # only tell the type checker which of the two it is.
        if gpus and isinstance(gpus[0], list):
            return [list(g) for g in gpus if isinstance(g, list)]
        flat = [g for g in gpus if isinstance(g, int)]
        if not flat:
            return [[] for _ in range(self.replicas)]
        size = len(flat) // self.replicas
        return [flat[i * size : (i + 1) * size] for i in range(self.replicas)]

    def parallel(self, gpus: int) -> tuple[int, int]:
        """(tensor-parallel, data-parallel) sizes for a replica of ``gpus`` GPUs."""
        given = parallel_flags(self.args)
        tp, dp = given["tp"], given["dp"]
        if tp is None and dp is None:
            return max(1, gpus), 1
        if tp is None:
            assert dp is not None
            return max(1, gpus // dp), dp
        if dp is None:
            return tp, max(1, gpus // tp)
        return tp, dp

    @model_validator(mode="after")
    def _groups(self) -> LaunchSpec:
        gpus = self.gpus
        if gpus and isinstance(gpus[0], list):
            if self.replicas not in (1, len(gpus)):
                raise ValueError(
                    f"launch.replicas: {self.replicas} replicas but {len(gpus)} GPU groups in "
                    "launch.gpus; give one or the other"
                )
            self.replicas = len(gpus)
            if any(not g for g in gpus):
                raise ValueError("launch.gpus: each replica's group needs at least one GPU")
            seen = [g for group in gpus for g in group]
            if len(seen) != len(set(seen)):
                raise ValueError(f"launch.gpus: a GPU is in two replicas' groups: {gpus}")
        elif gpus and len(gpus) % self.replicas:
            raise ValueError(
                f"launch.gpus: {len(gpus)} GPUs do not split into {self.replicas} equal replicas"
            )
        if self.command is not None:
            return self  # a command of one's own: its arguments are its business
        flags = parallel_flags(self.args)
        for group in self.gpu_groups():
            n = len(group)
            if not n:
                continue
            tp, dp = flags["tp"], flags["dp"]
            for key, size in (("-dp/--data-parallel-size", dp), ("-tp/--tensor-parallel-size", tp)):
                if size is not None and n % size:
                    raise ValueError(
                        f"launch.args: {key} {size} does not divide the {n} GPUs of a replica "
                        f"(launch.gpus {group})"
                    )
            if tp is not None and dp is not None and tp * dp != n:
                raise ValueError(
                    f"launch.args: tensor-parallel {tp} × data-parallel {dp} = {tp * dp} GPUs, "
                    f"but a replica has {n} (launch.gpus {group}); TP × DP must equal its GPUs"
                )
        return self


# The request parameters each preset sends (when set). OpenAI's reasoning models (o1, o3,
# o4-mini, gpt-5) refuse temperature, top_p and stop and take max_completion_tokens instead of
# max_tokens; classic chat models and OpenAI-compatible servers take the classic set.
PARAM_PRESETS: dict[str, frozenset[str]] = {
    "chat": frozenset({"max_tokens", "temperature", "top_p", "stop", "seed"}),
    "reasoning": frozenset({"max_completion_tokens", "reasoning_effort", "seed"}),
}
PARAM_NAMES = frozenset().union(*PARAM_PRESETS.values())
# ``accepts: auto``: a model whose name (after any ``provider/``) starts so is a reasoning one.
REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")


def is_reasoning_name(model: str) -> bool:
    """Whether ``accepts: auto`` reads ``model`` as an OpenAI reasoning model."""
    name = model.rsplit("/", 1)[-1].lower()
    if name.startswith("gpt-5") and "chat" in name:
        return False  # gpt-5-chat-latest: the chat model of the family, takes temperature
    return name.startswith(REASONING_PREFIXES)


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries ``user[:password]@`` before its host."""
    rest = url.partition("://")[2]
    return "@" in rest.split("/", 1)[0]


class ModelSpec(_Strict):
    """One model of the registry. ``base_urls`` may be given as a single ``base_url``.

    ``accepts``: which generation parameters requests carry — ``chat`` (max_tokens,
    temperature, top_p, stop, seed), ``reasoning`` (max_completion_tokens, reasoning_effort,
    seed), ``auto`` (reasoning for OpenAI-backend models named o1…, o3…, o4…, gpt-5…; chat
    otherwise), or a list of parameter names. ``cache``: replay identical requests from a
    response cache (``true``: the default file, a path: that file, ``false``: never; unset:
    as the run's ``cache:`` says).
    """

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
    # The most bytes of one reply's body, as sent and as decompressed: a reply over it is
    # stopped while it is read (``too_large``) and not retried.
    max_response_bytes: int = Field(default=MAX_RESPONSE_BYTES, ge=1024)
    stream: bool = False
    # sdk: requests through the SDK's client (``http``: its aiohttp or httpx transport);
    # direct: the SDK's URL, headers and key over a plain aiohttp session, several times less
    # CPU per request, for self-hosted servers at thousands of requests a second; auto: the
    # SDK for a vendor's own hosted API, direct for every other OpenAI-compatible server
    # (transport.transport_for).
    transport: Literal["auto", "sdk", "direct"] = "auto"
    http: Literal["aiohttp", "httpx"] = "aiohttp"
    headers: dict[str, str] = Field(default_factory=dict)
    price: PriceSpec | None = None
    launch: LaunchSpec | None = None
    accepts: Literal["auto", "chat", "reasoning"] | list[str] = "auto"
    cache: bool | str | None = None

    @field_validator("accepts")
    @classmethod
    def _known_params(cls, value: Any) -> Any:
        if isinstance(value, list):
            unknown = sorted(set(value) - PARAM_NAMES)
            if unknown:
                raise ValueError(
                    f"unknown parameter {unknown[0]!r}; known: {', '.join(sorted(PARAM_NAMES))}"
                )
        return value

    def accepted(self) -> frozenset[str]:
        """The generation parameters this model's requests may carry."""
        if isinstance(self.accepts, list):
            return frozenset(self.accepts)
        style = self.accepts
        if style == "auto":
            reasoning = self.backend == "openai" and is_reasoning_name(self.model)
            style = "reasoning" if reasoning else "chat"
        return PARAM_PRESETS[style]

    # Replies held to the turn's legal actions, and how the server takes it
    # (agents/backends/constrain.py: auto, choice, regex, guided_choice, guided_regex,
    # json_schema).
    constrain: Literal["legal_actions"] | None = None
    constrain_via: Literal[
        "auto", "choice", "regex", "guided_choice", "guided_regex", "json_schema"
    ] = "auto"
    # First turns of the run through the provider's batch API (agents/backends/batch.py).
    batch: bool = False
    # What the server is (agents/backends/dialect.py): auto (probed once, or known from the
    # host), or named, when a probe cannot tell or should not be made.
    dialect: Literal[
        "auto",
        "vllm",
        "sglang",
        "llamacpp",
        "ollama",
        "tgi",
        "lmstudio",
        "openai",
        "anthropic",
        "unknown",
    ] = "auto"

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
        keyed = self.api_key_env is not None or any(
            name.lower() in ("authorization", "x-api-key") for name in self.headers
        )
        if keyed and any(has_credentials(url) for url in self.base_urls):
            # Both would go as the request's Authorization: the HTTP clients refuse the pair.
            raise ValueError(
                "a base URL with user:password@ and an API key (api_key_env, or an "
                "Authorization / x-api-key header) cannot both be sent: keep one (take the "
                "credentials out of the URL, or drop the key)"
            )
        return self
