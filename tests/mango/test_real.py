"""The real data (required in CI): the oracle answers every answerable question right, directly
and through the bus; the scripted navigator stays near its measured level; the config loads."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from parley.environments.mango.offline import play_all
from parley.environments.mango.players import oracle_navigator, scripted_navigator
from parley.runtime.config import load_config
from parley.runtime.experiment import expand
from parley.runtime.report import build_report
from parley.runtime.reports.intervals import rate_cell
from parley.runtime.scheduler import run_experiment
from tests.mango.conftest import REPO


def test_oracle_answers_every_answerable_question(data_dir: Path) -> None:
    settings = {"data_dir": str(data_dir), "questions_per_episode": 0}
    for kind, expected in (("df", 21160), ("rf", 14782)):
        rows = play_all(kind, settings, oracle_navigator)
        assert len(rows) == expected
        wrong = [r for r in rows if r["success_strict"] != 1.0 or r["reasoning"] != 1.0]
        assert wrong == []


def test_scripted_navigator_level_on_a_sample(data_dir: Path) -> None:
    # Measured on all questions: DF 0.74/0.82, RF 0.72/0.69 (easy/hard); a sample of 20 a game
    # must stay within reach of that (see docs/mango.md for why it is not 100 %).
    settings = {"data_dir": str(data_dir), "questions_per_episode": 0, "sample": 20}
    for kind in ("df", "rf"):
        rows = play_all(kind, settings, scripted_navigator)
        success = sum(r["success_strict"] for r in rows) / len(rows)
        assert 0.6 < success < 0.9, (kind, success)
        assert all(r["parsed"] for r in rows)


def mango_config(data_dir: Path, **changes: Any) -> dict[str, Any]:
    config = yaml.safe_load((REPO / "configs" / "mango.yaml").read_text())
    for block in config["games"]:
        block["settings"] = {**block["settings"], "data_dir": str(data_dir), **changes}
    return config


def test_config_covers_all_games_and_players(data_dir: Path) -> None:
    specs = expand(load_config(mango_config(data_dir)))
    assert len(specs) == 2 * 53 * 3
    assert {s.pairing["navigator"] for s in specs} == {"oracle", "scripted", "random"}


def test_oracle_through_the_bus_on_a_sample(data_dir: Path, tmp_path: Path) -> None:
    config = mango_config(data_dir, sample=3)
    config["record_prompts"] = True
    for block in config["games"]:
        block["pairings"] = [{"navigator": {"kind": "scripted", "name": "oracle"}}]
    outcome = asyncio.run(run_experiment(load_config(config), tmp_path / "run"))
    assert len(outcome.records) == 2 * 53
    assert all(r["outcome"] == "success" for r in outcome.records)
    assert all(r["scores"]["questions"] == 3.0 for r in outcome.records)
    report = build_report(tmp_path / "run")
    ones = " | ".join(["1.00 [1.00, 1.00]"] * 4)  # every answer right: no spread
    for kind in ("DF", "RF"):
        assert f"| oracle | {kind} | all | 159 | {rate_cell(159, 159)} | {ones} |" in report
