"""One run through the bus shared by the COMMA tests: all ten puzzles, 30 seeds each, played by
the scripted pair, and 20 seeds each by the random solver (tracing off, prompts recorded). Its
pictures are what it costs (a text-variant episode is a fifth of the time): tests that need many
seeds and no pictures play the text variant."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from parley.environments.comma import PUZZLES
from parley.runtime.config import load_config
from parley.runtime.reports.comma import transcripts
from parley.runtime.scheduler import RunOutcome, run_experiment

SCRIPTED = {"solver": "scripted", "expert": "scripted"}
RANDOM = {"solver": "random", "expert": "scripted"}
SCRIPTED_SEEDS = 30
RANDOM_SEEDS = 20


def comma_config(count: int, pairings: list[dict[str, Any]], **block: Any) -> dict[str, Any]:
    games = [
        {"game": f"comma.{name}", "seeds": {"count": count}, "pairings": pairings, **block}
        for name in PUZZLES
    ]
    return {"name": "comma-test", "concurrency": 64, "tracing": {"enabled": False}, "games": games}


class Run:
    """A finished run with its transcripts loaded by episode."""

    def __init__(self, outcome: RunOutcome) -> None:
        self.outcome = outcome
        self.records = outcome.records
        self.path = outcome.folder.path
        self.messages = transcripts(self.path, {r["episode"] for r in self.records})

    def of(self, solver: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["pairing"]["solver"] == solver]


def play(config: dict[str, Any], out: Path) -> Run:
    return Run(asyncio.run(run_experiment(load_config(config), out)))


@pytest.fixture(scope="session")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    config = comma_config(SCRIPTED_SEEDS, [SCRIPTED])
    config["games"] += comma_config(RANDOM_SEEDS, [RANDOM])["games"]
    return play(config, tmp_path_factory.mktemp("comma") / "run")
