"""A run's status on the bus: how far it is, how fast it goes, and how its model endpoints fare.

Every process that plays episodes runs a :class:`StatusPublisher`. About once a second it reads
the counters the run keeps anyway (the scheduler's progress, the model pool's endpoints, the
event-loop lag probe), builds a :class:`~parley.bus.messages.RunStatus` and publishes it,
retained, on ``parley/{run}/status/{process}``: a dashboard that subscribes late still gets the
latest one. It adds no work per request or per turn, and a status costs little CPU even with
thousands of episodes in flight (``benchmarks/concurrency.py --status`` measures it).

``process`` is ``main`` for the run's own process, which counts the whole run, and ``w0``,
``w1`` … for worker processes (``workers: N``), which count their share. Workers also send their
endpoint figures to the parent in a small frame each second (runtime/workers.py), so ``main``
carries the endpoints of every worker, even on the local bus where each worker's bus is its own.

The ``main`` status carries the run's public key (``run_key``, parley.bus.signing): an observer
checks the run's results against it, and drops forged ones. Every status is signed with the
run's key when the process has it (``signature``), so a worker or dashboard that knows the key
ignores a forged one (a "run finished" that would end the run's work there), and it carries
``refused``: the messages this process refused as not the run's own, by kind.

The terminal's progress display (``parley run``) shows the same object: :func:`status_line`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from parley.bus import topics
from parley.bus.base import Bus
from parley.bus.messages import EndpointStatus, RunStatus
from parley.event_loop import LoopLagProbe
from parley.records import TokenCounts

log = logging.getLogger("parley.runtime.status")

RATE_WINDOW_S = 10.0  # turns/s and requests/s are over this much of the recent past
ETA_WINDOW_S = 60.0  # the episode rate behind the ETA, over this much


class Progressing(Protocol):
    """What a publisher reads of a scheduler (both schedulers have it)."""

    progress: Any

    def turns_in_flight(self) -> int: ...


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of an ascending, non-empty sequence (nearest rank)."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def lag_summary(samples: Iterable[float]) -> dict[str, float]:
    """Loop lag in milliseconds (p50, p99, max) over samples in seconds; zeros without any."""
    ordered = sorted(samples)
    if not ordered:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0}
    return {
        "p50": round(1000 * percentile(ordered, 0.5), 2),
        "p99": round(1000 * percentile(ordered, 0.99), 2),
        "max": round(1000 * ordered[-1], 2),
    }


_COUNTS = ("requests", "rate_limited", "retries", "errors")


def merge_endpoints(groups: Iterable[Iterable[Mapping[str, Any]]]) -> list[EndpointStatus]:
    """Endpoint figures from one or more processes (:meth:`ModelPool.endpoint_status`), one
    row per URL: limits, loads and counts summed, latency percentiles over the union of the
    processes' recent samples."""
    rows: dict[str, dict[str, Any]] = {}
    for group in groups:
        for e in group:
            row = rows.setdefault(
                e["url"],
                {"model": e["model"], "url": e["url"], "limit": 0, "in_flight": 0, "lat": []},
            )
            row["limit"] += int(e.get("limit", 0))
            row["in_flight"] += int(e.get("in_flight", 0))
            row["lat"].extend(e.get("latencies") or ())
            for key in _COUNTS:
                row[key] = row.get(key, 0) + int(e.get(key, 0))
    out = []
    for row in rows.values():
        ordered = sorted(row.pop("lat"))
        if ordered:
            row["latency_p50_s"] = round(percentile(ordered, 0.5), 4)
            row["latency_p99_s"] = round(percentile(ordered, 0.99), 4)
        out.append(EndpointStatus.model_validate(row))
    return out


