"""The launcher: a model entry's ``launch:`` server is started for the run, waited for, used,
stopped at the end, and its log kept — tested with the stand-in server as the command."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends.spec import ModelSpec
from parley.runtime.launch import LaunchedServer, LaunchFailed, launch_command
from tests.backends.conftest import SIM_YAML, play, transcript, wire_config

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


# The `vllm serve` flags the launcher may write, pinned to the vLLM version docs/models.md
# names (0.11.0), as read in that release's source (PyPI sdist vllm-0.11.0.tar.gz, sha256
# f435a64c…bfae): `EngineArgs.add_cli_args` in vllm/engine/arg_utils.py declares
# --served-model-name, --tensor-parallel-size/-tp, --data-parallel-size/-dp,
# --limit-mm-per-prompt (JSON) and --max-num-seqs; `FrontendArgs` in
# vllm/entrypoints/openai/cli_args.py gives --host, --port and --api-key (the server reads
# VLLM_API_KEY when --api-key is absent: vllm/entrypoints/openai/api_server.py). A flag the
# launcher starts writing must be checked against that version and added here.
VLLM_0_11_SERVE_FLAGS = frozenset(
    {
        "--host",
        "--port",
        "--api-key",
        "--served-model-name",
        "--tensor-parallel-size",
        "-tp",
        "--data-parallel-size",
        "-dp",
        "--limit-mm-per-prompt",
        "--max-num-seqs",
    }
)


def _command(launch: dict[str, Any], **entry: Any) -> list[str]:
    spec = ModelSpec.model_validate({"model": "m", "launch": launch, **entry})
    assert spec.launch is not None
    command = launch_command(spec, spec.launch, 8000)
    # (vLLM's dotted form sets one key of a JSON flag: --limit-mm-per-prompt.image 2.)
    flags = {a.split("=", 1)[0].split(".", 1)[0] for a in command if a.startswith("-")}
    assert flags <= VLLM_0_11_SERVE_FLAGS, flags - VLLM_0_11_SERVE_FLAGS
    return command


def _value(command: list[str], *names: str) -> list[str]:
    """Every value given to one of ``names`` (both ``--flag value`` and ``--flag=value``)."""
    out = []
    for i, arg in enumerate(command):
        if arg in names:
            out.append(command[i + 1])
        elif arg.split("=", 1)[0] in names and "=" in arg:
            out.append(arg.split("=", 1)[1])
    return out


TP = ("--tensor-parallel-size", "-tp")
DP = ("--data-parallel-size", "-dp")


@pytest.mark.parametrize(
    ("args", "tp", "dp"),
    [
        ([], ["4"], []),  # all four GPUs as one tensor-parallel group
        (["--data-parallel-size", "4"], [], ["4"]),  # the case: TP 1, not 4
        (["-dp", "2"], ["2"], ["2"]),
        (["--data-parallel-size=2"], ["2"], ["2"]),
        (["-tp", "2"], ["2"], ["2"]),  # TP given: DP fills the rest
        (["--tensor-parallel-size=4"], ["4"], []),
        (["-tp", "2", "-dp", "2"], ["2"], ["2"]),
    ],
)
def test_parallel_sizes_fill_the_gpus_and_never_repeat_a_flag(
    args: list[str], tp: list[str], dp: list[str]
) -> None:
    command = _command({"gpus": [0, 1, 2, 3], "args": args})
    assert _value(command, *TP) == tp
    assert _value(command, *DP) == dp
    # Each size is given once at most: the user's flag is never doubled.
    assert len(_value(command, *TP)) <= 1 and len(_value(command, *DP)) <= 1


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-tp", "4", "-dp", "4"], "tensor-parallel 4 × data-parallel 4 = 16 GPUs"),
        (["--data-parallel-size", "3"], "does not divide the 4 GPUs"),
        (["-tp=x"], "takes a whole number"),
    ],
)
def test_parallel_sizes_that_do_not_fit_the_gpus_are_a_config_error(
    args: list[str], words: str
) -> None:
    from parley.runtime.config import ConfigError, load_config

    with pytest.raises(ConfigError) as caught:
        load_config(
            {
                "games": [{"game": "comma.wire", "seeds": [0], "pairings": [{"solver": "m"}]}],
                "models": {"m": {"model": "m", "launch": {"gpus": [0, 1, 2, 3], "args": args}}},
            }
        )
    message = str(caught.value)
    assert "models.m.launch" in message and words in message, message


def test_the_image_limit_goes_to_vllm_as_json() -> None:
    command = _command({"gpus": [0]}, max_images=3)
    (limit,) = _value(command, "--limit-mm-per-prompt")
    assert json.loads(limit) == {"image": 3}
    # A limit in the entry's own args wins; a text-only entry sends none.
    own = _command({"args": ["--limit-mm-per-prompt", '{"image": 1}']}, max_images=3)
    assert _value(own, "--limit-mm-per-prompt") == ['{"image": 1}']
    dotted = _command({"args": ["--limit-mm-per-prompt.image", "2"]}, max_images=3)
    assert _value(dotted, "--limit-mm-per-prompt") == []
    assert _value(_command({}, max_images=3, images=False), "--limit-mm-per-prompt") == []


def test_replicas_get_their_own_gpus_ports_and_key(tmp_path: Path) -> None:
    spec = ModelSpec.model_validate(
        {
            "model": "m",
            "api_key_env": "M_KEY",
            "launch": {"gpus": [0, 1, 2, 3], "replicas": 2, "port": 9100},
        }
    )
    assert spec.launch is not None and spec.launch.gpu_groups() == [[0, 1], [2, 3]]
    environ = {"M_KEY": "sekret-value"}
    servers = [LaunchedServer("m", spec, tmp_path, i, environ) for i in range(2)]
    assert [s.port for s in servers] == [9100, 9101]
    assert [s.environment()["CUDA_VISIBLE_DEVICES"] for s in servers] == ["0,1", "2,3"]
    assert [_value(s.command, *TP) for s in servers] == [["2"], ["2"]]
    assert {s.log_path.name for s in servers} == {"m-0.log", "m-1.log"}
    for server in servers:
        # The key reaches vLLM through its environment, never the command line (ps shows it).
        assert server.environment()["VLLM_API_KEY"] == "sekret-value"
        assert "sekret-value" not in " ".join(server.command)
    # Lists of lists name the groups; a key variable that is unset stops the launch.
    spec2 = ModelSpec.model_validate(
        {"model": "m", "api_key_env": "M_KEY", "launch": {"gpus": [[3], [5]]}}
    )
    assert spec2.launch is not None and spec2.launch.replicas == 2
    with pytest.raises(LaunchFailed, match="M_KEY"):
        LaunchedServer("m", spec2, tmp_path, 1, {}).environment()


async def test_replicas_are_each_an_endpoint_and_get_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_TEST_LAUNCH_KEY", "launch-key-123")
    models = {
        "solver": {
            "model": "sim-solver",
            "images": False,
            "api_key_env": "PARLEY_TEST_LAUNCH_KEY",
            "launch": {
                # The stand-in server refuses requests without the key it reads from
                # VLLM_API_KEY, as vLLM does.
                "command": _sim_command("--ttft 0 --api-key-env VLLM_API_KEY"),
                "replicas": 2,
                "startup_timeout_s": 30,
            },
        }
    }
    config = wire_config(models, [{"solver": "solver", "expert": "scripted"}], seeds=[0, 1, 2, 3])
    records = await play(config, tmp_path)
    assert [r["outcome"] for r in records] == ["success"] * 4, [r["reason"] for r in records]
    endpoints = {
        call["endpoint"]
        for r in records
        for m in transcript(tmp_path, r["episode"])
        if m["kind"] == "turn_response"
        for call in m["calls"]
    }
    assert len(endpoints) == 2, endpoints
    assert (tmp_path / "logs" / "solver-0.log").exists()
    assert (tmp_path / "logs" / "solver-1.log").exists()
