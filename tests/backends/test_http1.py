"""``transport: direct`` over plain http: the keep-alive HTTP/1.1 client of client.py against a
scripted server, for what the stand-in server never sends (chunked and compressed bodies, a body
that ends with the connection, an interim 100, ``Connection: close``) and for what it must send
and reuse."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Callable

import pytest
import yarl

from parley.agents.backends import client as client_module
from parley.agents.backends.client import _Http1, classify

pytestmark = pytest.mark.anyio

REPLY = json.dumps({"choices": [{"message": {"content": "hi"}}]}).encode()


class Scripted:
    """A TCP server that reads each request (head and Content-Length body) and answers with
    ``answer(n)``, the raw bytes of its n-th response (from 0): ``None`` never answers, and the
    connection is closed after an answer without a length, with ``Connection: close``, or one
    whose index is in ``close_after``."""

    def __init__(self, answer: Callable[[int], bytes | None], close_after: set[int] | None = None):
        self.answer = answer
        self.close_after = close_after or set()
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                n = len(self.requests) - 1
                answer = self.answer(n)
                if answer is None:
                    await asyncio.sleep(30)
                    break
                writer.write(answer)
                await writer.drain()
                framed = b"Content-Length" in answer or b"chunked" in answer
                if n in self.close_after or b"Connection: close" in answer or not framed:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> _Http1:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        url = yarl.URL(f"http://127.0.0.1:{port}/v1/chat/completions")
        self.http = _Http1(url, {"Authorization": "Bearer k", "User-Agent": "t"}, 5.0)
        return self.http

    async def __aexit__(self, *exc: object) -> None:
        self.http.close()
        assert self.server is not None
        self.server.close()


def ok(body: bytes = REPLY, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def test_requests_reuse_one_connection_and_carry_the_headers() -> None:
    server = Scripted(lambda n: ok())
    async with server as http:
        for i in range(3):
            response = await http.post(b'{"n": %d}' % i, {"traceparent": f"00-{i}"})
            assert (response.status, response.body, response.keep_alive) == (200, REPLY, True)
        port = http.port
    assert server.connections == 1
    head, body = server.requests[2]
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert f"Host: 127.0.0.1:{port}" in lines
    assert {"Authorization: Bearer k", "User-Agent: t", "traceparent: 00-2"} <= set(lines)
    assert "Content-Length: 8" in lines and "Content-Type: application/json" in lines
    assert body == b'{"n": 2}'


async def test_concurrent_requests_open_a_connection_each_and_reuse_them() -> None:
    server = Scripted(lambda n: ok())
    async with server as http:
        await asyncio.gather(*(http.post(b"{}") for _ in range(5)))
        await asyncio.gather(*(http.post(b"{}") for _ in range(5)))
    assert server.connections == 5


async def test_chunked_gzip_interim_and_until_close_bodies() -> None:
    half = len(REPLY) // 2
    answers = [
        # Chunked, with a chunk extension and a trailer.
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x;x=1\r\n%s\r\n%x\r\n%s\r\n0\r\nX-T: 1\r\n\r\n"
        % (half, REPLY[:half], len(REPLY) - half, REPLY[half:]),
        ok(gzip.compress(REPLY), "Content-Encoding: gzip\r\n"),
        b"HTTP/1.1 100 Continue\r\n\r\n" + ok(),
        # No length: the body is what comes before the connection closes.
        b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + REPLY,
    ]
    async with Scripted(lambda n: answers[n]) as http:
        got = [await http.post(b"{}") for _ in answers]
    assert [r.body for r in got] == [REPLY] * 4
    assert [r.keep_alive for r in got] == [True, True, True, False]


async def test_connection_close_is_not_reused() -> None:
    server = Scripted(lambda n: ok(extra="Connection: close\r\n"))
    async with server as http:
        for _ in range(2):
            assert (await http.post(b"{}")).body == REPLY
    assert server.connections == 2


async def test_an_error_status_keeps_its_headers() -> None:
    answer = ok(b'{"error": "slow down"}', "Retry-After: 2\r\n").replace(b"200 OK", b"429 No")
    async with Scripted(lambda n: answer) as http:
        response = await http.post(b"{}")
    assert response.status == 429
    assert response.headers["retry-after"] == "2"


async def test_cut_short_dropped_and_garbage_are_told_apart() -> None:
    answers = [
        b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"cut',  # then the connection closes
        b"",  # closed with no answer at all
        b"garbage\r\n\r\n",
    ]
    kinds = []
    async with Scripted(lambda n: answers[n], close_after={0, 1, 2}) as http:
        for _ in answers:
            with pytest.raises(Exception) as caught:
                await http.post(b"{}")
            kinds.append(classify(caught.value).kind)
    assert kinds == ["bad_response", "connection", "bad_response"]


async def test_a_cancelled_request_does_not_leave_its_connection_for_reuse() -> None:
    server = Scripted(lambda n: None if n == 0 else ok())  # the first is never answered
    async with server as http:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await http.post(b"{}")
        assert (await http.post(b"{}")).body == REPLY
    assert server.connections == 2


async def test_idle_connections_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "KEEPALIVE_S", 0.05)
    server = Scripted(lambda n: ok())
    async with server as http:
        await http.post(b"{}")
        await asyncio.sleep(0.1)
        await http.post(b"{}")
    assert server.connections == 2


def test_only_plain_http_without_credentials_or_odd_headers() -> None:
    url = yarl.URL("http://127.0.0.1:8000/v1/chat/completions")
    assert _Http1.fits(url, {"Authorization": "Bearer k"})
    assert not _Http1.fits(yarl.URL("https://api.openai.com/v1/chat/completions"), {})
    assert not _Http1.fits(yarl.URL("http://u:p@127.0.0.1:8000/v1"), {})
    assert not _Http1.fits(url, {"X-Bad": "a\r\nInjected: 1"})


async def test_a_connection_with_bytes_beyond_its_response_is_not_reused() -> None:
    server = Scripted(lambda n: ok() + b"HTTP/1.1 200 OK\r\n" if n == 0 else ok())
    async with server as http:
        for _ in range(2):
            assert (await http.post(b"{}")).body == REPLY
    assert server.connections == 2


async def test_connections_made_together_share_one_address_lookup() -> None:
    server = Scripted(lambda n: ok())
    async with server as http:
        loop = asyncio.get_running_loop()
        lookups: list[tuple[object, ...]] = []
        real = loop.getaddrinfo

        async def counted(*args: object, **kwargs: object) -> object:
            lookups.append(args)
            return await real(*args, **kwargs)  # type: ignore[arg-type]

        loop.getaddrinfo = counted  # type: ignore[method-assign]
        try:
            await asyncio.gather(*(http.post(b"{}") for _ in range(5)))
        finally:
            del loop.getaddrinfo
    assert server.connections == 5
    assert len(lookups) == 1


async def test_a_host_that_refuses_is_a_connection_failure() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    http = _Http1(yarl.URL(f"http://127.0.0.1:{port}/v1/chat/completions"), {}, 5.0)
    with pytest.raises(OSError) as caught:
        await http.post(b"{}")
    assert classify(caught.value).kind == "connection"


def chunked(body: bytes, size: int) -> bytes:
    """``body`` as a chunked response of ``size``-byte chunks (the last may be shorter)."""
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + framed + b"0\r\n\r\n"


class Trickling(Scripted):
    """A Scripted server that writes each answer a few bytes at a time, each piece on its own."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.requests.append((head, b""))
            answer = self.answer(0) or b""
            for i in range(0, len(answer), 3):
                writer.write(answer[i : i + 3])
                await writer.drain()
                await asyncio.sleep(0.001)  # its own read on the client's side
        finally:
            writer.close()


