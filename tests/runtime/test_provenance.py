"""run.json says what produced a run: parley and its commit, Python, package versions, the
resolved generation parameters, and what each endpoint serves, asked of a real sim server
process (and of one that is down, which must not hold up or fail the run)."""

from __future__ import annotations

import asyncio
import json
import platform
import shutil
import socket
import subprocess
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.agents.backends.simserver import SimServerProcess
from parley.agents.backends.spec import GenerationParams
from parley.records import SCHEMA_VERSION
from parley.runtime import provenance
from parley.runtime.config import load_config
from parley.runtime.scheduler import run_experiment
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
SIM = {
    "latency": {"ttft_s": 0.0, "max_seqs": 64},
    "replies": {"text": "OK"},
    "models": {"solver-m": {"text": "cut_wire_1"}, "other-m": {"text": "OK"}},
    "faults": [],
}


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(sim_url: str, down_url: str) -> dict[str, Any]:
    return {
        "name": "provenance",
        "games": [
            {
                "game": "comma.wire",
                "seeds": {"count": 2},
                "settings": {"variant": "text", "max_turns": 4},
                "pairings": [
                    # A pairing's override is merged into the entry's params.
                    {
                        "solver": {
                            "kind": "llm",
                            "model": "solver-m",
                            "params": {"max_tokens": 64},
                        },
                        "expert": "scripted",
                    },
                    {"solver": "down-m", "expert": "scripted"},
                ],
            }
        ],
        "models": {
            "solver-m": {
                "model": "solver-m",
                "base_url": sim_url,
                "params": {"temperature": 0.3, "max_tokens": 128},
            },
            "down-m": {
                "model": "down-m",
                "base_url": down_url,
                "retry": {"max_attempts": 1},
            },
        },
    }


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServerProcess]:
    with SimServerProcess(SIM) as server:
        yield server


