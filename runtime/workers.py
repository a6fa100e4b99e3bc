"""A run's episodes played in worker processes: one event loop per core.

One event loop runs on one core. A run of thousands of model-played episodes keeps that core
busy (building requests, parsing replies, stepping games) and its loop falls behind; with
``workers: N`` the parent splits the episodes among N child processes, each a whole runtime
(its own bus connection, model clients, tracing, episodes), and stays the single writer of the
run folder. A worker streams each finished episode back as the bytes of its record, transcript
and images; the parent writes and fsyncs them exactly as a one-process run does, so the folder,
resume and every reader are the same either way.

Parent and worker talk over a socket pair in frames: a 4-byte length, a 1-byte kind and a
payload. Parent to worker: ``J`` the job (JSON), ``G`` go (start the opening episodes), ``S``
stop, ``P`` pause (start no new episode), ``C`` continue (resume after a pause), ``A`` abort
one episode (JSON: ``episode``, ``reason``; a worker that is not playing it ignores it). The
job carries the run's signing key (``run_key``, parley.bus.signing): a worker signs its
episodes' results as the parent would. Worker to parent: ``Y`` ready (set up, waiting for
``G``), ``B`` an episode begun (its id), ``R`` a finished episode, ``U`` its figures for the
run status each second (JSON: endpoints, turns in flight), ``D`` done (JSON: its loop lag and
last figures), ``E`` a failure (its traceback). A worker that loses its parent stops its
episodes and exits. On a second socket pair, from a thread of its own (runtime/heartbeats.py),
a worker sends ``H`` every second: its heartbeat (JSON: ``held``, the episodes of its job whose
results it has not sent yet, and ``lag_s``, how late its event loop is).

The run's first workers open together. Each sets itself up (bus, model clients, tracing),
says ``Y`` and waits; the parent says ``G`` to all once every one is ready, has died, or
:data:`OPENING_WAIT_S` has passed since the first. Without it, a worker that was set up
sooner sent its share of the opening requests well before the other's, and a batching server
got them in two waves. A
process taking over a dead worker's episodes does not wait.

Pause, resume and abort reach a worker two ways: from the parent's
:meth:`WorkerScheduler.pause` (and friends) as frames, and as ``Control`` messages on the bus,
to which every worker's scheduler subscribes (over MQTT a dashboard's control reaches each
worker directly; on the local bus, which a worker has to itself, only the frames do). A
``Control`` from the bus is obeyed only when the run's key signs it; a worker counts the ones it
refuses in its figures (``refused``), and the parent adds them up for ``run.json``.

The jobs a worker holds are leased, by the rules a distributed run's jobs follow
(runtime/leases.py): a worker that dies before it is done, or whose heartbeats stop for longer
than its lease (stopped, or hung as a whole), is taken over: a fresh process plays its
unfinished episodes, so the run still ends with every episode. A process taken over for
silence is told to start nothing more (``P``); what it still sends counts only where it comes
first, later copies are dropped as duplicates, and the run's end stops it. An episode that
keeps taking down the process that plays it is found and recorded as ``error`` with the reason
(see ``WorkerScheduler._keep``), so one such episode cannot stall the run or kill every worker
in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from opentelemetry import trace

import parley.bus as bus_module
from parley import event_loop
from parley.agents.backends.pool import ModelPool
from parley.agents.backends.spec import ModelSpec
from parley.agents.backends.transport import BACKENDS, uses_sdk
from parley.bus.signing import RunKey
from parley.event_loop import LoopLagProbe, Pacer, responsive_gc
from parley.observability import tracing as tracing_module
from parley.observability.tracing import Tracing, span_context
from parley.records import loads
from parley.runtime.config import ConfigError, ExperimentConfig
from parley.runtime.episode import EpisodeOptions, EpisodeResult
from parley.runtime.experiment import EpisodeSpec, memory_chains
from parley.runtime.heartbeats import Heartbeat, Held
from parley.runtime.launch import models_used
from parley.runtime.leases import LeaseBook
from parley.runtime.results import EncodedResult, RecordingFailed, ResultWriter
from parley.runtime.scheduler import (
    Progress,
    Scheduler,
    episode_options,
    open_memory_store,
    preload,
)
from parley.runtime.status import StatusPublisher, model_tokens, pairing_key, usd_prices

_FRAME = struct.Struct(">IB")
# The longest the run's first workers wait for each other before they open (see above): one
# that takes longer to set up must not hold the others' episodes back for long.
OPENING_WAIT_S = 5.0
# A worker's lease when the job's config names none (the config's remote.lease_s does).
LEASE_S = 15.0
# How often the parent looks for workers whose heartbeats stopped.
TICK_S = 0.2
# A result frame's header's length, and its record's (which starts after _RECORD).
_HEADER = struct.Struct(">II")
_RECORD = b'{"record": '

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("parley.runtime.workers")


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return _FRAME.pack(len(payload), kind[0]) + payload


async def read_frame(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The next frame's kind and payload; ``IncompleteReadError`` at the end of the stream."""
    length, kind = _FRAME.unpack(await reader.readexactly(_FRAME.size))
    return bytes([kind]), await reader.readexactly(length)


