"""A hostile model server cannot hurt a run: the stand-in server, as its own process, sends a
gzip bomb, a 200 MB body, a stream that never ends, headers that never end, and redirects;
each episode ends recorded with the reason, the client reads no more than about its
``max_response_bytes``, and no request follows a redirect to another server."""

from __future__ import annotations

import asyncio
import logging
import re
import zlib
from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends.bodies import PIECE, BodyLimit
from parley.agents.backends.cache import ResponseCache
from parley.agents.backends.retry import Failure
from parley.agents.backends.simserver import SimServerProcess
from parley.records import read_records
from parley.runtime.config import load_config
from parley.runtime.report import ending_rows
from tests.backends.conftest import FAST_RETRY, failed_calls, model, play, wire_config

pytestmark = pytest.mark.anyio

LIMIT = 1024 * 1024  # the entries' max_response_bytes here
# What the server may have written past what the client read: the sockets' buffers.
SLACK = 16 * 1024 * 1024
TRANSPORTS = [
    pytest.param({"transport": "sdk"}, id="sdk-aiohttp"),
    pytest.param({"transport": "sdk", "http": "httpx"}, id="sdk-httpx"),
    pytest.param({"transport": "direct"}, id="direct"),
]


def _solver_faces(sim: SimServerProcess, fault: dict[str, Any], extra: dict[str, Any]) -> Any:
    """A one-episode config whose solver's server sends ``fault``."""
    sim.configure(faults=[{**fault, "models": ["solver-m"]}])
    entry = {"retry": FAST_RETRY, "max_response_bytes": LIMIT, "timeout_s": 60.0, **extra}
    models = {
        "solver": model(sim, "solver-m", images=False, **entry),
        "expert": model(sim, "expert-m", **entry),
    }
    return wire_config(models, [{"solver": "solver", "expert": "expert"}], seeds=[0])


@pytest.mark.parametrize("extra", TRANSPORTS)
@pytest.mark.parametrize(
    ("fault", "stream"),
    [
        pytest.param({"kind": "gzip_bomb", "size": 64 * 1024 * 1024}, False, id="gzip-bomb"),
        pytest.param({"kind": "gzip_bomb", "size": 64 * 1024 * 1024}, True, id="gzip-bomb-stream"),
        pytest.param({"kind": "huge", "size": 200 * 1024 * 1024}, False, id="200mb"),
        pytest.param({"kind": "endless"}, True, id="endless-stream"),
        pytest.param({"kind": "endless"}, False, id="endless-body"),
    ],
)
async def test_a_reply_over_the_limit_is_stopped_while_read_and_not_retried(
    sim: SimServerProcess,
    tmp_path: Path,
    fault: dict[str, Any],
    stream: bool,
    extra: dict[str, Any],
) -> None:
    config = _solver_faces(sim, fault, {"stream": stream, **extra})
    (record,) = await play(config, tmp_path)
    assert record["outcome"] == "error", (record["outcome"], record["reason"])
    reason = record["reason"]
    assert f"too_large: a {'decompressed ' if 'gzip' in fault['kind'] else ''}reply" in reason
    assert f"over max_response_bytes ({LIMIT} bytes)" in reason and "not retried" in reason
    assert record["reason_code"] == "bad_response"
    calls = record["model_calls"]["solver"]
    assert calls["requests"] == calls["attempts"] == 1
    found = re.search(r"read (\d+) bytes, (\d+) decoded", reason)
    assert found is not None, reason
    read, decoded = int(found[1]), int(found[2])
    # Stopped within one piece of the limit, on the wire and decompressed.
    assert read <= LIMIT + PIECE and decoded <= LIMIT + PIECE
    assert max(read, decoded) > LIMIT
    assert sim.stats()["hostile_bytes"] <= read + SLACK


