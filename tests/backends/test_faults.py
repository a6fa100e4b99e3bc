"""Injected faults: every kind is retried, no episode is lost, retries are recorded; Retry-After
is honoured; the limiter shrinks under 429s; a dead endpoint is avoided; a model that is down
ends its episodes as errors while the run finishes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from parley.agents.backends.pool import ModelPool
from parley.agents.backends.simserver import SimServerProcess
from parley.agents.backends.spec import ModelSpec
from parley.bus.messages import PromptMessage, TextPart
from parley.runtime.launch import free_port
from tests.backends.conftest import (
    FAST_RETRY,
    SEEDS,
    failed_calls,
    model,
    play,
    wire_config,
)

pytestmark = pytest.mark.anyio

KINDS = [
    "rate_limit",
    "overloaded",
    "server_error",
    "timeout",
    "truncated",
    "garbage",
    "disconnect",
]
# How each fault shows in the call records.
SEEN_AS = {
    "rate_limit": "rate_limit",
    "overloaded": "overloaded",
    "server_error": "server_error",
    "timeout": "timeout",
    "truncated": "bad_response",
    "garbage": "bad_response",
    "disconnect": "connection",
}


@pytest.mark.parametrize(
    ("kind", "backend", "stream", "transport"),
    [(k, "openai", False, "sdk") for k in KINDS]
    + [("truncated", "openai", True, "sdk"), ("garbage", "anthropic", True, "sdk")]
    + [(k, "anthropic", False, "sdk") for k in ("rate_limit", "timeout", "disconnect")]
    + [(k, "openai", False, "direct") for k in KINDS]
    + [("truncated", "anthropic", True, "direct"), ("garbage", "openai", True, "direct")],
)
async def test_every_fault_is_retried_and_no_episode_is_lost(
    sim: SimServerProcess, tmp_path: Path, kind: str, backend: str, stream: bool, transport: str
) -> None:
    # A third of the requests fail; the first two requests always do, so each kind is seen.
    sim.configure(
        faults=[
            {"kind": kind, "rate": 1.0, "first": 2, "retry_after_s": 0.05, "hang_s": 5},
            {"kind": kind, "rate": 0.3, "retry_after_s": 0.05, "hang_s": 5},
        ]
    )
    # Only the timeout kind needs a short timeout (the injected hang is 5 s); elsewhere a short
    # one would turn a reply that is merely slow (a loaded CI machine) into a retry no fault
    # caused. Even here, 1 s: a plain reply slower than that on a loaded machine would be
    # recorded as a timeout nobody injected.
    timeout_s = 1.0 if kind == "timeout" else 5.0
    extra = {"retry": FAST_RETRY, "timeout_s": timeout_s, "stream": stream, "transport": transport}
    models = {
        "solver": model(sim, "solver-m", backend, images=False, **extra),
        "expert": model(sim, "expert-m", backend, **extra),
    }
    records = await play(wire_config(models, [{"solver": "solver", "expert": "expert"}]), tmp_path)
    assert [r["outcome"] for r in records] == ["success"] * len(SEEDS), [
        r["reason"] for r in records
    ]
    injected = sim.stats().get(f"fault_{kind}", 0)
    assert injected >= 2
    recorded = sum(
        calls["retries"].get(SEEN_AS[kind], 0)
        for r in records
        for calls in r["model_calls"].values()
    )
    assert recorded == injected
    # The transcript has the failed attempts, with the reason and the wait before the next.
    failed = failed_calls(tmp_path, records)
    assert len(failed) == injected
    assert all(call["outcome"] == SEEN_AS[kind] and call["backoff_s"] >= 0 for call in failed)
    if kind in ("rate_limit", "overloaded"):
        assert all(call["retry_after_s"] == 0.05 and call["backoff_s"] >= 0.05 for call in failed)
        assert all(call["status"] == (429 if kind == "rate_limit" else 503) for call in failed)


def _ask() -> list[PromptMessage]:
    return [
        PromptMessage(role="system", content=[TextPart(text="Be brief.")]),
        PromptMessage(role="user", content=[TextPart(text="Hello?")]),
    ]


async def test_retry_after_is_honoured(sim: SimServerProcess) -> None:
    sim.configure(faults=[{"kind": "rate_limit", "first": 1, "retry_after_s": 0.6}])
    spec = ModelSpec.model_validate(model(sim, "any", retry=FAST_RETRY))
    async with ModelPool({"m": spec}) as pool:
        start = time.monotonic()
        done = await pool.client("m").complete(_ask(), spec.params)
        took = time.monotonic() - start
    assert [c["outcome"] for c in done.calls] == ["rate_limit", "ok"]
    # The wait the client chose (Retry-After, not FAST_RETRY's 10 ms), and that it waited it:
    # a lower bound only, which a loaded machine can never break (it only waits longer).
    assert 0.6 <= done.calls[0]["backoff_s"] <= 0.6 * 1.1 + 0.011
    assert took >= 0.6


async def test_limiter_shrinks_on_429_and_requests_still_succeed(sim: SimServerProcess) -> None:
    sim.configure(
        latency={"ttft_s": 0.05, "max_seqs": 1024},
        faults=[{"kind": "rate_limit", "rate": 0.5, "retry_after_s": 0.02}],
    )
    spec = ModelSpec.model_validate(
        model(
            sim,
            "any",
            retry={**FAST_RETRY, "max_attempts": 30},
            concurrency={"start": 40, "min": 2, "max": 64},
        )
    )
    async with ModelPool({"m": spec}) as pool:
        client = pool.client("m")
        done = await asyncio.gather(*(client.complete(_ask(), spec.params) for _ in range(120)))
        (stats,) = pool.stats().values()
    assert all(d.reply.text == "OK" for d in done)
    assert stats["shrinks"] >= 1
    assert stats["limit"] < 40
    assert stats["peak_in_flight"] <= 40
    assert stats["rate_limit"] == sim.stats()["fault_rate_limit"]


async def test_requests_spread_over_endpoints_and_avoid_a_dead_one(sim: SimServerProcess) -> None:
    """Two live base URLs (the same server under two names) share the load; a third that
    refuses connections is taken out after a few failures and costs no request its answer."""
    port = sim.url.rsplit(":", 1)[1]
    dead = f"http://127.0.0.1:{free_port()}/v1"
    urls = [f"http://127.0.0.1:{port}/v1", f"http://localhost:{port}/v1", dead]
    sim.configure(latency={"ttft_s": 0.05, "max_seqs": 1024})
    spec = ModelSpec.model_validate(
        {
            "model": "any",
            "base_urls": urls,
            "retry": FAST_RETRY,
            "health": {"failures": 2, "cooldown_s": 60},
        }
    )
    async with ModelPool({"m": spec}) as pool:
        client = pool.client("m")
        done = await asyncio.gather(*(client.complete(_ask(), spec.params) for _ in range(90)))
        stats = {s["url"]: s for s in pool.stats().values()}
    assert len(done) == 90
    live = [stats[u].get("ok", 0) for u in urls[:2]]
    assert sum(live) == 90 and min(live) >= 30
    assert stats[dead].get("ok", 0) == 0
    assert stats[dead]["healthy"] is False
    # The dead endpoint was tried only until it was marked down (concurrent first attempts).
    assert stats[dead]["connection"] <= 31


async def test_health_checks_take_an_unhealthy_endpoint_out(sim: SimServerProcess) -> None:
    spec = ModelSpec.model_validate(
        model(sim, "any", health={"path": "/health", "interval_s": 0.05})
    )
    async with ModelPool({"m": spec}) as pool:
        (endpoint,) = pool.client("m").endpoints
        sim.configure(healthy=False)
        await asyncio.sleep(0.3)
        assert not endpoint.healthy
        sim.configure(healthy=True)
        await asyncio.sleep(0.3)
        assert endpoint.healthy


async def test_a_model_that_is_down_ends_its_episodes_as_errors(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    """Nothing listens at the down model's URL: its episodes end as error with the reason,
    the other pairing plays on, and the run finishes."""
    models = {
        "down": {
            "model": "solver-m",
            "base_url": f"http://127.0.0.1:{free_port()}/v1",
            "images": False,
            "retry": {"max_attempts": 3, "backoff_s": 0.01},
        },
        "up": model(sim, "solver-m", images=False),
    }
    config = wire_config(
        models,
        [{"solver": "down", "expert": "scripted"}, {"solver": "up", "expert": "scripted"}],
    )
    records = await play(config, tmp_path)
    by_solver: dict[str, list[str]] = {}
    for r in records:
        by_solver.setdefault(r["pairing"]["solver"], []).append(r["outcome"])
    assert by_solver == {"down": ["error"] * len(SEEDS), "up": ["success"] * len(SEEDS)}
    for r in records:
        if r["outcome"] == "error":
            assert r["reason"].startswith("solver failed: ModelUnavailable: model down unreachable")
            assert "gave up after 3 attempts" in r["reason"]
            assert "connection" in r["reason"]
            assert "ModelUnavailable" in r["error"]