def pack_result(result: EncodedResult) -> bytes:
    """A finished episode as one payload: a JSON header, then the transcript and image bytes
    (the record as :meth:`EncodedResult.safely` encoded it, when it did)."""
    record_json = result.record_json
    record = (record_json if record_json is not None else json.dumps(result.record)).encode()
    # The header json.dumps would write for {"record", "transcript", "images", "metrics"}.
    images = json.dumps([[sha, len(data)] for sha, data in result.images.items()])
    header = _RECORD + b'%s, "transcript": %d, "images": %s, "metrics": %s}' % (
        record,
        len(result.transcript),
        images.encode(),
        json.dumps(result.metrics).encode(),
    )
    return b"".join(
        [_HEADER.pack(len(header), len(record)), header, result.transcript, *result.images.values()]
    )


def unpack_result(payload: bytes) -> EncodedResult:
    size, record_size = _HEADER.unpack_from(payload)
    at = _HEADER.size + size
    # orjson, and the standard library for what it refuses (NaN, integers over 64 bits), so
    # that the parent gets the record the worker had.
    header = loads(payload[_HEADER.size : at])
    transcript = payload[at : at + header["transcript"]]
    at += header["transcript"]
    images: dict[str, bytes] = {}
    for sha, length in header["images"]:
        images[sha] = payload[at : at + length]
        at += length
    # The record's JSON as the worker wrote it (json.dumps: ASCII), for the writer to take.
    start = _HEADER.size + len(_RECORD)
    record_json = payload[start : start + record_size].decode("ascii")
    return EncodedResult(header["record"], transcript, images, header.get("metrics"), record_json)