def usd_prices(models: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """Model name → (input, output) USD per million tokens, for the models priced in USD."""
    prices = {}
    for name, spec in models.items():
        price = spec.get("price") if isinstance(spec, Mapping) else getattr(spec, "price", None)
        if price is None:
            continue
        if isinstance(price, Mapping):
            currency, cin, cout = (
                price.get("currency", "USD"),
                price["input_per_mtok"],
                price["output_per_mtok"],
            )
        else:
            currency, cin, cout = price.currency, price.input_per_mtok, price.output_per_mtok
        if str(currency).upper() == "USD":
            prices[name] = (float(cin), float(cout))
    return prices


def model_tokens(
    players: Mapping[str, Any], tokens: Mapping[str, Mapping[str, int] | TokenCounts]
) -> dict[str, tuple[int, int]]:
    """An episode's tokens by model: (input, output) summed over the roles models played.
    ``players`` are an episode's player specs (objects or their JSON); ``tokens`` a result's
    counts or a record's (``EpisodeRecord.tokens``); built-in players' words are not model
    tokens."""
    out: dict[str, tuple[int, int]] = {}
    for role, used in tokens.items():
        player = players.get(role)
        if player is None:
            continue
        kind = player.get("kind") if isinstance(player, Mapping) else player.kind
        model = player.get("model") if isinstance(player, Mapping) else player.model
        if kind != "llm" or not model:
            continue
        before = out.get(model, (0, 0))
        out[model] = (before[0] + int(used.get("input", 0)), before[1] + int(used.get("output", 0)))
    return out


def pairing_key(game: str, pairing: Mapping[str, str]) -> str:
    """How the status names a game's pairing: ``game role=player,role=player``."""
    return f"{game} " + ",".join(f"{role}={who}" for role, who in pairing.items())


class StatusPublisher:
    """Publishes one process's :class:`RunStatus`, retained, every ``interval_s``.

    ``scheduler`` gives the counts (its ``progress``, ``turns_in_flight()``, ``paused``);
    ``endpoints`` the endpoint figures (a pool's ``endpoint_status()``, or the workers'
    merged); ``probe`` the loop lag. ``snapshot()`` builds the status without publishing it
    (the terminal display calls it). ``on_tick`` runs after each publication (a worker sends
    its figures to the parent there). ``bus`` may be None: then nothing is published.

    Example::

        publisher = StatusPublisher(bus, scheduler, run="r1", process="main", name="comma")
        publisher.start()
        ...
        await publisher.stop()  # publishes the final status
    """

    def __init__(
        self,
        bus: Bus | None,
        scheduler: Progressing,
        *,
        run: str,
        process: str,
        name: str,
        endpoints: Callable[[], Iterable[Iterable[Mapping[str, Any]]]] = lambda: (),
        probe: LoopLagProbe | None = None,
        prices: Mapping[str, tuple[float, float]] | None = None,
        folder: str | None = None,
        interval_s: float = 1.0,
        on_tick: Callable[[], None] | None = None,
        run_key: str | None = None,
    ) -> None:
        self.bus = bus
        self.scheduler = scheduler
        self.run = run
        self.process = process
        self.name = name
        self.endpoints = endpoints
        self.probe = probe
        self.prices = dict(prices or {})
        self.folder = folder
        self.interval_s = interval_s
        self.on_tick = on_tick
        # The run's public key (base64), in ``main``'s status only; by default that of the key
        # the scheduler's episodes sign with (``options.signer``).
        self.run_key = run_key
        self.topic = topics.status(run, process)
        self.started_at = time.time()
        self.latest: RunStatus | None = None
        # CPU spent building and publishing statuses, to show that watching is cheap.
        self.cpu_s = 0.0
        self.published = 0
        # (monotonic time, turns, requests, episodes ended), one per snapshot, ETA_WINDOW_S long.
        self._history: deque[tuple[float, int, int, int]] = deque()
        self._started = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def snapshot(self, final: bool = False) -> RunStatus:
        """The status now (and a point of the rate history)."""
        p = self.scheduler.progress
        now = time.monotonic()
        endpoints = merge_endpoints(self.endpoints())
        requests = sum(e.requests for e in endpoints)
        turns = p.turns + self.scheduler.turns_in_flight()
        finished = sum(p.outcomes.values())
        history = self._history
        history.append((now, turns, requests, finished))
        while len(history) > 2 and history[1][0] < now - ETA_WINDOW_S:
            history.popleft()
        # The rates: from the oldest point within the window (or the oldest there is).
        since = next((h for h in history if h[0] >= now - RATE_WINDOW_S), history[0])
        span = now - since[0]
        turns_per_s = max(0.0, (turns - since[1]) / span) if span > 0 else 0.0
        requests_per_s = max(0.0, (requests - since[2]) / span) if span > 0 else 0.0
        input_tokens = sum(t[0] for t in p.model_tokens.values())
        output_tokens = sum(t[1] for t in p.model_tokens.values())
        cost = None
        if self.prices:
            cost = round(
                sum(
                    (t[0] * self.prices[m][0] + t[1] * self.prices[m][1]) / 1e6
                    for m, t in p.model_tokens.items()
                    if m in self.prices
                ),
                6,
            )
        status = RunStatus(
            run=self.run,
            sender=self.process,
            process=self.process,
            pid=os.getpid(),
            name=self.name,
            started_at=self.started_at,
            updated_at=time.time(),
            planned=p.planned + p.skipped,
            done=dict(p.outcomes),
            running=p.running,
            failed=p.failed,
            skipped=p.skipped,
            paused=bool(getattr(self.scheduler, "paused", False)),
            turns_per_s=round(turns_per_s, 2),
            requests_per_s=round(requests_per_s, 2),
            tokens={"input": input_tokens, "output": output_tokens},
            cost_usd=cost,
            eta_s=self._eta(now, finished, p.planned),
            endpoints=endpoints,
            loop_lag_ms=lag_summary(self.probe.recent) if self.probe is not None else {},
            folder=self.folder,
            final=final,
            pairings={k: dict(v) for k, v in getattr(p, "pairings", {}).items()},
            run_key=self._run_key(),
            refused=dict(getattr(self.scheduler, "refused", None) or {}),
        )
        signer = self._signer()
        if signer is not None:
            status.signature = signer.sign(status)
        self.latest = status
        return status

    def _run_key(self) -> str | None:
        """The public key observers verify this run's results with: ``main`` says it."""
        if self.process != "main":
            return None
        if self.run_key is None:
            self.run_key = getattr(self._signer(), "public_b64", None)
        return self.run_key

    def _signer(self) -> Any:
        """The run's key this process signs with (``options.signer``), or None."""
        return getattr(getattr(self.scheduler, "options", None), "signer", None)

    def _eta(self, now: float, finished: int, planned: int) -> float | None:
        """Seconds left at the recent episode rate (the whole run's while the window has
        none); None until an episode has ended."""
        if finished == 0:
            return None
        left = max(0, planned - finished)
        if left == 0:
            return 0.0
        first = self._history[0]
        span, ended = now - first[0], finished - first[3]
        if span <= 0 or ended <= 0:
            span, ended = now - self._started, finished
        return round(left * span / ended, 1) if span > 0 and ended > 0 else None

    async def publish(self, final: bool = False) -> RunStatus:
        """Build the status and publish it, retained."""
        clock = time.thread_time()
        status = self.snapshot(final)
        if self.bus is not None:
            await self.bus.publish(self.topic, status, retain=True)
        self.cpu_s += time.thread_time() - clock
        self.published += 1
        return status

    def start(self) -> StatusPublisher:
        self._task = asyncio.create_task(self._loop(), name=f"status:{self.process}")
        return self

    async def _loop(self) -> None:
        while True:
            try:
                await self.publish()
                if self.on_tick is not None:
                    self.on_tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # A status that cannot go out (a broker away) must never stop the run.
                log.warning("run status not published: %s", exc)
            await asyncio.sleep(self.interval_s)

    async def stop(self, publish_final: bool = True) -> RunStatus | None:
        """Stop the loop and publish the final status (``final: true``); once."""
        if self._stopped:
            return self.latest
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if not publish_final:
            return self.latest
        try:
            return await self.publish(final=True)
        except Exception as exc:
            log.warning("final run status not published: %s", exc)
            return self.latest


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


LOG_EVERY_S = 30.0  # outside a terminal, ``parley run`` logs a status line this often (--log-every)
# The most pairings a status line or the live table names; the rest are counted as "+k more".
SHOWN_PAIRINGS = 12
OUTCOME_ORDER = ("success", "lost", "aborted", "error", "cancelled")


def _outcomes(done: Mapping[str, int]) -> str:
    """``success 5 lost 2 error 1``: outcome counts in a fixed order (others after)."""
    names = [o for o in OUTCOME_ORDER if done.get(o)]
    names += sorted(o for o in done if o not in OUTCOME_ORDER and done[o])
    return " ".join(f"{o} {done[o]}" for o in names)


def progress_fields(status: RunStatus) -> list[str]:
    """How far a run is, as short labelled figures (the terminal display's first row):
    episodes done of planned, running, by outcome, failed, skipped, elapsed time."""
    fields = [
        f"done {status.finished + status.skipped}/{status.planned}",
        f"running {status.running}",
    ]
    if status.done:
        fields.append(_outcomes(status.done))
    fields.append(f"failed {status.failed}")
    if status.skipped:
        fields.append(f"skipped {status.skipped}")
    if status.paused:
        fields.append("PAUSED")
    fields.append(f"elapsed {_duration(max(0.0, status.updated_at - status.started_at))}")
    return fields


def rate_fields(status: RunStatus) -> list[str]:
    """How fast it goes and what it costs: rates, ETA, tokens, cost, the endpoints' 429s and
    retries (and the endpoint that had the most 429s) (the display's second row)."""
    fields = [f"{status.turns_per_s:,.0f} turns/s", f"{status.requests_per_s:,.1f} req/s"]
    fields.append(f"ETA {_duration(status.eta_s)}" if status.eta_s is not None else "ETA –")
    tokens_in, tokens_out = status.tokens.get("input", 0), status.tokens.get("output", 0)
    if tokens_in or tokens_out:
        fields.append(f"tokens {tokens_in:,} in {tokens_out:,} out")
    if status.cost_usd is not None:
        fields.append(f"${status.cost_usd:,.4f}")
    if status.endpoints:
        limited = sum(e.rate_limited for e in status.endpoints)
        retries = sum(e.retries for e in status.endpoints)
        text = f"429s {limited}, retries {retries}"
        worst = max(status.endpoints, key=lambda e: (e.rate_limited, e.errors))
        if worst.rate_limited and len(status.endpoints) > 1:
            text += f" (most at {worst.url})"
        fields.append(text)
    return fields


def pairing_fields(status: RunStatus, limit: int = SHOWN_PAIRINGS) -> list[str]:
    """Success so far by game and pairing, ``game pairing 3/5 success``, in the order of
    their names (the same from one line of a log to the next; at most ``limit``, then
    ``+k more``)."""
    rows = sorted(status.pairings.items())
    fields = []
    for key, counts in rows[:limit]:
        ended = sum(counts.values()) - counts.get("cancelled", 0)
        fields.append(f"{key} {counts.get('success', 0)}/{ended} success")
    if len(rows) > limit:
        fields.append(f"+{len(rows) - limit} more pairings")
    return fields


def status_line(status: RunStatus) -> str:
    """One line for a log (``parley run`` outside a terminal prints one every ``--log-every``
    seconds, 30 by default): the same figures as the live table."""
    line = f"{status.name}: " + ", ".join([*progress_fields(status), *rate_fields(status)])
    pairings = pairing_fields(status)
    if pairings:
        line += " | by pairing: " + "; ".join(pairings)
    return line
