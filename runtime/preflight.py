"""Pre-flight: check every model a config uses before any episode starts (``parley check``).

For each model that the config's episodes play with (runtime/experiment.py ``expand``):

1. **key**: the variable named by ``api_key_env`` is set (and a hosted API, OpenAI's or
   Anthropic's, has one named at all);
2. **server**: each base URL answers;
3. **models**: its model list (``GET /v1/models``, OpenAI-compatible and Anthropic alike) names
   the entry's ``model`` (the served name). Anthropic lists dated ids only, so an alias that is
   not listed is left to the request to judge; a server without a model list (404) is noted;
4. **request**: one tiny request round-trips through the run's own client code (the SDK, the
   headers, the key), with one small generated PNG when the model takes images and plays a
   role that is shown images in this config.

Every model's checks run at once, each endpoint under a short timeout (``--check-timeout``,
or ``check_timeout_s`` in the config). A failure names the model and the fix in one line
(``model gpt: OPENAI_API_KEY is not set; export it, or name another variable in
api_key_env``). A server that lists the model but gives no reply within the timeout is a
warning with the time waited, not a failure: it is up, only busy or slow, and the run's own
requests wait ``timeout_s``. Models with ``launch:`` are started by the run itself
(runtime/launch.py), which waits for their health check: they are skipped here with that
reason, as are base URLs they do not have yet.

``parley run`` runs the same checks first (``--no-check`` skips them) and stops, with exit
code 1 and no run folder written, when one fails. A model whose response cache already holds
replies of it is not asked at all there (a rerun from the cache sends nothing). A config of
scripted, random or human players only has nothing to check, and costs nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from parley.agents.backends.network import request_options
from parley.agents.backends.spec import ModelSpec

if TYPE_CHECKING:
    import aiohttp
    from rich.console import Console

    from parley.runtime.config import ExperimentConfig

Status = Literal["ok", "warning", "failed", "skipped"]
Step = Literal["key", "server", "models", "request", "launch", "cache"]

DEFAULT_TIMEOUT_S = 10.0
RAISE_TIMEOUT = "raise --check-timeout (check_timeout_s in the config)"
# Hosted APIs that always need a key: a model entry for them without ``api_key_env`` would
# send the SDK's placeholder key and fail every request.
HOSTED = {"api.openai.com": "OPENAI_API_KEY", "api.anthropic.com": "ANTHROPIC_API_KEY"}
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class ModelCheck:
    """The result of checking one model (at one endpoint, where it has several).

    ``step`` is the check that decided it (for ``ok``: ``request``, the last one); ``detail``
    what was found; ``fix`` what to do about a failure.
    """

    model: str
    status: Status
    step: Step
    detail: str
    fix: str = ""
    endpoint: str = ""
    images: bool = False  # the round-trip carried an image
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Nothing stops a run: passed, or skipped for a stated reason."""
        return self.status != "failed"

    @property
    def message(self) -> str:
        """One line: the model, what is wrong, and the fix."""
        fix = f"; {self.fix}" if self.fix else ""
        return f"model {self.model}: {self.detail}{fix}"


class _Failed(Exception):
    def __init__(self, step: Step, detail: str, fix: str) -> None:
        super().__init__(detail)
        self.step, self.detail, self.fix = step, detail, fix


class _Slow(Exception):
    """The tiny request got no reply within the check's time (the server listed the model)."""

    def __init__(self, waited_s: float) -> None:
        super().__init__(f"no reply after {waited_s:.1f} s")
        self.waited_s = waited_s


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def _shown(url: str) -> str:
    from parley.runtime.config import masked_url

    return masked_url(url)


