"""Trace sampling: a share of the episodes traced whole, the same ones every run and in every
process, while metrics still count every episode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.scheduler import run_experiment
from tests.observability.conftest import KEY_ENV, SECRET, config, model_entry, traces

pytestmark = pytest.mark.anyio


def traced_episodes(run: Path) -> set[str]:
    """Episode ids of a run's traces; every span of a trace must belong to its episode."""
    episodes = set()
    for spans in traces(run).values():
        roots = [s for s in spans if s["parent_id"] is None]
        if [r["name"].split()[0] for r in roots] == ["run"]:
            continue
        assert len(roots) == 1 and roots[0]["name"].startswith("episode ")
        episode = roots[0]["attributes"]["parley.episode"]
        ids = {s["span_id"] for s in spans}
        assert all(s["parent_id"] in ids for s in spans if s["parent_id"])  # whole
        kinds = {s["name"].split()[0] for s in spans}
        assert {"turn", "invoke_agent", "chat"} <= kinds
        episodes.add(episode)
    return episodes


def episodes_counted(run: Path) -> int:
    """Episodes in the run's metrics: the last export of each process, summed."""
    last: dict[Any, int] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        for rm in json.loads(line)["resource_metrics"]:
            for sm in rm["scope_metrics"]:
                for metric in sm["metrics"]:
                    if metric["name"] == "parley.episodes":
                        worker = rm["resource"]["attributes"].get("parley.worker")
                        last[worker] = sum(p["value"] for p in metric["data"]["data_points"])
    return sum(last.values())


async def test_a_share_of_episodes_is_traced_whole_and_the_same_each_run(
    sim: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)

    def cfg(workers: int) -> Any:
        return config(
            "comma.atm",
            list(range(16)),
            [{"solver": "leaky", "expert": "scripted"}],
            models={"leaky": model_entry(sim, "leaky-solver")},
            settings={"variant": "text", "max_turns": 2},
            tracing={"sample": 0.5},
            workers=workers,
            concurrency=8,
        )

    one = await run_experiment(cfg(1), tmp_path / "one")
    await run_experiment(cfg(1), tmp_path / "again")
    two = await run_experiment(cfg(2), tmp_path / "two")

    traced = traced_episodes(tmp_path / "one")
    assert 0 < len(traced) < 16  # a share, not all and not none
    assert traced_episodes(tmp_path / "again") == traced
    assert traced_episodes(tmp_path / "two") == traced  # the choice does not depend on the process
    # The run's own span is always kept; the metrics count every episode.
    names = [s["name"] for spans in traces(tmp_path / "one").values() for s in spans]
    assert names.count("run obs") == 1
    for run, outcome in ((tmp_path / "one", one), (tmp_path / "two", two)):
        assert len(outcome.records) == 16
        assert episodes_counted(run) == 16


def test_the_share_is_checked() -> None:
    from parley.runtime.config import ConfigError

    for bad in (0, 1.5, -0.1):
        with pytest.raises(ConfigError, match=r"tracing\.sample"):
            config(
                "comma.atm",
                [0],
                [{"solver": "scripted", "expert": "scripted"}],
                tracing={"sample": bad},
            )
