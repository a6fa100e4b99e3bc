"""The book of a run's jobs out with workers: leases, heartbeats, take-over, poison, duplicates.

Transport-free, and the one place these rules live: :class:`~parley.runtime.workers.
WorkerScheduler` (worker processes over socket pairs) and :class:`~parley.runtime.remote.
RemoteScheduler` (``parley worker`` processes over MQTT) each tell a :class:`LeaseBook` what
their transport brings (a job issued, a heartbeat, a result, a worker gone) and do what it says
(issue again, record, give up).

- A job issued is *leased*. A worker's heartbeat renews every lease issued to it or named in
  the heartbeat, for ``lease_s`` plus a few times the loop lag the worker reports: a worker
  that is alive but slow keeps its jobs. A lease it named before and names no more (finished,
  its result on the way, which a busy worker sends late; or put back) is renewed no more: it
  runs out ``lease_s`` after the last heartbeat that named it, half a second after a worker's
  final heartbeat.
- A job whose lease ran out goes out again, ``attempt + 1`` (``reissued``; ``unclaimed`` when
  no worker had named it); so do the jobs of a worker taken over (``reissued``).
- A worker that died, or whose heartbeats stopped for longer than its lease (it hangs, or was
  stopped), is *taken over*: its jobs go out again, and each episode it was playing counts one
  death. An episode at :data:`ALONE_AFTER_DEATHS` is played alone, so that it alone can be the
  cause; at :data:`MAX_DEATHS` it is *poison*: given up, recorded as ``error`` with the reason.
- Results are idempotent by episode id: the first wins; later ones (a taken-over worker that
  came back, a result sent twice) are counted as ``duplicates`` and dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from parley.runtime.episode import EpisodeResult
from parley.runtime.experiment import EpisodeSpec

# An episode in flight at this many deaths of its worker is played alone (then no other episode
# can be the cause); one in flight at MAX_DEATHS is recorded as an error, not played again.
ALONE_AFTER_DEATHS = 2
MAX_DEATHS = 3
# How often a worker says it is alive.
HEARTBEAT_S = 1.0
# A job named before a worker's final heartbeat, and not in it, goes out again this soon.
RELEASE_FINAL_S = 0.5
# A worker's lease is lease_s plus this many times the loop lag it reports: a loop that late
# sends its results that much later too.
LAG_LEASES = 3.0


@dataclass
class Lease:
    """One job out with the workers."""

    spec: EpisodeSpec
    attempt: int
    deadline: float  # monotonic: issued again after this
    holder: str | None = None  # the worker it was issued to, or whose heartbeat named it
    taken: bool = False  # named by a heartbeat since it was last issued


@dataclass
class Holder:
    """A worker as the book knows it from its heartbeats."""

    name: str
    last_seen: float
    interval_s: float = HEARTBEAT_S
    lag_s: float = 0.0
    holding: set[str] = field(default_factory=set)  # the episodes its latest heartbeat named
    issued: set[str] = field(default_factory=set)  # issued to it, not yet named
    gone: bool = False  # died, left or taken over: it holds nothing any more
    beating: bool = False  # it has sent a heartbeat (a process still starting has not)


class LeaseBook:
    """Every planned episode of a run: to do, leased to a worker, or recorded."""

    def __init__(
        self, specs: Iterable[EpisodeSpec], lease_s: float, finished: Iterable[str] = ()
    ) -> None:
        self.lease_s = lease_s
        # Recorded in this run or a run it resumes: a result for one of these is a duplicate.
        self.received: set[str] = set(finished)
        self.todo: dict[str, EpisodeSpec] = {s.id: s for s in specs if s.id not in self.received}
        self.planned = set(self.todo) | self.received
        self.leases: dict[str, Lease] = {}
        self.holders: dict[str, Holder] = {}
        self.deaths: dict[str, int] = {}
        self._attempts: dict[str, int] = {}
        self.counts = {
            "issued": 0,
            "reissued": 0,
            "unclaimed": 0,
            "takeovers": 0,
            "duplicates": 0,
            "given_up": 0,
        }

    # -- hand-out -------------------------------------------------------------------------------

    def issue(self, spec: EpisodeSpec, now: float, holder: str | None = None) -> Lease:
        """``spec`` out now (to ``holder`` when the transport chooses the worker)."""
        self.todo.pop(spec.id, None)
        attempt = self._attempts.get(spec.id, 0) + 1
        self._attempts[spec.id] = attempt
        lease = Lease(spec, attempt, now + self.lease_s, holder)
        if holder is not None:
            to = self.seen(holder, now)
            to.issued.add(spec.id)
            lease.deadline = now + self._lease_of(to)
        self.leases[spec.id] = lease
        self.counts["issued"] += 1
        return lease

    def hand_out(self, room: int) -> list[EpisodeSpec]:
        """Up to ``room`` specs to issue now, in order. A suspect (an episode in flight at
        :data:`ALONE_AFTER_DEATHS` deaths) goes out alone: once nothing else is out, and
        nothing goes out with it."""
        suspects = [s for s in self.todo.values() if self.suspect(s.id)]
        if suspects:
            return [suspects[0]] if not self.leases and room > 0 else []
        if any(self.suspect(e) for e in self.leases):
            return []
        return list(self.todo.values())[: max(0, room)]

    def suspect(self, episode: str) -> bool:
        return self.deaths.get(episode, 0) >= ALONE_AFTER_DEATHS

    def alone(self, specs: list[EpisodeSpec]) -> list[EpisodeSpec]:
        """What of ``specs`` (one worker's, to play again) to play first: the suspects, one at a
        time, or else all of them."""
        return [s for s in specs if self.suspect(s.id)] or specs

    # -- heartbeats -------------------------------------------------------------------------------

    def seen(self, name: str, now: float) -> Holder:
        holder = self.holders.get(name)
        if holder is None:
            holder = self.holders[name] = Holder(name, now)
        holder.last_seen = now
        return holder

    def _lease_of(self, holder: Holder) -> float:
        return self.lease_s + LAG_LEASES * holder.lag_s

    def beat(
        self,
        name: str,
        held: Iterable[str],
        now: float,
        interval_s: float = HEARTBEAT_S,
        lag_s: float = 0.0,
        final: bool = False,
    ) -> None:
        """Worker ``name`` is alive and holds ``held``: renew their leases and those issued to
        it; what it named before and names no more is not renewed (``final``: it left, and
        that runs out at once)."""
        holder = self.seen(name, now)
        holder.beating = True
        holder.interval_s, holder.lag_s = max(0.05, interval_s), max(0.0, lag_s)
        if holder.gone and not final:
            holder.gone = False  # back after a take-over: what it names now is its again
        lease_s = self._lease_of(holder)
        named = set(held)
        for episode in named:
            lease = self.leases.get(episode)
            # Only its holder renews a lease (a worker back after a take-over does not take
            # back what another worker holds now); a lease no one holds goes to who names it.
            if lease is not None and lease.holder in (None, name):
                lease.holder, lease.taken = name, True
                lease.deadline = now + lease_s
        for episode in (holder.holding | holder.issued) - named:
            lease = self.leases.get(episode)
            if lease is None or lease.holder != name:
                holder.issued.discard(episode)
            elif final:
                lease.deadline = min(lease.deadline, now + RELEASE_FINAL_S)
            elif episode in holder.holding:
                continue  # its result is on the way, or it was put back: not renewed
            elif not lease.taken:
                lease.deadline = now + lease_s  # issued to it, not yet named: it is alive
        holder.issued -= named
        holder.holding = {e for e in named if e in self.leases}
        holder.gone = final

    def shift(self, seconds: float) -> None:
        """No heartbeat could arrive for ``seconds`` (this process was cut off from the
        workers, or its own loop was late): no lease runs for that time."""
        for lease in self.leases.values():
            lease.deadline += seconds
        for holder in self.holders.values():
            holder.last_seen += seconds

    def silent(self, now: float) -> list[str]:
        """Workers holding jobs whose heartbeats stopped for longer than their lease (a worker
        that has not begun to beat is starting, not silent: its transport says if it dies)."""
        return [
            h.name
            for h in self.holders.values()
            if h.beating
            and not h.gone
            and now - h.last_seen >= self._lease_of(h)
            and any(self._holds(h.name, e) for e in h.holding | h.issued)
        ]

    def _holds(self, name: str, episode: str) -> bool:
        lease = self.leases.get(episode)
        return lease is not None and lease.holder == name

    def due(self, now: float) -> list[Lease]:
        """Leases run out: taken off the book (counted), for the caller to issue again."""
        out = [lease for lease in self.leases.values() if now >= lease.deadline]
        for lease in out:
            del self.leases[lease.spec.id]
            self.counts["reissued" if lease.taken else "unclaimed"] += 1
        return out

    # -- take-over and poison -------------------------------------------------------------------

    def lost(
        self, name: str, playing: Iterable[str] | None = None
    ) -> tuple[list[EpisodeSpec], list[EpisodeSpec]]:
        """Worker ``name`` died or is taken over: its jobs are off the book, and each episode
        it was ``playing`` (None: every one it held) counts a death. Returns the specs to play
        again and those given up (poison); both are off ``todo``, for the caller to place."""
        holder = self.holders.get(name)
        if holder is not None:
            holder.gone = True
            holder.holding, holder.issued = set(), set()
        mine = [lease for lease in self.leases.values() if lease.holder == name]
        suspects = {lease.spec.id for lease in mine} if playing is None else set(playing)
        again: list[EpisodeSpec] = []
        given_up: list[EpisodeSpec] = []
        if mine:
            self.counts["takeovers"] += 1
        for lease in mine:
            del self.leases[lease.spec.id]
            episode = lease.spec.id
            if episode in suspects:
                self.deaths[episode] = self.deaths.get(episode, 0) + 1
            if self.deaths.get(episode, 0) >= MAX_DEATHS:
                given_up.append(lease.spec)
                self.counts["given_up"] += 1
            else:
                again.append(lease.spec)
                self.counts["reissued"] += 1
        return again, given_up

    def again(self, specs: Iterable[EpisodeSpec]) -> None:
        """Put ``specs`` first in line to go out again."""
        self.todo = {**{s.id: s for s in specs if s.id not in self.received}, **self.todo}

    def poison(self, spec: EpisodeSpec, detail: str) -> EpisodeResult:
        """The ``error`` record of an episode given up, with the reason."""
        deaths = self.deaths.get(spec.id, 0)
        return EpisodeResult(
            spec=spec,
            outcome="error",
            reason=(
                f"the worker playing it was lost {deaths} times (it died, or stopped "
                f"answering), the last time with no other episode in it ({detail})"
            ),
            reason_code="exception",
            error=f"worker lost while playing this episode: {detail}",
        )

    # -- results --------------------------------------------------------------------------------

    def result(self, episode: str) -> bool:
        """A result for ``episode`` came: True when it is the first (record it), False for a
        duplicate, or one of an episode this run does not plan (counted, dropped)."""
        if episode in self.received or episode not in self.planned:
            self.counts["duplicates"] += 1
            return False
        self.received.add(episode)
        self.leases.pop(episode, None)
        self.todo.pop(episode, None)  # a result of a job issued before a --resume
        return True

    def put_back(self, episode: str, now: float) -> None:
        """Its worker stopped it without playing it (cancelled): out again now."""
        lease = self.leases.get(episode)
        if lease is not None:
            lease.deadline = min(lease.deadline, now)

    def done(self) -> bool:
        return not self.todo and not self.leases

    def summary(self) -> dict[str, Any]:
        return {**self.counts, "lease_s": self.lease_s}