def tiny_png(side: int = 64) -> bytes:
    """A small PNG (a two-colour square), made here so that no file is needed. Not smaller:
    some vision models refuse images under 28 pixels a side (Qwen2-VL's resizer)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (side, side), (255, 255, 255))
    ImageDraw.Draw(image).rectangle((side // 4, side // 4, 3 * side // 4, 3 * side // 4), "red")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def models_in_use(config: ExperimentConfig) -> dict[str, bool]:
    """The models the config's episodes play with, each with whether it is shown images (it
    takes images, and a role it plays sees them in some game of the config). Raises
    :class:`~parley.runtime.config.ConfigError` for a config that cannot run."""
    from parley.runtime.config import PairingMatrix

    # No model anywhere in the pairings (scripted, random, human players): nothing to check,
    # and no need to expand a config of perhaps many thousands of episodes here.
    players = [
        player
        for block in config.games
        for pairing in block.pairings
        for choices in (
            pairing.matrix.values() if isinstance(pairing, PairingMatrix) else [pairing.values()]
        )
        for player in choices
    ]
    if not any(player.kind == "llm" for player in players):
        return {}
    from parley.environments import registry
    from parley.runtime.experiment import expand, image_roles

    used: dict[str, bool] = {}
    seeing: dict[str, frozenset[str]] = {}
    for spec in expand(config):
        for role, player in spec.players.items():
            if player.kind != "llm" or not player.model:
                continue
            model = config.models[player.model]
            takes = model.images and model.max_images != 0
            if used.get(player.model) or not takes:
                used.setdefault(player.model, False)
                continue
            key = json.dumps([spec.game, spec.settings], sort_keys=True, default=str)
            if key not in seeing:
                info = registry.get(spec.game)
                seeing[key] = image_roles(info, spec.settings, spec.seed, spec.instance)
            used[player.model] = role in seeing[key]
    return used


def _key_problem(name: str, spec: ModelSpec, environ: Mapping[str, str]) -> _Failed | None:
    if spec.api_key_env is not None:
        if environ.get(spec.api_key_env):
            return None
        return _Failed(
            "key",
            f"{spec.api_key_env} is not set",
            f"export {spec.api_key_env}=…, or name the variable that holds the key in "
            f"models.{name}.api_key_env",
        )
    for url in spec.base_urls:
        wanted = HOSTED.get(_host(url))
        if wanted:
            return _Failed(
                "key",
                f"{_host(url)} needs an API key and the entry names no variable for it",
                f"set models.{name}.api_key_env: {wanted} and export {wanted}",
            )
    return None


def _models_url(spec: ModelSpec, url: str) -> str:
    # OpenAI-compatible base URLs end in /v1; Anthropic's is the server root.
    return f"{url}/models" if spec.backend == "openai" else f"{url}/v1/models"


def _headers(spec: ModelSpec, key: str | None) -> dict[str, str]:
    headers = dict(spec.headers)
    if spec.backend == "anthropic":
        headers.setdefault("anthropic-version", ANTHROPIC_VERSION)
        if key:
            headers.setdefault("x-api-key", key)
    elif key:
        headers.setdefault("Authorization", f"Bearer {key}")
    return headers


async def _served_names(
    session: aiohttp.ClientSession, name: str, spec: ModelSpec, url: str, key: str | None
) -> list[str] | None:
    """The names the server lists, or None when it keeps no list (404)."""
    import aiohttp

    target = _models_url(spec, url)
    shown = _shown(target)
    try:
        options = request_options(target)  # the proxy and TLS of the run's own requests
        headers = {**_headers(spec, key), **options.pop("headers", {})}
        async with session.get(target, headers=headers, **options) as response:
            status = response.status
            text = await response.text(errors="replace")
    except TimeoutError:
        raise _Failed(
            "server",
            f"no answer from {shown} within the timeout",
            f"check that the server is up and reachable from here, or {RAISE_TIMEOUT}",
        ) from None
    except (aiohttp.ClientError, OSError) as exc:
        cause = getattr(exc, "os_error", None) or exc
        if isinstance(cause, ConnectionRefusedError):
            reason = "connection refused"
        else:
            reason = getattr(cause, "strerror", None) or str(cause) or type(exc).__name__
        raise _Failed(
            "server",
            f"the server at {_shown(url)} does not answer ({reason})",
            f"start it, or fix models.{name}.base_url",
        ) from None
    if status in (401, 403):
        variable = spec.api_key_env or "no key"
        raise _Failed(
            "models",
            f"{shown} refused the key ({status}; key from {variable})",
            f"check the key's value, or the variable named in models.{name}.api_key_env"
            if spec.api_key_env
            else f"name the variable that holds the key in models.{name}.api_key_env",
        )
    if status == 404:
        return None
    if status != 200:
        raise _Failed(
            "models",
            f"{shown} answered {status}: {text[:120].strip()}",
            "check the server's log; it should list its models at this address",
        )
    try:
        data = json.loads(text)
        return [str(m["id"]) for m in data["data"]]
    except (ValueError, KeyError, TypeError):
        raise _Failed(
            "models",
            f"{shown} answered 200 but not with a model list",
            f"check that models.{name}.base_url points at the API"
            + (" (it usually ends in /v1)" if spec.backend == "openai" else ""),
        ) from None


async def _round_trip(
    name: str,
    spec: ModelSpec,
    url: str,
    images: bool,
    timeout_s: float,
    environ: Mapping[str, str],
) -> str:
    """One tiny request through the run's own client; returns a note on the reply."""
    from parley.agents.backends.client import ModelUnavailable
    from parley.agents.backends.pool import ModelPool
    from parley.bus.messages import ImagePart, PromptMessage, TextPart

    # The run's client with one attempt and the check's timeout: a check waits on nothing.
    quick = spec.model_copy(
        update={
            "base_urls": [url],
            "retry": spec.retry.model_copy(update={"max_attempts": 1}),
            "timeout_s": timeout_s,
            "health": spec.health.model_copy(update={"path": None}),
            "cache": False,  # the check must reach the server, and stays out of the cache
        }
    )
    # A few tokens are enough to prove the round-trip (a reasoning model may spend them all
    # thinking and answer nothing: still an answer).
    small: dict[str, Any] = {"max_tokens": min(spec.params.max_tokens, 16)}
    most = getattr(spec.params, "max_completion_tokens", None)
    if most:
        small["max_completion_tokens"] = min(int(most), 16)
    params = spec.params.model_copy(update=small)
    content: list[TextPart | ImagePart] = [
        TextPart(text="This is a connectivity check. Reply with the single word OK.")
    ]
    if images:
        content.append(ImagePart.from_bytes(tiny_png()))
    messages = [PromptMessage(role="user", content=content)]
    pool = ModelPool({name: quick}, environ=environ)
    no_images = (
        f"set models.{name}.images: false, so that the games' text variants are played "
        "(parley run --model: add --text-only)"
    )
    sent = time.monotonic()
    try:
        client = pool.client(name)
        # A server that says it takes no images has them left out of every request: the
        # episodes would play a picture variant without the pictures.
        if images and (await client.identify()).images is False:
            info = client.info
            said = f"{info.traits.label}, {info.evidence}" if info.evidence else info.traits.label
            raise _Failed(
                "request",
                "the entry takes images and a role it plays is shown them here, but the "
                f"server takes no images (so says {said})",
                no_images,
            )
        sent = time.monotonic()
        completion = await client.complete(messages, params)
    except TimeoutError:
        raise _Slow(time.monotonic() - sent) from None
    except ModelUnavailable as exc:
        if exc.calls and exc.calls[-1].get("outcome") == "timeout":
            raise _Slow(time.monotonic() - sent) from None
        detail = str(exc).removeprefix(f"model {name} ")
        fix = "check the model's settings against the server"
        if " 401" in detail or " 403" in detail:
            fix = (
                f"check the key in {spec.api_key_env}"
                if spec.api_key_env
                else f"name the variable that holds the key in models.{name}.api_key_env"
            )
        elif images and "image" in detail.lower():
            fix = f"this server takes no images: {no_images}"
        raise _Failed("request", f"a tiny request failed: {detail}", fix) from None
    finally:
        await pool.aclose()
    reply = completion.reply
    usage = reply.usage
    tokens = f", {usage.input_tokens}+{usage.output_tokens} tokens" if usage is not None else ""
    return f"answered in {completion.latency_s:.2f} s{tokens}"


