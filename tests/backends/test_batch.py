"""Batch mode (``batch: true``): a run's first turns go through the OpenAI and Anthropic batch
APIs of the stand-in server (its own process); the episodes then play without a chat call,
score seed for seed as a live run does, at half the price; a batch that fails leaves its
requests to live calls, counted."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.agents.backends.simserver import SimServerProcess
from parley.records import RecordedRun
from parley.runtime.config import load_config
from parley.runtime.reports.pairings import usage_table
from tests.backends.conftest import model, play, transcript

pytestmark = pytest.mark.anyio

GAME = "playground.tictactoe.qa"  # one question, one reply: the episode ends after it
SEEDS = list(range(5))
# A deterministic model whose answers differ by question: some right, some wrong.
QA_RULES = [{"match": r"What is in cell ([A-C])", "reply": r"Answer: \1"}]
PRICE = {"input_per_mtok": 1000.0, "output_per_mtok": 4000.0}


def _config_data(sim: SimServerProcess, backend: str, batch: bool) -> dict[str, Any]:
    entry = model(sim, "qa-m", backend, images=False, price=PRICE, batch=batch)
    return {
        "name": "batch",
        "games": [
            {
                "game": GAME,
                "seeds": SEEDS,
                "pairings": [{"player": "qa"}],
                "settings": {"variant": "text"},
            }
        ],
        "models": {"qa": entry},
    }


def _config(sim: SimServerProcess, backend: str, batch: bool) -> Any:
    return load_config(_config_data(sim, backend, batch))


def _by_seed(records: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    return {r["seed"]: (r["outcome"], r["main_score"], r["scores"], r["tokens"]) for r in records}


def _replies(run: Path, records: list[dict[str, Any]]) -> dict[int, list[str]]:
    return {
        r["seed"]: [
            m["text"] for m in transcript(run, r["episode"]) if m["kind"] == "turn_response"
        ]
        for r in records
    }


def _total_cost(records: list[dict[str, Any]], run: Path) -> float:
    table = usage_table(records, run)
    found = re.search(r"Total cost: ([\d,.]+) USD", table)
    assert found, table
    return float(found.group(1).replace(",", ""))


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
async def test_first_turns_from_a_batch_play_as_live_at_half_the_price(
    sim: SimServerProcess, tmp_path: Path, backend: str
) -> None:
    sim.configure(models={"qa-m": {"rules": QA_RULES, "text": "Answer: C"}})
    live = await play(_config(sim, backend, batch=False), tmp_path / "live")
    assert sim.stats()["requests"] == len(SEEDS)
    assert len({r["main_score"] for r in live}) > 1, "the answers should differ by seed"

    sim.reset()
    batched = await play(_config(sim, backend, batch=True), tmp_path / "batch")
    stats = sim.stats()
    assert stats["batches"] == 1
    assert stats["batch_lines"] == len(SEEDS)
    assert stats.get("requests", 0) == 0, "no episode should have made a chat call"
    assert _by_seed(batched) == _by_seed(live)
    assert _replies(tmp_path / "batch", batched) == _replies(tmp_path / "live", live)
    for r in batched:
        calls = r["model_calls"]["player"]
        assert calls["batch"]["requests"] == 1
        assert calls["batch"]["input"] == r["tokens"]["player"]["input"] > 0
    first = next(
        m
        for m in transcript(tmp_path / "batch", batched[0]["episode"])
        if m["kind"] == "turn_response"
    )
    assert first["calls"][0]["batch"] is True
    assert first["calls"][0]["endpoint"].startswith("batch ")
    summary = json.loads((tmp_path / "batch" / "batch.json").read_text())
    (one,) = summary["batches"]
    assert (one["provider"], one["requests"], one["answered"], one["fallback"]) == (
        backend,
        len(SEEDS),
        len(SEEDS),
        0,
    )
    assert _total_cost(batched, tmp_path / "batch") == pytest.approx(
        _total_cost(live, tmp_path / "live") / 2, rel=1e-3
    )


@pytest.mark.parametrize(
    ("backend", "failure", "live_calls"),
    [
        ("openai", {"fail": "expired"}, len(SEEDS)),
        ("openai", {"failed_lines": 2}, 2),
        ("anthropic", {"fail": "failed"}, len(SEEDS)),
        ("anthropic", {"failed_lines": 2}, 2),
    ],
)
async def test_what_a_batch_did_not_answer_is_asked_live(
    sim: SimServerProcess,
    tmp_path: Path,
    backend: str,
    failure: dict[str, Any],
    live_calls: int,
) -> None:
    sim.configure(models={"qa-m": {"rules": QA_RULES, "text": "Answer: C"}})
    live = await play(_config(sim, backend, batch=False), tmp_path / "live")
    sim.configure(batch={"delay_s": 0.2, **failure})
    sim.reset()
    batched = await play(_config(sim, backend, batch=True), tmp_path / "batch")
    stats = sim.stats()
    assert stats["batches"] == 1
    assert stats.get("requests", 0) == live_calls
    assert _by_seed(batched) == _by_seed(live)
    fallbacks = sum(r["model_calls"]["player"].get("batch_fallback", 0) for r in batched)
    served = sum(r["model_calls"]["player"].get("batch", {}).get("requests", 0) for r in batched)
    assert (fallbacks, served) == (live_calls, len(SEEDS) - live_calls)
    (one,) = json.loads((tmp_path / "batch" / "batch.json").read_text())["batches"]
    assert one["fallback"] == live_calls


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_ctrl_c_while_a_batch_is_awaited_stops_the_run_and_cancels_the_batch(
    sim: SimServerProcess, tmp_path: Path, backend: str
) -> None:
    """A batch may take hours: the run says it waits for it, and the first Ctrl-C ends the run
    (nothing played) and cancels the batch at the provider."""
    sim.configure(models={"qa-m": {"rules": QA_RULES}}, batch={"delay_s": 3600})
    sim.reset()
    config = tmp_path / "batch.yaml"
    config.write_text(yaml.safe_dump(_config_data(sim, backend, batch=True)))
    out = tmp_path / "run"
    command = [sys.executable, "-m", "parley.runtime.cli", "run", str(config), "--out", str(out)]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while sim.stats().get("batches", 0) < 1:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "no batch was sent"
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 130
    finally:
        if process.poll() is None:
            process.kill()
    said = " ".join((process.stderr.read() if process.stderr else "").split())
    assert "the run waits for it (Ctrl-C stops the run and cancels the batch)" in said
    assert "cancelled at the provider" in said and "Traceback" not in said
    assert sim.stats().get("batches_cancelled") == 1
    assert sim.stats().get("requests", 0) == 1  # the pre-run check only: no first turn went live
    assert not RecordedRun(out).records()  # stopped before any episode: --resume plays all
