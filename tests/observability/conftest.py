"""Fixtures for the observability tests: a stand-in model server (a real HTTP process) whose
models leak, judge or answer, behind an API key; helpers to read a run's traces."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.backends.simserver import SimServerProcess
from observability.tracing import read_spans
from runtime.config import ExperimentConfig, load_config

# A fake key: the sim server demands it, the models name its variable; it must never be written.
SECRET = "sk-obs-test-9f3c-never-write-me-41d2"
KEY_ENV = "PARLEY_OBS_TEST_KEY"
JUDGE_REPLY = '{"category": "repetition", "turn": 3, "evidence": "press_1 again"}'


def sim_config() -> dict[str, Any]:
    return {
        "latency": {"ttft_s": 0.0},
        "replies": {"text": "OK"},
        "api_key_env": "PARLEY_OBS_SIM_KEY",
        "models": {
            # An ATM solver that tells the expert its PIN (read off its text observation).
            "leaky-solver": {
                "rules": [
                    {"match": r"PIN (\d{4})", "reply": r"Hi expert! My PIN is \1, what now?"}
                ],
                "text": "What should I do?",
            },
            "judge-m": {"text": JUDGE_REPLY},
            "garbled-judge": {"text": "It is probably roleplay, I think."},
        },
    }


@pytest.fixture(scope="session")
def sim() -> Iterator[SimServerProcess]:
    with SimServerProcess(sim_config(), env={"PARLEY_OBS_SIM_KEY": SECRET}) as server:
        yield server


def model_entry(sim: SimServerProcess, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "backend": "openai",
        "model": name,
        "base_url": sim.openai_url,
        "api_key_env": KEY_ENV,
        "retry": {"max_attempts": 3, "backoff_s": 0.01, "backoff_max_s": 0.02},
        **extra,
    }


def config(game: str, seeds: list[int], pairings: list[Any], **top: Any) -> ExperimentConfig:
    settings = top.pop("settings", {"variant": "text"})
    return load_config(
        {
            "name": "obs",
            "games": [{"game": game, "seeds": seeds, "pairings": pairings, "settings": settings}],
            **top,
        }
    )


def traces(run: Path) -> dict[str, list[dict[str, Any]]]:
    """trace id → spans of a run folder."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in read_spans(run):
        out[span["trace_id"]].append(span)
    return out


def everything_written(run: Path) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in run.rglob("*") if p.is_file()
    )
