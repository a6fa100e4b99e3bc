"""The stand-in server itself: reply modes, its extra endpoints, and the batched-server latency
model (time to first token, tokens per second, a cap on sequences beyond which requests queue)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from parley.agents.backends import simserver
from parley.agents.backends.simserver import SimServerProcess
from parley.tokens import count_by_pattern, count_tokens

pytestmark = pytest.mark.anyio


async def _chat(
    session: aiohttp.ClientSession, url: str, model: str, *messages: tuple[str, str]
) -> str:
    body = {"model": model, "messages": [{"role": r, "content": c} for r, c in messages]}
    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
        assert response.status == 200
        data = await response.json()
    return data["choices"][0]["message"]["content"]


async def test_reply_modes(sim: SimServerProcess) -> None:
    sim.configure(
        replies={"text": "default"},
        models={
            "rules": {
                "rules": [{"match": r"serial (?P<s>\w+)", "reply": r"serial was \g<s>"}],
                "text": "no rule matched",
            },
            "turns": {"turns": ["zero", "one"]},
            "cycle": {"cycle": ["a", "b"]},
        },
    )
    url = sim.url
    async with aiohttp.ClientSession() as s:
        assert await _chat(s, url, "rules", ("user", "the serial X42 is here")) == "serial was X42"
        assert await _chat(s, url, "rules", ("user", "nothing")) == "no rule matched"
        # The last user message decides, not earlier ones.
        assert (
            await _chat(s, url, "rules", ("user", "serial A1"), ("assistant", "ok"), ("user", "hm"))
            == "no rule matched"
        )
        assert await _chat(s, url, "turns", ("user", "x")) == "zero"
        assert (
            await _chat(s, url, "turns", ("user", "x"), ("assistant", "zero"), ("user", "y"))
            == "one"
        )
        many = [("user", "x"), ("assistant", "a")] * 5 + [("user", "z")]
        assert await _chat(s, url, "turns", *many) == "one"  # the last one repeats
        assert [await _chat(s, url, "cycle", ("user", "x")) for _ in range(3)] == ["a", "b", "a"]
        assert await _chat(s, url, "unknown-model", ("user", "x")) == "default"
        async with s.get(f"{url}/v1/models") as r:
            ids = [m["id"] for m in (await r.json())["data"]]
        assert ids == ["cycle", "rules", "turns"]
        async with s.get(f"{url}/health") as r:
            assert r.status == 200
        async with s.post(f"{url}/v1/chat/completions", data=b"{broken") as r:
            assert r.status == 400


async def test_latency_model_queues_beyond_max_seqs(sim: SimServerProcess) -> None:
    # 0.2 s to the first token, 20 tokens at 100 tokens/s: 0.4 s a reply; 2 sequences at once.
    # How long the waves take is benchmarks/sim_latency.py's to measure; here the counts.
    sim.configure(
        latency={"ttft_s": 0.2, "tokens_per_s": 100, "max_seqs": 2},
        replies={"text": " ".join(["word"] * 20)},
        models={},
    )
    async with aiohttp.ClientSession() as s:
        replies = await asyncio.gather(*(_chat(s, sim.url, "m", ("user", "go")) for _ in range(6)))
    assert replies == [" ".join(["word"] * 20)] * 6
    stats = sim.stats()
    # All six were in at once; two ran, four queued, and never more than two ran together.
    assert stats["peak_in_flight"] == 6 and stats["peak_queued"] == 4
    assert stats["peak_running"] == 2 and stats["completed"] == 6 and stats["in_flight"] == 0


async def test_reply_files_come_only_from_the_startup_config(tmp_path: Path) -> None:
    """A reply file given when the server starts is served; the control API, open to any
    caller, cannot make it read another file (/etc/passwd was served this way once)."""
    replies = tmp_path / "replies.txt"
    replies.write_text("first block\n---\nsecond block\nwith two lines\n")
    with SimServerProcess({"models": {"file": {"file": str(replies)}}}) as server:
        async with aiohttp.ClientSession() as s:
            assert [await _chat(s, server.url, "file", ("user", "x")) for _ in range(2)] == [
                "first block",
                "second block\nwith two lines",
            ]
            for update in (
                {"replies": {"file": "/etc/passwd"}},
                {"models": {"file": {"file": str(replies)}, "x": {"file": "/etc/passwd"}}},
            ):
                async with s.post(f"{server.url}/sim/config", json=update) as r:
                    assert r.status == 403
                    assert "/etc/passwd" in (await r.json())["error"]
            assert await _chat(s, server.url, "other", ("user", "x")) == "OK"
            # Changing other parts keeps the file it started with.
            server.configure(models={"file": {"file": str(replies)}}, seed=3)
            assert await _chat(s, server.url, "file", ("user", "x")) == "first block"
            async with s.post(f"{server.url}/sim/config", data=b"[1, 2]") as r:
                assert r.status == 400


async def test_usage_counts_tokens_as_parley_does(sim: SimServerProcess) -> None:
    """The server reports the prompt's and reply's tokens as parley.tokens counts them, for
    ASCII text (counted its own faster way) and for any other text alike."""
    texts = [
        "Serial number: A7_x9\n4 wires, top to bottom:\n  wire 1: red (cut)",
        "extraordinarily\tlong\x0bwords\x1cand\x1f punctuation!? 1234 __init__ a_b",
        "",
        "   \n",
        "naïve café ² ½ ٣ Straße 東京",
        "abcdef abcdefg abcdefghijk abcdefghijklmnopqrstuvwxyz",
    ]
    sim.configure(replies={"text": texts[1]}, models={})
    async with aiohttp.ClientSession() as session:
        for text in texts:
            body = {"model": "any", "messages": [{"role": "user", "content": text}]}
            async with session.post(f"{sim.url}/v1/chat/completions", json=body) as response:
                usage = (await response.json())["usage"]
            assert usage["prompt_tokens"] == count_tokens(text) == count_by_pattern(text)
            assert usage["completion_tokens"] == count_by_pattern(texts[1])


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *requests: bytes
) -> list[tuple[int, dict[str, str], bytes]]:
    """Write ``requests`` at once (pipelined), read as many responses (Content-Length or
    chunked bodies): status, headers (lower-case names), body."""
    writer.write(b"".join(requests))
    out = []
    for _ in requests:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)
        }
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        else:  # chunked (aiohttp's streamed replies)
            body = b""
            while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                body += (await reader.readexactly(size + 2))[:-2]
            await reader.readuntil(b"\r\n")
        out.append((int(head[0].split()[1]), headers, body))
    return out


def _post(
    body: dict[str, object], *, path: str = "/v1/chat/completions", close: bool = False
) -> bytes:
    data = json.dumps(body).encode()
    extra = "Connection: close\r\n" if close else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode() + data


async def test_one_connection_carries_plain_streamed_and_pipelined_requests(
    sim: SimServerProcess,
) -> None:
    """Plain chat completions are answered by the server's own HTTP path, anything else by
    aiohttp: on one keep-alive connection, in any order, pipelined or not, each request gets
    its own answer and is counted once."""
    sim.configure(replies={"text": "plain answer"}, models={})
    plain = _post({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    streamed = _post(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    )
    host, port = sim.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        first = await _exchange(reader, writer, plain, plain)  # pipelined
        assert [s for s, _, _ in first] == [200, 200]
        for _, headers, body in first:
            assert headers["content-type"].startswith("application/json")
            assert json.loads(body)["choices"][0]["message"]["content"] == "plain answer"
        (status, _, body), (status2, _, body2) = await _exchange(reader, writer, streamed, plain)
        assert (status, status2) == (200, 200)
        assert body.startswith(b"data: {") and body.rstrip().endswith(b"data: [DONE]")
        assert json.loads(body2)["choices"][0]["message"]["content"] == "plain answer"
        bad = _post({"messages": "not a list"})
        ((status, _, body),) = await _exchange(reader, writer, bad)
        assert status == 400 and b"invalid_request_error" in body
    finally:
        writer.close()
    assert sim.stats()["requests"] == 5
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        ((status, headers, _),) = await _exchange(
            reader,
            writer,
            _post({"model": "m", "messages": [{"role": "user", "content": "bye"}]}, close=True),
        )
        assert status == 200 and headers.get("connection") == "close"
        assert await reader.read() == b""  # closed after its answer
    finally:
        writer.close()


async def test_a_body_that_arrives_in_pieces_is_answered_once_and_the_next_request_after_it(
    sim: SimServerProcess,
) -> None:
    """The server's own HTTP path keeps a request's head while its body comes over many reads:
    the request is answered once it is whole, and a request pipelined behind it in the same
    read as its last piece gets its own answer."""
    sim.configure(replies={"text": "whole"}, models={})
    before = sim.stats().get("requests", 0)
    long = _post({"model": "m", "messages": [{"role": "user", "content": "x" * 200_000}]})
    short = _post({"model": "m", "messages": [{"role": "user", "content": "next"}]})
    host, port = sim.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        head_end = long.index(b"\r\n\r\n") + 4
        pieces = [long[:head_end]] + [long[i : i + 4096] for i in range(head_end, len(long), 4096)]
        for piece in pieces[:-1]:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.002)  # each its own read on the server
        assert sim.stats().get("requests", 0) == before  # not answered before its body is whole
        answers = await _exchange(reader, writer, pieces[-1], short)  # in one write
    finally:
        writer.close()
    assert [status for status, _, _ in answers] == [200, 200]
    for _, _, body in answers:
        assert json.loads(body)["choices"][0]["message"]["content"] == "whole"
    assert sim.stats()["requests"] == before + 2


async def test_the_active_window_is_timed_by_the_server(sim: SimServerProcess) -> None:
    sim.configure(latency={"ttft_s": 0.1, "tokens_per_s": 0, "max_seqs": 100}, models={})
    sim.reset()
    assert sim.stats(window_from=1)["window"] is None  # nothing has come yet
    async with aiohttp.ClientSession() as s:
        await _chat(s, sim.url, "m", ("user", "first, alone"))
        await asyncio.gather(*(_chat(s, sim.url, "m", ("user", "then four")) for _ in range(4)))
    whole, later = sim.stats(window_from=1)["window"], sim.stats(window_from=2)["window"]
    assert (whole["requests"], later["requests"]) == (5, 4)
    assert whole["complete"] and later["complete"]
    # The first request was answered before the other four came: a whole reply longer.
    assert whole["seconds"] > later["seconds"] > 0
    assert sim.stats(window_from=6)["window"] is None  # no sixth request
    assert "window" not in sim.stats()  # asked for only
    sim.reset()
    assert sim.stats(window_from=1)["window"] is None
    with pytest.raises(ValueError, match="window_from must be a request number"):
        sim._call("/sim/stats?window_from=first")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "a folder: name the file in it"),
        (b"\xff\xfe", "cannot be read: not UTF-8 text"),
        (b"latency: [", "not valid YAML"),
        (b"[1]", "a YAML mapping at the top level, not list"),
        (b"latency: {mean_s: -5}\n", "latency.mean_s: Extra inputs are not permitted"),
    ],
)
def test_a_bad_sim_config_is_one_message(
    content: bytes | None, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sim.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    assert simserver.main(["--config", str(path), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"parley sim-server: --config {path}: {says}"), err
