"""A worker's heartbeat, sent from a thread of its own.

A worker whose event loop is busy (many episodes, a slow parse, a long garbage collection) is
alive, and its jobs are its own; but a heartbeat sent from that loop goes out late, and the
coordinator takes a late heartbeat for a dead worker. So the heartbeat is sent from a thread:
it goes out on time whatever the loop does, and says how late the loop is (the coordinator
lengthens the worker's lease by that much, since its results come that much later too). Only
a process that is stopped or hung as a whole (the thread stops with it) goes silent.

The jobs a heartbeat names are kept here, under a lock: the worker adds a job as it takes it
and lets it go once its result is handed to the transport, never before.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from parley.runtime.leases import HEARTBEAT_S

log = logging.getLogger("parley.runtime.heartbeats")

# How often the loop marks itself as on time.
_TICK_S = 0.1


class Held:
    """The jobs a worker holds, by group (a remote worker's runs; one group for a local one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, dict[str, None]] = {}

    def add(self, group: str, episode: str) -> None:
        with self._lock:
            self._groups.setdefault(group, {})[episode] = None

    def discard(self, group: str, episode: str) -> None:
        with self._lock:
            self._groups.get(group, {}).pop(episode, None)

    def clear(self, group: str) -> None:
        with self._lock:
            self._groups.pop(group, None)

    def names(self, group: str) -> list[str]:
        with self._lock:
            return list(self._groups.get(group, {}))

    def groups(self) -> dict[str, list[str]]:
        with self._lock:
            return {g: list(held) for g, held in self._groups.items()}

    def __contains__(self, item: tuple[str, str]) -> bool:
        group, episode = item
        with self._lock:
            return episode in self._groups.get(group, {})


class Heartbeat:
    """Calls ``send(lag_s)`` every ``interval_s`` from a thread, where ``lag_s`` is how late
    this process's event loop has been since the last beat. ``send`` runs in that thread;
    ``on_stop`` once the beats have stopped."""

    def __init__(
        self,
        send: Callable[[float], None],
        interval_s: float = HEARTBEAT_S,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.send = send
        self.on_stop = on_stop
        self.interval_s = interval_s
        self._on_time = time.monotonic()
        self._lag_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticking: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> Heartbeat:
        """Start beating; with ``loop``, measure how late it is."""
        if loop is not None:
            self._tick(loop)
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self._thread.start()
        return self

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Measure how late ``loop`` is from now on (a beat started before the loop was)."""
        self._on_time = time.monotonic()
        self._tick(loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.monotonic()
        self._lag_s = max(self._lag_s, now - self._on_time - _TICK_S)
        self._on_time = now
        if not self._stop.is_set():
            self._ticking = loop.call_later(_TICK_S, self._tick, loop)

    def lag_s(self) -> float:
        """The loop's lateness: the worst since the last beat, or how long it is late now."""
        now_late = time.monotonic() - self._on_time - _TICK_S
        return max(0.0, self._lag_s, now_late)

    def _beat(self) -> None:
        # The first beat at once: a process stopped or hung before its first interval ran out
        # would otherwise never have beaten, and a lease book takes such a holder for one still
        # starting, never for one gone silent.
        while not self._stop.is_set():
            lag = self.lag_s() if self._ticking is not None else 0.0
            self._lag_s = 0.0
            try:
                self.send(lag)
            except Exception as exc:  # the transport is going away: the next beat tries again
                log.debug("heartbeat not sent: %s", exc)
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        """No more beats once this returns."""
        self._stop.set()
        if self._ticking is not None:
            self._ticking.cancel()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self.on_stop is not None:
            self.on_stop()
