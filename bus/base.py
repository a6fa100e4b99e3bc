"""The bus contract shared by every transport, and the in-process routing they all use."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple, Self

from parley.bus import topics
from parley.bus.codec import CodecError, decode
from parley.bus.messages import Message

log = logging.getLogger("parley.bus")

DEFAULT_MAXSIZE = 1000


class BusClosed(RuntimeError):
    """The bus or the subscription was closed."""


class Delivery(NamedTuple):
    """A message as a subscriber receives it, with the topic it was published to."""

    topic: str
    message: Message


@dataclass
class BusStats:
    """Counters a transport keeps; ``malformed`` counts payloads that could not be decoded.

    ``duplicates``: redelivered messages dropped; ``reconnects``/``resent``: connections
    re-established and publishes sent again on them; ``rejected``: publishes the broker refused.
    """

    published: int = 0
    delivered: int = 0
    malformed: int = 0
    duplicates: int = 0
    reconnects: int = 0
    resent: int = 0
    rejected: int = 0
    malformed_reasons: dict[str, int] = field(default_factory=dict)

    def count_malformed(self, reason: str) -> None:
        self.malformed += 1
        self.malformed_reasons[reason] = self.malformed_reasons.get(reason, 0) + 1


class Mailbox:
    """A bounded FIFO with close: ``put`` waits while full (backpressure), ``get`` while empty."""

    __slots__ = ("_getter", "_items", "_putters", "closed", "maxsize")

    def __init__(self, maxsize: int = DEFAULT_MAXSIZE) -> None:
        self._items: deque[Delivery] = deque()
        self._getter: asyncio.Future[None] | None = None
        self._putters: deque[asyncio.Future[None]] = deque()
        self.maxsize = maxsize
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    async def put(self, item: Delivery) -> bool:
        """Append ``item``, waiting for room; False if the mailbox closed meanwhile."""
        while len(self._items) >= self.maxsize and not self.closed:
            waiter = asyncio.get_running_loop().create_future()
            self._putters.append(waiter)
            try:
                await waiter
            except BaseException:
                waiter.cancel()
                if waiter in self._putters:
                    self._putters.remove(waiter)
                self._wake_putter()
                raise
        if self.closed:
            return False
        self._items.append(item)
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)
        return True

    def put_nowait(self, item: Delivery) -> None:
        """Append without waiting (for transports whose producer cannot wait, e.g. a socket)."""
        if self.closed:
            return
        self._items.append(item)
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)

    async def get(self) -> Delivery:
        """The next item; raises :class:`BusClosed` once closed and drained."""
        while not self._items:
            if self.closed:
                raise BusClosed("subscription closed")
            self._getter = asyncio.get_running_loop().create_future()
            try:
                await self._getter
            finally:
                self._getter = None
        item = self._items.popleft()
        self._wake_putter()
        return item

    def _wake_putter(self) -> None:
        while self._putters:
            waiter = self._putters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        self.closed = True
        while self._putters:
            waiter = self._putters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        if self._getter is not None and not self._getter.done():
            self._getter.set_result(None)


class Subscription:
    """Messages matching one topic filter, as an async iterator; an async context manager.

    Entering the context (or ``await ready()``) waits until the transport confirms the
    subscription; messages published after that are delivered, in order per topic.
    """

    def __init__(self, bus: Bus, topic_filter: str, maxsize: int, local: bool = False) -> None:
        self.bus = bus
        self.filter = topic_filter
        self.local = local
        self.mailbox = Mailbox(maxsize)
        self._ready: asyncio.Future[None] | None = None

    async def ready(self) -> Self:
        if self._ready is not None:
            await asyncio.shield(self._ready)
        return self

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Delivery:
        try:
            return await self.mailbox.get()
        except BusClosed:
            raise StopAsyncIteration from None

    async def get(self) -> Delivery:
        """The next delivery; raises :class:`BusClosed` when the subscription is closed."""
        return await self.mailbox.get()

    async def close(self) -> None:
        if not self.mailbox.closed:
            self.mailbox.close()
            await self.bus._unsubscribe(self)

    async def __aenter__(self) -> Self:
        return await self.ready()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Router:
    """Who subscribes to what, in this process: exact filters by dict, wildcard ones by scan."""

    def __init__(self) -> None:
        self.exact: dict[str, list[Subscription]] = {}
        self.wildcard: list[Subscription] = []

    def add(self, sub: Subscription) -> None:
        if topics.is_wildcard(sub.filter):
            self.wildcard.append(sub)
        else:
            self.exact.setdefault(sub.filter, []).append(sub)

    def remove(self, sub: Subscription) -> None:
        if topics.is_wildcard(sub.filter):
            if sub in self.wildcard:
                self.wildcard.remove(sub)
        else:
            subs = self.exact.get(sub.filter)
            if subs and sub in subs:
                subs.remove(sub)
                if not subs:
                    del self.exact[sub.filter]

    def match(self, topic: str) -> list[Subscription]:
        found = self.exact.get(topic, [])
        if self.wildcard:
            found = found + [s for s in self.wildcard if topics.matches(s.filter, topic)]
        return found

    def count(self, topic_filter: str) -> int:
        """Subscriptions to ``topic_filter`` that also listen beyond this process."""
        if topics.is_wildcard(topic_filter):
            return sum(1 for s in self.wildcard if s.filter == topic_filter and not s.local)
        return sum(1 for s in self.exact.get(topic_filter, ()) if not s.local)

    def __len__(self) -> int:
        return sum(len(v) for v in self.exact.values()) + len(self.wildcard)


class Bus(ABC):
    """Publish/subscribe with MQTT topic-filter semantics; every transport passes one contract."""

    def __init__(self) -> None:
        self.router = Router()
        self.stats = BusStats()
        self.closed = False
        # The retained message of each topic (MQTT semantics, kept for this process's own
        # subscribers on every transport): a later subscription gets them first.
        self.retained: dict[str, Message] = {}

    async def deliver_local(self, topic: str, message: Message) -> None:
        """Hand ``message`` to every matching subscriber in this process, waiting for room."""
        delivery = Delivery(topic, message)
        for sub in self.router.match(topic):
            if await sub.mailbox.put(delivery):
                self.stats.delivered += 1

    @abstractmethod
    async def publish(
        self,
        topic: str,
        message: Message,
        *,
        qos: int = 1,
        local: bool = False,
        retain: bool = False,
    ) -> None:
        """Send ``message`` to every subscriber whose filter matches ``topic``.

        ``local=True``: only to this process's subscribers (a broker transport sends nothing
        on) — for messages between actors that all live here. ``retain=True``: the message
        stays the topic's retained one, which every later subscription whose filter matches
        receives first (MQTT semantics; over MQTT the broker keeps it for other processes),
        until the next retained publish or :meth:`clear_retained`.
        """

    async def clear_retained(self, topic: str) -> None:
        """Forget ``topic``'s retained message; subscribers receive nothing for it.

        Example: ``await bus.clear_retained(topics.state(run, episode))`` when an episode ends.
        """
        topics.check_topic(topic)
        self.retained.pop(topic, None)

    def _retain(self, topic: str, message: Message) -> None:
        self.retained[topic] = message

    def _replay_retained(self, sub: Subscription) -> None:
        """Hand a new subscription the retained messages its filter matches."""
        if not self.retained:
            return
        if not topics.is_wildcard(sub.filter):
            message = self.retained.get(sub.filter)
            if message is not None:
                sub.mailbox.put_nowait(Delivery(sub.filter, message))
            return
        for topic, message in list(self.retained.items()):
            if topics.matches(sub.filter, topic):
                sub.mailbox.put_nowait(Delivery(topic, message))

    def outage_s(self) -> float:
        """Seconds this bus has spent cut off from its broker so far, the current outage
        included (0 for a transport without one). Episode timeouts do not count this time: a
        broker outage is not the players' fault."""
        return 0.0

    async def publish_raw(self, topic: str, payload: bytes | str, *, qos: int = 1) -> None:
        """Publish an encoded payload as a foreign client would; malformed ones are counted."""
        topics.check_topic(topic)
        try:
            message = decode(payload)
        except CodecError as exc:
            self.stats.count_malformed(exc.reason)
            log.warning("dropped a malformed payload on %s: %s", topic, exc)
            return
        await self.publish(topic, message, qos=qos)

    def subscribe(
        self, topic_filter: str, *, maxsize: int = DEFAULT_MAXSIZE, local: bool = False
    ) -> Subscription:
        """Start receiving messages that match ``topic_filter``.

        ``local=True``: only what this process publishes (no broker subscription) — for the
        inboxes of actors whose every correspondent lives in the same process.
        """
        if self.closed:
            raise BusClosed("bus is closed")
        topics.check_filter(topic_filter)
        sub = Subscription(self, topic_filter, maxsize, local)
        self.router.add(sub)
        self._replay_retained(sub)
        if not local:
            self._on_subscribe(sub)
        return sub

    def _on_subscribe(self, sub: Subscription) -> None:
        """Transport hook: tell the broker, set ``sub._ready``."""

    async def _unsubscribe(self, sub: Subscription) -> None:
        self.router.remove(sub)

    async def close(self) -> None:
        self.closed = True
        for sub in [*self.router.wildcard, *(s for v in self.router.exact.values() for s in v)]:
            sub.mailbox.close()
        self.router = Router()
        self.retained = {}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
