"""The event loop a parley process runs on, and what keeps it responsive.

The loop is uvloop where it is installed, else asyncio's own. Its lag probe, collection policy
and pacer belong with it: a run's processes (the runtime) and the stand-in model server
(``parley.agents.backends.simserver``) both use them, and none is about the bus, so they live
in the package root where every layer may import them (``tests/test_layers.py``).

uvloop (libuv underneath) takes less CPU per model request than asyncio's selector loop
(benchmarks/concurrency.py compares them), and serves more connections per core: the same
reason vLLM's API server runs on it. ``PARLEY_LOOP=asyncio`` picks the standard loop instead
(for debugging, or where a library misbehaves on uvloop).

Event-loop lag, how late a short timer fires, measures a loop too busy to keep up: a run that
blocks its loop (a game computing on it, a collection pass, too many replies at once) answers
every episode late. One probe per process, sampling every 10 ms, costs a wake-up per sample
(little beside a run's own work).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None for asyncio's default loop."""
    if os.environ.get("PARLEY_LOOP", "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh loop (as :func:`asyncio.run`), Ctrl-C included:
    it cancels ``main`` and ``run`` raises KeyboardInterrupt.

    ``main``'s result never becomes the result of the loop's main task. On Python 3.11 the
    runner puts the SIGINT handler back as it ends, and ``signal`` formats the handler it
    replaces, which names that task and so its result: a run's outcome was written out twice
    as text that nobody reads, and the time and memory grow
    with the run (CPython issue 112559).
    """
    box: list[T] = []

    async def keep_result() -> None:
        box.append(await main)

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(keep_result())
    return box[0]


class LoopLagProbe:
    """Samples the lag of the running loop until stopped; ``summary()`` gives p50/p99/max."""

    def __init__(self, interval_s: float = 0.01, keep: int = 200_000) -> None:
        self.interval_s = interval_s
        self.keep = keep
        self.samples: list[float] = []
        # The latest ~10 s of samples, for a live view (``samples`` stops growing at ``keep``).
        self.recent: deque[float] = deque(maxlen=1000)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> LoopLagProbe:
        self._task = asyncio.create_task(self._sample(), name="loop-lag")
        return self

    async def _sample(self) -> None:
        interval, clock = self.interval_s, time.perf_counter
        while True:
            before = clock()
            await asyncio.sleep(interval)
            lag = max(0.0, clock() - before - interval)
            self.recent.append(lag)
            if len(self.samples) < self.keep:
                self.samples.append(lag)

    async def stop(self) -> dict[str, Any]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """Lag in milliseconds: p50, p99 and max over the samples, and how many were taken."""
        ordered = sorted(self.samples)

        def at(q: float) -> float:
            if not ordered:
                return 0.0
            return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

        return {"p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": at(1.0), "samples": len(ordered)}


class Pacer:
    """Lets one task do bulk work a slice at a time, so other tasks and timers keep their turn.

    ``await pacer.breathe()`` between pieces yields to the loop once ``budget_s`` of work has
    gone by since the last yield. Hundreds of episodes that end in the same instant (lockstep
    replies) would otherwise be recorded in one loop iteration, and every reply that arrived
    meanwhile would wait for all of them.
    """

    def __init__(self, budget_s: float = 0.002) -> None:
        self.budget_s = budget_s
        self._since = time.perf_counter()

    async def breathe(self) -> None:
        now = time.perf_counter()
        if now - self._since > self.budget_s:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


@contextlib.asynccontextmanager
async def responsive_gc(full_every_s: float = 60.0) -> AsyncIterator[None]:
    """Collect garbage the way a process serving thousands of live conversations needs.

    CPython's collector is driven by a count of allocations minus deallocations, and any object
    freed, however old, lowers it: when hundreds of episodes end at once, the count falls and
    the young generation grows unchecked to hundreds of thousands of objects, then one "young"
    pass stalls the loop long enough to delay every episode; passes over the older
    generations, which rescan every live episode, stall it for longer. Yet a run makes almost
    no cyclic garbage (turns free their objects by reference counting). So while this is
    entered, automatic collection is off and one full collection runs every
    ``full_every_s`` seconds (a pause that grows with the live episodes, but rare), which
    bounds what code that does leave cycles (a game, a library) can hold. Objects from before
    are frozen out of every pass. The previous state is restored afterwards.

    The young generations are collected before the freeze, not the old one: a full pass over
    a process that has imported its games is slow and finds next to nothing unreachable,
    which stays frozen until the block ends.
    """
    enabled = gc.isenabled()
    gc.collect(1)
    gc.freeze()
    gc.disable()

    async def collect_now_and_then() -> None:
        while True:
            await asyncio.sleep(full_every_s)
            gc.collect()

    task = asyncio.create_task(collect_now_and_then(), name="full-gc")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        gc.unfreeze()
        if enabled:
            gc.enable()