async def check_endpoint(
    name: str,
    spec: ModelSpec,
    url: str,
    *,
    images: bool,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    environ: Mapping[str, str],
) -> ModelCheck:
    """Every check of one model at one base URL."""
    start = time.monotonic()
    shown = _shown(url)

    def result(status: Status, step: Step, detail: str, fix: str = "") -> ModelCheck:
        return ModelCheck(
            name, status, step, detail, fix, shown, images, round(time.monotonic() - start, 3)
        )

    key = environ.get(spec.api_key_env) if spec.api_key_env else None
    notes: list[str] = []
    try:
        problem = _key_problem(name, spec, environ)
        if problem is not None:
            raise problem
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            names = await _served_names(session, name, spec, url, key)
        if names is None:
            notes.append("the server keeps no model list (404); served name not checked")
        elif spec.model not in names:
            listed = ", ".join(names[:8]) + (" …" if len(names) > 8 else "")
            if spec.backend == "openai":
                raise _Failed(
                    "models",
                    f"the server at {shown} does not serve {spec.model!r}; it serves: {listed}",
                    f"set models.{name}.model to the served name "
                    "(vLLM: --served-model-name), or fix base_url",
                )
            notes.append(f"{spec.model!r} is not listed (an alias?); the request decides")
        remaining = max(1.0, timeout_s - (time.monotonic() - start))
        notes.insert(0, await _round_trip(name, spec, url, images, remaining, environ))
    except _Failed as failed:
        return result("failed", failed.step, failed.detail, failed.fix)
    except _Slow as slow:
        # Listed, so up: busy or slow to generate. The run's requests wait timeout_s each.
        return result(
            "warning",
            "request",
            f"the server answers, but a tiny request to {spec.model!r} got no reply in "
            f"{slow.waited_s:.1f} s (the check waits {timeout_s:g} s): busy, or slow to generate",
            f"the run goes on, each request waiting up to models.{name}.timeout_s "
            f"({spec.timeout_s:g} s); to wait longer here, {RAISE_TIMEOUT}",
        )
    except Exception as exc:  # anything the client does not classify: named, never a traceback
        return result(
            "failed",
            "request",
            f"the check failed: {type(exc).__name__}: {str(exc)[:200]}",
            "check the model's entry and the server's log",
        )
    what = (
        "served, and a request with an image round-trips"
        if images
        else "served, and a request round-trips"
    )
    return result("ok", "request", f"{what}: {'; '.join(notes)}")


