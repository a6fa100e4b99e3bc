"""A run whose episodes ``parley worker`` processes play on other machines: the coordinator.

With ``workers: remote`` the run's own process (the coordinator) plays nothing. It publishes
each episode as a :class:`~parley.bus.messages.Job` on ``parley/{run}/jobs``; workers take jobs
through one MQTT 5 shared subscription (the broker hands each job to one of them), play them
and publish each finished episode as a :class:`~parley.bus.messages.JobResult` on
``parley/{run}/jobs/done``. The coordinator stays the single writer of the run folder: it
writes every result through the same :class:`~parley.runtime.results.ResultWriter` a local run
uses, so ``--resume``, reports and the dashboard cannot tell the difference.

Nothing here relies on the broker to deliver a job exactly once, or at all: Mosquitto can drop
a shared subscriber's in-flight QoS 1 message when that subscriber disconnects (its issue 2662),
and a broker restarted without its database forgets everything queued. Instead each job is
*leased*, by the rules local worker processes follow too (runtime/leases.py):

- at most ``window`` jobs are out at once (taken or not);
- a job counts as taken once a worker's heartbeat (:class:`WorkerHeartbeat`, about once a
  second, sent from a thread of the worker's own) names it, and each such heartbeat renews the
  lease;
- a job no heartbeat has named for ``lease_s`` is issued again with ``attempt + 1`` (one its
  worker stopped naming too: its result may come late; half a second after a worker's final
  heartbeat);
- a worker silent for longer than its lease is taken over: its jobs go out again, each counts
  a death, and an episode that keeps taking its workers down is played alone, then given up
  and recorded as ``error`` with the reason;
- results are idempotent by episode id: the first wins, later ones are counted as duplicates
  and dropped. So a worker that was merely slow, or a result that arrives after a restart, does
  no harm: at worst an episode is played twice and recorded once.

Jobs and the coordinator's controls are signed with the run's key (parley.bus.signing), as the
results are; a worker plays only jobs signed with the key it trusts for the run, and the
coordinator obeys only a pause or resume that the key signs (a dashboard that can read the
run's folder signs its own). What it refuses is counted (``refused``, in ``run.json``).

A worker that refuses a job (another parley version, a game plugin it lacks or has at another
version) says why in a ``JobResult`` with ``refused``; the job goes out again, and when every
worker seen refuses, the run ends with that reason instead of waiting forever. With no worker
at all, the run says so within ``no_worker_s`` (a log line, and ``waiting`` for the progress
display) and keeps waiting: a worker started later picks the jobs up, and Ctrl-C ends the run
with its folder resumable.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import anyio
from opentelemetry import trace

from parley.bus import topics
from parley.bus.base import Bus, Subscription
from parley.bus.messages import Control, Job, JobResult, Outcome, WorkerHeartbeat
from parley.bus.signing import Gate
from parley.observability import tracing as tracing_module
from parley.records import record_of
from parley.runtime.episode import EpisodeOptions
from parley.runtime.experiment import EpisodeSpec
from parley.runtime.leases import LeaseBook
from parley.runtime.results import EncodedResult, RecordingFailed, ResultWriter
from parley.runtime.scheduler import Progress
from parley.runtime.status import StatusPublisher, model_tokens, pairing_key

log = logging.getLogger("parley.runtime.remote")

# Test-only: makes this process claim another parley version, so that a test can start a
# worker that differs from its coordinator (docs/distributed.md). Never set it in a real run.
VERSION_ENV = "PARLEY_VERSION_OVERRIDE"
# How often the coordinator looks at its leases and its window.
TICK_S = 0.2
# Jobs the broker handed a worker as it left go out again after this many of its intervals.
RELEASE_BEATS = 3
# A worker is taken for gone after this many heartbeat intervals without one (or its lease).
SILENT_BEATS = 5
# Every worker refuses: the run ends once no other worker has shown up for this long.
REFUSAL_GRACE_S = 3.0
_OUTCOMES = {o.value for o in Outcome} - {Outcome.CANCELLED.value}


def _verify(message: JobResult, public_b64: str) -> bool:
    from parley.bus.signing import verify

    return verify(message, public_b64)


def parley_version() -> str:
    """This process's parley version (``PARLEY_VERSION_OVERRIDE`` for tests)."""
    override = os.environ.get(VERSION_ENV)
    if override:
        return override
    import parley

    return str(parley.__version__)


