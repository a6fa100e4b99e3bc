"""What produced a run, for its ``run.json``: parley's version and git commit, Python, the
platform, key package versions, the resolved generation parameters of each model, and what each
model endpoint says it serves (``GET /v1/models``; vLLM's ``GET /version``).

Everything here is best effort: a missing ``git``, an unknown package or an endpoint that does
not answer is recorded as ``None`` or as the error's text, never a reason to stop a run. The
endpoints are asked in the background once the run's model pool is open, with a short
timeout, and their answers are added to ``run.json`` as the run ends
(:func:`endpoints_recorded`).
"""

from __future__ import annotations

import asyncio
import contextlib
import platform
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parley.records import SCHEMA_VERSION

if TYPE_CHECKING:
    from parley.agents.backends.dialect import ServerInfo
    from parley.agents.backends.spec import ModelSpec
    from parley.runtime.config import ExperimentConfig
    from parley.runtime.experiment import EpisodeSpec
    from parley.runtime.results import RunFolder

# The distributions whose versions can change what a run records or how it talks to servers.
PACKAGES = (
    "pydantic",
    "openai",
    "anthropic",
    "aiohttp",
    "httpx2",
    "aiomqtt",
    "paho-mqtt",
    "opentelemetry-api",
    "opentelemetry-sdk",
    "pillow",
    "numpy",
    "scipy",
    "networkx",
    "chess",
    "pandas",
    "pyarrow",
    "uvloop",
)
GIT_TIMEOUT_S = 2.0
# A distribution's version, the first ``Version:`` line of its metadata (its header's).
_VERSION_LINE = re.compile(r"^Version:[ \t]*(\S+)", re.MULTILINE)
# Per endpoint request; the whole probe is bounded by this too (requests go out at once).
ENDPOINT_TIMEOUT_S = 3.0


def parley_version() -> str:
    """The installed distribution's version (``0+unknown`` in a never-installed checkout)."""
    return installed_version("parley") or "0+unknown"


