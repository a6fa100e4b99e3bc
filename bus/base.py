"""The bus contract shared by every transport, and the in-process routing they all use."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Self

from parley.bus import topics
from parley.bus.codec import CodecError, decode
from parley.bus.messages import Message

log = logging.getLogger("parley.bus")

DEFAULT_MAXSIZE = 1000

# Which shared groups a local delivery reaches (see Bus.deliver_local).
SharedScope = Literal["all", "local", "none"]


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
    re-established and publishes sent again on them; ``rejected``: publishes the broker refused;
    ``orphaned``: messages for a shared subscription of this process (over MQTT: dealt to it by
    the broker) whose every member here had closed when they arrived; no one else gets them.
    """

    published: int = 0
    delivered: int = 0
    malformed: int = 0
    duplicates: int = 0
    reconnects: int = 0
    resent: int = 0
    rejected: int = 0
    orphaned: int = 0
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

    @property
    def refuses_now(self) -> bool:
        """Whether a put would wait: full, and open (a closed mailbox drops what it gets)."""
        return len(self._items) >= self.maxsize and not self.closed

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
        if self._getter is not None:
            self._wake_getter()
        return True

    def put_nowait(self, item: Delivery) -> None:
        """Append without waiting (for transports whose producer cannot wait, e.g. a socket)."""
        if self.closed:
            return
        self._items.append(item)
        if self._getter is not None:
            self._wake_getter()

    async def get(self) -> Delivery:
        """The next item; raises :class:`BusClosed` once closed and drained."""
        while not self._items:
            if self.closed:
                raise BusClosed("subscription closed")
            await self.arrival()
        return self.take()

    def take(self) -> Delivery:
        """The next item, which must be there (``len(mailbox) > 0``), without waiting."""
        item = self._items.popleft()
        if self._putters:
            self._wake_putter()
        return item

    def arrival(self) -> asyncio.Future[None]:
        """A future done when an item arrives or the mailbox closes (one waiter at a time).

        An actor's loop awaits it directly: a message then wakes the actor through one frame
        instead of three coroutines (``async for``, :meth:`Subscription.__anext__`,
        :meth:`get`), and every turn of an episode is two such wake-ups."""
        self._getter = asyncio.get_running_loop().create_future()
        return self._getter

    def _wake_getter(self) -> None:
        # The waiter is done with once woken (``put`` clears it, not the waiter, so that
        # waiting costs no ``finally``); a cancelled one is only dropped.
        getter = self._getter
        if getter is not None:
            self._getter = None
            if not getter.done():
                getter.set_result(None)

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
        self._wake_getter()


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


class SharedGroup:
    """The subscriptions of this process to one shared subscription (``$share/<group>/<filter>``):
    each message for the group goes to one of them, in turn."""

    __slots__ = ("_next", "filter", "members", "shared_filter")

    def __init__(self, shared_filter: str) -> None:
        self.shared_filter = shared_filter
        self.filter = topics.split_shared(shared_filter)[1]
        self.members: list[Subscription] = []
        self._next = 0

    def pick(self) -> Subscription | None:
        """The next open member in turn that has room in its mailbox; when all are full, the
        next open one in turn (delivery then waits for it, as for any full mailbox)."""
        members = self.members
        count = len(members)
        start = self._next % count if count else 0
        full: Subscription | None = None
        for step in range(count):
            sub = members[(start + step) % count]
            if sub.mailbox.closed:
                continue
            if len(sub.mailbox) < sub.mailbox.maxsize:
                self._next = start + step + 1
                return sub
            if full is None:
                full = sub
                self._next = start + step + 1
        return full


_WILD_CACHE = 16384  # topics whose wildcard matches a router keeps