@pytest.mark.parametrize("extra", [{"transport": "sdk"}, {"transport": "direct"}])
async def test_six_episodes_at_once_against_200mb_bodies_each_read_about_the_limit(
    sim: SimServerProcess, tmp_path: Path, extra: dict[str, Any]
) -> None:
    config = _solver_faces(sim, {"kind": "huge", "size": 200 * 1024 * 1024}, extra)
    config = wire_config(
        {name: entry.model_dump() for name, entry in config.models.items()},
        [{"solver": "solver", "expert": "expert"}],
        seeds=list(range(6)),
    )
    records = await play(config, tmp_path)
    assert [r["outcome"] for r in records] == ["error"] * 6
    assert all("too_large" in r["reason"] for r in records), [r["reason"] for r in records]
    assert sum(r["model_calls"]["solver"]["attempts"] for r in records) == 6
    # One ending, grouped as one in the report's table of reason codes.
    header, rows = ending_rows(read_records(tmp_path))
    assert header == ["game", "pairing", "bad_response"] and [r[2] for r in rows] == ["6"]
    assert sim.stats()["hostile_bytes"] <= 6 * (LIMIT + SLACK)


@pytest.mark.parametrize(
    ("fault", "extra"),
    [
        pytest.param({"kind": "gzip_bomb", "size": 64 * 1024 * 1024}, {}, id="gzip-bomb-sdk"),
        pytest.param({"kind": "endless"}, {"transport": "direct"}, id="endless-direct"),
    ],
)
async def test_an_anthropic_stream_over_the_limit_is_stopped(
    sim: SimServerProcess, tmp_path: Path, fault: dict[str, Any], extra: dict[str, Any]
) -> None:
    sim.configure(faults=[{**fault, "models": ["solver-m"]}])
    entry = {"max_response_bytes": LIMIT, "stream": True, "timeout_s": 60.0, **extra}
    models = {
        "solver": model(sim, "solver-m", "anthropic", images=False, **entry),
        "expert": model(sim, "expert-m", "anthropic", **entry),
    }
    config = wire_config(models, [{"solver": "solver", "expert": "expert"}], seeds=[0])
    (record,) = await play(config, tmp_path)
    assert record["outcome"] == "error", (record["outcome"], record["reason"])
    what = "decompressed reply" if fault["kind"] == "gzip_bomb" else "reply"
    assert f"too_large: a {what} over max_response_bytes" in record["reason"]
    assert record["reason_code"] == "bad_response"
    assert record["model_calls"]["solver"]["attempts"] == 1
    assert sim.stats()["hostile_bytes"] <= LIMIT + SLACK


@pytest.mark.parametrize("extra", TRANSPORTS)
async def test_headers_that_never_end_end_the_episode_recorded(
    sim: SimServerProcess, tmp_path: Path, extra: dict[str, Any]
) -> None:
    config = _solver_faces(sim, {"kind": "endless_headers"}, extra)
    (record,) = await play(config, tmp_path)
    assert record["outcome"] == "error", (record["outcome"], record["reason"])
    # Each attempt stops at the client's limit on a response's head, retried, and the reason
    # says so: aiohttp's count of headers, h11's buffer.
    reason = record["reason"]
    assert "model solver unreachable" in reason
    assert "Too many headers received" in reason or "Receive buffer too long" in reason, reason
    attempts = record["model_calls"]["solver"]["attempts"]
    assert sim.stats()["hostile_bytes"] <= attempts * SLACK


@pytest.fixture(scope="module")
def elsewhere() -> Any:
    """A second server that redirects must never reach."""
    with SimServerProcess({"replies": {"text": "Cut wire 1."}}) as server:
        yield server


@pytest.mark.parametrize("extra", TRANSPORTS)
async def test_a_redirect_to_another_server_is_refused_and_named(
    sim: SimServerProcess, elsewhere: SimServerProcess, tmp_path: Path, extra: dict[str, Any]
) -> None:
    elsewhere.reset()
    target = f"{elsewhere.url.replace('127.0.0.1', 'localhost')}/v1/chat/completions"
    config = _solver_faces(sim, {"kind": "redirect", "location": f"{target}?key=x"}, extra)
    (record,) = await play(config, tmp_path)
    assert record["outcome"] == "error", (record["outcome"], record["reason"])
    reason = record["reason"]
    assert "not retried (redirect 307: HTTP 307 to " + target in reason, reason
    assert "key=x" not in reason and record["model_calls"]["solver"]["attempts"] == 1
    assert record["reason_code"] == "bad_response"
    assert elsewhere.stats().get("requests", 0) == 0


