"""Two runs in one process each trace to their own folder: the run's tracing is carried by the
run's tasks (a context variable), not shared through module globals."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from parley.observability import tracing
from parley.runtime.scheduler import RunOutcome, run_experiment
from tests.observability.conftest import config
from tests.observability.test_sampling import episodes_counted

pytestmark = pytest.mark.anyio


def left_and_right() -> tuple[object, object]:
    """Two scripted runs of different sizes and names, so that a mix-up shows in any count."""
    pair = [{"solver": "scripted", "expert": "scripted"}]
    return (
        config("comma.wire", [0, 1, 2], pair, name="left"),
        config("comma.wire", [10, 11, 12, 13, 14], pair, name="right"),
    )


def assert_traced_alone(run: Path, outcome: RunOutcome, name: str) -> None:
    """Every span and metric in ``run`` is of that run, and every episode of it is there."""
    spans = tracing.read_spans(run)
    assert spans, f"no spans in {run}"
    assert {s["resource"]["parley.run"] for s in spans} == {outcome.run_id}
    assert [s["name"] for s in spans if s["name"].startswith("run ")] == [f"run {name}"]
    ids = {s["span_id"] for s in spans}
    assert all(s["parent_id"] in ids for s in spans if s["parent_id"])  # whole traces
    traced = {s["attributes"]["parley.episode"] for s in spans if s["name"].startswith("episode ")}
    assert traced == {r["episode"] for r in outcome.records}
    assert episodes_counted(run) == len(outcome.records)


async def test_two_runs_one_after_the_other_trace_apart(tmp_path: Path) -> None:
    left, right = left_and_right()
    first = await run_experiment(left, tmp_path / "left")  # type: ignore[arg-type]
    assert not tracing.enabled()  # closed with its run
    second = await run_experiment(right, tmp_path / "right")  # type: ignore[arg-type]
    assert (len(first.records), len(second.records)) == (3, 5)
    assert_traced_alone(tmp_path / "left", first, "left")
    assert_traced_alone(tmp_path / "right", second, "right")


async def test_two_runs_at_once_trace_apart(tmp_path: Path) -> None:
    left, right = left_and_right()
    first, second = await asyncio.gather(
        run_experiment(left, tmp_path / "left"),  # type: ignore[arg-type]
        run_experiment(right, tmp_path / "right"),  # type: ignore[arg-type]
    )
    assert (len(first.records), len(second.records)) == (3, 5)
    assert_traced_alone(tmp_path / "left", first, "left")
    assert_traced_alone(tmp_path / "right", second, "right")
    assert not tracing.enabled()


def test_outside_a_run_tracing_is_off(tmp_path: Path) -> None:
    one = tracing.Tracing(tmp_path)
    one.activate()
    assert tracing.current() is one and tracing.enabled()
    one.close()
    assert tracing.current() is not one and not tracing.enabled()