def installed_plugins() -> dict[str, str]:
    """Every game plugin here: entry point name → its distribution's version; a module added
    with ``PARLEY_PLUGINS`` maps to ``unpackaged``."""
    from parley.environments import registry

    found: dict[str, str] = {}
    for ep in entry_points(group=registry.GAMES_GROUP):
        dist = getattr(ep, "dist", None)
        found[ep.name] = str(dist.version) if dist is not None else "unknown"
    hacks = os.environ.get(registry.PLUGINS_ENV, "")
    for module in (m.strip() for m in hacks.split(",")):
        if module:
            found[module] = "unpackaged"
    return found


def plugins_for(games: Iterable[str]) -> dict[str, str]:
    """The plugins (name → version, as :func:`installed_plugins`) that provide ``games``: what
    a worker needs, at the same versions, to play them."""
    from parley.environments import registry

    modules: dict[str, str] = {}
    for ep in entry_points(group=registry.GAMES_GROUP):
        modules[ep.value.partition(":")[0].strip()] = ep.name
    hacks = os.environ.get(registry.PLUGINS_ENV, "")
    for module in (m.strip() for m in hacks.split(",")):
        if module:
            modules[module] = module
    versions = installed_plugins()
    out: dict[str, str] = {}
    for game in set(games):
        where = registry.get(game).game_master.__module__
        for module, name in modules.items():
            if where == module or where.startswith(module + "."):
                out[name] = versions[name]
    return out


def incompatibility(job: Job, version: str, plugins: dict[str, str]) -> str | None:
    """Why a worker with ``version`` and ``plugins`` must not play ``job``; None when it may."""
    problems = []
    if job.version != version:
        problems.append(f"parley {version} here, {job.version or 'unknown'} at the coordinator")
    for name, wanted in sorted(job.plugins.items()):
        have = plugins.get(name)
        if have is None:
            problems.append(f"game plugin {name!r} ({wanted}) is not installed here")
        elif have != wanted:
            problems.append(f"game plugin {name!r} is {have} here, {wanted} at the coordinator")
    return "; ".join(problems) or None


@dataclass
class WorkerSeen:
    """A worker as the coordinator knows it from its heartbeats and results."""

    worker: str
    host: str = ""
    version: str = ""
    slots: int = 0
    interval_s: float = 1.0
    first_seen: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.monotonic)
    holding: set[str] = field(default_factory=set)
    results: int = 0
    refused: str | None = None
    left: bool = False

    def alive(self, now: float, lease_s: float) -> bool:
        return not self.left and now - self.last_seen < max(SILENT_BEATS * self.interval_s, lease_s)

    def summary(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "version": self.version,
            "slots": self.slots,
            "first_seen": round(self.first_seen, 3),
            "results": self.results,
            "refused": self.refused,
            "left": self.left,
        }


