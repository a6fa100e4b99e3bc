"""What kind of server an endpoint is, and what follows from it.

OpenAI-compatible servers share a request format but not its corners: which field holds a
constraint on the reply, how long a sequence may be, whether images are taken, how the prompt
cache shows in ``usage``. A server ignores fields it does not know and answers 200, so a
constraint sent in another server's dialect is silently dropped. Each endpoint is therefore
identified once: from the config (``dialect:``), from its host (OpenAI's and Anthropic's own
APIs), or by probing what it answers — ``/v1/models`` (its ``owned_by`` and fields), llama.cpp's
``/props``, vLLM's ``/version``, Ollama's ``/api/version``, TGI's ``/info``.

Example::

    info = identify("openai", "http://127.0.0.1:8080/v1", {"/props": {...}, "/v1/models": {...}})
    info.dialect, info.constraint, info.context_size      # ('llamacpp', 'json_schema', 2048)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from parley.agents.backends.bodies import ACCEPT_ENCODING, PIECE, limited
from parley.agents.backends.network import request_options

Dialect = Literal[
    "vllm", "sglang", "llamacpp", "ollama", "tgi", "lmstudio", "openai", "anthropic", "unknown"
]
DIALECTS: tuple[str, ...] = get_args(Dialect)
# The constraint forms of constrain.py a server honours (None: it takes none).
ConstraintForm = Literal["choice", "json_schema"]
Source = Literal["config", "host", "probe"]

PROBE_TIMEOUT_S = 3.0
PROBE_MAX_BYTES = 1024 * 1024  # the most of one probe's answer: model lists and versions are small
# What the probe asks, relative to the server root (the base URL less ``/v1``), and the model
# list relative to the base URL.
ROOT_PATHS = ("/props", "/version", "/api/version", "/info")
MODELS_PATH = "/models"


@dataclass(frozen=True)
class Traits:
    """What a dialect implies, whatever the model."""

    constraint: ConstraintForm | None
    # Where ``usage`` reports prompt tokens served from the server's prefix cache.
    cached_tokens: str
    label: str


TRAITS: dict[str, Traits] = {
    # vLLM 0.10.2 and later (the pinned 0.11): structured_outputs.choice.
    "vllm": Traits(
        "choice",
        "prompt_tokens_details.cached_tokens (with --enable-prompt-tokens-details)",
        "vLLM",
    ),
    "sglang": Traits("json_schema", "prompt_tokens_details.cached_tokens", "SGLang"),
    "llamacpp": Traits("json_schema", "prompt_tokens_details.cached_tokens", "llama.cpp server"),
    "ollama": Traits("json_schema", "not reported", "Ollama"),
    "tgi": Traits("json_schema", "not reported", "Text Generation Inference"),
    "lmstudio": Traits("json_schema", "not reported", "LM Studio"),
    "openai": Traits("json_schema", "prompt_tokens_details.cached_tokens", "OpenAI API"),
    "anthropic": Traits(
        None, "cache_read_input_tokens, cache_creation_input_tokens", "Anthropic API"
    ),
    # response_format with a JSON schema is the form the most servers take.
    "unknown": Traits("json_schema", "prompt_tokens_details.cached_tokens, if at all", "unknown"),
}

_HOSTS = {"api.openai.com": "openai", "api.anthropic.com": "anthropic"}
# ``owned_by`` of /v1/models entries, as each server writes it.
_OWNERS = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp", "library": "ollama"}


@dataclass(frozen=True)
class ServerInfo:
    """One endpoint's dialect and what it said of itself. ``context_size`` is per sequence
    (llama.cpp's ``n_ctx`` of a slot, vLLM's ``max_model_len``); ``images`` None where the
    server does not say."""

    dialect: str
    source: Source
    version: str | None = None
    context_size: int | None = None
    images: bool | None = None
    evidence: str = ""

    @property
    def traits(self) -> Traits:
        return TRAITS.get(self.dialect, TRAITS["unknown"])

    @property
    def constraint(self) -> ConstraintForm | None:
        """The constraint form ``constrain_via: auto`` sends this server."""
        return self.traits.constraint

    def record(self) -> dict[str, Any]:
        """What ``run.json``'s endpoints and the call records keep of it."""
        out = {k: v for k, v in asdict(self).items() if v not in (None, "")}
        out["constraint"] = self.constraint
        out["cached_tokens"] = self.traits.cached_tokens
        return out


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def hosted_api(url: str) -> bool:
    """Whether ``url`` is a vendor's own hosted API (``api.openai.com``, ``api.anthropic.com``)."""
    return _host(url) in _HOSTS


