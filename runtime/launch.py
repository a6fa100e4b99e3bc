"""Model servers a run starts itself (``launch:`` in a model entry), and the run's model pool.

``open_models`` is what a run wraps its episodes in: it starts every server the episodes need
(``vllm serve`` by default, or the command given; one per replica, each an endpoint of the
model's balancer), waits until each answers its health check,
hands out one :class:`ModelPool` shared by all episodes, and at the end closes every connection
and stops the servers, keeping their logs in ``<run>/logs/<model>.log``. A server that fails to
come up does not stop the run: the episodes of its model end as ``error`` with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from parley.agents.backends.pool import ModelPool
from parley.agents.backends.processes import free_port
from parley.agents.backends.spec import LaunchSpec, ModelSpec, parallel_flags

log = logging.getLogger("parley.launch")


class LaunchFailed(RuntimeError):
    """A server that exited or never became healthy."""


_PLACEHOLDER = re.compile(r"\{(model|served_name|port|host|gpus|replica|python)\}")


def _filled(arg: str, fill: Mapping[str, str]) -> str:
    """``arg`` with the known placeholders filled; other braces (JSON values of vLLM flags
    such as ``--limit-mm-per-prompt '{"image": 2}'``) are left as they are."""
    return _PLACEHOLDER.sub(lambda m: fill[m.group(1)], arg)


def _has_flag(args: list[str], flag: str) -> bool:
    """Whether ``args`` give ``flag``: ``--flag v``, ``--flag=v`` or vLLM's dotted form for
    JSON fields (``--limit-mm-per-prompt.image 2``)."""
    return any(a == flag or a.startswith((flag + "=", flag + ".")) for a in args)


def launch_command(
    spec: ModelSpec,
    launch: LaunchSpec,
    port: int,
    gpus: list[int] | None = None,
    replica: int = 0,
) -> list[str]:
    """The command line of one replica (``gpus``: its GPUs, default the first group):
    ``launch.command`` with placeholders filled, or ``vllm serve`` with the flags the entry
    implies — served name, tensor/data-parallel sizes for its GPUs (never one the user gave),
    and the image limit — before the entry's own ``args``."""
    served = launch.model or spec.model
    group = launch.gpu_groups()[0] if gpus is None else gpus
    fill = {
        "model": served,
        "served_name": spec.model,
        "port": str(port),
        "host": launch.host,
        "gpus": ",".join(str(g) for g in group),
        "replica": str(replica),
        "python": sys.executable,
    }
    if launch.command is not None:
        parts = (
            shlex.split(launch.command) if isinstance(launch.command, str) else list(launch.command)
        )
        return [_filled(p, fill) for p in parts]
    command = ["vllm", "serve", served, "--host", launch.host, "--port", str(port)]
    if served != spec.model:
        command += ["--served-model-name", spec.model]
    if group:
        given = parallel_flags(launch.args)
        tp, dp = launch.parallel(len(group))
        if given["tp"] is None and tp > 1:
            command += ["--tensor-parallel-size", str(tp)]
        if given["dp"] is None and dp > 1:
            command += ["--data-parallel-size", str(dp)]
    if (
        spec.images
        and spec.max_images is not None
        and not _has_flag(launch.args, "--limit-mm-per-prompt")
    ):
        # The JSON form (vLLM >= 0.10); the older key=value form is gone from current releases.
        command += ["--limit-mm-per-prompt", json.dumps({"image": spec.max_images})]
    return command + [_filled(a, fill) for a in launch.args]