@pytest.mark.parametrize("extra", TRANSPORTS)
async def test_a_redirect_to_the_same_server_is_followed_once(
    sim: SimServerProcess, tmp_path: Path, extra: dict[str, Any]
) -> None:
    path = "/v1/chat/completions"
    config = _solver_faces(sim, {"kind": "redirect", "location": path, "first": 1}, extra)
    (record,) = await play(config, tmp_path)
    assert record["outcome"] == "success", (record["outcome"], record["reason"])
    assert sim.stats()["fault_redirect"] == 1
    assert failed_calls(tmp_path, [record]) == []

    # Redirected again: not followed a second time.
    config = _solver_faces(sim, {"kind": "redirect", "location": path}, extra)
    (record,) = await play(config, tmp_path / "again")
    assert record["outcome"] == "error"
    assert "redirect 307" in record["reason"] and "already followed" in record["reason"]
    assert record["reason_code"] == "bad_response"


async def test_replies_of_the_wrong_shape_until_the_retries_run_out_are_a_bad_response(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    config = _solver_faces(sim, {"kind": "body", "body": {"choices": "none"}}, {})
    (record,) = await play(config, tmp_path)
    assert (record["outcome"], record["reason_code"]) == ("error", "bad_response")
    calls = record["model_calls"]["solver"]
    assert calls["retries"] == {"bad_response": calls["attempts"] - 1} and calls["attempts"] > 1


def test_credentials_in_a_base_url_beside_an_api_key_are_a_config_error() -> None:
    entry = {"model": "m", "base_url": "https://user:pw@example.com/v1", "api_key_env": "KEY"}
    with pytest.raises(ValueError, match=r"models\.bad.*user:password@.*api_key_env"):
        load_config(
            {
                "name": "x",
                "games": [
                    {
                        "game": "comma.wire",
                        "seeds": [0],
                        "pairings": [{"solver": "bad", "expert": "bad"}],
                    }
                ],
                "models": {"bad": entry},
            }
        )
    # Either alone is fine.
    load_config(
        {
            "name": "x",
            "games": [
                {"game": "comma.wire", "seeds": [0], "pairings": [{"solver": "a", "expert": "b"}]}
            ],
            "models": {
                "a": {**entry, "api_key_env": None},
                "b": {**entry, "base_url": "https://example.com/v1"},
            },
        }
    )


async def test_a_corrupt_cache_file_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cache.sqlite"
    path.write_bytes(b"not a cache at all" * 50)
    cache = ResponseCache(path)
    with caplog.at_level(logging.WARNING):
        found = await asyncio.gather(*(cache.get(f"k{i}") for i in range(16)))
        await cache.get("again")
    await cache.aclose()
    assert found == [None] * 16
    warnings = [r for r in caplog.records if "response cache" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


@pytest.mark.parametrize("encoding", ["gzip", "deflate-zlib", "deflate-raw", "identity"])
def test_each_encoding_asked_for_is_decoded_in_bounded_pieces(encoding: str) -> None:
    text = b'{"choices": []}' + b" " * (3 * PIECE)
    if encoding == "gzip":
        packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    elif encoding == "deflate-raw":
        packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    else:
        packer = zlib.compressobj(9)
    sent = text if encoding == "identity" else packer.compress(text) + packer.flush()
    body = BodyLimit(LIMIT, {"content-encoding": encoding.partition("-")[0]})
    pieces = body.feed(sent[:1]) + body.feed(sent[1:]) + body.flush()
    assert b"".join(pieces) == text
    assert max(len(p) for p in pieces) <= max(PIECE, len(sent))
    assert (body.raw, body.decoded) == (len(sent), len(text))


def test_a_reply_that_cannot_fit_or_was_not_asked_for_is_refused_before_it_is_read() -> None:
    with pytest.raises(Failure, match="Content-Length") as err:
        BodyLimit(LIMIT, {"content-length": str(LIMIT + 1)})
    assert err.value.kind == "too_large" and not err.value.retryable
    with pytest.raises(Failure, match="'br'") as err:
        BodyLimit(LIMIT, {"content-encoding": "br"})
    assert err.value.kind == "bad_response"