class Router:
    """Who subscribes to what, in this process: exact filters by dict, wildcard ones by scan.

    Shared subscriptions are kept apart, one :class:`SharedGroup` per shared filter and kind
    (local-only or through the broker): :meth:`match` never returns them; :meth:`match_shared`
    picks one member of each matching group.
    """

    def __init__(self) -> None:
        self.exact: dict[str, list[Subscription]] = {}
        self.wildcard: list[Subscription] = []
        self.shared: dict[tuple[str, bool], SharedGroup] = {}
        # The wildcard subscriptions matching a topic, by topic: every turn publishes to the
        # same few topics of its episode, and scanning every wildcard filter for each publish
        # was a tenth of a scripted turn. Emptied whenever a wildcard subscription comes or
        # goes; bounded (emptied when full).
        self._wild: dict[str, list[Subscription]] = {}

    def add(self, sub: Subscription) -> None:
        if topics.is_shared(sub.filter):
            key = (sub.filter, sub.local)
            group = self.shared.get(key)
            if group is None:
                group = self.shared[key] = SharedGroup(sub.filter)
            group.members.append(sub)
        elif topics.is_wildcard(sub.filter):
            self.wildcard.append(sub)
            self._wild.clear()
        else:
            self.exact.setdefault(sub.filter, []).append(sub)

    def remove(self, sub: Subscription) -> None:
        if topics.is_shared(sub.filter):
            key = (sub.filter, sub.local)
            group = self.shared.get(key)
            if group is not None and sub in group.members:
                group.members.remove(sub)
                if not group.members:
                    del self.shared[key]
        elif topics.is_wildcard(sub.filter):
            if sub in self.wildcard:
                self.wildcard.remove(sub)
                self._wild.clear()
        else:
            subs = self.exact.get(sub.filter)
            if subs and sub in subs:
                subs.remove(sub)
                if not subs:
                    del self.exact[sub.filter]

    def match(self, topic: str) -> list[Subscription]:
        """The plain (not shared) subscriptions whose filter matches ``topic``."""
        found = self.exact.get(topic, [])
        if self.wildcard:
            wild = self._wild.get(topic)
            if wild is None:
                if len(self._wild) >= _WILD_CACHE:
                    self._wild.clear()
                wild = [s for s in self.wildcard if topics.matches(s.filter, topic)]
                self._wild[topic] = wild
            if wild:
                found = found + wild
        return found

    def match_shared(self, topic: str, *, broker: bool = True) -> list[Subscription]:
        """One member, picked in turn, of each shared group whose filter matches ``topic``;
        ``broker=False`` leaves out the groups shared through a broker (the broker deals
        their share)."""
        if not self.shared:
            return []
        return [
            sub
            for (_, local), group in list(self.shared.items())
            if (broker or local)
            and topics.matches(group.filter, topic)
            and (sub := group.pick()) is not None
        ]

    def group(self, shared_filter: str, *, local: bool = False) -> SharedGroup | None:
        return self.shared.get((shared_filter, local))

    def count(self, topic_filter: str) -> int:
        """Subscriptions to ``topic_filter`` that also listen beyond this process."""
        if topics.is_shared(topic_filter):
            group = self.shared.get((topic_filter, False))
            return len(group.members) if group is not None else 0
        if topics.is_wildcard(topic_filter):
            return sum(1 for s in self.wildcard if s.filter == topic_filter and not s.local)
        return sum(1 for s in self.exact.get(topic_filter, ()) if not s.local)

    def all(self) -> list[Subscription]:
        """Every subscription, shared ones included."""
        found = [*self.wildcard, *(s for v in self.exact.values() for s in v)]
        return found + [s for group in self.shared.values() for s in group.members]

    def __len__(self) -> int:
        return (
            sum(len(v) for v in self.exact.values())
            + len(self.wildcard)
            + sum(len(g.members) for g in self.shared.values())
        )


class Bus(ABC):
    """Publish/subscribe with MQTT topic-filter semantics; every transport passes one contract."""

    def __init__(self) -> None:
        self.router = Router()
        self.stats = BusStats()
        self.closed = False
        # The retained message of each topic (MQTT semantics, kept for this process's own
        # subscribers on every transport): a later subscription gets them first.
        self.retained: dict[str, Message] = {}

    def deliver_now(self, topic: str, message: Message) -> bool:
        """:meth:`deliver_local` (``shared="all"``) where it cannot wait: no shared group
        in this process and room in every matching mailbox. Then the message is delivered
        and True returned; else nothing is delivered (False), and the caller awaits
        :meth:`deliver_local`. A publish in process (every turn's request and reply) then
        makes no coroutine to deliver."""
        router = self.router
        if router.shared:
            return False
        subs = router.match(topic)
        for sub in subs:
            mailbox = sub.mailbox
            if mailbox.refuses_now:
                return False
        if subs:
            delivery = Delivery(topic, message)
            for sub in subs:
                mailbox = sub.mailbox
                if not mailbox.closed:
                    mailbox.put_nowait(delivery)
                    self.stats.delivered += 1
        return True

    async def deliver_local(
        self, topic: str, message: Message, *, shared: SharedScope = "all"
    ) -> None:
        """Hand ``message`` to every matching subscriber in this process, waiting for room.

        ``shared``: which shared groups get it (one member each, in turn): ``"all"``;
        ``"local"``, only the local-only ones (a broker deals the others their share);
        ``"none"``.
        """
        delivery = Delivery(topic, message)
        for sub in self.router.match(topic):
            mailbox = sub.mailbox
            if not mailbox.refuses_now and not mailbox.closed:
                # Room: no coroutine to make and await for a put that cannot wait.
                mailbox.put_nowait(delivery)
                self.stats.delivered += 1
            elif await mailbox.put(delivery):
                self.stats.delivered += 1
        if shared != "none" and self.router.shared:
            for sub in self.router.match_shared(topic, broker=shared == "all"):
                await self.deliver_shared(sub, delivery)

    async def deliver_shared(self, sub: Subscription, delivery: Delivery) -> bool:
        """Hand ``delivery`` to ``sub``, a member of a shared group, or, should ``sub`` close
        while delivery waits for room, to another member of its group (one of them has to
        take it). False if the group has no member left."""
        while True:
            if await sub.mailbox.put(delivery):
                self.stats.delivered += 1
                return True
            group = self.router.group(sub.filter, local=sub.local)
            picked = group.pick() if group is not None else None
            if picked is None:
                self.stats.orphaned += 1
                log.warning(
                    "dropped a message on %s: every subscription of %s closed",
                    delivery.topic,
                    sub.filter,
                )
                return False
            sub = picked

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
        """Hand a new subscription the retained messages its filter matches (not to a shared
        subscription: MQTT 5 sends retained messages to none)."""
        if not self.retained or topics.is_shared(sub.filter):
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

        ``$share/<group>/<filter>`` (e.g. :func:`topics.shared_jobs`) is a shared subscription:
        each message matching ``<filter>`` goes to exactly one subscription of the group (over
        a broker: to one of all the group's subscribers on the broker), while other groups and
        plain subscriptions get their own copies. Deliveries carry the real topic. Retained
        messages are not replayed to it.
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
        for sub in self.router.all():
            sub.mailbox.close()
        self.router = Router()
        self.retained = {}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
