"""Event-loop lag: how late a short timer fires, the measure of a loop too busy to keep up.

A run that blocks its loop (a game computing on it, a collection pass, too many replies at
once) answers every episode late; the lag says so directly. One probe per process, sampling
every ``interval_s``, costs a wake-up per sample (about 0.2 % of a core at 10 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any


class LoopLagProbe:
    """Samples the lag of the running loop until stopped; ``summary()`` gives p50/p99/max."""

    def __init__(self, interval_s: float = 0.01, keep: int = 200_000) -> None:
        self.interval_s = interval_s
        self.keep = keep
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> LoopLagProbe:
        self._task = asyncio.create_task(self._sample(), name="loop-lag")
        return self

    async def _sample(self) -> None:
        interval, clock = self.interval_s, time.perf_counter
        while True:
            before = clock()
            await asyncio.sleep(interval)
            if len(self.samples) < self.keep:
                self.samples.append(max(0.0, clock() - before - interval))

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
