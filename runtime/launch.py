"""Model servers a run starts itself (``launch:`` in a model entry), and the run's model pool.

``open_models`` is what a run wraps its episodes in: it starts every server the episodes need
(``vllm serve`` by default, or the command given), waits until each answers its health check,
hands out one :class:`ModelPool` shared by all episodes, and at the end closes every connection
and stops the servers, keeping their logs in ``<run>/logs/<model>.log``. A server that fails to
come up does not stop the run: the episodes of its model end as ``error`` with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from parley.agents.backends.pool import ModelPool
from parley.agents.backends.spec import LaunchSpec, ModelSpec

log = logging.getLogger("parley.launch")


class LaunchFailed(RuntimeError):
    """A server that exited or never became healthy."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def launch_command(spec: ModelSpec, launch: LaunchSpec, port: int) -> list[str]:
    """The command line: ``launch.command`` with placeholders filled, or ``vllm serve``."""
    served = launch.model or spec.model
    fill = {
        "model": served,
        "served_name": spec.model,
        "port": str(port),
        "host": launch.host,
        "gpus": ",".join(str(g) for g in launch.gpus),
        "python": sys.executable,
    }
    if launch.command is not None:
        parts = (
            shlex.split(launch.command) if isinstance(launch.command, str) else list(launch.command)
        )
        return [p.format(**fill) for p in parts]
    command = ["vllm", "serve", served, "--host", launch.host, "--port", str(port)]
    if served != spec.model:
        command += ["--served-model-name", spec.model]
    if len(launch.gpus) > 1 and not any(
        a.startswith("--tensor-parallel-size") for a in launch.args
    ):
        command += ["--tensor-parallel-size", str(len(launch.gpus))]
    return command + [a.format(**fill) for a in launch.args]


class LaunchedServer:
    """One server process of a run, its log file, and its base URL once it is up."""

    def __init__(self, name: str, spec: ModelSpec, log_dir: Path) -> None:
        assert spec.launch is not None
        self.name = name
        self.spec = spec
        self.launch = spec.launch
        self.port = self.launch.port or free_port(self.launch.host)
        self.command = launch_command(spec, self.launch, self.port)
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        self.log_path = log_dir / f"{safe}.log"
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://{self.launch.host}:{self.port}/v1"

    @property
    def health_url(self) -> str:
        return f"http://{self.launch.host}:{self.port}{self.launch.health_path}"

    async def start(self) -> str:
        """Start the process and wait until it is healthy; returns the base URL."""
        env = {**os.environ, **self.launch.env}
        if self.launch.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.launch.gpus)
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
        LaunchedServer(name, spec, log_dir)
        for name, spec in models.items()
        if spec.launch is not None and name in used
    ]
    try:
        results = await asyncio.gather(*(s.start() for s in servers), return_exceptions=True)
        for server, result in zip(servers, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, LaunchFailed | OSError):
                    raise result
                reason = f"launch failed: {result}"
                log.error("model %s: %s", server.name, reason)
                pool.mark_failed(server.name, reason)
            else:
                pool.add_urls(server.name, [result])
        yield pool
    finally:
        try:
            await pool.aclose()
        finally:
            await asyncio.gather(*(s.stop() for s in servers), return_exceptions=True)