async def test_a_chunked_body_that_trickles_in_is_read_whole() -> None:
    body = json.dumps({"choices": [{"message": {"content": "x" * 300}}]}).encode()
    async with Trickling(lambda n: chunked(body, 7)) as http:
        response = await http.post(b"{}")
    assert (response.status, response.body) == (200, body)


def test_a_chunked_body_is_taken_chunk_by_chunk_as_it_grows() -> None:
    body = bytes(range(256)) * 3
    whole = chunked(body, 5)
    at = whole.index(b"\r\n\r\n") + 4
    chunks = client_module._Chunks(at)
    buffer = bytearray(whole[:at])
    seen: list[bytes | None] = []
    for byte in whole[at:]:  # one byte a read: every cut, inside a size line, chunk or CRLF
        buffer.append(byte)
        seen.append(chunks.body(buffer, eof=False))
    assert seen[:-1] == [None] * (len(seen) - 1)
    assert seen[-1] == body
    # Each chunk was taken once, as it completed (none twice).
    assert b"".join(chunks.pieces) == body and len(chunks.pieces) == -(-len(body) // 5)


def test_a_chunked_body_cut_by_the_end_of_the_connection_is_an_error() -> None:
    whole = chunked(REPLY, 4)
    at = whole.index(b"\r\n\r\n") + 4
    cut = bytearray(whole[: len(whole) - 9])
    with pytest.raises(client_module.aiohttp.ClientPayloadError):
        client_module._Chunks(at).body(cut, eof=True)
    with pytest.raises(ValueError):
        client_module._Chunks(at).body(bytearray(whole[:at] + b"zz\r\n"), eof=False)