async def check_models(
    models: Mapping[str, ModelSpec],
    images: Mapping[str, bool] | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    environ: Mapping[str, str] | None = None,
    launch: bool = False,
) -> list[ModelCheck]:
    """Check ``models`` (registry name → entry) at once, every base URL of each; ``images``
    says which models get an image in their request (default: those that take images).
    Models with ``launch:`` are skipped, or with ``launch`` started, checked and stopped."""
    import os

    from parley.agents.backends.transport import BACKENDS, uses_sdk

    env = environ if environ is not None else os.environ
    # The SDKs take seconds to import: before any timeout starts, not inside one.
    for backend in {s.backend for s in models.values() if s.base_urls and uses_sdk(s)}:
        BACKENDS[backend].sdk  # noqa: B018 (imports it)
    jobs: list[asyncio.Future[ModelCheck] | asyncio.Task[ModelCheck]] = []
    skipped: list[ModelCheck] = []

    async def bounded(name: str, spec: ModelSpec, url: str, images: bool) -> ModelCheck:
        # A guard over the client's own timeouts: no check outlives its time by much.
        try:
            async with asyncio.timeout(timeout_s + 5.0):
                return await check_endpoint(
                    name, spec, url, images=images, timeout_s=timeout_s, environ=env
                )
        except TimeoutError:
            return ModelCheck(
                name,
                "failed",
                "request",
                f"no answer within {timeout_s:g} s",
                f"check that the server is up and not overloaded, or {RAISE_TIMEOUT}",
                _shown(url),
                images,
            )

    async def launched(name: str, spec: ModelSpec, images: bool) -> ModelCheck:
        # Started as the run would start it (its first replica), checked, stopped again.
        from parley.runtime.launch import LaunchedServer, LaunchFailed

        with tempfile.TemporaryDirectory(prefix="parley-check-") as logs:
            server = LaunchedServer(name, spec, Path(logs), environ=env)
            try:
                try:
                    url = await server.start()
                except (LaunchFailed, OSError) as exc:
                    return ModelCheck(
                        name,
                        "failed",
                        "launch",
                        f"the server did not come up: {exc}",
                        f"check models.{name}.launch (command, model, args, gpus)",
                    )
                quick = spec.model_copy(update={"launch": None, "base_urls": [url]})
                result = await bounded(name, quick, url, images)
                return replace(result, detail=f"started for the check: {result.detail}")
            finally:
                await server.stop()

    for name, spec in models.items():
        takes = spec.images and spec.max_images != 0
        with_images = takes if images is None else bool(images.get(name)) and takes
        problem = _key_problem(name, spec, env)
        if problem is not None:  # one line for the model, not one per endpoint
            skipped.append(ModelCheck(name, "failed", problem.step, problem.detail, problem.fix))
            continue
        if spec.launch is not None and launch:
            jobs.append(asyncio.ensure_future(launched(name, spec, with_images)))
        elif spec.launch is not None:
            skipped.append(
                ModelCheck(
                    name,
                    "skipped",
                    "launch",
                    "started by the run (launch:), which waits for its health check and "
                    "ends its episodes as error with the reason if it never comes up; "
                    "parley check --launch starts it here to check it",
                )
            )
        for url in spec.base_urls:
            jobs.append(asyncio.ensure_future(bounded(name, spec, url, with_images)))
    done = list(await asyncio.gather(*jobs))
    order = list(models)
    return sorted([*skipped, *done], key=lambda c: order.index(c.model))


