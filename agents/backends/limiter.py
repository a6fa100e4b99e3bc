"""An adaptive concurrency limit per endpoint (additive increase, multiplicative decrease)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque


class AdaptiveLimiter:
    """At most ``limit`` requests in flight; waiters are served first come, first served.

    ``overloaded()`` (a 429 or 503) shrinks the limit by ``decrease``, at most once per
    ``cooldown_s`` so that a burst of rejections from one overload counts once. ``succeeded()``
    grows it by one after ``limit`` successes while requests were waiting: a slow climb back,
    like TCP congestion avoidance.
    """

    def __init__(
        self,
        start: int,
        minimum: int = 1,
        maximum: int = 1024,
        decrease: float = 0.8,
        cooldown_s: float = 1.0,
    ) -> None:
        self.limit = float(start)
        self.minimum = minimum
        self.maximum = maximum
        self.decrease = decrease
        self.cooldown_s = cooldown_s
        self.in_flight = 0
        self.peak = 0
        self.shrinks = 0
        self._credit = 0.0
        self._last_shrink = -1e9
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def current(self) -> int:
        return int(self.limit)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_acquire(self) -> bool:
        """Take a slot if one is free and nobody waits for it (no coroutine, no await)."""
        if self.in_flight < int(self.limit) and not self._waiters:
            self._take()
            return True
        return False

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                # Granted just as we were cancelled: hand the slot on.
                self.release()
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(future)
            raise

    def _take(self) -> None:
        self.in_flight += 1
        if self.in_flight > self.peak:
            self.peak = self.in_flight

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < int(self.limit):
            future = self._waiters.popleft()
            if not future.done():
                self._take()
                future.set_result(None)

    def succeeded(self) -> None:
        if self.limit >= self.maximum:
            return
        # Grow only when the limit is what holds requests back.
        if self._waiters or self.in_flight >= int(self.limit) - 1:
            self._credit += 1.0 / self.limit
            if self._credit >= 1.0:
                self._credit = 0.0
                self.limit = min(self.maximum, self.limit + 1)
                self._wake()

    def overloaded(self) -> None:
        now = time.monotonic()
        if now - self._last_shrink < self.cooldown_s:
            return
        self._last_shrink = now
        self.shrinks += 1
        self._credit = 0.0
        self.limit = max(float(self.minimum), self.limit * self.decrease)

    async def __aenter__(self) -> AdaptiveLimiter:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()
