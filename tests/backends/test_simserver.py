"""The stand-in server itself: reply modes, its extra endpoints, and the batched-server latency
model (time to first token, tokens per second, a cap on sequences beyond which requests queue)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import aiohttp
import pytest

from parley.agents.backends.simserver import SimServerProcess, count_tokens_fast
from parley.tokens import count_tokens

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
            assert usage["prompt_tokens"] == count_tokens(text)
            assert usage["completion_tokens"] == count_tokens(texts[1])


def test_fast_token_count_is_parleys_count() -> None:
    rng = random.Random(0)
    alphabet = "".join(map(chr, range(128))) + "éß²½٣東"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        words = " ".join("x" * rng.randint(1, 17) for _ in range(3))
        assert count_tokens_fast(text) == count_tokens(text)
        assert count_tokens_fast(words) == count_tokens(words)
