"""A small HTTP forward proxy for the tests, run as its own process: it forwards requests whose
target is an absolute ``http://`` URI (as clients send them to a proxy) and counts them; a
request to the proxy itself (``GET /count``) answers the count and the forwarded targets.

Run as ``python -m tests.backends.forward_proxy``; it prints ``listening on PORT``. Used through
:class:`ForwardProxyProcess`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[2]

# Headers of one connection, not of the request (RFC 9110 7.6.1), and those aiohttp sets again.
_HOP = frozenset(
    (
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    )
)


class Forwarder:
    """Forwards each absolute-URI request over one client session and keeps what it saw."""

    def __init__(self) -> None:
        self.targets: list[str] = []
        self.proxy_auth: list[str | None] = []
        self.session: aiohttp.ClientSession | None = None

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        target = request.raw_path  # the request target as sent: absolute when meant for a proxy
        if not target.startswith("http://"):
            if request.method == "GET" and target == "/count":
                seen = {"forwarded": len(self.targets), "targets": self.targets}
                return web.json_response({**seen, "proxy_auth": self.proxy_auth})
            return web.Response(status=400, text=f"not a proxy request: {target}")
        self.targets.append(target)
        self.proxy_auth.append(request.headers.get("Proxy-Authorization"))
        if self.session is None:
            self.session = aiohttp.ClientSession(auto_decompress=False)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self.session.request(
            request.method, target, headers=headers, data=await request.read()
        ) as upstream:
            out = web.StreamResponse(status=upstream.status)
            for k, v in upstream.headers.items():
                if k.lower() not in _HOP:
                    out.headers[k] = v
            await out.prepare(request)
            async for chunk in upstream.content.iter_any():
                await out.write(chunk)  # streamed replies go on as they come
            await out.write_eof()
            return out


async def serve() -> None:
    forwarder = Forwarder()
    runner = web.ServerRunner(web.Server(forwarder.handle))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print(f"listening on {port}", flush=True)
    await asyncio.Event().wait()


class ForwardProxyProcess:
    """The forward proxy as a child process on a free loopback port; ``url`` is its address
    (for ``HTTP_PROXY``), ``count()`` what it has forwarded so far."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.output: deque[str] = deque(maxlen=100)

    def __enter__(self) -> ForwardProxyProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.backends.forward_proxy"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening on "):
            self.process.kill()
            raise RuntimeError(f"forward proxy did not start: {line}{self.process.stdout.read()}")
        self.url = f"http://127.0.0.1:{int(line.split()[-1])}"
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def count(self) -> dict[str, Any]:
        """``forwarded`` (how many requests), their ``targets`` and ``proxy_auth`` headers."""
        # Never through a proxy of the environment: this asks the proxy itself.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{self.url}/count", timeout=10) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


if __name__ == "__main__":
    asyncio.run(serve())
