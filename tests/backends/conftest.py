"""Fixtures for the model-backend tests: the stand-in server as a separate process, and COMMA
wire configs whose model replies are scripted by it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.agents.backends.simserver import SimServerProcess
from parley.environments.comma.wire import WirePuzzle, wire_to_cut
from parley.runtime.config import ExperimentConfig, load_config
from parley.runtime.results import RunFolder
from parley.runtime.scheduler import run_experiment

ROOT = Path(__file__).resolve().parents[2]
SIM_YAML = ROOT / "configs" / "sim.yaml"

# The solver of configs/sim.yaml: reads the wires of the text variant out, then cuts the wire
# the expert names.
SOLVER_RULES: list[dict[str, str]] = yaml.safe_load(SIM_YAML.read_text())["models"]["sim-solver"][
    "rules"
]


def expert_rules(seeds: list[int]) -> list[dict[str, str]]:
    """An expert that knows the answer of each of these seeds (keyed by serial number)."""
    rules = []
    for seed in seeds:
        instance = WirePuzzle.generate(seed, {})
        answer = wire_to_cut(instance["colors"], instance["serial"])
        rules.append(
            {"match": f"serial number is {instance['serial']}", "reply": f"Cut wire {answer}."}
        )
    return rules


SEEDS = list(range(6))


def base_sim() -> dict[str, Any]:
    return {
        "latency": {"ttft_s": 0.0, "max_seqs": 1024},
        "replies": {"text": "OK"},
        "models": {
            "solver-m": {"rules": SOLVER_RULES, "text": "Which wire?"},
            "expert-m": {"rules": expert_rules(SEEDS), "text": "Describe the wires."},
        },
        "faults": [],
        "healthy": True,
    }


@pytest.fixture(scope="module")
def sim_process() -> Iterator[SimServerProcess]:
    with SimServerProcess(base_sim()) as server:
        yield server


@pytest.fixture
def sim(sim_process: SimServerProcess) -> SimServerProcess:
    """The module's sim server, set back to the base config with zeroed counters."""
    sim_process.configure(**base_sim())
    sim_process.reset()
    return sim_process


def model(sim: SimServerProcess, model_id: str, backend: str = "openai", **extra: Any) -> dict:
    url = sim.openai_url if backend == "openai" else sim.url
    return {"backend": backend, "model": model_id, "base_url": url, **extra}


FAST_RETRY = {"max_attempts": 12, "backoff_s": 0.01, "backoff_max_s": 0.05}


def wire_config(
    models: dict[str, Any],
    pairings: list[Any],
    *,
    seeds: list[int] | None = None,
    settings: dict[str, Any] | None = None,
    **top: Any,
) -> ExperimentConfig:
    return load_config(
        {
            "name": "backends",
            "games": [
                {
                    "game": "comma.wire",
                    "seeds": seeds if seeds is not None else SEEDS,
                    "pairings": pairings,
                    "settings": settings or {},
                }
            ],
            "models": models,
            **top,
        }
    )


async def play(config: ExperimentConfig, out: Path) -> list[dict[str, Any]]:
    outcome = await run_experiment(config, out)
    return outcome.records


def transcript(run: Path, episode: str) -> list[dict[str, Any]]:
    return list(RunFolder(run).iter_transcript(episode))


def failed_calls(run: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every model-call attempt that did not end ``ok``, as the transcripts record them."""
    return [
        call
        for r in records
        for m in transcript(run, r["episode"])
        if m["kind"] == "turn_response"
        for call in m["calls"]
        if call["outcome"] != "ok"
    ]
