"""The response cache: a run against the stand-in server fills it; the same config rerun
with the server stopped replays every reply from it and writes the same records; errors are
never cached; ``parley cache stats|clear``."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends.cache import ResponseCache, request_key
from parley.agents.backends.simserver import SimServerProcess
from parley.records import EpisodeRecord
from parley.runtime.cli import main as cli
from parley.runtime.report import build_report
from tests.backends.conftest import FAST_RETRY, base_sim, model, play, wire_config

pytestmark = pytest.mark.anyio

# Fields of a record that say when and how fast it ran, and how many replies came from the
# cache: the only ones a replay may change. (``transcript`` points into the run's transcript
# file, whose call records name the cache rather than an endpoint and carry no latencies.)
TIMING = {"run", "started_at", "finished_at", "duration_s", "model_time_s", "transcript"}


def _comparable(typed: EpisodeRecord) -> dict[str, Any]:
    record = typed.json_dict()
    out = {k: v for k, v in record.items() if k not in TIMING}
    out["model_calls"] = {
        role: {k: v for k, v in calls.items() if k not in ("call_s", "cached")}
        for role, calls in (record.get("model_calls") or {}).items()
    }
    return out


def _config(sim: SimServerProcess, cache: Path, seeds: list[int], retry: Any = None) -> Any:
    retry = retry or FAST_RETRY
    models = {
        "solver": model(sim, "solver-m", images=False, retry=retry),
        "expert": model(sim, "expert-m", retry=retry),
    }
    return wire_config(
        models, [{"solver": "solver", "expert": "expert"}], seeds=seeds, cache=str(cache)
    )


def test_the_key_is_the_request_less_its_delivery() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.0}
    key = request_key("openai", body)
    assert request_key("openai", {**body, "stream": True, "stream_options": {}}) == key
    assert request_key("openai", dict(reversed(list(body.items())))) == key
    assert request_key("anthropic", body) != key
    assert request_key("openai", {**body, "temperature": 0.5}) != key
    assert request_key("openai", {**body, "model": "m2"}) != key
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    other = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAB"}}
    with_image = {**body, "messages": [{"role": "user", "content": [image]}]}
    assert request_key("openai", with_image) != request_key(
        "openai", {**body, "messages": [{"role": "user", "content": [other]}]}
    )


async def test_a_rerun_replays_from_the_cache_with_the_server_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache.sqlite"
    seeds = [0, 1, 2]
    with SimServerProcess(base_sim()) as sim:
        config = _config(sim, cache, seeds)
        first = await play(config, tmp_path / "first")
        requests = sim.stats()["requests"]
    assert [r["outcome"] for r in first] == ["success"] * 3, [r["reason"] for r in first]
    assert requests > 0
    assert all("cached" not in calls for r in first for calls in r["model_calls"].values())

    # The server is gone: any call would fail. The rerun plays from the cache alone.
    second = await play(config, tmp_path / "second")
    by_episode = {r["episode"]: _comparable(r) for r in first}
    assert {r["episode"]: _comparable(r) for r in second} == by_episode
    replayed = sum(calls["cached"] for r in second for calls in r["model_calls"].values())
    assert replayed == requests
    for r in second:
        for calls in r["model_calls"].values():
            assert calls["cached"] == calls["requests"] and calls["call_s"] == 0.0
    # The replayed calls keep their chat spans, marked.
    traces = (tmp_path / "second" / "traces.jsonl").read_text()
    assert traces.count('"parley.cached"') == requests
    assert '"parley.cached"' not in (tmp_path / "first" / "traces.jsonl").read_text()
    report = build_report(tmp_path / "second")
    assert f"{requests} of {requests} model calls from the cache." in report
    assert "from the cache" not in build_report(tmp_path / "first")

    capsys.readouterr()
    assert cli(["cache", "stats", str(cache)]) == 0
    shown = capsys.readouterr().out
    assert f"{requests} cached replies, replayed {requests} times" in shown
    assert "solver-m:" in shown and "expert-m:" in shown
    assert cli(["cache", "clear", str(cache)]) == 0
    assert f"removed {requests} cached replies" in capsys.readouterr().out
    assert cli(["cache", "stats", str(cache)]) == 0
    assert "0 cached replies" in capsys.readouterr().out

    # Emptied, the cache serves nothing: with no server, the episode fails.
    third = await play(_config(sim, cache, [0], {"max_attempts": 1}), tmp_path / "third")
    assert third[0]["outcome"] == "error"


async def test_errors_are_never_cached(tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    refused = {"kind": "body", "body": {"not": "a completion"}, "models": ["solver-m"]}
    with SimServerProcess({**base_sim(), "faults": [refused]}) as sim:
        models = {"solver": model(sim, "solver-m", images=False, retry={"max_attempts": 1})}
        config = wire_config(
            models, [{"solver": "solver", "expert": "scripted"}], seeds=[0], cache=str(cache)
        )
        first = await play(config, tmp_path / "first")
        assert first[0]["outcome"] == "error"
        sim.configure(faults=[])
        sim.reset()
        second = await play(config, tmp_path / "second")
        assert second[0]["outcome"] == "success", second[0]["reason"]
        # The request that failed went to the server again.
        assert sim.stats()["requests"] > 0
        assert "cached" not in second[0]["model_calls"]["solver"]


async def test_a_damaged_entry_is_a_miss_and_a_file_that_is_no_cache_is_an_empty_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cache.sqlite"
    cache = ResponseCache(path)
    await cache.put("k", "m", {"text": "stored"})
    await cache.put("j", "m", {"text": "kept"})
    await cache.aclose()
    db = sqlite3.connect(path)
    db.execute("UPDATE replies SET value = ? WHERE key = 'k'", (b"\xff{ not json",))
    db.commit()
    db.close()

    cache = ResponseCache(path)
    with caplog.at_level("WARNING"):
        assert await cache.get("k") is None
    assert "dropped a damaged entry" in caplog.text
    assert await cache.get("j") == {"text": "kept"}  # the others still replay
    await cache.put("k", "m", {"text": "asked again"})
    assert await cache.get("k") == {"text": "asked again"}
    await cache.aclose()

    other = tmp_path / "other.sqlite"
    other.write_bytes(b"not a cache at all" * 50)
    cache = ResponseCache(other)
    assert await cache.get("k") is None
    await cache.put("k", "m", {"text": "x"})  # the run goes on without its cache
    await cache.aclose()
    assert other.read_bytes() == b"not a cache at all" * 50