@pytest.fixture(scope="module")
def run(sim: SimServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("provenance") / "run"
    down = f"http://127.0.0.1:{closed_port()}/v1"
    asyncio.run(run_experiment(load_config(config(sim.openai_url, down)), out))
    return out


def meta(run: Path) -> dict[str, Any]:
    return json.loads((run / "run.json").read_text())


def test_run_json_names_parley_python_and_packages(run: Path) -> None:
    data = meta(run)
    assert data["schema_version"] == SCHEMA_VERSION
    made = data["provenance"]
    assert made["parley"] == metadata.version("parley")
    assert made["python"] == platform.python_version()
    assert made["platform"] == platform.platform()
    for name in ("pydantic", "openai", "anthropic", "aiomqtt", "opentelemetry-sdk", "pandas"):
        assert made["packages"][name] == metadata.version(name), name


def test_installed_versions_read_as_importlib_metadata_reads_them() -> None:
    # Every distribution of this environment: wheels, the editable parley, whatever else.
    names = {d.metadata["Name"] for d in metadata.distributions()}
    assert len(names) > 20
    for name in names:
        assert provenance.installed_version(name) == metadata.version(name), name
    assert provenance.installed_version("no-such-distribution-here") is None


def test_a_distribution_whose_metadata_cannot_be_read_has_no_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken-1.0.dist-info" / "METADATA").mkdir(parents=True)  # not a file
    plain = tmp_path / "plain-2.5.dist-info"
    plain.mkdir()
    (plain / "METADATA").write_text("Metadata-Version: 2.1\nName: plain\nVersion: 2.5\n\nbody\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert provenance.installed_version("broken") is None
    assert provenance.installed_version("plain") == metadata.version("plain") == "2.5"


def test_git_state_is_none_where_git_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(shutil.which("git") is not None, "git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert provenance.git_state(repo) is None


def test_run_json_names_the_commit_of_parley_s_checkout(run: Path) -> None:
    git = meta(run)["provenance"]["git"]
    if not (ROOT / ".git").exists():  # an installed wheel: no commit to name
        assert git is None
        return
    require(shutil.which("git") is not None, "git is not installed")
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # Other commits may land while the suite runs; the run's commit is HEAD or an ancestor.
    ancestor = subprocess.run(
        ["git", "-C", str(ROOT), "merge-base", "--is-ancestor", git["commit"], head], check=False
    )
    assert ancestor.returncode == 0 and len(git["commit"]) == 40
    assert isinstance(git["dirty"], bool)


def test_git_state_of_a_checkout_and_of_a_plain_folder(tmp_path: Path) -> None:
    require(shutil.which("git") is not None, "git is not installed")
    assert provenance.git_state(tmp_path) is None  # not a checkout
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    git("init", "-q")
    (repo / "a.txt").write_text("one")
    git("add", "a.txt")
    git("commit", "-q", "-m", "one")
    assert provenance.git_state(repo) == {"commit": git("rev-parse", "HEAD"), "dirty": False}
    (repo / "a.txt").write_text("two")
    assert provenance.git_state(repo) == {"commit": git("rev-parse", "HEAD"), "dirty": True}


def test_run_json_has_the_resolved_generation_parameters(run: Path) -> None:
    generation = meta(run)["provenance"]["generation"]
    assert set(generation) == {"solver-m", "down-m"}
    solver = generation["solver-m"]
    assert (solver["backend"], solver["model"]) == ("openai", "solver-m")
    expected = GenerationParams(temperature=0.3, max_tokens=64).model_dump(mode="json")
    assert solver["params"] == expected  # the entry's 0.3, the pairing's 64
    assert generation["down-m"]["params"] == GenerationParams().model_dump(mode="json")


def test_run_json_has_what_each_endpoint_serves(run: Path, sim: SimServerProcess) -> None:
    endpoints = meta(run)["endpoints"]
    [served] = endpoints["solver-m"]
    assert served["url"] == sim.openai_url
    assert sorted(served["models"]) == sorted(SIM["models"])  # the server's own list
    assert served["version"] == f"parley-sim {metadata.version('parley')}"  # GET /version
    [down] = endpoints["down-m"]
    assert down["error"] and "models" not in down and down["version"] is None


def test_a_server_that_is_down_does_not_stop_the_run(run: Path) -> None:
    records = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    by_model = {r["pairing"]["solver"]: r["outcome"] for r in records}
    assert len(records) == 4 and by_model["down-m"] == "error"
    assert all(r["outcome"] != "error" for r in records if r["pairing"]["solver"] == "solver-m")


def test_a_resumed_run_keeps_what_produced_its_earlier_part(
    run: Path, sim: SimServerProcess, tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    shutil.copytree(run, folder)
    data = meta(folder)
    data["provenance"]["parley"] = "0.0.1"  # as if an older parley had played it
    (folder / "run.json").write_text(json.dumps(data))
    # The same config as the run's (the down server's port included).
    [down] = yaml.safe_load((folder / "config.yaml").read_text())["models"]["down-m"]["base_urls"]
    asyncio.run(run_experiment(load_config(config(sim.openai_url, down)), folder, resume=True))
    after = meta(folder)
    assert after["provenance"]["parley"] == metadata.version("parley")
    assert [p["parley"] for p in after["provenance_history"]] == ["0.0.1"]
    assert after["run"] == data["run"]


COMMA_CONFIG = ROOT.parent / "shared" / "data" / "reference" / "comma" / "config"


def test_run_json_names_no_reference_where_none_was_read(run: Path) -> None:
    assert "references" not in meta(run)


def test_a_resumed_run_whose_reference_changed_keeps_the_earlier_hashes(tmp_path: Path) -> None:
    checkout = tmp_path / "comma"
    (checkout / "config").mkdir(parents=True)
    for name in ("prompts.json", "puzzles_final.json", "random_config.json"):
        shutil.copy(COMMA_CONFIG / name, checkout / "config" / name)
    block = {
        "game": "comma.wire",
        "seeds": [0],
        "pairings": [{"solver": "scripted", "expert": "scripted"}],
        "settings": {"variant": "text", "reference": str(checkout)},
    }
    setup = {"name": "ref", "tracing": {"enabled": False}, "games": [block]}
    out = tmp_path / "run"
    asyncio.run(run_experiment(load_config(setup), out))
    (first,) = meta(out)["references"]
    assert first["path"] == str(checkout.resolve())
    prompts = checkout / "config" / "prompts.json"
    data = json.loads(prompts.read_text())
    data["EXPERT"] += " Be brief."
    prompts.write_text(json.dumps(data))
    asyncio.run(run_experiment(load_config(setup), out, resume=True))
    after = meta(out)
    (now,) = after["references"]
    assert after["references_history"] == [[first]]
    changed = {k for k in now["files"] if now["files"][k] != first["files"][k]}
    assert changed == {"config/prompts.json"}