def known(backend: str, url: str, setting: str | None = None) -> ServerInfo | None:
    """The dialect where no probe is needed: the config's ``dialect:``, the Anthropic backend,
    or a hosted API's own host; else None."""
    if setting is not None and setting != "auto":
        return ServerInfo(setting, "config", evidence="dialect: in the config")
    if backend == "anthropic":
        return ServerInfo("anthropic", "host", evidence="backend: anthropic")
    hosted = _HOSTS.get(_host(url))
    if hosted is not None:
        return ServerInfo(hosted, "host", evidence=_host(url))
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _model_entry(models: Any, served: str) -> dict[str, Any] | None:
    """The ``/v1/models`` entry of the served name (or the only one)."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list):
        return None
    entries = [m for m in data if isinstance(m, dict)]
    for entry in entries:
        if entry.get("id") == served or served in (entry.get("aliases") or []):
            return entry
    return entries[0] if len(entries) == 1 else None


def identify(backend: str, url: str, answers: Mapping[str, Any], served: str = "") -> ServerInfo:
    """The dialect of the server at ``url`` from what it answered: ``answers`` maps the probed
    paths (``/v1/models``, ``/props``, ``/version``, ``/api/version``, ``/info``) to their JSON,
    None where there was no JSON answer."""
    fixed = known(backend, url)
    if fixed is not None:
        return fixed
    models = answers.get("/v1/models")
    entry = _model_entry(models, served) or {}
    owner = entry.get("owned_by")
    props = answers.get("/props")
    info = answers.get("/info")
    version = answers.get("/version")
    ollama = answers.get("/api/version")
    if isinstance(props, dict) and ("default_generation_settings" in props or owner == "llamacpp"):
        settings = props.get("default_generation_settings")
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        meta = entry.get("meta")
        modalities = props.get("modalities")
        vision = modalities.get("vision") if isinstance(modalities, dict) else None
        return ServerInfo(
            "llamacpp",
            "probe",
            version=str(props.get("build_info") or "") or None,
            context_size=_int(n_ctx)
            or (_int(meta.get("n_ctx")) if isinstance(meta, dict) else None),
            images=vision if isinstance(vision, bool) else None,
            evidence="GET /props",
        )
    if isinstance(info, dict) and "max_total_tokens" in info and "model_id" in info:
        return ServerInfo(
            "tgi",
            "probe",
            version=str(info.get("version") or "") or None,
            context_size=_int(info.get("max_total_tokens")),
            evidence="GET /info",
        )
    if owner in _OWNERS:
        dialect = _OWNERS[owner]
        return ServerInfo(
            dialect,
            "probe",
            version=_version_of(ollama if dialect == "ollama" else version),
            context_size=_int(entry.get("max_model_len")),
            evidence=f"GET /v1/models: owned_by {owner}",
        )
    if isinstance(ollama, dict) and isinstance(ollama.get("version"), str):
        return ServerInfo("ollama", "probe", version=ollama["version"], evidence="GET /api/version")
    if isinstance(version, dict) and isinstance(version.get("version"), str):
        # vLLM answers /version; so do some others, whose model lists then say more.
        return ServerInfo(
            "vllm",
            "probe",
            version=version["version"],
            context_size=_int(entry.get("max_model_len")),
            evidence="GET /version",
        )
    if owner == "organization_owner":
        return ServerInfo(
            "lmstudio", "probe", evidence="GET /v1/models: owned_by organization_owner"
        )
    return ServerInfo(
        "unknown",
        "probe",
        context_size=_int(entry.get("max_model_len")),
        evidence="no answer named the server" if not any(answers.values()) else "not recognised",
    )


def _version_of(answer: Any) -> str | None:
    if isinstance(answer, dict) and isinstance(answer.get("version"), str):
        return str(answer["version"])
    return None


def root(url: str) -> str:
    """The server root of a base URL (``…/v1`` removed)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def _get_json(session: Any, url: str, headers: Mapping[str, str]) -> Any:
    """The JSON answer at ``url``, or None (not 200, not JSON, no answer); never raises."""
    options = request_options(url)
    sent = {**dict(headers), **options.pop("headers", {}), "Accept-Encoding": ACCEPT_ENCODING}
    try:
        # As a model request: no redirect followed, the body decoded here and held to a limit.
        async with session.get(url, headers=sent, allow_redirects=False, **options) as response:
            if response.status != 200:
                return None
            pieces = limited(
                response.content.iter_chunked(PIECE), PROBE_MAX_BYTES, response.headers
            )
            return json.loads(b"".join([piece async for piece in pieces]))
    except asyncio.CancelledError:
        raise
    except Exception:  # a probe tells what it can; anything else is no answer
        return None


async def probe(
    backend: str,
    url: str,
    served: str = "",
    headers: Mapping[str, str] | None = None,
    *,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> tuple[ServerInfo, dict[str, Any]]:
    """Ask the server at ``url`` what it is (all paths at once, within ``timeout_s``); the
    answers come back too, for the run's provenance. Each request goes through the proxy and
    with the TLS settings the model calls take (network.py)."""
    fixed = known(backend, url)
    if fixed is not None:
        return fixed, {}
    import aiohttp

    base = root(url)
    paths = {"/v1/models": f"{url.rstrip('/')}{MODELS_PATH}"}
    paths.update({p: base + p for p in ROOT_PATHS})
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
        got = await asyncio.gather(*(_get_json(session, u, headers or {}) for u in paths.values()))
    answers = dict(zip(paths, got, strict=True))
    return identify(backend, url, answers, served), answers
