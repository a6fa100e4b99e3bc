"""The direct transport's keep-alive HTTP/1.1 client against a scripted server: the request it
writes, the response framings it reads (length, chunked, until close, gzip, interim 1xx),
connection reuse, and the errors of a broken answer (classified like aiohttp's)."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agents.backends import client as client_module
from agents.backends.client import Failure, _HttpPool, classify

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """Both loops a run may use (uvloop where installed)."""
    if request.param == "asyncio":
        return "asyncio"
    pytest.importorskip("uvloop")
    return ("asyncio", {"use_uvloop": True})


Answer = Callable[[bytes], bytes | None]  # request bytes → raw response (None: hang up)


class Scripted:
    """A server that answers each request with the next raw response from ``answers``."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}/v1/chat/completions"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                for piece in answer.split(b"|PAUSE|"):  # sent in pieces, with pauses between
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.01)
                if b"connection: close" in answer.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[list[bytes | None]], Any]]:
    servers: list[Scripted] = []

    async def start(answers: list[bytes | None]) -> Scripted:
        server = Scripted(answers)
        server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for server in servers:
        assert server.server is not None
        server.server.close()


def ok(body: bytes = b'{"ok": true}', extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


HEADERS = {"Authorization": "Bearer k", "Content-Type": "application/json", "X-Test": "1"}


async def test_the_request_carries_the_sdk_headers_and_connections_are_reused(
    scripted: Any,
) -> None:
    server = await scripted([ok(), ok(b"[2]")])
    pool = _HttpPool(server.url, HEADERS, 5.0)
    assert await pool.post(b'{"a": 1}') == (200, {"content-length": "12"}, b'{"ok": true}')
    assert (await pool.post(b"{}"))[2] == b"[2]"
    pool.close()
    assert server.connections == 1
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    host, port = server.server.sockets[0].getsockname()[:2]
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert lines[1] == f"Host: {host}:{port}"
    assert {"Authorization: Bearer k", "Content-Type: application/json", "X-Test: 1"} <= set(lines)
    assert "Content-Length: 8" in lines
    assert body == b'{"a": 1}'


async def test_chunked_gzip_interim_and_until_close_framings(scripted: Any) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )
    packed = gzip.compress(b'{"zipped": 1}')
    zipped = ok(packed, "Content-Encoding: gzip\r\n")
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after")
    until_close = b"HTTP/1.0 200 OK\r\n\r\nall of it"
    server = await scripted([chunked, zipped, interim, until_close])
    pool = _HttpPool(server.url, HEADERS, 5.0)
    assert (await pool.post(b"1"))[2] == b"hello, world"
    assert (await pool.post(b"2"))[2] == b'{"zipped": 1}'
    assert (await pool.post(b"3"))[2] == b"after"
    assert (await pool.post(b"4"))[2] == b"all of it"
    pool.close()


async def test_error_status_headers_and_connection_close(scripted: Any) -> None:
    limited = b"HTTP/1.1 429 Too Many\r\nRetry-After: 2\r\nContent-Length: 4\r\n\r\nslow"
    server = await scripted([limited, ok(extra="Connection: close\r\n"), ok()])
    pool = _HttpPool(server.url, HEADERS, 5.0)
    status, headers, body = await pool.post(b"{}")
    assert (status, headers["retry-after"], body) == (429, "2", b"slow")
    await pool.post(b"{}")  # answered with Connection: close
    await pool.post(b"{}")  # so this one opens a new connection
    pool.close()
    assert server.connections == 2


async def test_a_cut_body_and_a_dropped_connection_are_classified_like_aiohttp(
    scripted: Any,
) -> None:
    cut = b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"half'
    server = await scripted([cut])
    pool = _HttpPool(server.url, HEADERS, 5.0)
    with pytest.raises(Exception) as caught:
        await pool.post(b"{}")
    assert classify(caught.value).kind == "bad_response"
    server = await scripted([None])
    pool = _HttpPool(server.url, HEADERS, 5.0)
    with pytest.raises(Exception) as caught:
        await pool.post(b"{}")
    assert classify(caught.value).kind == "connection"
    pool.close()


async def test_nothing_listening_is_a_connection_failure() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    pool = _HttpPool(f"http://127.0.0.1:{port}/v1/messages", HEADERS, 5.0)
    with pytest.raises(Exception) as caught:
        await pool.post(b"{}")
    failure = classify(caught.value)
    assert isinstance(failure, Failure) and failure.kind == "connection"


async def test_a_cancelled_request_does_not_leave_its_connection_for_reuse(
    scripted: Any,
) -> None:
    server = await scripted([None, ok()])
    server.answers[0] = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"  # body never comes
    pool = _HttpPool(server.url, HEADERS, 5.0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await pool.post(b"{}")
    assert pool._idle == []
    pool.close()


async def test_a_connection_the_server_closed_while_idle_is_not_reused(scripted: Any) -> None:
    server = await scripted([ok()])  # answers once, then closes the connection
    pool = _HttpPool(server.url, HEADERS, 5.0)
    await pool.post(b"{}")
    await asyncio.sleep(0.05)
    server.answers.append(ok(b"again"))
    assert (await pool.post(b"{}"))[2] == b"again"
    assert server.connections == 2
    pool.close()


async def test_a_connect_timeout_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    async def hang(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(10)

    monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", hang)
    pool = _HttpPool("http://127.0.0.1:9/v1/messages", HEADERS, 0.05)
    with pytest.raises(TimeoutError) as caught:
        await pool.post(b"{}")
    assert classify(caught.value).kind == "timeout"


@pytest.mark.parametrize("with_orjson", [True, False])
def test_json_bodies_read_as_the_standard_library_reads_them(
    monkeypatch: pytest.MonkeyPatch, with_orjson: bool
) -> None:
    if not with_orjson:
        monkeypatch.setattr(client_module, "_orjson", None)
    body = {"model": "m", "logit_bias": {50256: -100}, "big": 2**70, "text": "héllo"}
    assert json.loads(client_module._dumps(body)) == json.loads(json.dumps(body))
    assert client_module._loads(b'{"a": [1, 2.5, null, "\\u00e9"]}') == {"a": [1, 2.5, None, "é"]}
    assert math.isnan(client_module._loads(b'{"x": NaN}')["x"])
    with pytest.raises(json.JSONDecodeError):
        client_module._loads(b"<html>not json</html>")


async def test_a_chunked_body_that_arrives_in_pieces(scripted: Any) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n|PAUSE|"
        b"6\r\nab\r\n\r\n\r\n|PAUSE|3\r\ncd|PAUSE|e\r\n0\r\n|PAUSE|\r\n"
    )
    server = await scripted([chunked, ok()])
    pool = _HttpPool(server.url, HEADERS, 5.0)
    assert (await pool.post(b"1"))[2] == b"ab\r\n\r\ncde"
    assert (await pool.post(b"2"))[2] == b'{"ok": true}'
    assert server.connections == 1
    pool.close()
