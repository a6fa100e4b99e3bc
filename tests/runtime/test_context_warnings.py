"""Prompts longer than a model's context, before and after a run: ``parley plan`` and
``parley check`` warn per game and role, naming the tokens and the fix; the episodes that run
into the context anyway end ``context_exceeded`` and the report counts them apart from the
infrastructure's errors; replies the server did not hold to a constraint it was sent are
counted per model and role. Runs against the stand-in server as its own process."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley import event_loop
from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.cli import main
from parley.runtime.config import ExperimentConfig, load_config
from parley.runtime.launch import free_port
from parley.runtime.plan import Plan, context_warnings, make_plan
from parley.runtime.preflight import check_before_run
from parley.runtime.report import build_report
from parley.runtime.scheduler import run_experiment
from tests.backends.conftest import base_sim

SMALL = 300  # tokens: the first prompt of a wire solver fits, the later ones do not
CHATTER = "Let me think about the board for a while before I decide anything."


@pytest.fixture(scope="module")
def server() -> Iterator[SimServerProcess]:
    with SimServerProcess(base_sim()) as sim:
        yield sim


@pytest.fixture
def sim(server: SimServerProcess) -> SimServerProcess:
    server.configure(**base_sim())
    server.reset()
    return server


def wire(
    sim: SimServerProcess, context: int | None, memory: str | None = None, **extra: Any
) -> dict[str, Any]:
    """COMMA's wire puzzle, its solver the sim's, with ``context`` tokens of context."""
    block: dict[str, Any] = {
        "game": "comma.wire",
        "seeds": {"count": 4},
        "settings": {"variant": "text"},
        "pairings": [{"solver": "small", "expert": "scripted"}],
    }
    if memory is not None:
        block["memory"] = {"solver": {"policy": memory}}
    entry: dict[str, Any] = {"model": "solver-m", "base_url": sim.openai_url, "images": False}
    if context is not None:
        entry["context_size"] = context
    return {"name": "ctx", "games": [block], "models": {"small": entry}, **extra}


def plan_of(data: dict[str, Any]) -> tuple[ExperimentConfig, Plan]:
    config = load_config(data)
    return config, event_loop.run(make_plan(config, sample=4))


def longest(plan: Plan, model: str) -> int:
    return max(r.prompt_tokens_max for p in plan.pairings for r in p.roles if r.model == model)


# --- before the run -------------------------------------------------------------------------


def test_plan_warns_of_a_prompt_over_the_context_with_the_fix(sim: SimServerProcess) -> None:
    config, plan = plan_of(wire(sim, SMALL))
    tokens = longest(plan, "small")
    assert tokens > SMALL
    (warning,) = plan.warnings
    assert warning.startswith("comma.wire, role solver (model small): ")
    assert f"about {tokens:,} tokens" in warning and f"context of {SMALL:,}" in warning
    assert "models.small.context_size" in warning
    assert "policy: last_k" in warning and "now full" in warning and "bigger context" in warning
    # The same from the function pre-flight calls, playing its own quick sample.
    (quick,) = event_loop.run(context_warnings(config))
    assert quick.startswith("comma.wire, role solver (model small): ")


def test_no_warning_where_the_prompts_fit_or_no_context_is_known(sim: SimServerProcess) -> None:
    _, plan = plan_of(wire(sim, 100_000))
    assert longest(plan, "small") > 0 and plan.warnings == []
    _, unsized = plan_of(wire(sim, None))
    assert unsized.warnings == []
    # A context served by the server, where the entry sets none, is compared too.
    config = load_config(wire(sim, None))
    (served,) = event_loop.run(context_warnings(config, unsized, sizes={"small": SMALL}))
    assert "served by the server of small" in served


def test_a_role_that_keeps_the_latest_message_only_is_told_of_a_bigger_context(
    sim: SimServerProcess,
) -> None:
    _, full = plan_of(wire(sim, 100_000))
    _, plan = plan_of(wire(sim, 60, memory="none"))
    assert longest(plan, "small") < longest(full, "small")  # less memory: shorter prompts
    (warning,) = plan.warnings
    assert "latest message only" in warning and "last_k" not in warning


def test_plan_and_check_print_the_warning(
    sim: SimServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ctx.yaml"
    path.write_text(yaml.safe_dump(wire(sim, SMALL)))
    assert main(["plan", str(path)]) == 0
    printed = capsys.readouterr()
    assert re.search(r"context: comma\.wire, role solver \(model small\)", printed.out)
    assert main(["plan", str(path), "--json"]) == 0
    (warning,) = json.loads(capsys.readouterr().out)["warnings"]
    assert "role solver" in warning
    # parley check: the model passes, and the warning is said.
    assert main(["check", str(path)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "context: comma.wire, role solver (model small)" in err
    # The run's pre-flight says it too, and lets the run start.
    args = argparse.Namespace(no_check=False, check_timeout=None, quiet=False)
    assert check_before_run(load_config(wire(sim, SMALL)), args) is None
    assert "role solver (model small)" in " ".join(capsys.readouterr().err.split())


# --- after the run --------------------------------------------------------------------------


def test_episodes_over_the_context_are_counted_apart_from_the_infrastructures(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    data = wire(sim, SMALL)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    data["models"]["down"] = {"model": "solver-m", "base_url": dead, "images": False}
    data["models"]["down"]["retry"] = {"max_attempts": 1}
    data["games"][0]["pairings"].append({"solver": "down", "expert": "scripted"})
    config = load_config(data)
    warned = event_loop.run(context_warnings(config))
    records = event_loop.run(run_experiment(config, tmp_path)).records
    over = [r for r in records if r["reason_code"] == "context_exceeded"]
    infra = [r for r in records if r["outcome"] == "error" and r not in over]
    # The plan's warning came true: the small model's episodes ran into its context.
    assert [w.split(":")[0] for w in warned] == ["comma.wire, role solver (model small)"]
    assert over and all(r["pairing"]["solver"] == "small" for r in over)
    assert {r["outcome"] for r in over} == {"error"}
    assert infra and all(r["pairing"]["solver"] == "down" for r in infra)
    for r in over:  # the over-long request was never sent: no attempt for it, no retry
        calls = r["model_calls"]["solver"]
        assert calls["not_sent"] == 1 and calls["retries"] == {}
        assert calls["attempts"] == calls["requests"] - 1 > 0  # the first prompts were sent
    report = build_report(tmp_path)
    failed = report.split("## Why episodes failed", 1)[1].split("\n## ", 1)[0]
    assert (
        f"Of these, {len(over)} ended on a prompt longer than the model's context" in failed
        and f"and {len(infra)} on the infrastructure" in failed
    )
    row = next(line for line in failed.splitlines() if "(context_exceeded)" in line)
    assert row.startswith(f"| {len(over)} |") and "solver failed: a prompt longer" in row
    # The advice for a model none of whose episodes played is for the dead one only.
    assert "Every episode of down failed" in failed and "of small" not in failed
    usage = report.split("## Models: usage and cost", 1)[1].strip().split("\n\n", 1)[0]
    lines = [[c.strip() for c in line.strip("|").split("|")] for line in usage.splitlines()]
    rows = {cells[0]: dict(zip(lines[0], cells, strict=True)) for cells in lines[2:]}
    assert rows["small"]["over context"] == str(len(over))
    assert rows["small"]["failed episodes"] == "0"
    assert rows["down"]["failed episodes"] == str(len(infra))


def test_replies_a_server_did_not_hold_to_its_constraint_are_counted(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    """The server receives the constraint and ignores it (as llama.cpp does vLLM's fields):
    every reply is chatter, outside the legal moves, and counted per model and role."""
    sim.configure(models={"chatty-m": {"text": CHATTER}}, honour_constraints=False)
    block = {
        "game": "playground.tictactoe.e2e",
        "seeds": [0, 1],
        "pairings": [{"player": "chatty", "opponent": "random"}],
        "settings": {"variant": "text", "max_invalid": 2},
        "constrain": "legal_actions",
    }
    models = {"chatty": {"model": "chatty-m", "base_url": sim.openai_url, "images": False}}
    config = load_config({"name": "ignored", "games": [block], "models": models})
    records = event_loop.run(run_experiment(config, tmp_path)).records
    sent = sum(r["model_calls"]["player"].get("constrained", 0) for r in records)
    ignored = sum(r["model_calls"]["player"].get("not_honoured", 0) for r in records)
    assert sent == sim.stats()["constrained"] > 0
    assert ignored == sent  # no reply was a legal move
    report = build_report(tmp_path)
    section = report.split("## Constrained and free play", 1)[1]
    assert "Constraint not honoured by the server" in section
    assert f"| chatty | player | {sent} | {ignored} |" in section
    # Replies the server did not hold are not counted as held play.
    assert "| not honoured by the server |" in section and "| held |" not in section