def cached_replies(spec: ModelSpec) -> tuple[Path, int] | None:
    """The response cache file of ``spec`` and how many replies of its model it holds, or
    None when it has no cache or holds none (a file that is not a cache holds none)."""
    from parley.agents.backends.cache import resolve_path, stats

    path = resolve_path(spec.cache)
    if path is None or not path.is_file():
        return None
    try:
        held = int(stats(path)["models"].get(spec.model, 0))
    except (sqlite3.Error, OSError):
        return None
    return (path, held) if held else None


def _from_cache(name: str, spec: ModelSpec) -> ModelCheck | None:
    found = cached_replies(spec)
    if found is None:
        return None
    path, held = found
    return ModelCheck(
        name,
        "skipped",
        "cache",
        f"not asked: its response cache {path} holds {held} replies of {spec.model!r}; "
        "a request the cache lacks goes to the server during the run",
    )


async def check_config(
    config: ExperimentConfig,
    *,
    timeout_s: float | None = None,
    environ: Mapping[str, str] | None = None,
    launch: bool = False,
    skip_cached: bool = False,
) -> list[ModelCheck]:
    """Check the models ``config``'s episodes use (none: an empty list, at once), each
    endpoint within ``timeout_s`` (default: the config's ``check_timeout_s``). With
    ``skip_cached``, a model whose response cache holds replies of it is skipped unasked."""
    used = models_in_use(config)
    if not used:
        return []
    models = {name: config.models[name] for name in config.models if name in used}
    skipped = []
    if skip_cached:
        skipped = [c for name, spec in models.items() if (c := _from_cache(name, spec))]
        models = {
            name: spec for name, spec in models.items() if name not in {c.model for c in skipped}
        }
    seconds = config.check_timeout_s if timeout_s is None else timeout_s
    done = await check_models(models, used, timeout_s=seconds, environ=environ, launch=launch)
    order = list(config.models)
    return sorted([*skipped, *done], key=lambda c: order.index(c.model))


