"""A person can play COMMA at the terminal (``{solver: human}``): the prompt is printed, the
puzzle image is written to a file whose path is printed, and the typed reply is played."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

from parley.environments.comma.wire import WirePuzzle, wire_to_cut
from parley.runtime.config import load_config
from parley.runtime.scheduler import run_experiment

pytestmark = pytest.mark.anyio


async def test_human_solver_on_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    instance = WirePuzzle.generate(0, {})
    answer = wire_to_cut(instance["colors"], instance["serial"])
    typed = f"Hello, I see some wires. What now?\n\ncut_wire_{answer}\n\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    monkeypatch.setenv("PARLEY_HUMAN_IMAGES", str(tmp_path / "seen"))
    config = load_config(
        {
            "name": "human",
            "concurrency": 1,
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": "comma.wire",
                    "seeds": [0],
                    "pairings": [{"solver": "human", "expert": "scripted"}],
                }
            ],
        }
    )
    outcome = await run_experiment(config, tmp_path / "run")
    (record,) = outcome.records
    assert record["outcome"] == "success" and record["pairing"]["solver"] == "human"
    assert record["scores"]["turns"] == 2.0
    shown = capsys.readouterr().out
    assert "You are the solver" in shown and "Actions: cut_wire_1" in shown
    assert "[expert] Please tell me" in shown  # the expert's answer to the first message
    paths = re.findall(r"\(image: (\S+\.png)\)", shown)
    assert paths and all(Path(p).parent == tmp_path / "seen" for p in paths)
    assert Path(paths[0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
