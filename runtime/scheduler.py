"""Running an experiment: many episodes at once under a global limit, results made durable."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

import parley.bus as bus_module
from parley.bus import topics
from parley.bus.base import Bus, Subscription
from parley.bus.messages import Control
from parley.bus.signing import Gate
from parley.environments import registry
from parley.event_loop import LoopLagProbe, responsive_gc
from parley.memory.across import EpisodeStore, InProcessEpisodeStore, SQLiteEpisodeStore
from parley.observability.tracing import Tracing
from parley.records import FINISHED, EpisodeRecord
from parley.runtime import provenance
from parley.runtime.actor import ActorHost
from parley.runtime.config import ConfigError, ExperimentConfig
from parley.runtime.episode import EpisodeOptions, EpisodeResult, EpisodeRunner
from parley.runtime.experiment import EpisodeSpec, expand, memory_chains, play_order
from parley.runtime.launch import models_used, open_models
from parley.runtime.results import RecordingFailed, ResultWriter, RunFolder
from parley.runtime.status import StatusPublisher, model_tokens, pairing_key, usd_prices

if TYPE_CHECKING:
    from parley.runtime.run_scheduler import RunScheduler


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
    # Tokens of the finished episodes by model: (input, output).
    model_tokens: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Outcome counts by game and pairing (:func:`parley.runtime.status.pairing_key`).
    pairings: dict[str, dict[str, int]] = field(default_factory=dict)
    # Outcome counts of the episodes that ended, as they end (before their records are on
    # disk, where a process plays them; else as counted): what fail_on_error judges.
    ended: dict[str, int] = field(default_factory=dict)
    # Called after each end (the run's fail_on_error check, runtime/scheduler.py).
    watch: Callable[[Progress], None] | None = None

    def count(
        self,
        outcome: str,
        turns: int,
        tokens: dict[str, tuple[int, int]] | None = None,
        pairing: str | None = None,
        *,
        ended: bool = False,
    ) -> None:
        """A finished episode, once it is on disk (``tokens``: see :func:`model_tokens`;
        ``pairing``: its :func:`~parley.runtime.status.pairing_key`; ``ended``: :meth:`end`
        was called for it already)."""
        self.done += 1
        self.turns += turns
        for model, (used_in, used_out) in (tokens or {}).items():
            before_in, before_out = self.model_tokens.get(model, (0, 0))
            self.model_tokens[model] = (before_in + used_in, before_out + used_out)
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if pairing is not None:
            counts = self.pairings.setdefault(pairing, {})
            counts[outcome] = counts.get(outcome, 0) + 1
        if outcome == "error":
            self.failed += 1
        if not ended:
            self.end(outcome)

    def end(self, outcome: str) -> None:
        """An episode ended with ``outcome`` (its record may not be on disk yet)."""
        self.ended[outcome] = self.ended.get(outcome, 0) + 1
        if self.watch is not None:
            self.watch(self)

    @property
    def turns_per_s(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.turns / elapsed if elapsed > 0 else 0.0


# The most of a run's opening slots that start together, in the first pass of the loop
# (StartPacer): as many as a model's concurrency may reach (ConcurrencySpec's ``max``), so that
# a run of thousands at once has them all in flight from its first pass, as its config says.
OPENING_STARTS = 4096


class StartPacer:
    """Episodes start a few per pass of the event loop, in the order they asked.

    An episode's start is synchronous work, short but not free (its actors, its first turn).
    A run's episodes move in step, a reply's latency apart: hundreds end in one pass of the
    loop (their last replies came in together), and each slot starts its next episode in that
    same pass, so every reply and timer waits for all of those starts. Through :meth:`turn`,
    a few start in one pass and the others wait for the next passes, each after what else is
    ready by then (replies of the episodes in flight). How many: ``first`` at first, twice as
    many after a pass shorter than ``short_s``, half as many (at least one) after one longer
    than ``long_s``, at most ``most``: an idle loop starts a backlog at once, a busy one a
    few a pass. (``clock``: what times the passes.)

    ``backlog_at_once``: the first release takes up to this many of the callers waiting then
    (a run's opening slots), before anything is in flight that their starts could hold up.
    They reach their first requests in step, so the requests leave together, as a batching
    server wants them, instead of trickling out over the whole ramp (and the last one
    leaves sooner). The cap bounds that first pass: each start costs CPU.
    """

    def __init__(
        self,
        first: int = 4,
        most: int = 64,
        short_s: float = 0.005,
        long_s: float = 0.020,
        clock: Callable[[], float] = time.perf_counter,
        backlog_at_once: int = 0,
    ) -> None:
        self.per_pass = first
        self.backlog_at_once = backlog_at_once
        self.most = most
        self.short_s = short_s
        self.long_s = long_s
        self.clock = clock
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._task: asyncio.Task[None] | None = None

    async def turn(self) -> None:
        """Return when it is this caller's turn to start an episode."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiting.append(future)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._release(), name="episode-starts")
        await future

    async def _release(self) -> None:
        last = self.clock()
        while self._waiting:
            released = 0
            most = self.per_pass
            if self.backlog_at_once:
                # The first callers: nothing is in flight yet that their starts could delay.
                most, self.backlog_at_once = max(most, self.backlog_at_once), 0
            while self._waiting and released < most:
                future = self._waiting.popleft()
                if not future.done():  # (a caller cancelled while it waited)
                    future.set_result(None)
                    released += 1
            # The released callers run in the next pass, and this after them: it sees how
            # long that pass took (their starts and all else) before it releases more.
            await asyncio.sleep(0)
            now = self.clock()
            if now - last < self.short_s:
                self.per_pass = min(self.most, 2 * self.per_pass)
            elif now - last > self.long_s:
                self.per_pass = max(1, self.per_pass // 2)
            last = now

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class Scheduler:
    """Plays a list of episode specs in this process, at most ``concurrency`` at once (a
    :class:`~parley.runtime.run_scheduler.RunScheduler`).

    ``stop()`` (Ctrl-C) ends the episodes in flight as ``cancelled``, records them and returns;
    the folder stays resumable. ``pause()`` starts no new episode until ``resume()`` (those
    running go on); ``abort(episode, reason)`` ends one running episode as ``aborted``. The
    same happens for :class:`~parley.bus.messages.Control` messages published to the run's
    control topics (``parley/{run}/control``, ``parley/{run}/{episode}/control``), which the
    scheduler subscribes to while it runs. Example::

        scheduler.pause()   # a dashboard's pause button
        scheduler.abort("ep-0007", "stuck in a loop")
    """

    # This process's run status (runtime/status.py), set by run_experiment.
    status: StatusPublisher | None = None

    def __init__(
        self,
        specs: list[EpisodeSpec],
        bus: Bus,
        writer: ResultWriter,
        options: EpisodeOptions,
        concurrency: int,
        on_result: Callable[[EpisodeResult], None] | None = None,
        on_begin: Callable[[EpisodeSpec], None] | None = None,
        source: asyncio.Queue[EpisodeSpec | None] | None = None,
        gate: asyncio.Semaphore | None = None,
    ) -> None:
        self.specs = specs
        # Specs that arrive while it runs (a remote worker's jobs), after ``specs``: ``None``
        # ends the queue. ``gate``: slots shared with other schedulers (a worker's --slots,
        # over every run it plays episodes of).
        self.source = source
        self.gate = gate
        self.on_begin = on_begin
        self.bus = bus
        self.host = ActorHost(bus)
        self.writer = writer
        self.options = options
        self.concurrency = concurrency
        self.on_result = on_result
        self.progress = Progress(planned=len(specs))
        self.stopping = False
        self.paused = False
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self._running: set[EpisodeRunner] = set()
        # What went wrong outside any episode (a memory store that failed).
        self.errors: list[str] = []
        # Controls from the bus are obeyed only when the run's key signs them (with a key).
        self.control_gate = Gate(None)

    @property
    def refused(self) -> dict[str, int]:
        """Controls refused as not the run's own (parley.bus.signing.Gate), by kind."""
        return self.control_gate.refused

    def stop(self) -> None:
        self.stopping = True
        self._unpaused.set()  # paused slots wake, see the stop and end
        if self.source is not None:
            self.source.put_nowait(None)  # slots waiting for a spec wake and end
        for runner in list(self._running):
            runner.cancel()

    def pause(self) -> None:
        """Start no new episode until :meth:`resume`; the running ones go on."""
        self.paused = True
        self._unpaused.clear()

    def resume(self) -> None:
        """Start episodes again after :meth:`pause`."""
        self.paused = False
        self._unpaused.set()

    def abort(self, episode: str, reason: str = "") -> bool:
        """End the running episode ``episode`` as ``aborted`` (reason code ``operator_abort``);
        False when no such episode is running here."""
        for runner in list(self._running):
            if runner.spec.id == episode:
                runner.abort(reason)
                return True
        return False

    def obey(self, control: Control, episode: str | None = None) -> None:
        """Carry out a :class:`Control` message: ``pause``/``resume`` the run, or ``abort``
        ``episode`` (the episode its topic names)."""
        if control.command == "pause":
            self.pause()
        elif control.command == "resume":
            self.resume()
        elif episode is not None:
            self.abort(episode, control.reason)

    async def run(self, parent: trace.Span | None = None) -> None:
        # With memory across episodes, the episodes of a key are a chain played in order in
        # one slot, each after the one before it is remembered (runtime/experiment.py).
        units = (
            memory_chains(self.specs)
            if any(m.remembers for s in self.specs for m in s.memory.values())
            else [[s] for s in self.specs]
        )
        queue = iter(units)
        recording: set[asyncio.Task[None]] = set()
        starts = StartPacer(backlog_at_once=OPENING_STARTS)

        async def next_unit() -> list[EpisodeSpec] | None:
            unit = next(queue, None)
            if unit is None and self.source is not None and not self.stopping:
                spec = await self.source.get()
                if spec is None:
                    self.source.put_nowait(None)  # the end, for every slot
                    return None
                unit = [spec]
            return unit

        async def worker() -> None:
            while (unit := await next_unit()) is not None:
                for spec in unit:
                    if self.paused:
                        await self._unpaused.wait()
                    await starts.turn()
                    if self.stopping:
                        return
                    if self.gate is None:
                        result = await self._play(spec, parent)
                    else:
                        async with self.gate:
                            if self.stopping:
                                return
                            result = await self._play(spec, parent)
                    if result.memories and not self._remember(result):
                        return
                    # Judged as it ends: instant errors must not outrun their records' fsync.
                    self.progress.end(result.outcome)
                    # The slot is free once the episode ends; it counts once it is on disk.
                    task = asyncio.create_task(self._record(result))
                    recording.add(task)
                    task.add_done_callback(recording.discard)

        listener = await self._listen_for_control()
        try:
            # asyncio's task group: anyio's start_soon costs several times the CPU per task, and a
            # ramp makes one slot per episode in flight (thousands) as the first ones start.
            async with asyncio.TaskGroup() as tg:
                slots = self.concurrency if self.source is not None else len(units)
                for _ in range(min(self.concurrency, slots)):
                    tg.create_task(worker())
        finally:
            await starts.close()
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener
            if recording:
                await asyncio.gather(*recording)

    async def _listen_for_control(self) -> asyncio.Task[None] | None:
        """Subscribe to the run's control topics; the task obeys what arrives on them."""
        if (not self.specs and self.source is None) or self.bus.closed:
            return None
        run = self.options.run
        # A run with a key (every run parley starts) obeys only controls signed with it.
        self.control_gate.public_b64 = getattr(self.options.signer, "public_b64", None)
        self.control_gate.what = self.control_gate.what or f"run {run}"
        subs = [
            self.bus.subscribe(topics.control(run), maxsize=100),
            self.bus.subscribe(topics.all_episode_control(run), maxsize=100),
        ]

        async def obey(sub: Subscription) -> None:
            async for delivery in sub:
                message = delivery.message
                if isinstance(message, Control):
                    episode = topics.parse(delivery.topic).episode
                    if self.control_gate.control(message, episode or "run", run):
                        self.obey(message, episode)

        async def listen() -> None:
            try:
                # asyncio's own group: anyio's imports its asyncio backend on first use, time
                # at a run's start that a run without worker threads never needs otherwise.
                async with asyncio.TaskGroup() as group:
                    for sub in subs:
                        group.create_task(obey(sub))
            finally:
                for sub in subs:
                    with contextlib.suppress(Exception):
                        await sub.close()

        for sub in subs:
            # A broker that is not there yet must not hold the run up: control comes when it can.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sub.ready(), 5)
        return asyncio.create_task(listen(), name="control")

    def turns_in_flight(self) -> int:
        """Turns played so far by the episodes running now (the run status adds them to the
        finished episodes' turns)."""
        return sum(runner.result.turns for runner in self._running)

    def endpoint_figures(self) -> list[list[dict[str, Any]]]:
        """This process's endpoints (the run status's), once its model pool is open."""
        status = getattr(self.options.models, "endpoint_status", None)
        return [status()] if status is not None else []

    async def _play(self, spec: EpisodeSpec, parent: trace.Span | None) -> EpisodeResult:
        runner = EpisodeRunner(spec, self.bus, self.host, self.options)
        if self.on_begin is not None:
            self.on_begin(spec)
        self._running.add(runner)
        self.progress.running += 1
        try:
            return await runner.run(parent)
        finally:
            self._running.discard(runner)
            self.progress.running -= 1

    def _remember(self, result: EpisodeResult) -> bool:
        """Write the episode's memory across episodes, before its result: killed between the
        two, a resumed run plays it again and its memory is written again, replacing this
        (memory/across.py). A store that fails ends the run (resumable); False then."""
        if result.outcome not in FINISHED:
            return True  # cancelled: played again on --resume, remembered then
        store = self.options.memory_store
        try:
            if store is None:
                raise RuntimeError("no memory store is open for memory across episodes")
            for memory in result.memories:
                store.put(memory)
        except Exception as exc:
            self.errors.append(
                f"memory of {result.spec.id} not written ({type(exc).__name__}: {exc}); "
                "the run stopped and can be resumed"
            )
            self.stop()
            return False
        return True

    async def _record(self, result: EpisodeResult) -> None:
        try:
            await self.writer.write(result)
        except RecordingFailed:
            # Nothing more can be recorded: end the run now (run_experiment raises the failure).
            self.stop()
            return
        self.progress.count(
            result.outcome,
            result.turns,
            model_tokens(result.spec.players, result.tokens),
            pairing_key(result.spec.game, result.spec.pairing),
            ended=True,
        )
        if self.on_result is not None:
            self.on_result(result)


@dataclass
class RunOutcome:
    folder: RunFolder
    run_id: str
    progress: Progress
    records: list[EpisodeRecord]
    interrupted: bool
    # Per process that played episodes: event-loop lag p50/p99/max in ms.
    loop_lag: list[dict[str, Any]] = field(default_factory=list)
    # What went wrong outside any episode (a worker process that died); the run is resumable.
    errors: list[str] = field(default_factory=list)
    # Why the run stopped before its end on its own (fail_on_error), else None.
    stopped_by: str | None = None


def preload(specs: list[EpisodeSpec], models: Any) -> None:
    """What the first episode would otherwise pay for, done before the run's clock matters:
    the games' families imported (only theirs, environments/registry.py) and the model
    clients made (the SDK's import is slow), so episodes start at an even pace."""
    for game in sorted({s.game for s in specs}):
        registry.find(game)
    warm = getattr(models, "warm", None)
    if warm is not None:
        warm(models_used(specs))


def episode_options(config: ExperimentConfig, run_id: str) -> EpisodeOptions:
    """How the episodes of ``config`` are played (the model pool is set once it is open)."""
    return EpisodeOptions(
        run=run_id,
        record_prompts=config.record_prompts,
        mirror_turns=config.bus_mirror == "all",
        timeout_s=config.episode_timeout_s,
        models=config.models,
        state=config.state.publish,
        state_images=config.state.images,
    )


def open_memory_store(
    config: ExperimentConfig, folder: Path, specs: list[EpisodeSpec]
) -> EpisodeStore | None:
    """The store of memory across episodes (``memory_store``), when some role of ``specs``
    keeps any: SQLite at ``path`` (relative to the working directory) or ``memory.sqlite`` in
    the run folder, or in-process."""
    if not any(m.remembers for s in specs for m in s.memory.values()):
        return None
    where = config.memory_store
    if where.kind == "process":
        return InProcessEpisodeStore()
    return SQLiteEpisodeStore(Path(where.path) if where.path else folder / "memory.sqlite")


async def _unless_stopped(work: Coroutine[Any, Any, Any], scheduler: RunScheduler) -> None:
    """Await ``work`` (a batch the run waits for, hours at worst) until the run is stopped
    (Ctrl-C: :meth:`Scheduler.stop`), which cancels it; the scheduler then ends at once."""
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=0.2)
            if scheduler.stopping and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return
        task.result()
    finally:
        if not task.done():  # this wait itself was cancelled
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# ``workers: auto`` plays a run of fewer episodes than this in one process: a worker process
# takes seconds to start (interpreter, imports, model clients), more than a small run gains.
AUTO_ONE_PROCESS_BELOW = 1000


def worker_count(workers: int | str, episodes: int | None = None) -> int:
    """``workers`` as a number: ``auto`` is one per core, or one process for a run of fewer
    than :data:`AUTO_ONE_PROCESS_BELOW` ``episodes`` (``remote``: none here)."""
    if workers == "auto":
        if episodes is not None and episodes < AUTO_ONE_PROCESS_BELOW:
            return 1
        return os.cpu_count() or 1
    if workers == "remote":
        return 0
    return int(workers)


# fail_on_error is judged only once this many episodes of the run have ended (a share of
# 1 in 3 says little; 10 keeps a run with a couple of early errors going).
FAIL_MIN_FINISHED = 10


def error_watch(
    threshold: float, stop: Callable[[], None], stopped: list[str]
) -> Callable[[Progress], None]:
    """A :attr:`Progress.watch` that stops the run (``stop``) once more than ``threshold`` of
    its ended episodes are errors, from :data:`FAIL_MIN_FINISHED` ended episodes on; it says
    why in ``stopped`` (cancelled episodes are not counted: they are played again)."""

    def watch(progress: Progress) -> None:
        ended = sum(n for outcome, n in progress.ended.items() if outcome in FINISHED)
        errors = progress.ended.get("error", 0)
        if stopped or ended < FAIL_MIN_FINISHED or errors <= threshold * ended:
            return
        stopped.append(
            f"fail_on_error: {errors} of {ended} ended episodes were errors "
            f"({100 * errors / ended:.0f}% > {100 * threshold:g}%); the run stopped"
        )
        stop()

    return watch


async def run_experiment(
    config: ExperimentConfig,
    out: str | Path,
    *,
    resume: bool = False,
    bus_url: str | None = None,
    concurrency: int | None = None,
    on_start: Callable[[RunScheduler], None] | None = None,
    on_result: Callable[[EpisodeResult], None] | None = None,
    retry_errors: bool = False,
    force_resume: bool = False,
) -> RunOutcome:
    """Expand ``config``, play what is not finished yet, and return the run's records.

    With more than one worker (``workers`` in the config) the episodes are played in
    child processes (runtime/workers.py); with ``workers: remote``, by ``parley worker``
    processes over the MQTT bus (runtime/remote.py). ``on_result`` is then not called, since
    this process sees records, not results.

    Episodes start in :func:`~parley.runtime.experiment.play_order` (games, pairings and
    seeds interleaved: any prefix is a fair sample). The run holds the folder's lock
    throughout: a second run on it raises :class:`~parley.runtime.results.RunFolderError`,
    as does ``resume`` with a config that asks for other episodes (unless ``force_resume``).
    ``retry_errors``: on resume, the episodes recorded as ``error`` are played again (their
    new record supersedes the old). ``fail_on_error`` in the config stops the run early
    (:func:`error_watch`; :attr:`RunOutcome.stopped_by` says why).
    """
    from parley.runtime.workers import discard_prestarted

    try:
        specs = play_order(expand(config))
        url = bus_url or config.bus
        if config.workers == "remote" and not url.startswith("mqtt"):
            raise ConfigError([("bus", url, "workers: remote needs an MQTT bus: mqtt[s]://host")])
        folder = RunFolder.prepare(
            out,
            config,
            resume=resume or force_resume,
            planned=len(specs),
            lock=True,
            same_config=not force_resume,
        )
    except BaseException:
        discard_prestarted()  # worker processes started ahead for a run that will not be
        raise
    try:
        return await _run_in_folder(
            config, folder, specs, bus_url, concurrency, on_start, on_result, retry_errors
        )
    except BaseException:
        # A run that could not start (a memory store, a broker, a model pool …) leaves no
        # folder behind that a second try would have to --resume.
        folder.discard_if_unplayed()
        raise
    finally:
        folder.unlock()


async def _run_in_folder(
    config: ExperimentConfig,
    folder: RunFolder,
    specs: list[EpisodeSpec],
    bus_url: str | None,
    concurrency: int | None,
    on_start: Callable[[RunScheduler], None] | None,
    on_result: Callable[[EpisodeResult], None] | None,
    retry_errors: bool,
) -> RunOutcome:
    """:func:`run_experiment` once its folder is prepared and locked."""
    from parley.runtime.workers import WorkerScheduler, discard_prestarted

    finished = folder.finished_ids()
    if retry_errors:
        finished -= {r["episode"] for r in folder.records() if r["outcome"] == "error"}
    todo = [s for s in specs if s.id not in finished]
    run_id = folder.run_id
    url = bus_url or config.bus
    processes = worker_count(config.workers, len(todo))
    messages = config.tracing.messages
    if messages == "auto":
        messages = url.startswith("mqtt")
    # Opened before the first episode, and before any thread or file of the run's is started:
    # a memory file of another schema, or one that cannot be opened, stops the run here.
    store = open_memory_store(config, folder.path, specs)
    tracing = _run_tracing(config, folder, messages)
    tracing.activate()
    writer = ResultWriter(folder, run_id)
    writer.start()
    options = episode_options(config, run_id)
    options.signer = folder.key  # the run's results are signed with the folder's key
    options.memory_store = store
    # With tracing on: publish spans, and a traceparent on every message. In worker mode the
    # parent's bus carries its run status (the workers play on buses of their own).
    the_bus = tracing.wrap_bus(bus_module.connect(url))
    scheduler = _scheduler(
        config,
        folder,
        todo,
        finished,
        the_bus,
        writer,
        options,
        limit=concurrency or config.concurrency,
        processes=processes,
        url=url,
        messages=messages,
        on_result=on_result,
    )
    scheduler.progress.skipped = len(specs) - len(todo)
    stopped: list[str] = []
    if config.fail_on_error is not None:
        scheduler.progress.watch = error_watch(config.fail_on_error, scheduler.stop, stopped)
    status = _run_status(config, folder, scheduler, the_bus)
    scheduler.status = status
    if on_start is not None:
        on_start(scheduler)
    run_span = tracing.tracer.start_span(
        f"run {config.name}", attributes={"parley.run": run_id, "parley.episodes": len(todo)}
    )
    probe = LoopLagProbe().start()
    status.probe = probe
    try:
        await _play(config, folder, todo, scheduler, the_bus, status, writer, run_span)
    finally:
        if isinstance(scheduler, WorkerScheduler):
            scheduler.close()  # workers started and never given a job (the run failed first)
        discard_prestarted()  # started ahead for a run that played in this process
        run_span.end()
        lag = await probe.stop()
        await writer.close()
        tracing.close()
        if options.memory_store is not None:
            options.memory_store.close()
    return _outcome(folder, scheduler, processes, lag, stopped)


def _run_tracing(config: ExperimentConfig, folder: RunFolder, messages: bool) -> Tracing:
    """The run's tracing (``tracing:`` in the config), into ``folder``; ``messages``: spans
    for the bus messages too."""
    return Tracing(
        folder.path,
        enabled=config.tracing.enabled,
        content=config.tracing.content,
        sample=config.tracing.sample,
        messages=messages,
        attributes={"parley.run": folder.run_id},
    )


def _run_status(
    config: ExperimentConfig, folder: RunFolder, scheduler: RunScheduler, bus: Bus
) -> StatusPublisher:
    """The status of the whole run (process ``main``), published on ``bus`` once started."""
    return StatusPublisher(
        bus,
        scheduler,
        run=folder.run_id,
        process="main",
        name=config.name,
        endpoints=scheduler.endpoint_figures,
        prices=usd_prices(config.models),
        folder=str(folder.path.resolve()),
    )


def _scheduler(
    config: ExperimentConfig,
    folder: RunFolder,
    todo: list[EpisodeSpec],
    finished: set[str],
    bus: Bus,
    writer: ResultWriter,
    options: EpisodeOptions,
    *,
    limit: int,
    processes: int,
    url: str,
    messages: bool,
    on_result: Callable[[EpisodeResult], None] | None,
) -> RunScheduler:
    """The way ``config`` plays ``todo``: ``parley worker`` processes over the bus
    (``workers: remote``), child processes, or this process."""
    from parley.runtime.remote import RemoteScheduler
    from parley.runtime.workers import WorkerScheduler, discard_prestarted, preload_args

    if config.workers == "remote":
        setup = {"config": config.model_dump(mode="json"), "messages": messages}
        return RemoteScheduler(
            todo,
            bus,
            writer,
            options,
            limit,
            setup,
            lease_s=config.remote.lease_s,
            window=config.remote.window,
            no_worker_s=config.remote.no_worker_s,
            finished=finished,
        )
    if processes > 1:
        job = {
            "config": config.model_dump(mode="json"),
            "run": folder.run_id,
            "folder": str(folder.path),
            "bus": url,
            "messages": messages,
            "preload": preload_args(config, todo),
        }
        return WorkerScheduler(todo, writer, options, limit, processes, job)
    scheduler = Scheduler(todo, bus, writer, options, limit, on_result)
    discard_prestarted()  # workers started ahead (workers.prestart) are not needed
    return scheduler


async def _play(
    config: ExperimentConfig,
    folder: RunFolder,
    todo: list[EpisodeSpec],
    scheduler: RunScheduler,
    bus: Bus,
    status: StatusPublisher,
    writer: ResultWriter,
    span: trace.Span,
) -> None:
    """``scheduler.run`` with the run's bus, status, model pool and endpoint provenance open
    around it."""
    options = scheduler.options
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(responsive_gc())
        await stack.enter_async_context(bus)
        status.start()
        stack.push_async_callback(status.stop)  # the final status, before the bus closes
        models = await stack.enter_async_context(open_models(config.models, folder.path, todo))
        options.models = models  # one pool of model clients for every episode
        if isinstance(scheduler, Scheduler):
            preload(todo, models)  # (worker processes preload their own)
        if any(m.batch for m in config.models.values()):
            from parley.runtime.batching import prefetch_first_turns

            # batch: true models: first turns answered through batch APIs, ahead.
            local = isinstance(scheduler, Scheduler)
            await _unless_stopped(
                prefetch_first_turns(todo, models, folder.run_id, folder.path, local=local),
                scheduler,
            )
        # What the endpoints serve, asked in the background, into run.json at the end.
        await stack.enter_async_context(provenance.endpoints_recorded(folder, models, todo))
        # The final status, with the endpoints' figures: before the pool closes.
        stack.push_async_callback(status.stop)
        await scheduler.run(span)
        if writer.failure is not None:
            raise writer.failure


def _outcome(
    folder: RunFolder,
    scheduler: RunScheduler,
    processes: int,
    lag: dict[str, Any],
    stopped: list[str],
) -> RunOutcome:
    """The run's outcome, once it has ended; what run.json keeps of how it was played is
    noted in the folder."""
    from parley.runtime.remote import RemoteScheduler
    from parley.runtime.workers import WorkerScheduler

    takeovers: list[dict[str, Any]] = []
    if isinstance(scheduler, WorkerScheduler):
        loop_lag, errors, takeovers = scheduler.loop_lag, scheduler.errors, scheduler.takeovers
    else:
        loop_lag, errors = [lag], list(scheduler.errors)
    # Messages refused as not the run's own (forged or replayed controls), by kind.
    refused = dict(getattr(scheduler, "refused", None) or {})
    if isinstance(scheduler, RemoteScheduler):
        # Jobs issued again, duplicates dropped, refusals, the workers seen (docs/distributed.md).
        folder.note(
            workers="remote",
            loop_lag=loop_lag,
            errors=errors,
            remote=scheduler.summary(),
            refused=refused,
        )
    elif isinstance(scheduler, WorkerScheduler):
        # The same lease book as a remote run's: issued, re-issued, duplicates, given up.
        leases = scheduler.summary()
        folder.note(
            workers=processes,
            loop_lag=loop_lag,
            errors=errors,
            takeovers=takeovers,
            leases=leases,
            refused=refused,
        )
    else:
        folder.note(
            workers=processes,
            loop_lag=loop_lag,
            errors=errors,
            takeovers=takeovers,
            refused=refused,
        )
    return RunOutcome(
        folder,
        folder.run_id,
        scheduler.progress,
        folder.records(),
        scheduler.stopping,
        loop_lag=loop_lag,
        errors=errors,
        stopped_by=stopped[0] if stopped else None,
    )