def table(results: list[ModelCheck], title: str = "pre-flight") -> Any:
    """The results as a small rich table."""
    from rich.table import Table

    out = Table(title=title, title_justify="left")
    for column in ("model", "endpoint", "result", "detail"):
        out.add_column(column, overflow="fold")
    style = {"ok": "green", "warning": "yellow", "failed": "bold red", "skipped": "yellow"}
    for r in results:
        detail = r.detail + (f"\n[cyan]fix:[/] {r.fix}" if r.fix else "")
        out.add_row(r.model, r.endpoint or "-", f"[{style[r.status]}]{r.status}[/]", detail)
    return out


def _print(results: list[ModelCheck], console: Console) -> None:
    console.print(table(results), highlight=False)
    for r in results:
        if r.status == "failed":
            console.print(f"[red]{r.message}[/]", highlight=False, soft_wrap=True)


# --- the command line ----------------------------------------------------------------------


def _timeout(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not 0 < number <= 600:
        raise argparse.ArgumentTypeError(
            f"expected seconds, more than 0 and at most 600, got {value!r}"
        )
    return number


def add_check_command(sub: Any) -> None:
    """Register ``parley check CONFIG``."""
    check = sub.add_parser(
        "check",
        help="check every model a config uses (key, server, served name, one request); "
        "exit 1 if one fails",
    )
    check.add_argument("config", help="experiment YAML")
    check.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, as for parley run",
    )
    _add_timeout(check, "--check-timeout", "--timeout")
    check.add_argument(
        "--launch",
        action="store_true",
        help="start the servers of launch: models (as the run would), check them, stop them",
    )
    check.add_argument("--json", action="store_true", help="print the results as JSON")
    check.set_defaults(fn=command)


def _add_timeout(parser: argparse.ArgumentParser, *flags: str) -> None:
    parser.add_argument(
        *flags,
        dest="check_timeout",
        type=_timeout,
        default=None,
        metavar="S",
        help="seconds for each model's checks (default: the config's check_timeout_s, "
        f"{DEFAULT_TIMEOUT_S:g}); a model that is listed but slower is a warning",
    )


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """``parley run --no-check`` and ``--check-timeout S``."""
    run.add_argument(
        "--no-check",
        action="store_true",
        help="skip the pre-flight check of the models (parley check) before the run",
    )
    _add_timeout(run, "--check-timeout")


def _report(results: list[ModelCheck], console: Console) -> None:
    """The warnings of passed checks, one line each."""
    for r in results:
        if r.status == "warning":
            console.print(f"[yellow]pre-flight: {r.message}[/]", highlight=False, soft_wrap=True)


def command(args: argparse.Namespace) -> int:
    """``parley check``: 0 when every model passes, 1 when one fails (a bad config: the
    ConfigError goes up to the CLI, which exits 2)."""
    from rich.console import Console

    from parley import event_loop
    from parley.runtime.config import load_config

    console = Console(stderr=True)
    config = load_config(args.config, args.set)
    used = models_in_use(config)
    if not used:
        from parley.runtime.experiment import expand

        expand(config)  # the config must still be one that runs (a ConfigError: exit 2)
        if args.json:
            print("[]")
        console.print("no models to check: every player is scripted, random or human")
        return 0
    timeout = args.check_timeout
    results = event_loop.run(check_config(config, timeout_s=timeout, launch=args.launch))
    if args.json:
        print(json.dumps([{**asdict(r), "message": r.message} for r in results], indent=2))
    else:
        _print(results, Console(width=None if sys.stdout.isatty() else 160))
        _report(results, console)
    from parley.runtime.plan import print_context_warnings

    # Prompts longer than a model's context, declared or as its server reports it.
    print_context_warnings(config, console, sizes=served_context_sizes(config, results))
    failed = [r for r in results if r.status == "failed"]
    if failed:
        console.print(f"[red]{len(failed)} of {len(results)} checks failed[/]")
        return 1
    return 0