class LaunchedServer:
    """One server process of a run (one replica of a model), its log file, and its base URL
    once it is up."""

    def __init__(
        self,
        name: str,
        spec: ModelSpec,
        log_dir: Path,
        replica: int = 0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        assert spec.launch is not None
        self.name = name
        self.spec = spec
        self.launch = spec.launch
        self.replica = replica
        self.environ = os.environ if environ is None else environ
        groups = self.launch.gpu_groups()
        self.gpus = groups[replica] if replica < len(groups) else []
        given = self.launch.port
        self.port = given + replica if given else free_port(self.launch.host)
        self.command = launch_command(spec, self.launch, self.port, self.gpus, replica)
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        suffix = f"-{replica}" if len(groups) > 1 else ""
        self.log_path = log_dir / f"{safe}{suffix}.log"
        self.process: asyncio.subprocess.Process | None = None

    def environment(self) -> dict[str, str]:
        """The server's environment: this one, the entry's ``env``, its GPUs, and the API key
        as ``VLLM_API_KEY`` (vLLM reads it when ``--api-key`` is not given; an argument would
        show the key to anyone who lists processes)."""
        env = {**self.environ, **self.launch.env}
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.gpus)
        key_env = self.spec.api_key_env
        if key_env:
            key = self.environ.get(key_env)
            if not key:
                raise LaunchFailed(
                    f"environment variable {key_env} (api_key_env of model {self.name}) is not "
                    "set: the server would take requests without a key"
                )
            env["VLLM_API_KEY"] = key
        return env

    @property
    def url(self) -> str:
        return f"http://{self.launch.host}:{self.port}/v1"

    @property
    def health_url(self) -> str:
        return f"http://{self.launch.host}:{self.port}{self.launch.health_path}"

    async def start(self) -> str:
        """Start the process and wait until it is healthy; returns the base URL."""
        env = self.environment()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"$ {shlex.join(self.command)}\n".encode())
            out.flush()
            try:
                self.process = await asyncio.create_subprocess_exec(
                    *self.command,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    stdin=asyncio.subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,  # its own process group: stopped with its children
                )
            except OSError as exc:
                raise LaunchFailed(f"could not start {self.command[0]!r}: {exc}") from None
        await self._wait_healthy()
        return self.url

    async def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.launch.startup_timeout_s
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                assert self.process is not None
                if self.process.returncode is not None:
                    raise LaunchFailed(
                        f"exited with code {self.process.returncode} before it was healthy; "
                        f"log {self.log_path}: {self.tail()}"
                    )
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with session.get(self.health_url) as response:
                        if response.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise LaunchFailed(
                        f"not healthy after {self.launch.startup_timeout_s:g} s "
                        f"({self.health_url}); log {self.log_path}: {self.tail()}"
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.process.wait(), 0.25)

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    async def stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), self.launch.stop_timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


def models_used(specs: Iterable[Any]) -> set[str]:
    """Model names the episode specs play with."""
    return {p.model for s in specs for p in s.players.values() if p.kind == "llm" and p.model}


@contextlib.asynccontextmanager
async def open_models(
    models: Mapping[str, ModelSpec],
    run_dir: str | Path | None = None,
    episodes: Iterable[Any] | None = None,
) -> AsyncIterator[ModelPool]:
    """The run's :class:`ModelPool`, with the servers of ``launch:`` entries running.

    Only models that ``episodes`` use are launched (all of them when ``episodes`` is None).
    """
    from parley.observability import tracing

    used = models_used(episodes) if episodes is not None else set(models)
    pool = ModelPool(models, tracer=tracing.tracer)
    log_dir = Path(run_dir or ".") / "logs"
    servers = [
        LaunchedServer(name, spec, log_dir, replica)
        for name, spec in models.items()
        if spec.launch is not None and name in used
        for replica in range(spec.launch.replicas)
    ]
    try:
        results = await asyncio.gather(*(s.start() for s in servers), return_exceptions=True)
        failures: dict[str, list[str]] = {}
        for server, result in zip(servers, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, LaunchFailed | OSError):
                    raise result
                where = f" (replica {server.replica})" if server.launch.replicas > 1 else ""
                reason = f"launch failed{where}: {result}"
                log.error("model %s: %s", server.name, reason)
                failures.setdefault(server.name, []).append(reason)
            else:
                # Each replica is one endpoint of the model's balancer.
                pool.add_urls(server.name, [result])
        for name, reasons in failures.items():
            if not pool.urls.get(name) and not pool.specs[name].base_urls:
                pool.mark_failed(name, "; ".join(reasons))
        yield pool
    finally:
        try:
            await pool.aclose()
        finally:
            await asyncio.gather(*(s.stop() for s in servers), return_exceptions=True)
