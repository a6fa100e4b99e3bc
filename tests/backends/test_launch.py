"""The launcher: a model entry's ``launch:`` server is started for the run, waited for, used,
stopped at the end, and its log kept — tested with the stand-in server as the command."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from parley.agents.backends.spec import ModelSpec
from parley.runtime.launch import launch_command
from tests.backends.conftest import SIM_YAML, play, wire_config

pytestmark = pytest.mark.anyio


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _sim_command(extra: str = "") -> str:
    return f"{{python}} -m parley.agents.backends.simserver --config {SIM_YAML} --port {{port}} {extra}"


async def test_a_launched_server_is_used_stopped_and_logged(tmp_path: Path) -> None:
    models = {
        "solver": {
            "model": "sim-solver",
            "images": False,
            "launch": {"command": _sim_command("--ttft 0"), "startup_timeout_s": 30},
        },
        # Declared but played by no pairing: never started.
        "unused": {
            "model": "x",
            "launch": {"command": "false", "startup_timeout_s": 30},
        },
    }
    config = wire_config(models, [{"solver": "solver", "expert": "scripted"}], seeds=[0, 1, 2])
    records = await play(config, tmp_path)
    assert [r["outcome"] for r in records] == ["success"] * 3, [r["reason"] for r in records]
    log = (tmp_path / "logs" / "solver.log").read_text()
    assert log.startswith(f"$ {sys.executable} -m parley.agents.backends.simserver")
    assert "listening on http://127.0.0.1:" in log
    port = int(log.split("listening on http://127.0.0.1:")[1].split()[0])
    assert not _listening(port), "the server still runs after the run"
    assert not (tmp_path / "logs" / "unused.log").exists()


async def test_a_server_that_fails_to_start_errors_its_episodes_only(tmp_path: Path) -> None:
    models = {
        "broken": {
            "model": "sim-solver",
            "images": False,
            "launch": {
                "command": [sys.executable, "-c", "import sys; print('no GPU here'); sys.exit(3)"],
                "startup_timeout_s": 30,
            },
        }
    }
    config = wire_config(
        models,
        [{"solver": "broken", "expert": "scripted"}, {"solver": "scripted", "expert": "scripted"}],
        seeds=[0, 1],
    )
    records = await play(config, tmp_path)
    outcomes = sorted((r["pairing"]["solver"], r["outcome"]) for r in records)
    assert outcomes == [("broken", "error")] * 2 + [("scripted", "success")] * 2
    reason = next(r["reason"] for r in records if r["outcome"] == "error")
    assert "launch failed: exited with code 3" in reason
    assert "no GPU here" in reason
    assert "no GPU here" in (tmp_path / "logs" / "broken.log").read_text()


def test_the_default_command_is_vllm_serve() -> None:
    spec = ModelSpec.model_validate(
        {
            "model": "qwen-vl",
            "launch": {
                "model": "Qwen/Qwen2.5-VL-7B-Instruct",
                "gpus": [2, 3],
                "args": ["--max-num-seqs", "1024"],
            },
        }
    )
    assert spec.launch is not None
    assert launch_command(spec, spec.launch, 8123) == [
        "vllm",
        "serve",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--served-model-name",
        "qwen-vl",
        "--tensor-parallel-size",
        "2",
        "--max-num-seqs",
        "1024",
    ]
    # No base URL was given: the launched server is the only one.
    assert spec.base_urls == []