class RemoteScheduler:
    """Hands ``specs`` to ``parley worker`` processes over ``bus`` and records their results.

    The same surface as :class:`~parley.runtime.scheduler.Scheduler` (``progress``, ``stop``,
    ``pause``, ``resume``, ``abort``, ``run()``, ``status``, ``loop_lag``, ``errors``).
    ``setup`` is what every worker needs to play the run (its config and model registry); the
    URLs of model servers the run launched are added when it starts. ``book`` is its lease
    book (runtime/leases.py); ``counts`` says how many jobs went out again (``reissued``: their
    worker went silent; ``unclaimed``: no worker took them in time), workers ``takeovers``,
    ``duplicates`` dropped, episodes ``given_up``, ``refusals`` and ``malformed`` results;
    ``workers`` every worker seen; ``waiting`` why the run waits (no worker), or None.
    """

    status: StatusPublisher | None = None

    def __init__(
        self,
        specs: list[EpisodeSpec],
        bus: Bus,
        writer: ResultWriter,
        options: EpisodeOptions,
        concurrency: int,
        setup: dict[str, Any],
        *,
        lease_s: float = 15.0,
        window: int | None = None,
        no_worker_s: float = 3.0,
        finished: Iterable[str] = (),
    ) -> None:
        self.specs = specs
        self.bus = bus
        self.writer = writer
        self.options = options
        self.concurrency = concurrency
        self.setup = setup
        self.lease_s = lease_s
        self.window = max(1, window or concurrency)
        self.no_worker_s = no_worker_s
        self.run_id = options.run
        self.version = parley_version()
        self.plugins = plugins_for(s.game for s in specs)
        self.progress = Progress(planned=len(specs))
        self.stopping = False
        self.paused = False
        self.loop_lag: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.book = LeaseBook(specs, lease_s, finished)
        self._counts = {"refusals": 0, "malformed": 0}
        self.workers: dict[str, WorkerSeen] = {}
        self.waiting: str | None = None
        self._over = asyncio.Event()
        self._recording: set[asyncio.Task[None]] = set()
        self._sending: set[asyncio.Task[None]] = set()
        self._started = time.monotonic()
        self._last_worker = self._started  # the last time a worker that plays was seen
        self._warned_at: float | None = None
        self.signer: Any = None
        # Controls from elsewhere (a dashboard) that the run's key does not sign are refused.
        self.gate = Gate(None, f"run {self.run_id}")

    # -- control ------------------------------------------------------------------------------

    def stop(self) -> None:
        """End the run now; what the workers still play is played again on ``--resume``."""
        self.stopping = True
        self._over.set()

    def pause(self) -> None:
        """Issue no new job, and tell the workers to start no new episode of this run."""
        self.paused = True
        self._send(topics.control(self.run_id), "pause")

    def resume(self) -> None:
        self.paused = False
        self._send(topics.control(self.run_id), "resume")

    def abort(self, episode: str, reason: str = "") -> bool:
        """Ask the worker playing ``episode`` to end it as ``aborted``; False when it is not out
        with a worker."""
        lease = self.book.leases.get(episode)
        if lease is None or not lease.taken:
            return False
        self._send(topics.episode_control(self.run_id, episode), "abort", reason)
        return True

    def _send(self, topic: str, command: str, reason: str = "") -> None:
        episode = topics.parse(topic).episode or ""
        message = Control(
            run=self.run_id,
            episode=episode,
            sender="main",
            command=command,  # type: ignore[arg-type]
            reason=reason,
        )
        if self.signer is not None:
            message.signature = self.signer.sign(message)
        task = asyncio.get_running_loop().create_task(self._publish(topic, message))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _publish(self, topic: str, message: Any) -> None:
        try:
            await self.bus.publish(topic, message)
        except Exception as exc:  # a broker away: the bus queues; a closed bus: nothing to do
            log.warning("could not publish to %s: %s", topic, exc)

    # -- what the run status reads --------------------------------------------------------------

    def turns_in_flight(self) -> int:
        return 0  # the workers play the turns; they count once their episodes are recorded

    def endpoint_figures(self) -> list[list[dict[str, Any]]]:
        return []  # each worker has its own model clients

    @property
    def counts(self) -> dict[str, int]:
        return {**self.book.counts, **self._counts}

    @property
    def refused(self) -> dict[str, int]:
        """Controls refused as not the run's own (forged or replayed), by kind."""
        return self.gate.refused

    def summary(self) -> dict[str, Any]:
        """What ``run.json`` keeps of this run's distribution (``remote``)."""
        return {
            **self.counts,
            "window": self.window,
            "lease_s": self.lease_s,
            "workers": {w: seen.summary() for w, seen in sorted(self.workers.items())},
        }

    # -- the run ----------------------------------------------------------------------------------

    async def run(self, parent: trace.Span | None = None) -> None:
        if not self.specs:
            return
        pool = self.options.models
        # The run's key (parley.bus.signing), when it has one: workers sign their results with
        # it, and a result that does not verify is dropped.
        self.signer = getattr(self.options, "signer", None)
        if self.signer is not None:
            self.setup = {**self.setup, "run_key": self.signer.private_b64()}
            self.gate.public_b64 = self.signer.public_b64
        self.setup = {
            **self.setup,
            "urls": getattr(pool, "urls", {}),
            "failed": getattr(pool, "failed", {}),
            "traceparent": tracing_module.inject(parent) if parent is not None else None,
        }
        results = self.bus.subscribe(topics.job_results(self.run_id), maxsize=100_000)
        beats = self.bus.subscribe(topics.all_workers(self.run_id), maxsize=100_000)
        control = self.bus.subscribe(topics.control(self.run_id), maxsize=100)
        try:
            # Listening before the first job goes out: no result can come before it.
            await results.ready()
            await beats.ready()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._take_results, results)
                tg.start_soon(self._take_heartbeats, beats)
                tg.start_soon(self._take_control, control)
                tg.start_soon(self._watch)
                await self._over.wait()
                tg.cancel_scope.cancel()
        finally:
            for sub in (results, beats, control):
                with contextlib.suppress(Exception):
                    await sub.close()
            if self._recording:
                await asyncio.gather(*self._recording)
            if self._sending:
                await asyncio.gather(*self._sending, return_exceptions=True)

    def _done(self) -> bool:
        return self.book.done()

    async def _take_control(self, sub: Subscription) -> None:
        """A pause or resume from elsewhere (a dashboard): the workers obey it themselves;
        here no new job goes out while paused."""
        async for delivery in sub:
            message = delivery.message
            if not isinstance(message, Control):
                continue
            if message.command in ("pause", "resume") and self.gate.control(
                message, "run", self.run_id
            ):
                self.paused = message.command == "pause"

    def _outage(self) -> float:
        """Seconds this process's bus has been cut off from the broker so far."""
        try:
            return self.bus.outage_s()
        except RuntimeError:
            return 0.0

    async def _watch(self) -> None:
        """Every tick: silent workers are taken over, jobs whose lease ran out go out again,
        the window is filled, and the run says when it waits for workers or every worker
        refuses."""
        outage = self._outage()
        last = time.monotonic()
        while not self._over.is_set():
            now = time.monotonic()
            # While this process is cut off, or its own loop is late, no heartbeat can reach
            # it: leases do not run.
            cut_off = self._outage() - outage
            late = max(0.0, now - last - 2 * TICK_S)
            last = now
            if cut_off > 0 or late > 0:
                outage += max(0.0, cut_off)
                self.book.shift(max(cut_off, late))
            for worker in self.book.silent(now):
                await self._take_over(worker)
            self.book.again(lease.spec for lease in self.book.due(now))
            if not self.paused:
                for spec in self.book.hand_out(self.window - len(self.book.leases)):
                    await self._issue(spec)
            self._update_running(now)
            self._check_workers(now)
            if self._done():
                self._over.set()
                return
            await asyncio.sleep(TICK_S)

    async def _take_over(self, worker: str) -> None:
        """``worker`` went silent with jobs: they go out again; poison is recorded."""
        again, given_up = self.book.lost(worker)
        log.warning(
            "run %s: worker %s went silent holding %d jobs; they go out again",
            self.run_id,
            worker,
            len(again) + len(given_up),
        )
        self.book.again(again)
        for spec in given_up:
            if self.book.result(spec.id):
                result = self.book.poison(spec, f"worker {worker} went silent")
                self._keep_task(self._record(EncodedResult.of(result, self.run_id)))

    async def _issue(self, spec: EpisodeSpec) -> None:
        lease = self.book.issue(spec, time.monotonic())
        job = Job(
            run=self.run_id,
            episode=spec.id,
            sender="main",
            spec=spec.model_dump(mode="json"),
            attempt=lease.attempt,
            setup=self.setup,
            version=self.version,
            plugins=self.plugins,
            lease_s=self.lease_s,
        )
        if self.signer is not None:
            job.signature = self.signer.sign(job)
        await self.bus.publish(topics.jobs(self.run_id), job)

    def _keep_task(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)

    def _update_running(self, now: float) -> None:
        self.progress.running = sum(
            1
            for lease in self.book.leases.values()
            if lease.holder is not None
            and (seen := self.workers.get(lease.holder)) is not None
            and seen.alive(now, self.lease_s)
        )

    def _check_workers(self, now: float) -> None:
        if self.paused:  # workers that hold nothing are silent
            self._last_worker = now
            return
        alive = [w for w in self.workers.values() if w.alive(now, self.lease_s)]
        playing = [w for w in alive if w.refused is None]
        if playing:
            self._last_worker = now
            if self.waiting is not None:
                log.warning("run %s: worker %s is taking jobs", self.run_id, playing[0].worker)
                self.waiting = None
                self._warned_at = None
            return
        refusers = [w for w in alive if w.refused is not None]
        if refusers and now - self._last_worker > REFUSAL_GRACE_S:
            reasons = "; ".join(f"{w.worker}: {w.refused}" for w in refusers)
            self.errors.append(
                f"every worker refuses the jobs of run {self.run_id} ({reasons}); start workers "
                f"with parley {self.version} and the same game plugins, then --resume"
            )
            log.error("%s", self.errors[-1])
            self.stop()
            return
        if now - self._last_worker >= self.no_worker_s and not self._done():
            self.waiting = (
                f"no worker has taken a job for {now - self._last_worker:.0f} s: waiting for "
                f"workers (start one with: parley worker --bus <this run's broker>)"
            )
            if self._warned_at is None or now - self._warned_at >= 30:
                log.warning("run %s: %s", self.run_id, self.waiting)
                self._warned_at = now

    def _seen(self, worker: str) -> WorkerSeen:
        seen = self.workers.get(worker)
        if seen is None:
            seen = self.workers[worker] = WorkerSeen(worker)
            log.info("run %s: worker %s joined", self.run_id, worker)
        seen.last_seen = time.monotonic()
        return seen

    async def _take_heartbeats(self, sub: Subscription) -> None:
        async for delivery in sub:
            beat = delivery.message
            if not isinstance(beat, WorkerHeartbeat) or beat.run != self.run_id:
                continue
            now = time.monotonic()
            seen = self._seen(beat.worker)
            seen.host, seen.version, seen.slots = beat.host, beat.version, beat.slots
            seen.interval_s = max(0.05, beat.interval_s)
            seen.left = beat.final
            self.book.beat(beat.worker, beat.held, now, beat.interval_s, final=beat.final)
            seen.holding = self.book.holders[beat.worker].holding
            if beat.final:
                log.info("run %s: worker %s left", self.run_id, beat.worker)
                # Jobs the broker was handing it as it left never reached a heartbeat of its:
                # a job no one has named yet goes out again unless a worker names it soon
                # (workers take jobs as they arrive, and name them within a second).
                soon = now + min(self.lease_s, RELEASE_BEATS * seen.interval_s)
                for lease in self.book.leases.values():
                    if not lease.taken:
                        lease.deadline = min(lease.deadline, soon)

    async def _take_results(self, sub: Subscription) -> None:
        async for delivery in sub:
            message = delivery.message
            if not isinstance(message, JobResult) or message.run != self.run_id:
                continue
            worker = message.worker or message.sender
            seen = self._seen(worker)
            if message.refused is not None:
                self._refused(seen, message)
                continue
            encoded = self._decode(message)
            if encoded is None:
                continue
            episode = encoded.record["episode"]
            if encoded.record["outcome"] == Outcome.CANCELLED.value:
                # Not a result: its worker stopped it. It goes out again.
                self.book.put_back(episode, time.monotonic())
                continue
            if not self.book.result(episode):
                continue  # a duplicate: counted by the book
            seen.results += 1
            encoded.record["worker"] = worker
            self._keep_task(self._record(encoded))
            if self._done():
                self._over.set()

    def _refused(self, seen: WorkerSeen, message: JobResult) -> None:
        self._counts["refusals"] += 1
        if seen.refused is None:
            log.error(
                "run %s: worker %s refuses its jobs: %s", self.run_id, seen.worker, message.refused
            )
        seen.refused = message.refused
        lease = self.book.leases.get(message.episode)
        if lease is not None:
            # Out again soon, for another worker (not at once: it may come back to this one).
            lease.deadline = min(lease.deadline, time.monotonic() + 1.0)

    def _decode(self, message: JobResult) -> EncodedResult | None:
        """The result as the run folder's bytes, or None (counted) when it is not whole."""
        record = message.record
        try:
            if self.signer is not None and not _verify(message, self.signer.public_b64):
                raise ValueError("its signature is not the run key's")
            # What a worker sends is checked as any reader of a record would read it (a
            # NotARecord is a ValueError: it says what the record lacks).
            typed = record_of(record)
            if typed.outcome not in {*_OUTCOMES, Outcome.CANCELLED.value}:
                raise ValueError(f"outcome {typed.outcome!r}")
            if typed.run != self.run_id:
                raise ValueError(f"its record is of run {typed.run!r}")
            images = {}
            for sha, data in message.images.items():
                raw = base64.b64decode(data, validate=True)
                if hashlib.sha256(raw).hexdigest() != sha:
                    raise ValueError(f"image {sha[:12]}… does not match its hash")
                images[sha] = raw
            transcript = message.transcript.encode()
        except (ValueError, binascii.Error) as exc:
            self._counts["malformed"] += 1
            log.warning("run %s: dropped a result from %s: %s", self.run_id, message.worker, exc)
            return None
        return EncodedResult(typed.json_dict(), transcript, images, message.metrics)

    async def _record(self, result: EncodedResult) -> None:
        try:
            await self.writer.write(result)
        except RecordingFailed:
            self.stop()  # run_experiment raises the failure
            return
        record = result.record
        players = (record.get("spec") or {}).get("players") or {}
        tokens = model_tokens(players, record.get("tokens") or {})
        self.progress.count(
            record["outcome"],
            int(record.get("turns", 0)),
            tokens,
            pairing_key(record["game"], record.get("pairing") or {}),
        )