def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None when it is not installed (or
    its metadata cannot be read).

    Read from its metadata's ``Version:`` line: ``importlib.metadata.version`` parses the
    whole file with the email parser, five times the cost, and a run's start waits on 18 of
    these. A file without that line is left to ``importlib.metadata``."""
    try:
        dist = metadata.distribution(name)
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
        found = _VERSION_LINE.search(text)
        return found.group(1) if found else dist.version
    # Not installed, or metadata that cannot be read (provenance is never worth a run).
    except (metadata.PackageNotFoundError, OSError, ValueError):
        return None


def _git(root: Path, *commands: tuple[str, ...]) -> list[str | None]:
    """Each git command's output in ``root`` (None where it failed, hung or git is missing),
    the commands run side by side: a run's start waits on the slowest, not on their sum."""
    running: list[subprocess.Popen[str] | None] = []
    for args in commands:
        try:
            running.append(
                subprocess.Popen(
                    ["git", "-C", str(root), *args],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
        except OSError:  # no git
            running.append(None)
    outputs: list[str | None] = []
    for process in running:
        if process is None:
            outputs.append(None)
            continue
        try:
            out, _ = process.communicate(timeout=GIT_TIMEOUT_S)
        except subprocess.SubprocessError:  # it hung
            process.kill()
            process.communicate()
            outputs.append(None)
            continue
        outputs.append(out if process.returncode == 0 else None)
    return outputs


def git_state(root: Path | None = None) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the checkout parley runs from, or None when parley is not
    run from one (an installed wheel) or git cannot tell. Only parley's own checkout counts:
    a site-packages folder inside some other repository is not parley's commit."""
    if root is None:
        import parley

        root = Path(parley.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    commit, status = _git(
        root, ("rev-parse", "HEAD"), ("status", "--porcelain", "--untracked-files=no")
    )
    if commit is None:
        return None
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    """Installed version per distribution name (None: not installed)."""
    return {name: installed_version(name) for name in names}


def environment() -> dict[str, Any]:
    """What runs this process: parley, its commit, Python, the platform, key packages."""
    return {
        "parley": parley_version(),
        "git": git_state(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": package_versions(),
    }


def generation(config: ExperimentConfig) -> dict[str, Any]:
    """Per model the config's pairings play with: its backend, served name and the generation
    parameters its players use, resolved (the entry's ``params`` merged with a pairing's
    overrides; a list when pairings resolve to several)."""
    from parley.runtime.experiment import _pairings

    resolved: dict[str, list[dict[str, Any]]] = {}
    for block in config.games:
        for pairing in _pairings(block):
            for player in pairing.values():
                if player.kind != "llm" or not player.model or player.model not in config.models:
                    continue
                params = config.models[player.model].params.merged(player.params or {})
                dumped = params.model_dump(mode="json")
                seen = resolved.setdefault(player.model, [])
                if dumped not in seen:
                    seen.append(dumped)
    return {
        name: {
            "backend": config.models[name].backend,
            "model": config.models[name].model,
            "params": params[0] if len(params) == 1 else params,
        }
        for name, params in sorted(resolved.items())
    }


def describe(config: ExperimentConfig) -> dict[str, Any]:
    """The ``provenance`` of ``run.json`` (the endpoints' answers are added as the run ends)."""
    return {**environment(), "generation": generation(config)}


async def _get_json(session: Any, url: str, headers: dict[str, str]) -> tuple[Any, str | None]:
    """(the JSON answer, None) or (None, why not), never raising."""
    from parley.agents.backends.network import request_options

    try:
        options = request_options(url)  # the proxy and TLS of the run's own requests
        sent = {**headers, **options.pop("headers", {})}
        async with session.get(url, headers=sent, **options) as response:
            if response.status != 200:
                return None, f"HTTP {response.status}"
            return await response.json(content_type=None), None
    except asyncio.CancelledError:
        raise
    except TimeoutError:
        return None, f"no answer within {ENDPOINT_TIMEOUT_S:g} s"
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"[:300]


async def probe_endpoint(
    session: Any, spec: ModelSpec, url: str, key: str | None, known: ServerInfo | None = None
) -> dict[str, Any]:
    """What one endpoint of ``spec`` says: the model ids it serves (or the error), what server
    it is (:mod:`~parley.agents.backends.dialect`) and the version it gives."""
    from parley.runtime.config import masked_url

    headers = {k: v for k, v in spec.headers.items()}
    if spec.backend == "anthropic":
        models_url = f"{url.rstrip('/')}/v1/models"
        if key:
            headers["x-api-key"] = key
        headers.setdefault("anthropic-version", "2023-06-01")
    else:
        models_url = f"{url.rstrip('/')}/models"
        if key:
            headers["Authorization"] = f"Bearer {key}"
    # Both at once, so one endpoint takes at most ENDPOINT_TIMEOUT_S; the probe of what the
    # server is also reads its version (vLLM's /version, llama.cpp's /props).
    (models, error), server = await asyncio.gather(
        _get_json(session, models_url, headers), _server(spec, url, headers, known)
    )
    entry: dict[str, Any] = {"url": masked_url(url)}
    if error is None and isinstance(models, dict) and isinstance(models.get("data"), list):
        entry["models"] = [m.get("id") for m in models["data"] if isinstance(m, dict)]
        # vLLM says which weights back a served name (``root``) and its context size.
        extra = {
            m.get("id"): {k: m[k] for k in ("root", "parent", "max_model_len") if m.get(k)}
            for m in models["data"]
            if isinstance(m, dict)
        }
        if any(extra.values()):
            entry["served"] = {k: v for k, v in extra.items() if v}
    else:
        error = error or "an answer without a model list"
        # An error's text may quote the URL or the key: stored as the URL is, masked.
        entry["error"] = error.replace(url, masked_url(url)).replace(key or "\0", "***")
    entry["version"] = server.get("version")
    entry["server"] = server
    return entry


async def _server(
    spec: ModelSpec, url: str, headers: Mapping[str, str], known: ServerInfo | None
) -> dict[str, Any]:
    """What the endpoint is (agents/backends/dialect.py): as the run's model calls learnt it
    (``known``), else from the config, its host or a probe of its own."""
    from parley.agents.backends import dialect

    info = known or dialect.known(spec.backend, url, spec.dialect)
    if info is None:
        info, _ = await dialect.probe(spec.backend, url, spec.model, headers)
    return info.record()


async def probe_endpoints(
    models: Mapping[str, ModelSpec],
    names: Iterable[str],
    urls: Mapping[str, list[str]] | None = None,
    environ: Mapping[str, str] | None = None,
    pool: Any = None,
) -> dict[str, list[dict[str, Any]]]:
    """Per model of ``names``: :func:`probe_endpoint` for each of its base URLs (the config's
    and ``urls``, e.g. launched servers'); what a server is comes from ``pool``'s endpoints
    where the run has them (one probe for the run and its record). Never raises; bounded by
    ``ENDPOINT_TIMEOUT_S``."""
    import aiohttp

    from parley.agents.backends.client import api_key

    answers: dict[str, list[dict[str, Any]]] = {}
    timeout = aiohttp.ClientTimeout(total=ENDPOINT_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        jobs: list[tuple[str, asyncio.Task[dict[str, Any]]]] = []
        for name in sorted(set(names)):
            spec = models.get(name)
            if spec is None:
                continue
            try:
                key = api_key(spec, environ)
            except Exception:  # unset: the request goes without one and the answer says so
                key = None
            targets = list(dict.fromkeys([*spec.base_urls, *(urls or {}).get(name, [])]))
            if not targets:
                answers[name] = [{"url": None, "error": "no base URL"}]
            for url in targets:
                probe = _probed(session, spec, url, key, name, pool)
                jobs.append((name, asyncio.create_task(probe)))
        for name, job in jobs:
            answers.setdefault(name, []).append(await job)
    return answers


async def _probed(
    session: Any, spec: ModelSpec, url: str, key: str | None, name: str, pool: Any
) -> dict[str, Any]:
    server_info = getattr(pool, "server_info", None)
    known = await server_info(name, url) if server_info is not None else None
    return await probe_endpoint(session, spec, url, key, known)


@contextlib.asynccontextmanager
async def endpoints_recorded(
    folder: RunFolder, pool: Any, specs: Iterable[EpisodeSpec]
) -> AsyncIterator[None]:
    """Ask the endpoints of the models ``specs`` play with what they serve, in the background
    while the run goes on; at the run's end add the answers to ``run.json`` as ``endpoints``.
    Each endpoint answers within ``ENDPOINT_TIMEOUT_S`` or records why not, so a run's end
    waits at most that long (a run that failed or was cut short does not wait)."""
    from parley.runtime.launch import models_used

    names = models_used(specs)
    if not names:
        yield
        return
    task = asyncio.create_task(
        probe_endpoints(pool.specs, names, getattr(pool, "urls", None), pool.environ, pool),
        name="provenance-endpoints",
    )
    try:
        yield
    except BaseException:  # the run failed or was cut short: no reason to wait for answers
        task.cancel()
        raise
    try:
        answers: Any = await asyncio.wait_for(task, ENDPOINT_TIMEOUT_S + 1)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # recorded, never a reason to fail the run
        answers = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    with contextlib.suppress(OSError, ValueError):
        folder.note(endpoints=answers)


def stamp(meta: dict[str, Any], config: ExperimentConfig) -> dict[str, Any]:
    """``meta`` (a run's ``run.json``) with this schema version and this process's
    provenance. A resumed run keeps what produced its earlier part: an earlier provenance that
    differs (another parley, commit, package or parameters) moves to ``provenance_history``."""
    current = describe(config)
    earlier = meta.get("provenance")
    if isinstance(earlier, dict) and _differs(earlier, current):
        meta.setdefault("provenance_history", []).append(earlier)
    meta["schema_version"] = SCHEMA_VERSION
    meta["provenance"] = current
    return meta


def _differs(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("parley", "git", "python", "packages", "generation")
    return any(a.get(k) != b.get(k) for k in keys)