def served_context_sizes(config: ExperimentConfig, results: list[ModelCheck]) -> dict[str, int]:
    """Per model whose entry declares no ``context_size``: the context per sequence its server
    reports (dialect.py: llama.cpp's ``n_ctx``, vLLM's ``max_model_len``), for the context
    warnings. Only models the checks reached are asked (none served from the cache)."""
    from parley import event_loop
    from parley.agents.backends import dialect

    reached = {r.model for r in results if r.step in ("request", "models") and r.status != "failed"}
    wanted = {
        name: spec
        for name, spec in config.models.items()
        if name in reached and spec.context_size is None and spec.base_urls
    }

    async def size(spec: ModelSpec) -> int | None:
        info = dialect.known(spec.backend, spec.base_urls[0], spec.dialect)
        if info is None:
            info, _ = await dialect.probe(spec.backend, spec.base_urls[0], spec.model, spec.headers)
        return info.context_size

    async def sizes() -> list[int | None]:
        return list(await asyncio.gather(*(size(spec) for spec in wanted.values())))

    if not wanted:
        return {}
    found = event_loop.run(sizes())
    return {name: n for name, n in zip(wanted, found, strict=True) if n}


def _cached(config: ExperimentConfig, model: str) -> bool:
    spec = config.models.get(model)
    return spec is not None and spec.cache not in (None, False)


def check_before_run(config: ExperimentConfig, args: argparse.Namespace) -> int | None:
    """For ``parley run``: the checks of ``parley check``, unless ``--no-check``. Returns the
    exit code when the run must not start (1: a model failed), None when it may."""
    if getattr(args, "no_check", False) or not models_in_use(config):
        return None
    from rich.console import Console

    from parley import event_loop

    console = Console(stderr=True)
    if config.workers == "remote":
        # The workers call the models, with their own keys and network: checked from here,
        # a key that only the workers hold would stop a run that can play.
        console.print(
            "[yellow]pre-flight skipped: with workers: remote the models are called from the "
            "worker machines; run parley check CONFIG there[/]",
            highlight=False,
        )
        return None
    timeout = getattr(args, "check_timeout", None)
    results = event_loop.run(check_config(config, timeout_s=timeout, skip_cached=True))
    failed = [r for r in results if r.status == "failed"]
    # A model with a response cache may rerun with its server gone (the point of the cache):
    # its failure is a warning, and any request the cache lacks ends its episode as error.
    cached = [r for r in failed if _cached(config, r.model)]
    for r in cached:
        console.print(
            f"[yellow]pre-flight: {r.message} — going on: its replies come from the response "
            "cache, and a request the cache lacks ends its episode as error[/]",
            highlight=False,
            soft_wrap=True,
        )
    failed = [r for r in failed if r not in cached]
    if not failed:
        _report(results, console)  # slow servers: said even with --quiet
        from parley.runtime.plan import print_context_warnings

        # Prompts longer than a model's context, declared or as its server reports it.
        print_context_warnings(config, console, sizes=served_context_sizes(config, results))
        if not getattr(args, "quiet", False):
            passed = sum(r.status == "ok" for r in results)
            notes = [f"{passed} model check(s) passed"]
            warned = sum(r.status == "warning" for r in results)
            if warned:
                notes.append(f"{warned} with a warning")
            for step, why in (("launch", "started by the run"), ("cache", "from the cache")):
                names = [r.model for r in results if r.status == "skipped" and r.step == step]
                if names:
                    notes.append(f"{', '.join(names)}: {why}, not checked here")
            console.print(f"pre-flight: {'; '.join(notes)}", highlight=False)
        return None
    _print(results, console)
    console.print(
        "[yellow]the run did not start. Fix the above, or skip the check with --no-check[/]",
        highlight=False,
    )
    return 1
