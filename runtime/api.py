"""Running an experiment from Python (a notebook, a script): ``await parley.run(config)``
(``parley.run`` is this module's :func:`run`, exposed lazily by ``parley/__init__.py``).

Example (in a notebook, where an event loop is already running)::

    import parley

    result = await parley.run("configs/quickstart.yaml", out="runs/nb", overrides=["games.0.seeds.count=3"])
    print(result.counts)          # {'success': 6}
    df = result.episodes()        # one row per episode (parley.results.episodes)

In a plain script, ``parley.run_sync(...)`` does the same without ``await``. Both play the run
exactly as ``parley run`` does (:func:`parley.runtime.scheduler.run_experiment`) and write the
same run folder, report included.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from parley.runtime.config import ExperimentConfig

ConfigLike = Any  # a path to a YAML config, a dict, or an ExperimentConfig


@dataclass
class RunResult:
    """What :func:`run` returns: where the run folder is and how its episodes ended."""

    folder: Path
    run_id: str
    counts: dict[str, int]  # episodes by outcome, all of the folder's (earlier ones included)
    played: int  # episodes played by this call (a resumed run skips what was done)
    skipped: int  # episodes already done before this call
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)  # what went wrong outside any episode
    report: Path | None = None

    def episodes(self) -> pd.DataFrame:
        """One row per episode (:func:`parley.results.episodes`)."""
        from parley.results import episodes

        return episodes(self.folder)

    def turns(self) -> pd.DataFrame:
        """One row per turn (:func:`parley.results.turns`)."""
        from parley.results import turns

        return turns(self.folder)


def load(config: ConfigLike, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """``config`` (a YAML path, a dict or an :class:`ExperimentConfig`) validated, with
    ``--set``-style ``overrides`` (``"games.0.seeds.count=3"``) applied."""
    from parley.runtime.config import ExperimentConfig, load_config

    if isinstance(overrides, str):  # one override, not a list of its characters
        overrides = (overrides,)
    if isinstance(config, ExperimentConfig):
        if not overrides:
            return config
        config = config.model_dump(mode="json")
    if isinstance(config, dict):
        return load_config(dict(config), list(overrides))
    if isinstance(config, str | Path):
        return load_config(config, list(overrides))
    raise TypeError(f"config: a path, a dict or an ExperimentConfig, not {type(config).__name__}")


async def run(
    config: ConfigLike,
    *,
    out: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    concurrency: int | None = None,
    resume: bool = False,
    bus: str | None = None,
    report: bool = True,
) -> RunResult:
    """Play the experiment ``config`` into the run folder ``out`` (default ``runs/<name>``)
    and return a :class:`RunResult`. As ``parley run``: ``resume`` continues a folder,
    ``concurrency`` and ``bus`` override the config's, ``report`` writes ``report.md``.
    Bad input raises :class:`parley.runtime.config.ConfigError`, whose message names it."""
    from parley.runtime.scheduler import run_experiment

    experiment = load(config, overrides)
    folder = Path(out) if out is not None else Path("runs") / experiment.name
    outcome = await run_experiment(
        experiment, folder, resume=resume, bus_url=bus, concurrency=concurrency
    )
    written = None
    if report:
        from parley.runtime.report import write_report

        written = await asyncio.to_thread(write_report, outcome.folder.path)
    return RunResult(
        folder=outcome.folder.path,
        run_id=outcome.run_id,
        counts=dict(Counter(r.outcome for r in outcome.records)),
        played=outcome.progress.done,
        skipped=outcome.progress.skipped,
        interrupted=outcome.interrupted,
        errors=list(outcome.errors),
        report=written,
    )


def run_sync(config: ConfigLike, **options: Any) -> RunResult:
    """:func:`run` for code without an event loop (a script); in a notebook, ``await run``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        from parley import event_loop

        return event_loop.run(run(config, **options))
    raise RuntimeError(
        "parley.run_sync cannot run inside a running event loop (a notebook): "
        "use `await parley.run(...)` there"
    )
