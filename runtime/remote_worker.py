"""``parley worker``: a process on any machine that plays the episodes of distributed runs.

A worker connects to the broker and takes jobs from the MQTT 5 shared subscription
``$share/parley-workers/parley/+/jobs`` (the broker hands each job to one worker, of every run
on the broker). For each run it keeps one runtime while the run has jobs here: the run's config
and model registry from the job's ``setup``, one :class:`~parley.agents.backends.pool.ModelPool`
and one :class:`~parley.runtime.scheduler.Scheduler` fed from a queue. At most ``--slots``
episodes play at once over all runs; the jobs beyond wait in the worker's own queue. Jobs are
taken off the subscription as soon as they arrive (a job the broker has handed to this worker
but the worker has not named would only have its lease run out).

About once a second, per run it holds jobs of, the worker publishes a
:class:`~parley.bus.messages.WorkerHeartbeat` naming every job it holds (queued or playing):
that renews their leases at the coordinator (runtime/remote.py, runtime/leases.py). The
heartbeats go out from a thread of their own, on a connection of their own
(runtime/heartbeats.py): a worker whose event loop is busy is late with its results, not with
its heartbeats, and keeps its jobs. A job is named until its result is published. Each finished episode goes
back as a :class:`~parley.bus.messages.JobResult` (record, transcript, images base64, the
metrics the run keeps), published on the run's ``jobs/done`` topic; a broker that is away holds
nothing up, since the bus keeps what it publishes until the broker acknowledges it. A job from a
coordinator with another parley version, or with game plugins this worker lacks or has at
other versions, is refused with a ``JobResult`` that says what differs.

Stopping (SIGINT or SIGTERM): the worker takes no more jobs, puts back the ones it has not
begun (its heartbeats stop naming them, so the coordinator issues them again within seconds),
finishes the episodes it is playing and publishes their results, then says goodbye (a final
heartbeat) and exits. A second signal cancels the episodes still playing (a cancelled episode is never sent
as a result: the coordinator issues it again). When a run's coordinator ends (its final run
status), the worker drops that run's jobs the same way.

Which messages count (parley.bus.signing): the first job of a run that reaches the worker names
the run's key (the ``run_key`` of its setup, which the job must be signed with); from then on the
worker plays only jobs of that run signed with that key, and obeys only statuses and controls
signed with it. What fails is not played or obeyed, and is counted (:attr:`RemoteWorker.forged`,
in the worker's log). On the secure broker only the coordinator may publish jobs and statuses,
so that first job is the coordinator's (docs/distributed.md).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import parley.bus as bus_module
from parley import event_loop
from parley.agents.backends.pool import ModelPool
from parley.bus import topics
from parley.bus.base import Bus, BusClosed
from parley.bus.codec import PayloadTooLarge
from parley.bus.messages import Job, JobResult, RunStatus, WorkerHeartbeat
from parley.bus.signing import Gate, RunKey, SigningError
from parley.event_loop import responsive_gc
from parley.observability import tracing as tracing_module
from parley.observability.metrics import episode_summary
from parley.runtime.config import ExperimentConfig, masked_url
from parley.runtime.episode import EpisodeResult
from parley.runtime.experiment import EpisodeSpec
from parley.runtime.heartbeats import Heartbeat, Held
from parley.runtime.leases import HEARTBEAT_S
from parley.runtime.remote import incompatibility, installed_plugins, parley_version
from parley.runtime.results import EncodedResult, unrecordable
from parley.runtime.scheduler import Scheduler, episode_options
from parley.runtime.workers import worker_bus_url, worker_models

log = logging.getLogger("parley.runtime.remote_worker")

# A run with no job here for this long has its runtime (model clients) closed.
IDLE_RUN_S = 30.0
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@=-]")


def default_worker_id() -> str:
    """``<host>-<pid>``, made safe as a topic level."""
    return _UNSAFE.sub("_", f"{socket.gethostname()[:64]}-{os.getpid()}")


class RunPlayer:
    """One run's episodes in this worker: its config, model pool and scheduler."""

    def __init__(self, worker: RemoteWorker, job: Job) -> None:
        self.worker = worker
        self.run = job.run
        setup = job.setup
        self.config = ExperimentConfig.model_validate(setup["config"])
        self.options = episode_options(self.config, self.run)
        self.pool = ModelPool(
            worker_models(setup["config"].get("models") or {}, 1),
            tracer=tracing_module.tracer,
            urls=setup.get("urls") or {},
        )
        for name, reason in (setup.get("failed") or {}).items():
            self.pool.mark_failed(name, reason)
        self.options.models = self.pool
        if setup.get("run_key"):
            # The run's key: this worker's results (and EpisodeFinished) are the run's own.
            self.options.signer = RunKey.from_b64(setup["run_key"])
        self.queue: asyncio.Queue[EpisodeSpec | None] = asyncio.Queue()
        self.held: dict[str, int] = {}  # episode -> the attempt this worker has
        self.begun: set[str] = set()
        self.beat_empty = False  # one heartbeat naming nothing after the last job
        # Jobs taken, not yet named by a heartbeat: each begins only once one has named it
        # (so that a job that takes this process down is known to have been here).
        self.announcing: list[EpisodeSpec] = []
        self.announcer: asyncio.Task[None] | None = None
        self.last_job = time.monotonic()
        self.job_sent_at = job.sent_at
        self.scheduler = Scheduler(
            [],
            worker.bus,
            # The writer: finished episodes go back to the coordinator as results.
            self,  # type: ignore[arg-type]
            self.options,
            worker.slots,
            on_begin=lambda spec: self.begun.add(spec.id),
            source=self.queue,
            gate=worker.gate,
        )
        # The run's controls are checked by the worker's gate for the run: its counts and the
        # latest control obeyed outlive this player.
        self.scheduler.control_gate = worker.gates[self.run]
        self.task = asyncio.create_task(self._play(), name=f"run:{self.run}")

    async def _play(self) -> None:
        async with self.pool:
            await self.scheduler.run()

    def take(self, job: Job, spec: EpisodeSpec) -> None:
        self.last_job = time.monotonic()
        self.job_sent_at = max(self.job_sent_at, job.sent_at)
        self.worker.held.add(self.run, spec.id)
        if spec.id in self.held:  # issued again while it is still here: play it once
            self.held[spec.id] = job.attempt
            return
        self.held[spec.id] = job.attempt
        self.announcing.append(spec)
        if self.announcer is None or self.announcer.done():
            self.announcer = asyncio.create_task(self._announce(), name=f"announce:{self.run}")

    async def _announce(self) -> None:
        """Name the jobs just taken in a heartbeat, then let them begin (one heartbeat for
        however many came meanwhile)."""
        while self.announcing:
            await self.worker._beat(self.run, list(self.held))
            await asyncio.sleep(0)  # the heartbeat onto the wire before an episode begins
            taken, self.announcing = self.announcing, []
            for spec in taken:
                self.queue.put_nowait(spec)

    def let_go(self, episode: str) -> None:
        """No heartbeat names ``episode`` from now on."""
        self.held.pop(episode, None)
        self.worker.held.discard(self.run, episode)

    def put_back(self) -> list[str]:
        """Give up the jobs not begun; no new ones start. The ids given up."""
        dropped = [spec.id for spec in self.announcing]
        for episode in dropped:
            self.let_go(episode)
        self.announcing = []
        while not self.queue.empty():
            spec = self.queue.get_nowait()
            if spec is not None:
                dropped.append(spec.id)
                self.let_go(spec.id)
        self.queue.put_nowait(None)  # the playing episodes end, then the scheduler
        return dropped

    async def write(self, result: EpisodeResult) -> None:
        """The scheduler's writer: a finished episode goes back to the coordinator."""
        episode = result.spec.id
        attempt = self.held.get(episode, 1)
        if result.outcome == "cancelled":
            self.let_go(episode)
            return  # stopped here, not played: the coordinator issues it again
        metrics = episode_summary(result) if self.config.tracing.enabled else None
        message = self._message(EncodedResult.safely(result, self.run), metrics, attempt)
        try:
            await self._publish(episode, result, message, attempt)
        finally:
            # Named until its result is with the broker (or cannot be): never before, or a
            # late result would find its job given to another worker.
            self.let_go(episode)

    async def _publish(
        self, episode: str, result: EpisodeResult, message: JobResult, attempt: int
    ) -> None:
        try:
            try:
                await self.worker.bus.publish(topics.job_results(self.run), message)
            except PayloadTooLarge as exc:
                # Too big for the broker (a transcript with many large images): an error record
                # that says why, rather than a job that comes back and fails again forever.
                log.warning("worker %s: result of %s: %s", self.worker.worker_id, episode, exc)
                small = EncodedResult.of(unrecordable(result, exc), self.run)
                await self.worker.bus.publish(
                    topics.job_results(self.run), self._message(small, None, attempt)
                )
        except BusClosed as exc:  # the lease brings the job back to a worker
            log.warning("worker %s: result of %s not sent: %s", self.worker.worker_id, episode, exc)
            return
        self.worker.played += 1

    def _message(
        self, encoded: EncodedResult, metrics: dict[str, Any] | None, attempt: int
    ) -> JobResult:
        """A finished episode as a result message, signed with the run's key if it has one."""
        message = JobResult(
            run=self.run,
            episode=encoded.record["episode"],
            sender=self.worker.worker_id,
            record=encoded.record,
            transcript=encoded.transcript.decode("utf-8", "replace"),
            images={sha: base64.b64encode(data).decode() for sha, data in encoded.images.items()},
            metrics=metrics,
            attempt=attempt,
            worker=self.worker.worker_id,
        )
        signer = getattr(self.options, "signer", None)
        if signer is not None:
            message.signature = signer.sign(message)
        return message

    async def close(self, cancel: bool = False) -> None:
        if cancel:
            self.scheduler.stop()
        else:
            self.put_back()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class RemoteWorker:
    """Takes jobs of every run on the broker, plays them, heartbeats; see the module docs."""

    def __init__(
        self,
        bus: Bus,
        *,
        slots: int = 4,
        worker_id: str | None = None,
        group: str = topics.JOB_GROUP,
        beats: Callable[[], Bus] | None = None,
    ) -> None:
        self.bus = bus
        # A bus of the heartbeats' own, made in their thread; None: heartbeats on ``bus``,
        # from the event loop.
        self.beats = beats
        self.held = Held()  # what the heartbeats name, per run
        self.group = group
        self.slots = max(1, slots)
        self.worker_id = topics.check_id(worker_id or default_worker_id(), "worker id")
        self.host = socket.gethostname()
        self.version = parley_version()
        self.plugins = installed_plugins()
        self.gate = asyncio.Semaphore(self.slots)
        self.runs: dict[str, RunPlayer] = {}
        self.draining = False
        self.played = 0
        self.refused = 0
        # Per run: the key its first job named, which its later jobs, statuses and controls
        # must be signed with, and what failed (parley.bus.signing.Gate).
        self.gates: dict[str, Gate] = {}
        self._unkeyed = Gate("", f"worker {self.worker_id}")  # first jobs that failed their key
        self._closing: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    async def serve(self) -> None:
        """Take and play jobs until :meth:`drain` (or :meth:`cancel`) and every run is done."""
        jobs = self.bus.subscribe(topics.shared_jobs(group=self.group), maxsize=100_000)
        await jobs.ready()
        log.warning(
            "worker %s: %d slots, parley %s, waiting for jobs",
            self.worker_id,
            self.slots,
            self.version,
        )
        thread = await self._beat_thread()
        beating = asyncio.create_task(self._heartbeats(thread is None), name="heartbeats")
        taking = asyncio.create_task(self._take(jobs), name="jobs")
        try:
            await self._stop.wait()
            taking.cancel()
            with contextlib.suppress(Exception):
                await jobs.close()
            await asyncio.gather(*(p.close(self._cancel) for p in list(self.runs.values())))
            await asyncio.gather(*self._closing, return_exceptions=True)
        finally:
            taking.cancel()
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
            if thread is not None:
                await asyncio.to_thread(thread.stop)
            # Goodbye: every lease this worker held ends now.
            for run in list(self.runs):
                await self._beat(run, [], final=True)
            self.runs.clear()

    _cancel = False

    def drain(self) -> None:
        """Stop: no new jobs, the queued ones put back, the playing ones finished."""
        self.draining = True
        self._stop.set()

    def cancel(self) -> None:
        """Stop now: the playing episodes too are put back."""
        self._cancel = True
        self.draining = True
        for player in self.runs.values():
            player.scheduler.stop()
        self._stop.set()

    @property
    def forged(self) -> dict[str, int]:
        """Jobs, statuses and controls refused as not their run's own, by kind."""
        total = dict(self._unkeyed.refused)
        for gate in self.gates.values():
            for kind, n in gate.refused.items():
                total[kind] = total.get(kind, 0) + n
        return total

    def _trusted(self, job: Job) -> bool:
        """Whether ``job`` is signed with its run's key: the key the run's first job here named
        (and was signed with). A forged job is counted, not answered."""
        gate = self.gates.get(job.run)
        if gate is not None:
            return gate.check(job, job.run)
        key: str | None = None
        if job.setup.get("run_key"):
            try:
                key = RunKey.from_b64(str(job.setup["run_key"])).public_b64
            except SigningError:
                key = ""  # no signature verifies with it: the job is refused
        if not Gate(key).check(job):
            # Not signed with the key it names: counted, and the run's next job may name it.
            return self._unkeyed.check(job)
        self.gates[job.run] = Gate(key, f"worker {self.worker_id}")
        return True

    async def _take(self, jobs: Any) -> None:
        async for delivery in jobs:
            job = delivery.message
            if not isinstance(job, Job) or self.draining:
                continue
            if not self._trusted(job):
                continue
            try:
                await self._accept(job)
            except Exception as exc:
                log.exception("worker %s: job %s failed", self.worker_id, job.episode)
                await self._refuse(job, f"this worker cannot play it: {type(exc).__name__}: {exc}")

    async def _accept(self, job: Job) -> None:
        problem = incompatibility(job, self.version, self.plugins)
        if problem is not None:
            await self._refuse(job, problem)
            return
        spec = EpisodeSpec.model_validate(job.spec)
        player = self.runs.get(job.run)
        if player is None:
            player = self.runs[job.run] = RunPlayer(self, job)
            log.warning("worker %s: playing episodes of run %s", self.worker_id, job.run)
            player.task.add_done_callback(functools.partial(self._ended, player))
            self._watch_coordinator(player)
        player.take(job, spec)

    def _ended(self, player: RunPlayer, task: asyncio.Task[None]) -> None:
        """A run's scheduler that failed: its jobs are let go (no heartbeat names them any
        more, so the coordinator issues them again) rather than held forever."""
        if task.cancelled() or task.exception() is None:
            return
        log.error(
            "worker %s: the episodes of run %s failed here: %r",
            self.worker_id,
            player.run,
            task.exception(),
        )
        player.held.clear()
        self.held.clear(player.run)
        if self.runs.get(player.run) is player:
            del self.runs[player.run]

    async def _refuse(self, job: Job, why: str) -> None:
        self.refused += 1
        if self.refused == 1 or self.refused % 100 == 0:
            log.error("worker %s refuses jobs of run %s: %s", self.worker_id, job.run, why)
        await self.bus.publish(
            topics.job_results(job.run),
            JobResult(
                run=job.run,
                episode=job.episode or str(job.spec.get("id", "")),
                sender=self.worker_id,
                attempt=job.attempt,
                worker=self.worker_id,
                refused=why,
            ),
        )

    def _watch_coordinator(self, player: RunPlayer) -> None:
        """Drop the run's jobs when its coordinator ends (its final status, newer than the
        run's latest job here: a resumed run's coordinator leaves an old final one)."""
        sub = self.bus.subscribe(topics.status(player.run, "main"), maxsize=10)

        async def watch() -> None:
            try:
                async for delivery in sub:
                    status = delivery.message
                    if (
                        isinstance(status, RunStatus)
                        and self.gates[player.run].check(status, player.run)
                        and status.final
                        and status.sent_at >= player.job_sent_at
                        and self.runs.get(player.run) is player
                    ):
                        log.warning(
                            "worker %s: run %s ended at its coordinator; its jobs here are dropped",
                            self.worker_id,
                            player.run,
                        )
                        await self._retire(player, cancel=True)
                        return
            finally:
                with contextlib.suppress(Exception):
                    await sub.close()

        task = asyncio.create_task(watch(), name=f"coordinator:{player.run}")
        player.task.add_done_callback(lambda _: task.cancel())

    async def _retire(self, player: RunPlayer, cancel: bool = False) -> None:
        if self.runs.get(player.run) is player:
            del self.runs[player.run]
        await player.close(cancel)
        self.held.clear(player.run)
        await self._beat(player.run, [])

    def _heartbeat(self, run: str, held: list[str], final: bool = False) -> WorkerHeartbeat:
        return WorkerHeartbeat(
            run=run,
            sender=self.worker_id,
            worker=self.worker_id,
            host=self.host,
            version=self.version,
            plugins=self.plugins,
            slots=self.slots,
            held=held,
            interval_s=HEARTBEAT_S,
            final=final,
        )

    async def _beat(self, run: str, held: list[str], final: bool = False) -> None:
        beat = self._heartbeat(run, held, final)
        try:
            await self.bus.publish(topics.worker(run, self.worker_id), beat)
        except Exception as exc:  # the bus keeps trying; a closed one cannot
            log.warning("worker %s: heartbeat not sent: %s", self.worker_id, exc)

    async def _heartbeats(self, beat: bool) -> None:
        """Every interval: runs idle here for long are closed; with ``beat``, the heartbeats
        are sent from here (no thread of their own)."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            now = time.monotonic()
            for run, player in list(self.runs.items()):
                if player.held:
                    player.beat_empty = True
                    if beat:
                        await self._beat(run, list(player.held))
                elif player.beat_empty:
                    player.beat_empty = False
                    if beat:
                        await self._beat(run, [])
                elif now - player.last_job > IDLE_RUN_S and not self.draining:
                    del self.runs[run]
                    self.held.clear(run)
                    self._closing.append(asyncio.create_task(player.close()))

    async def _beat_thread(self) -> Heartbeat | None:
        """The heartbeats' thread, sending on a bus of their own (:class:`BeatBus`); None
        without :attr:`beats`."""
        if self.beats is None:
            return None
        try:
            link = await asyncio.to_thread(BeatBus, self.beats)
        except Exception as exc:  # the main bus connected: heartbeats from the loop will do
            log.warning("worker %s: heartbeats from the event loop: %s", self.worker_id, exc)
            return None

        def send(lag_s: float) -> None:
            for run, held in self.held.groups().items():
                link.publish(topics.worker(run, self.worker_id), self._heartbeat(run, held))

        heartbeat = Heartbeat(send, on_stop=link.close)
        return heartbeat.start(asyncio.get_running_loop())


class BeatBus:
    """A bus of the heartbeats' own, run by an event loop in a thread of its own: what it
    publishes goes out whatever the worker's own loop is doing."""

    def __init__(self, make: Callable[[], Bus]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="beat-bus", daemon=True)
        self.thread.start()
        try:
            self.bus = self._call(self._start(make), 30)
        except BaseException:
            self._end()
            raise

    @staticmethod
    async def _start(make: Callable[[], Bus]) -> Bus:
        return await make().__aenter__()

    def _call(self, work: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout_s)

    def publish(self, topic: str, message: WorkerHeartbeat) -> None:
        self._call(self.bus.publish(topic, message), 5 * HEARTBEAT_S)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self.bus.close(), 10)
        self._end()

    def _end(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def worker_url(bus: str | None, credentials: str | None) -> str:
    """The broker URL: ``--bus``, or the one a credentials file gives (``parley broker
    --secure``); with both, the file's (it carries the user, password and CA)."""
    if credentials:
        from parley.bus.secure import bus_url

        try:
            return str(bus_url(credentials))
        except Exception as exc:  # a missing or malformed file: say which, and why
            raise SystemExit(f"--credentials {credentials}: {exc}") from None
    if not bus:
        raise SystemExit("parley worker: give --bus mqtt[s]://host:port or --credentials FILE")
    return bus


async def run_worker(
    url: str, slots: int, worker_id: str | None, group: str = topics.JOB_GROUP
) -> int:
    """Serve until SIGINT/SIGTERM (a second one cancels the playing episodes)."""
    if not url.startswith("mqtt"):
        print(
            f"parley worker: {url!r} is not an MQTT broker URL (mqtt[s]://host:port)",
            file=sys.stderr,
        )
        return 2
    from parley.runtime.cli import bus_problem

    # A broker that is down or refuses us: one line, rather than waiting without a word.
    problem = await bus_problem(url)
    if problem is not None:
        print(f"parley worker: {problem}", file=sys.stderr)
        return 1
    # Its session ends with its connection: the broker must not queue jobs for a worker that
    # is gone (the coordinator's leases cover the jobs that were on the way).
    the_bus = bus_module.connect(url, session_expiry=0)
    beats_url = worker_bus_url(url, "beats")
    worker = RemoteWorker(
        the_bus,
        slots=slots,
        worker_id=worker_id,
        group=group,
        beats=lambda: bus_module.connect(beats_url, session_expiry=0),
    )
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.warning(
                "worker %s: stopping: finishing the episodes it plays (again to cancel them)",
                worker.worker_id,
            )
            worker.drain()
        else:
            log.warning("worker %s: cancelling the episodes it plays", worker.worker_id)
            worker.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    log.warning("worker %s: connecting to %s", worker.worker_id, masked_url(url))
    async with responsive_gc(), the_bus:
        await worker.serve()
    forged = worker.forged
    log.warning(
        "worker %s: played %d episodes; refused %s as not their run's own; goodbye",
        worker.worker_id,
        worker.played,
        ", ".join(f"{n} {kind}" for kind, n in sorted(forged.items())) or "nothing",
    )
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bus", help="the broker: mqtt://host:port or mqtts://host:8883")
    parser.add_argument("--slots", type=int, default=4, help="episodes played at once (default 4)")
    parser.add_argument(
        "--credentials", metavar="FILE", help="a credentials file from parley broker --secure"
    )
    parser.add_argument("--id", dest="worker_id", help="this worker's name (default host-pid)")
    parser.add_argument(
        "--group",
        help="the workers' shared-subscription group (default: the credentials file's secret "
        f"one, else {topics.JOB_GROUP})",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parley worker", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return command(args)


def command(args: argparse.Namespace) -> int:
    """``parley worker`` with parsed arguments."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    if args.slots < 1:
        print("parley worker: --slots must be at least 1", file=sys.stderr)
        return 2
    url = worker_url(args.bus, args.credentials)
    group = args.group or _credentials_group(args.credentials) or topics.JOB_GROUP
    try:
        topics.check_filter(topics.shared_jobs(group=group))
    except topics.TopicError as exc:
        print(f"parley worker: --group {group!r}: {exc}", file=sys.stderr)
        return 2
    if args.worker_id is not None:  # a topic level of its own (heartbeats, results)
        try:
            topics.check_id(args.worker_id, "worker id")
        except topics.TopicError as exc:
            print(f"parley worker: --id {args.worker_id!r}: {exc}", file=sys.stderr)
            return 2
    return event_loop.run(run_worker(url, args.slots, args.worker_id, group))


def _credentials_group(credentials: str | None) -> str | None:
    if not credentials:
        return None
    from parley.bus.secure import job_group

    return job_group(credentials)


if __name__ == "__main__":
    sys.exit(main())
