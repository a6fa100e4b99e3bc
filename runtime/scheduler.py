"""Running an experiment: many episodes at once under a global limit, results made durable."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from opentelemetry import trace

import bus as bus_module
from bus.base import Bus
from observability.tracing import Tracing
from runtime.actor import ActorHost
from runtime.config import ExperimentConfig
from runtime.episode import EpisodeOptions, EpisodeResult, EpisodeRunner
from runtime.experiment import EpisodeSpec, expand
from runtime.launch import open_models
from runtime.results import ResultWriter, RunFolder


@dataclass
class Progress:
    """Live counters of a run, for the progress display."""

    planned: int = 0
    skipped: int = 0
    done: int = 0
    running: int = 0
    failed: int = 0
    turns: int = 0
    started: float = field(default_factory=time.monotonic)
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def turns_per_s(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.turns / elapsed if elapsed > 0 else 0.0


class Scheduler:
    """Plays a list of episode specs with at most ``concurrency`` at once.

    ``stop()`` (Ctrl-C) ends the episodes in flight as ``cancelled``, records them and returns;
    the folder stays resumable.
    """

    def __init__(
        self,
        specs: list[EpisodeSpec],
        bus: Bus,
        writer: ResultWriter,
        options: EpisodeOptions,
        concurrency: int,
        on_result: Callable[[EpisodeResult], None] | None = None,
    ) -> None:
        self.specs = specs
        self.bus = bus
        self.host = ActorHost(bus)
        self.writer = writer
        self.options = options
        self.concurrency = concurrency
        self.on_result = on_result
        self.progress = Progress(planned=len(specs))
        self.stopping = False
        self._running: set[EpisodeRunner] = set()

    def stop(self) -> None:
        self.stopping = True
        for runner in list(self._running):
            runner.cancel()

    async def run(self, parent: trace.Span | None = None) -> None:
        queue = iter(self.specs)
        recording: set[asyncio.Task[None]] = set()

        async def worker() -> None:
            for spec in queue:
                if self.stopping:
                    return
                result = await self._play(spec, parent)
                # The slot is free once the episode ends; it counts once it is on disk.
                task = asyncio.create_task(self._record(result))
                recording.add(task)
                task.add_done_callback(recording.discard)

        try:
            async with anyio.create_task_group() as tg:
                for n in range(min(self.concurrency, len(self.specs))):
                    tg.start_soon(worker)
                    if n % 64 == 63:
                        # Let the started episodes get going: 2,000 starting in one loop
                        # iteration would stall everything else for most of a second.
                        await anyio.sleep(0)
        finally:
            if recording:
                await asyncio.gather(*recording)

    async def _play(self, spec: EpisodeSpec, parent: trace.Span | None) -> EpisodeResult:
        runner = EpisodeRunner(spec, self.bus, self.host, self.options)
        self._running.add(runner)
        self.progress.running += 1
        try:
            return await runner.run(parent)
        finally:
            self._running.discard(runner)
            self.progress.running -= 1

    async def _record(self, result: EpisodeResult) -> None:
        await self.writer.write(result)
        progress = self.progress
        progress.done += 1
        progress.turns += result.turns
        progress.outcomes[result.outcome] = progress.outcomes.get(result.outcome, 0) + 1
        if result.outcome == "error":
            progress.failed += 1
        if self.on_result is not None:
            self.on_result(result)


@contextlib.contextmanager
def tuned_gc(gen0: int = 10_000) -> Iterator[None]:
    """Collect garbage less often while a run plays.

    Thousands of live episodes make CPython's default collector (a young-generation pass every
    700 allocations, a full pass over the whole heap every 100 of those) cost up to 40 % of a
    run and stall the event loop for hundreds of milliseconds: objects that exist before the
    run (modules, the game registry) are frozen out of collection, and every generation waits
    for more allocations. The previous settings are restored afterwards.
    """
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


@dataclass
class RunOutcome:
    folder: RunFolder
    run_id: str
    progress: Progress
    records: list[dict[str, Any]]
    interrupted: bool


async def run_experiment(
    config: ExperimentConfig,
    out: str | Path,
    *,
    resume: bool = False,
    bus_url: str | None = None,
    concurrency: int | None = None,
    on_start: Callable[[Scheduler], None] | None = None,
    on_result: Callable[[EpisodeResult], None] | None = None,
) -> RunOutcome:
    """Expand ``config``, play what is not finished yet, and return the run's records."""
    specs = expand(config)
    folder = RunFolder.prepare(out, config, resume=resume, planned=len(specs))
    finished = folder.finished_ids()
    todo = [s for s in specs if s.id not in finished]
    run_id = folder.run_id
    url = bus_url or config.bus
    messages = config.tracing.messages
    if messages == "auto":
        messages = url.startswith("mqtt")
    tracing = Tracing(
        folder.path,
        enabled=config.tracing.enabled,
        content=config.tracing.content,
        messages=messages,
        attributes={"parley.run": run_id},
    )
    tracing.activate()
    # With tracing on: publish spans, and a traceparent on every message.
    the_bus = tracing.wrap_bus(bus_module.connect(url))
    writer = ResultWriter(folder, run_id)
    writer.start()
    options = EpisodeOptions(
        run=run_id,
        record_prompts=config.record_prompts,
        mirror_turns=config.bus_mirror == "all",
        timeout_s=config.episode_timeout_s,
        models=config.models,
    )
    scheduler = Scheduler(
        todo, the_bus, writer, options, concurrency or config.concurrency, on_result
    )
    scheduler.progress.skipped = len(specs) - len(todo)
    if on_start is not None:
        on_start(scheduler)
    run_span = tracing.tracer.start_span(
        f"run {config.name}", attributes={"parley.run": run_id, "parley.episodes": len(todo)}
    )
    try:
        with tuned_gc():
            async with the_bus, open_models(config.models, folder.path, todo) as models:
                options.models = models  # one pool of model clients for every episode
                await scheduler.run(run_span)
    finally:
        run_span.end()
        await writer.close()
        tracing.close()
    return RunOutcome(folder, run_id, scheduler.progress, folder.records(), scheduler.stopping)