def split(total: int, parts: int) -> list[int]:
    """``total`` shared out as evenly as whole numbers allow (the first parts get the rest)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def worker_models(models: dict[str, Any], workers: int) -> dict[str, ModelSpec]:
    """Each worker's share of every endpoint's concurrency limits, so that together the workers
    keep as many requests in flight as one process would."""
    out = {}
    for name, raw in models.items():
        spec = ModelSpec.model_validate(raw)
        limits = spec.concurrency
        share = {
            k: max(1, math.ceil(getattr(limits, k) / workers)) for k in ("start", "min", "max")
        }
        out[name] = spec.model_copy(update={"concurrency": limits.model_copy(update=share)})
    return out


# --- starting worker processes -------------------------------------------------------------


class Spawned:
    """A worker process, started and importing, and the parent's ends of its socket pairs: one
    for frames, one for the heartbeats its own thread sends (runtime/heartbeats.py)."""

    def __init__(self, preload_args: list[str]) -> None:
        ours, theirs = socket.socketpair()
        beats, their_beats = socket.socketpair()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self.args = tuple(preload_args)
        fds = (theirs.fileno(), their_beats.fileno())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "parley.runtime.workers", *map(str, fds), *preload_args],
            pass_fds=fds,
            env=env,
        )
        theirs.close()
        their_beats.close()
        self.sock = ours
        self.beats = beats

    def discard(self) -> None:
        """Not needed after all: it reads the end of its stream, and exits."""
        self.sock.close()
        self.beats.close()

    async def wait(self, timeout_s: float) -> int:
        """Its exit code, killing it after ``timeout_s``."""
        try:
            return await asyncio.wait_for(asyncio.to_thread(self.process.wait), timeout_s)
        except TimeoutError:
            self.process.kill()
            return await asyncio.to_thread(self.process.wait)


def preload_args(config: ExperimentConfig, specs: list[EpisodeSpec]) -> list[str]:
    """What a worker imports while it waits for its job: the games' families and the model
    SDKs these episodes use (a large part of a worker's start, otherwise paid after the job
    arrives, by its first episode)."""
    games = sorted({s.game for s in specs})
    modules = sorted(
        {
            BACKENDS[config.models[m].backend].sdk_name
            for m in models_used(specs)
            if m in config.models
            and config.models[m].backend in BACKENDS
            and uses_sdk(config.models[m])
        }
    )
    return ["--games", ",".join(games), "--modules", ",".join(modules)]


def _preload(games: list[str], modules: list[str]) -> None:
    """Import what :func:`preload_args` names; what fails is left for the episodes to report."""
    from parley.environments import registry

    for module in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    for game in games:
        with contextlib.suppress(Exception):
            registry.find(game)


# Worker processes started ahead of their run (:func:`prestart`), for the scheduler to take.
_PRESTARTED: list[Spawned] = []


def prestart(config: ExperimentConfig) -> list[int]:
    """Start now the worker processes a run of ``config`` will play in, so that they import
    parley, the games and the model SDKs while the caller does other things (``parley run``
    checks the models first); the run's :class:`WorkerScheduler` takes them. Returns their
    process ids (none for a run played in one process, or by ``workers: remote``)."""
    from parley.runtime.experiment import expand
    from parley.runtime.scheduler import worker_count

    if config.workers == "remote":
        return []
    try:
        specs = expand(config)
    except ConfigError:
        return []  # the run refuses the config in its own words
    n = min(worker_count(config.workers, len(specs)), len(specs), config.concurrency)
    if n <= 1:
        return []
    args = preload_args(config, specs)
    started = [Spawned(args) for _ in range(n)]
    _PRESTARTED.extend(started)
    return [worker.process.pid for worker in started]


def _spawn(args: list[str]) -> Spawned:
    """A worker process with these preload arguments: one started ahead if there is one."""
    for worker in list(_PRESTARTED):
        if worker.args == tuple(args) and worker.process.poll() is None:
            _PRESTARTED.remove(worker)
            return worker
    return Spawned(args)


def discard_prestarted() -> None:
    """Let go of the processes :func:`prestart` started that no run took."""
    while _PRESTARTED:
        _PRESTARTED.pop().discard()


# --- the parent ------------------------------------------------------------------------------


def _deal(specs: list[EpisodeSpec], n: int) -> list[list[EpisodeSpec]]:
    """``specs`` dealt to ``n`` workers in turn; with memory across episodes, each chain of
    episodes that share a key whole to one worker (the one with the fewest so far), which
    plays it in order."""
    if not any(m.remembers for s in specs for m in s.memory.values()):
        return [specs[i::n] for i in range(n)]
    shards: list[list[EpisodeSpec]] = [[] for _ in range(n)]
    for chain in memory_chains(specs):
        min(shards, key=len).extend(chain)
    return shards


@dataclass
class _Process:
    """One worker process as the parent drives it: its slot, its name in the lease book, what
    it began, and whether it was taken over (an orphan: its results count only if first)."""

    slot: int
    holder: str
    spawned: Spawned
    link: asyncio.StreamWriter
    begun: set[str] = field(default_factory=set)
    orphan: bool = False
    done: bool = False


class WorkerScheduler:
    """Plays specs in ``workers`` child processes, at most ``concurrency`` at once in all.

    The same surface as :class:`~parley.runtime.scheduler.Scheduler` (``progress``, ``stop()``,
    ``run()``), and :meth:`summary`. Specs are dealt round robin; each worker gets its share of
    the concurrency. ``job`` is what every worker needs to rebuild the run (config, run id,
    folder, bus URL); the model servers the parent launched reach the workers as URLs. The
    jobs out with the workers are leased (runtime/leases.py), for the config's
    ``remote.lease_s``, as a distributed run's are.
    """

    # The run status of the whole run (``main``), set by run_experiment.
    status: StatusPublisher | None = None

    def __init__(
        self,
        specs: list[EpisodeSpec],
        writer: ResultWriter,
        options: EpisodeOptions,
        concurrency: int,
        workers: int,
        job: dict[str, Any],
    ) -> None:
        self.specs = specs
        self.writer = writer
        self.options = options
        self.concurrency = concurrency
        self.workers = max(1, min(workers, len(specs), concurrency))
        self.job = job
        self.progress = Progress(planned=len(specs))
        self.stopping = False
        self.paused = False
        self.loop_lag: list[dict[str, Any]] = []
        self.errors: list[str] = []
        # Workers that died or hung before they were done, and what became of their episodes.
        self.takeovers: list[dict[str, Any]] = []
        lease_s = float(((job.get("config") or {}).get("remote") or {}).get("lease_s") or LEASE_S)
        self.book = LeaseBook(specs, lease_s)
        self._processes: list[_Process] = []
        self._orphans: set[asyncio.Task[int | None]] = set()
        self._hung: dict[str, asyncio.Event] = {}  # per holder: set when it is taken over
        self._share: list[tuple[int, int]] = []  # per worker: (concurrency, episodes left)
        self.pids: dict[int, int] = {}  # worker slot -> the process playing it now
        self.holders: dict[str, int] = {}  # every process's name in the lease book -> its pid
        # Per worker slot: its process's latest figures (``U`` frames: endpoints, turns in
        # flight), and the endpoint counts of the processes that slot lost.
        self._figures: dict[int, dict[str, Any]] = {}
        self._lost: list[list[dict[str, Any]]] = []
        self._refused_lost: dict[str, int] = {}
        self._begun: set[str] = set()
        self._generations: dict[int, int] = {}
        # The opening: worker slots not yet ready, the links of those that are (told ``G``
        # together), and the timer that opens anyway.
        self._opening: set[int] = set()
        self._ready: list[asyncio.StreamWriter] = []
        self._opening_timer: asyncio.TimerHandle | None = None
        # The worker processes start now, while the parent sets the run up (model servers,
        # tracing, the run status): each imports parley, its games and model SDKs meanwhile.
        self._preload = list(job.get("preload", []))
        self._spawned: dict[int, Spawned] = (
            {i: _spawn(self._preload) for i in range(self.workers)} if specs else {}
        )
        discard_prestarted()  # any more than this run needs

    def close(self) -> None:
        """Let go of worker processes started and never given a job (the run ended first)."""
        spawned, self._spawned = list(self._spawned.values()), {}
        for worker in spawned:
            worker.discard()

    def stop(self) -> None:
        """Ask every worker to end its episodes as ``cancelled`` and finish."""
        self.stopping = True
        self._tell(frame(b"S"))

    def pause(self) -> None:
        """Ask every worker to start no new episode until :meth:`resume`."""
        self.paused = True
        self._tell(frame(b"P"))

    def resume(self) -> None:
        """Let every worker start episodes again."""
        self.paused = False
        self._tell(frame(b"C"), orphans=False)

    def abort(self, episode: str, reason: str = "") -> bool:
        """Ask the worker playing ``episode`` to end it as ``aborted`` (``operator_abort``);
        False when it is not running (not begun, or already finished)."""
        if episode not in self._begun or episode in self.book.received:
            return False
        self._tell(frame(b"A", json.dumps({"episode": episode, "reason": reason}).encode()))
        return True

    def _tell(self, message: bytes, orphans: bool = True) -> None:
        for process in self._processes:
            if orphans or not process.orphan:
                with contextlib.suppress(Exception):
                    process.link.write(message)

    def playing(self, holder: str) -> set[str]:
        """The episodes process ``holder`` (a name in :attr:`holders`) began and has not sent."""
        for process in self._processes:
            if process.holder == holder:
                return process.begun - self.book.received
        return set()

    def summary(self) -> dict[str, Any]:
        """The run's lease book: jobs issued, taken over, duplicates dropped, given up."""
        return {**self.book.summary(), "workers": self.workers}

    async def run(self, parent: trace.Span | None = None) -> None:
        if not self.specs:
            return
        n = self.workers
        shards = _deal(self.specs, n)
        limits = split(self.concurrency, n)
        self._share = [(c, len(s)) for c, s in zip(limits, shards, strict=True)]
        self._update_running()
        urls, failed = {}, {}
        pool = self.options.models
        if isinstance(pool, ModelPool):
            urls, failed = pool.urls, pool.failed
        traceparent = tracing_module.inject(parent) if parent is not None else None
        # The run's key, so that a worker's results are signed as the parent's would be.
        signer = self.options.signer
        run_key = signer.private_b64() if signer is not None else None
        recording: set[asyncio.Task[None]] = set()
        self._opening = set(range(n))
        watching = asyncio.create_task(self._watch(), name="leases")
        try:
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    job = {
                        **self.job,
                        "worker": i,
                        "workers": n,
                        "concurrency": limits[i],
                        "urls": urls,
                        "failed": failed,
                        "traceparent": traceparent,
                        "run_key": run_key,
                    }
                    tg.start_soon(self._keep, i, job, shards[i], recording)
            await self._let_go()
        finally:
            watching.cancel()
            self.close()
            if self._opening_timer is not None:
                self._opening_timer.cancel()
            for process in self._processes:
                if process.orphan and process.spawned.process.poll() is None:
                    process.spawned.process.kill()  # the run failed: none outlives it
            for task in self._orphans:
                task.cancel()
            if recording:
                await asyncio.gather(*recording)

    async def _watch(self) -> None:
        """Every tick: a process whose heartbeats stopped for longer than its lease is taken
        over; a tick that came late (this loop was busy) lets no lease run meanwhile."""
        last = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            if now - last > 2 * TICK_S:
                self.book.shift(now - last - TICK_S)
            last = now
            for holder in self.book.silent(now):
                self._hung.setdefault(holder, asyncio.Event()).set()

    async def _let_go(self) -> None:
        """The run is over: processes taken over are told to stop; one still silent (stopped,
        hung) is killed rather than waited for."""
        for process in self._processes:
            if process.orphan:
                with contextlib.suppress(Exception):
                    process.link.write(frame(b"S"))
        now = time.monotonic()
        for process in [p for p in self._processes if p.orphan]:
            holder = self.book.holders.get(process.holder)
            if holder is None or now - holder.last_seen > self.book.lease_s:
                process.spawned.process.kill()
        if self._orphans:
            await asyncio.gather(*self._orphans, return_exceptions=True)

    def _arrived(self, i: int, link: asyncio.StreamWriter | None) -> None:
        """Worker slot ``i`` is ready (``link``: tell it ``G``) or gone (None); the opening
        goes once no slot is left to wait for."""
        if i not in self._opening:
            if link is not None:  # ready after the opening went (its wait ran out): go now
                with contextlib.suppress(Exception):
                    link.write(frame(b"G"))
            return
        self._opening.discard(i)
        if link is not None:
            self._ready.append(link)
            if self._opening_timer is None and self._opening:
                self._opening_timer = asyncio.get_running_loop().call_later(
                    OPENING_WAIT_S, self._open
                )
        if not self._opening:
            self._open()

    def _open(self) -> None:
        """Tell every worker that is ready to start its episodes; later ones go at once."""
        self._opening.clear()
        if self._opening_timer is not None:
            self._opening_timer.cancel()
            self._opening_timer = None
        ready, self._ready = self._ready, []
        for link in ready:
            with contextlib.suppress(Exception):
                link.write(frame(b"G"))

    async def _keep(
        self,
        i: int,
        job: dict[str, Any],
        specs: list[EpisodeSpec],
        recording: set[asyncio.Task[None]],
    ) -> None:
        """Worker ``i``'s share played to the end: a worker that dies, or hangs past its lease,
        is replaced by a fresh process for its unfinished episodes, until they are all recorded.

        The episodes that were being played when a process was lost are suspects (the lease
        book counts their deaths). A process killed from outside (out of memory, a signal)
        costs nothing more: its suspects are played again with the rest. Episodes in flight at
        two losses are played one at a time, each alone in its process, before the rest; one
        that is lost with its process then is the cause, and is recorded as ``error`` rather
        than played a fourth time.
        """
        while specs:
            batch = self.book.alone(specs)
            alone = batch is not specs
            generation = self._generations[i] = self._generations.get(i, -1) + 1
            holder = f"{i}.{generation}"
            now = time.monotonic()
            for spec in batch:
                self.book.issue(spec, now, holder)
            run_job = {
                **job,
                "specs": [s.model_dump(mode="json") for s in batch],
                "concurrency": 1 if alone else job["concurrency"],
            }
            self._share[i] = (run_job["concurrency"], len(batch))
            self._update_running()
            process, code = await self._drive(i, holder, run_job, recording)
            left = [s for s in specs if s.id not in self.book.received]
            if self.stopping:
                return
            if process.done:
                specs = left
                continue
            if not process.begun:
                # It was lost before it began anything (it could not start): another would be.
                how = "hung" if process.orphan else f"exited with code {code}"
                self.errors.append(
                    f"worker {i} {how} before it began an episode; "
                    f"{len(left)} episodes left for --resume"
                )
                return
            specs = await self._take_over(process, code, left)

    async def _take_over(
        self, process: _Process, code: int | None, left: list[EpisodeSpec]
    ) -> list[EpisodeSpec]:
        """``process`` was lost with ``left`` unplayed: what a fresh process plays; the
        episodes given up (poison) are recorded as errors."""
        playing = process.begun - self.book.received
        _, given_up = self.book.lost(process.holder, playing)
        given = {s.id for s in given_up}
        specs = [s for s in left if s.id not in given]
        how = "stopped answering" if process.orphan else f"exited with code {code}"
        self.takeovers.append(
            {
                "worker": process.slot,
                "exit_code": code,
                "hung": process.orphan,
                "unfinished": len(left),
                "given_up": sorted(given),
            }
        )
        log.warning(
            "worker %d %s before it finished; a new process takes over its %d unfinished episodes",
            process.slot,
            how,
            len(specs),
        )
        detail = "it stopped answering" if process.orphan else f"exit code {code}"
        for spec in given_up:
            if self.book.result(spec.id):
                await self._record(
                    EncodedResult.of(self.book.poison(spec, detail), self.options.run)
                )
        return specs

    async def _drive(
        self, i: int, holder: str, job: dict[str, Any], recording: set[asyncio.Task[None]]
    ) -> tuple[_Process, int | None]:
        """Run one worker process over ``job`` until it ends (its exit code) or is taken over
        for silence (None: it is left to end as an orphan, its results dropped unless first)."""
        # The process started with the scheduler, the first time; a fresh one to take over.
        worker = self._spawned.pop(i, None) or Spawned(self._preload)
        self.pids[i] = self.holders[holder] = worker.process.pid
        reader, link = await asyncio.open_unix_connection(sock=worker.sock)
        process = _Process(i, holder, worker, link)
        self._processes.append(process)
        # The run's first process in this slot waits for the others (the opening); a process
        # taking over, or one started after the opening, starts at once.
        job = {**job, "opening": i in self._opening}
        link.write(frame(b"J", json.dumps(job).encode()))
        if self.stopping:
            link.write(frame(b"S"))
        if self.paused:  # a process taking over while the run is paused starts paused
            link.write(frame(b"P"))
        reading = asyncio.create_task(self._read(process, reader, recording))
        hung = self._hung.setdefault(holder, asyncio.Event())
        waiting = asyncio.create_task(hung.wait())
        await asyncio.wait({reading, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if reading.done():
            return process, reading.result()
        # Taken over: it starts nothing more, and the results it still sends count only where
        # they come first (see _read); the run's end stops it.
        process.orphan = True
        with contextlib.suppress(Exception):
            link.write(frame(b"P"))
        self._orphans.add(reading)
        reading.add_done_callback(self._orphans.discard)
        self._slot_gone(i, link, lost=True)
        return process, None

    def _slot_gone(self, i: int, link: asyncio.StreamWriter, lost: bool) -> None:
        """Slot ``i``'s process is no longer the one playing its share."""
        if link in self._ready:
            self._ready.remove(link)
        self._arrived(i, None)  # a worker gone before it was ready holds nobody back
        if lost:
            self._lose_figures(i)
        self._share[i] = (self._share[i][0], 0)
        self._update_running()

    async def _read(
        self, process: _Process, reader: asyncio.StreamReader, recording: set[asyncio.Task[None]]
    ) -> int | None:
        """The frames of ``process`` until its stream ends; its exit code."""
        i, link = process.slot, process.link
        beats = asyncio.create_task(self._take_beats(process))
        try:
            with contextlib.suppress(ConnectionError):
                await link.drain()  # (one that died before its job reached it: read below)
            while True:
                try:
                    kind, payload = await read_frame(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                if kind == b"R":
                    self._took(process, unpack_result(payload), recording)
                elif kind == b"B":
                    process.begun.add(payload.decode())
                    self._begun.add(payload.decode())
                elif process.orphan:
                    continue  # its figures, readiness and report are no longer the slot's
                elif kind == b"Y":
                    self._arrived(i, link)
                elif kind == b"U":
                    self._figures[i] = json.loads(payload)
                elif kind == b"D":
                    report = json.loads(payload)
                    self._figures[i] = report.get("figures", {})
                    self.loop_lag.append({"worker": i, **report["loop_lag"]})
                    process.done = True
                elif kind == b"E":
                    self.errors.append(f"worker {i} failed: {payload.decode(errors='replace')}")
        finally:
            beats.cancel()
            if not process.orphan:
                self._slot_gone(i, link, lost=not process.done)
            self._processes.remove(process)
            link.close()
            with contextlib.suppress(Exception):
                await link.wait_closed()
            code: int | None = await process.spawned.wait(30)
        return code

    def _took(
        self, process: _Process, result: EncodedResult, recording: set[asyncio.Task[None]]
    ) -> None:
        """A finished episode from ``process``: recorded if it is the first for its episode."""
        episode = result.record["episode"]
        if result.record["outcome"] == "cancelled" and not self.stopping:
            return  # a taken-over process stopped it; its new process plays it
        first = self.book.result(episode)  # (a duplicate is counted by the book)
        if process.orphan and not (process.begun - self.book.received):
            with contextlib.suppress(Exception):
                process.link.write(frame(b"S"))  # nothing left that it alone plays
        if not first:
            return
        if not process.orphan:
            concurrency, left = self._share[process.slot]
            self._share[process.slot] = (concurrency, left - 1)
            self._update_running()
        # Written and fsynced in its own task: reading the next one goes on.
        task = asyncio.create_task(self._record(result))
        recording.add(task)
        task.add_done_callback(recording.discard)

    async def _take_beats(self, process: _Process) -> None:
        """The heartbeats of ``process``, from its own thread, into the lease book."""
        reader, writer = await asyncio.open_unix_connection(sock=process.spawned.beats)
        try:
            while True:
                _, payload = await read_frame(reader)
                beat = json.loads(payload)
                self.book.beat(
                    process.holder, beat["held"], time.monotonic(), lag_s=beat.get("lag_s", 0.0)
                )
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    def turns_in_flight(self) -> int:
        """Turns of the episodes the workers are playing, as they last reported."""
        return sum(int(f.get("turns", 0)) for f in self._figures.values())

    def endpoint_figures(self) -> list[list[dict[str, Any]]]:
        """Every worker's endpoints (:meth:`ModelPool.endpoint_status`), as they last
        reported, with the counts of worker processes that died."""
        return [*(f.get("endpoints", []) for f in self._figures.values()), *self._lost]

    @property
    def refused(self) -> dict[str, int]:
        """What the workers refused as not the run's own (forged or replayed controls), by kind,
        as they last reported (with the counts of worker processes that died)."""
        total = dict(self._refused_lost)
        for figures in self._figures.values():
            for kind, n in (figures.get("refused") or {}).items():
                total[kind] = total.get(kind, 0) + int(n)
        return total

    def _lose_figures(self, i: int) -> None:
        """Worker ``i``'s process is gone before it was done: keep its counts, not its load."""
        figures = self._figures.pop(i, None)
        if figures:
            for kind, n in (figures.get("refused") or {}).items():
                self._refused_lost[kind] = self._refused_lost.get(kind, 0) + int(n)
            idle = {"limit": 0, "in_flight": 0, "latencies": []}
            self._lost.append([{**e, **idle} for e in figures.get("endpoints", [])])

    def _update_running(self) -> None:
        self.progress.running = sum(min(c, left) for c, left in self._share)

    async def _record(self, result: EncodedResult) -> None:
        try:
            await self.writer.write(result)
        except RecordingFailed:
            # Nothing more can be recorded: end the run now (run_experiment raises the failure).
            self.stop()
            return
        record = result.record
        tokens = model_tokens((record.get("spec") or {}).get("players") or {}, record["tokens"])
        self.progress.count(
            record["outcome"],
            int(record.get("turns", 0)),
            tokens,
            pairing_key(record["game"], record.get("pairing") or {}),
        )


# --- the worker ------------------------------------------------------------------------------


class _FrameSink:
    """Where a worker's scheduler writes finished episodes: back to the parent, as frames.

    Like the parent's writer, it encodes each episode on its own task, a slice at a time (see
    :class:`~parley.event_loop.Pacer`), with what the run's metrics need from it; ``write``
    returns once the frame is handed to the socket.
    """

    def __init__(self, link: asyncio.StreamWriter, run: str, metrics: bool, held: Held) -> None:
        self.link = link
        self.run = run
        self.held = held
        # What the run's metrics need of an episode; None when tracing is off.
        self.summary: Callable[[EpisodeResult], dict[str, Any]] | None = None
        if metrics:
            # Imported only here: the metrics SDK would slow the start of a run with tracing
            # off (runtime/scheduler.py imports this module for every run).
            from parley.observability.metrics import episode_summary

            self.summary = episode_summary
        self._queue: asyncio.Queue[tuple[EpisodeResult, asyncio.Future[None]]] = asyncio.Queue()
        self._task = asyncio.create_task(self._send(), name="result-frames")

    async def write(self, result: EpisodeResult) -> None:
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((result, future))
        await future

    async def _send(self) -> None:
        pacer = Pacer()
        while True:
            result, future = await self._queue.get()
            try:
                encoded = EncodedResult.safely(result, self.run)
                # The parent keeps the run's metrics: it has CPU to spare, the workers do not.
                if self.summary is not None:
                    encoded.metrics = self.summary(result)
                self.link.write(frame(b"R", pack_result(encoded)))
                await self.link.drain()
            except Exception as exc:
                future.set_exception(exc)
            else:
                future.set_result(None)
            finally:
                # Its heartbeats name it until its result is with the parent, not before.
                self.held.discard("", result.spec.id)
            await pacer.breathe()

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def _listen(reader: asyncio.StreamReader, scheduler: Scheduler, go: asyncio.Event) -> None:
    """Open, pause, resume and abort as the parent says; stop when it says so, or when it is
    gone (then ``go`` too: nothing waits for an opening that will not come)."""
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            kind, payload = await read_frame(reader)
            if kind == b"S":
                break
            if kind == b"G":
                go.set()
            elif kind == b"P":
                scheduler.pause()
            elif kind == b"C":
                scheduler.resume()
            elif kind == b"A":
                order = json.loads(payload)
                scheduler.abort(order["episode"], order.get("reason", ""))
    scheduler.stop()
    go.set()


async def play_job(
    job: dict[str, Any], reader: asyncio.StreamReader, link: asyncio.StreamWriter, held: Held
) -> dict[str, Any]:
    """Play one worker's share of a run; returns its report (its loop lag). ``held`` is what
    its heartbeats name: every episode of the job until its result is sent."""
    config = ExperimentConfig.model_validate(job["config"])
    specs = [EpisodeSpec.model_validate(s) for s in job["specs"]]
    for spec in specs:
        held.add("", spec.id)
    run_id, worker = job["run"], job["worker"]
    url = job["bus"]
    tracing = Tracing(
        Path(job["folder"]),
        enabled=config.tracing.enabled,
        content=config.tracing.content,
        sample=config.tracing.sample,
        messages=job["messages"],
        attributes={"parley.run": run_id, "parley.worker": worker},
        metrics=False,
    )
    tracing.activate()
    the_bus = tracing.wrap_bus(bus_module.connect(worker_bus_url(url, worker)))
    options = episode_options(config, run_id)
    options.memory_store = open_memory_store(config, Path(job["folder"]), specs)
    if job.get("run_key"):
        options.signer = RunKey.from_b64(job["run_key"])
    sink = _FrameSink(link, run_id, metrics=config.tracing.enabled, held=held)
    scheduler = Scheduler(
        specs,
        the_bus,
        sink,  # type: ignore[arg-type]
        options,
        job["concurrency"],
        on_begin=lambda spec: link.write(frame(b"B", spec.id.encode())),
    )
    go = asyncio.Event()
    listener = asyncio.create_task(_listen(reader, scheduler, go))
    probe = LoopLagProbe().start()
    context = span_context(job.get("traceparent"))
    parent = trace.NonRecordingSpan(context) if context is not None else None
    pool = ModelPool(
        worker_models(job["config"]["models"], job["workers"]),
        tracer=tracing_module.tracer,
        urls=job["urls"],
    )
    for name, reason in job["failed"].items():
        pool.mark_failed(name, reason)
    options.models = pool
    preload(specs, pool)  # the clients made before the first episode

    def figures() -> dict[str, Any]:
        return {
            "endpoints": pool.endpoint_status(),
            "turns": scheduler.turns_in_flight(),
            "refused": scheduler.refused,  # controls from the bus not signed with the run's key
        }

    # Its own status on its bus, and its figures to the parent (which counts the whole run).
    status = StatusPublisher(
        the_bus,
        scheduler,
        run=run_id,
        process=f"w{worker}",
        name=config.name,
        endpoints=lambda: [pool.endpoint_status()],
        probe=probe,
        prices=usd_prices(config.models),
        on_tick=lambda: link.write(frame(b"U", json.dumps(figures()).encode())),
    )
    scheduler.status = status
    last: dict[str, Any] = {}
    try:
        async with responsive_gc(), the_bus, pool:
            status.start()
            try:
                if job.get("opening"):  # set up: wait for the other workers (the opening)
                    link.write(frame(b"Y"))
                    await go.wait()
                await scheduler.run(parent)
            finally:
                await status.stop()
                last = figures()  # while the pool is open
    finally:
        lag = await probe.stop()
        await sink.close()
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
        tracing.close()
        if options.memory_store is not None:
            options.memory_store.close()
    return {"loop_lag": lag, "figures": last}


def worker_bus_url(url: str, worker: int | str) -> str:
    """The bus URL for worker ``worker``: a client id chosen in the URL gets a suffix, since two
    connections with one client id would throw each other off the broker."""
    if "client_id=" not in url:
        return url
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    query = [(k, f"{v}-w{worker}" if k == "client_id" else v) for k, v in parse_qsl(parts.query)]
    return urlunsplit(parts._replace(query=urlencode(query)))


async def _serve(fd: int, held: Held, heartbeat: Heartbeat) -> int:
    heartbeat.watch(asyncio.get_running_loop())
    sock = socket.socket(fileno=fd)
    reader, link = await asyncio.open_unix_connection(sock=sock)
    try:
        kind, payload = await read_frame(reader)
    except asyncio.IncompleteReadError:
        return 1
    if kind != b"J":
        return 1
    try:
        report = await play_job(json.loads(payload), reader, link, held)
        link.write(frame(b"D", json.dumps(report).encode()))
        code = 0
    except Exception:
        link.write(frame(b"E", traceback.format_exc().encode()))
        code = 1
    with contextlib.suppress(ConnectionError):
        await link.drain()
    link.close()
    with contextlib.suppress(Exception):
        await link.wait_closed()
    return code


def main(argv: list[str] | None = None) -> int:
    """``FD BEATS [--games G,G] [--modules M,M]``: serve the parent on socket ``FD`` and send
    heartbeats on ``BEATS``, after importing the games and modules named (while the parent is
    still setting the run up)."""
    args = sys.argv[1:] if argv is None else argv
    # Ctrl-C reaches the whole process group: the parent decides, and tells us with a frame.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="worker %(process)d: %(message)s")
    named = dict(zip(args[2::2], args[3::2], strict=False))
    held = Held()
    beats = socket.socket(fileno=int(args[1]))

    def beat(lag_s: float) -> None:
        beats.sendall(frame(b"H", json.dumps({"held": held.names(""), "lag_s": lag_s}).encode()))

    # Beating from the start: the imports below and the setup take a while, and this process
    # is alive all along.
    heartbeat = Heartbeat(beat).start()
    _preload(
        [g for g in named.get("--games", "").split(",") if g],
        [m for m in named.get("--modules", "").split(",") if m],
    )
    try:
        return event_loop.run(_serve(int(args[0]), held, heartbeat))
    finally:
        heartbeat.stop()


if __name__ == "__main__":
    sys.exit(main())
