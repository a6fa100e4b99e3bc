"""The MQTT transport: one MQTT 5 connection per bus, local routing, and no lost QoS 1 message.

Built on paho-mqtt 2.x through its public API: paho's client with its documented hooks for an
outside event loop (socket callbacks, ``loop_read``/``loop_write``/``loop_misc``), run on the
asyncio loop here. aiomqtt lends its protocol versions and errors. Two things a plain client
would not give are done here, for throughput and flow control:

- **publishing** goes straight to paho's write queue (the packets of one pass of the event loop
  together, at its end), and the PUBACKs are read as they come, so up to ``max_inflight`` QoS 1
  messages are on the wire at a time (a plain client's ``publish`` awaits each PUBACK in
  turn). Every
  unacknowledged message stays in an ordered pending table until its PUBACK arrives, and is sent
  again, in order, on the next connection;
- **receiving** uses paho's manual acknowledgement and the MQTT 5 Receive Maximum: a message is
  acknowledged only after it sits in every matching local mailbox, so a full mailbox stops the
  acknowledgements and the broker stops sending (and queues: see ``configs/mosquitto.conf``).

A message published here reaches the subscribers of this process directly (no broker round trip)
and goes to the broker for everyone else; broker subscriptions use MQTT 5 ``no_local`` so the
broker never sends a process its own messages back. A bounded memory of recent
``(topic, message id)`` pairs drops redeliveries (QoS 1 resends after a reconnect, overlapping
subscriptions), counted in ``stats.duplicates``.

Shared subscriptions (``$share/<group>/<filter>``) are the exception to both: the broker deals
each message to one subscriber of the group, which may be this process, so they are made
without ``no_local`` (a protocol error on them anyway) and a message published here reaches
them only through the broker. To tell the copy the broker sends for a shared subscription from
the copy for an overlapping plain one (Mosquitto sends one per subscription, same topic, same
message id), every SUBSCRIBE carries an MQTT 5 Subscription Identifier: 1 for plain filters,
one of its own for each shared filter. A copy goes where its identifiers say, and the
duplicate memory keys shared copies by ``(topic, message id, shared filter)``. MQTT 3.1.1 has
no identifiers: there, shared subscriptions are refused.

Where the installed paho passes the start-up check of :mod:`parley.bus.paho_fast`, QoS 1
packets are built and queued, and their PUBACKs read, by that accelerator beneath paho's API;
elsewhere, or with ``PARLEY_MQTT_ACCELERATOR=0``, every message goes through paho's ``publish``.
Both paths send the same packets in the same order and settle the same pending table.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import socket
import ssl
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Self
from urllib.parse import parse_qs, unquote, urlparse

import paho.mqtt.client as paho_mqtt
from aiomqtt import MqttError, ProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from parley.bus import paho_fast, topics
from parley.bus.base import Bus, BusClosed, Delivery, Subscription
from parley.bus.codec import (
    BATCH_CONTENT_TYPE,
    CONTENT_TYPE,
    DEFAULT_MAX_BYTES,
    CodecError,
    decode,
    decode_batch,
    encode,
    encode_batch,
    is_batch,
)
from parley.bus.messages import Message

log = logging.getLogger("parley.bus.mqtt")

Protocol = Literal["5", "3.1.1"]
_PROTOCOLS: dict[str, ProtocolVersion] = {
    "5": ProtocolVersion.V5,
    "5.0": ProtocolVersion.V5,
    "3.1.1": ProtocolVersion.V311,
    "311": ProtocolVersion.V311,
}
_SUBSCRIBE_BATCH = 64
# Topics whose messages are never batched: a shared subscription deals a whole PUBLISH to one
# member of its group, and each job must be free to go to a different worker.
NO_BATCH = ("parley/+/jobs",)
# MQTT 5 Subscription Identifier of every plain filter; each shared filter has its own (2, 3 …).
_PLAIN_ID = 1
# How long a closing bus waits for the UNSUBACK of its shared subscriptions (a live broker answers
# at once; one that is hung or cut off must not hold the close up for operation_timeout).
_CLOSE_UNSUBSCRIBE_S = 2.0


class _PackedOnce(Properties):
    """Publish properties that never change once made (the content type every message
    carries): paho packs a message's properties on every publish, walking all of MQTT 5's
    property names, about as much CPU as the rest of sending it. Packed once here."""

    _packed: bytes | None = None

    def pack(self) -> bytes:
        if self._packed is None:
            object.__setattr__(self, "_packed", super().pack())
        assert self._packed is not None
        return self._packed


class MqttConnectError(ConnectionError):
    """The bus could not reach its broker in time; the message carries the last error."""


def default_client_id() -> str:
    """``parley-<hostname>-<pid>-<random>``: unique per bus, readable in broker logs."""
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())
    return f"parley-{host[:32]}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(slots=True)
class _Outgoing:
    topic: str
    payload: bytes
    qos: int
    properties: Properties | None
    retain: bool = False
    sent: bool = False
    count: int = 1  # messages in the payload (a batch holds several)


@dataclass(slots=True)
class _Batch:
    """Messages published on one topic, waiting for the end of the batching window."""

    payloads: list[bytes]
    properties: Properties | None  # of the first message: used when it goes alone
    size: int


@dataclass(slots=True)
class _Filter:
    ready: asyncio.Future[None]


@dataclass(eq=False)
class _Connection:
    """One paho client and its connection; ``mids`` maps paho message ids to pending sequence
    numbers, ``requests`` the ids of SUBSCRIBE/UNSUBSCRIBE packets to their acknowledgement."""

    paho: paho_mqtt.Client
    generation: int
    loop: asyncio.AbstractEventLoop
    loop_thread: int
    fast: bool  # paho_fast publishes and reads the PUBACKs
    connected: asyncio.Future[None]
    disconnected: asyncio.Future[None]
    mids: dict[int, int] = field(default_factory=dict)
    requests: dict[int, asyncio.Future[list[Any]]] = field(default_factory=dict)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    housekeeping: asyncio.Task[None] | None = None
    leaving: bool = False  # our DISCONNECT is on its way
    server_receive_maximum: int | None = None
    # What the broker's CONNACK says it supports (MQTT 5 says: available unless it says not).
    shared_available: bool = True
    identifiers_available: bool = True
    paused: bool = False
    acked: Callable[[int, int], None] = field(default=lambda mid, reason: None)
    acked_all: Callable[[list[int]], None] = field(default=lambda mids: None)

    def fail(self, exc: BaseException) -> None:
        """End this connection with ``exc`` (the connection loop starts the next)."""
        for future in (self.connected, self.disconnected):
            if not future.done():
                future.set_exception(exc)
        for request in self.requests.values():
            if not request.done():
                request.set_exception(MqttError(f"the connection ended: {exc}"))

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task


class MqttBus(Bus):
    """A bus over one MQTT connection; see the module docstring for the guarantees.

    Options: ``client_id`` (default ``parley-<host>-<pid>-<random>``); ``clean_start`` (discard
    a session the broker keeps for this client id; default: only for a chosen ``client_id``);
    ``username``/``password``; ``tls`` with ``tls_ca``/``tls_cert``/``tls_key`` (client
    certificate) and ``tls_insecure`` (no certificate or host name check: tests only);
    ``protocol`` ("5", or "3.1.1" for brokers without MQTT 5: no ``no_local``, so own messages
    are recognised by id, no session survives a reconnect, and no shared subscriptions);
    ``keepalive``;
    ``session_expiry`` (seconds the broker keeps this bus's subscriptions and queued messages
    while it is disconnected); ``max_inflight`` (unacknowledged publishes; ``publish`` waits
    beyond it); ``receive_maximum`` (unacknowledged incoming messages);
    ``max_backlog``/``max_backlog_bytes`` (received messages waiting for full mailboxes at which
    the bus stops reading its socket); ``dedup_window`` (remembered message ids);
    ``close_timeout`` (how long ``close`` waits for PUBACKs); ``connect_timeout`` (``async
    with`` / :meth:`start`); ``inline_images``/``resolve_image`` (send images by reference,
    resolve them on receipt); ``batch`` (send the messages published on one topic close
    together as one PUBLISH; see :meth:`publish`) with ``batch_window`` (seconds a batch stays
    open; 0: until the event loop has run what is ready), ``batch_messages``, ``batch_bytes``
    (a batch that would pass either goes at once) and ``batch_exclude`` (topic filters never
    batched; default :data:`NO_BATCH`). A bus that never reaches its broker keeps trying;
    ``Subscription.ready()`` waits until it does.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        client_id: str | None = None,
        clean_start: bool | None = None,
        username: str | None = None,
        password: str | None = None,
        tls: bool = False,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_insecure: bool = False,
        protocol: Protocol | str = "5",
        keepalive: int = 30,
        session_expiry: int = 300,
        max_inflight: int = 1000,
        receive_maximum: int = 200,
        max_backlog: int = 2000,
        max_backlog_bytes: int = 64 * 1024 * 1024,
        dedup_window: int = 65536,
        close_timeout: float = 5.0,
        connect_timeout: float = 10.0,
        operation_timeout: float = 10.0,
        reconnect_min: float = 0.05,
        reconnect_max: float = 5.0,
        inline_images: bool = True,
        max_bytes: int = DEFAULT_MAX_BYTES,
        resolve_image: Callable[[str], bytes | None] | None = None,
        batch: bool = True,
        batch_window: float = 0.0,
        batch_messages: int = 64,
        batch_bytes: int = 256 * 1024,
        batch_exclude: tuple[str, ...] = NO_BATCH,
    ) -> None:
        super().__init__()
        if str(protocol) not in _PROTOCOLS:
            raise ValueError(f"unknown MQTT protocol {protocol!r}: use '5' or '3.1.1'")
        if not 1 <= max_inflight <= 65535 or not 1 <= receive_maximum <= 65535:
            raise ValueError("max_inflight and receive_maximum must be between 1 and 65535")
        if batch_window < 0 or batch_messages < 1 or batch_bytes < 1:
            raise ValueError("batch_window must be >= 0, batch_messages and batch_bytes >= 1")
        for topic_filter in batch_exclude:
            topics.check_filter(topic_filter)
        self.host = host
        self.tls = tls or bool(tls_ca or tls_cert)
        self.port = port or (8883 if self.tls else 1883)
        self.client_id = client_id or default_client_id()
        # A generated id cannot have an old session, so the first connection may ask to keep
        # one: Mosquitto 2.0.11 writes to its database (and restores after a restart) only the
        # MQTT 5 sessions whose first CONNECT had Clean Start = 0. A chosen id may have an old
        # session with old subscriptions: start clean unless told otherwise.
        self.clean_start = (client_id is not None) if clean_start is None else clean_start
        self.username = username
        self.password = password
        self.tls_ca = tls_ca
        self.tls_cert = tls_cert
        self.tls_key = tls_key
        self.tls_insecure = tls_insecure
        self.protocol = _PROTOCOLS[str(protocol)]
        self._v5 = self.protocol == ProtocolVersion.V5
        self.keepalive = keepalive
        self.session_expiry = session_expiry
        self.max_inflight = max_inflight
        self.receive_maximum = receive_maximum
        self.max_backlog = max_backlog
        self.max_backlog_bytes = max_backlog_bytes
        self.dedup_window = dedup_window
        self.close_timeout = close_timeout
        self.connect_timeout = connect_timeout
        self.operation_timeout = operation_timeout
        self.reconnect_min = reconnect_min
        self.reconnect_max = reconnect_max
        self.inline_images = inline_images
        self.max_bytes = max_bytes
        self.resolve_image = resolve_image
        self.batch = batch
        self.batch_window = batch_window
        self.batch_messages = batch_messages
        self.batch_bytes = min(batch_bytes, max_bytes)
        self.batch_exclude = tuple(batch_exclude)

        self._filters: dict[str, _Filter] = {}
        self._stale: set[str] = set()  # unsubscribed here, maybe not yet on the broker
        self._pending: OrderedDict[int, _Outgoing] = OrderedDict()
        self._held = 0  # messages unacknowledged: in the pending table or an open batch
        self._unsent: deque[int] = deque()
        self._seq = 0
        self._inflight = 0
        self._window = max_inflight
        self._space_waiters: deque[asyncio.Future[None]] = deque()
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._pump_scheduled = False
        self._unyielded = 0
        # (topic, message id) for plain subscriptions, (topic, message id, shared filter) for
        # each shared one: the broker sends one copy per subscription, all to be delivered.
        self._seen: OrderedDict[tuple[str, ...], bool] = OrderedDict()
        self._share_ids: dict[str, int] = {}  # shared filter -> its Subscription Identifier
        self._shared_by_id: dict[int, str] = {}
        self._inbox: deque[tuple[_Connection, paho_mqtt.MQTTMessage]] = deque()
        self._inbox_bytes = 0
        self._inbox_waiter: asyncio.Future[None] | None = None
        self._conn: _Connection | None = None
        self._generation = 0
        self._ever_connected = False
        self._connected = asyncio.Event()
        # Time spent disconnected after the first connection: ended outages, and the start of
        # the current one (loop.time()).
        self._outage_total = 0.0
        self._down_since: float | None = None
        self._runner: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._closing: asyncio.Future[None] | None = None
        self._last_error: BaseException | None = None
        self._plain_properties: Properties | None = None
        self._batch_properties: Properties | None = None
        self._batches: dict[str, _Batch] = {}  # open batches, oldest first
        self._batch_flush: asyncio.Handle | None = None
        self._batchable: dict[str, bool] = {}  # topic -> not excluded (bounded memo)
        # The excluded filters with the number of levels a topic needs to match them (0: any,
        # a filter ending in #): an episode's topics are new, and most cannot match any. A
        # shared filter is kept as its filter, which is what it matches ($share/<group>/ is no
        # level of a topic).
        self._exclude_levels: list[tuple[str, int]] = []
        for f in self.batch_exclude:
            inner = topics.split_shared(f)[1] if topics.is_shared(f) else f
            self._exclude_levels.append((inner, 0 if inner.endswith("#") else inner.count("/") + 1))
        self._topic_names: dict[str, bytes] = {}  # topic -> its UTF-8 name, length first
        self._ssl_context: ssl.SSLContext | None = None

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MqttBus:
        """``mqtt://[user:pass@]host[:port][?option=value&...]``, ``mqtts://`` for TLS.

        Query options: ``client_id``, ``protocol``, ``keepalive``, ``session_expiry``,
        ``max_inflight``, ``receive_maximum``, ``ca``, ``cert``, ``key``, ``insecure``,
        ``batch`` (``0``/``off`` sends every message alone), ``batch_window`` (seconds),
        ``batch_messages``, ``batch_bytes``; keyword ``options`` override them.
        """
        parsed = urlparse(url)
        if parsed.scheme not in ("mqtt", "mqtts"):
            raise ValueError(f"{url!r} is not an mqtt:// or mqtts:// URL")
        if not parsed.hostname:
            raise ValueError(f"{url!r} has no host")
        kwargs: dict[str, Any] = {"host": parsed.hostname, "tls": parsed.scheme == "mqtts"}
        if parsed.port:
            kwargs["port"] = parsed.port
        if parsed.username:
            kwargs["username"] = unquote(parsed.username)
        if parsed.password:
            kwargs["password"] = unquote(parsed.password)
        names: dict[str, tuple[str, Callable[[str], Any]]] = {
            "client_id": ("client_id", str),
            "protocol": ("protocol", str),
            "keepalive": ("keepalive", int),
            "session_expiry": ("session_expiry", int),
            "max_inflight": ("max_inflight", int),
            "receive_maximum": ("receive_maximum", int),
            "ca": ("tls_ca", str),
            "cafile": ("tls_ca", str),
            "cert": ("tls_cert", str),
            "certfile": ("tls_cert", str),
            "key": ("tls_key", str),
            "keyfile": ("tls_key", str),
            "insecure": ("tls_insecure", _truthy),
            "batch": ("batch", _truthy),
            "batch_window": ("batch_window", float),
            "batch_messages": ("batch_messages", int),
            "batch_bytes": ("batch_bytes", int),
        }
        for name, values in parse_qs(parsed.query, keep_blank_values=True).items():
            if name not in names:
                raise ValueError(
                    f"unknown option {name!r} in {url!r}; known: {', '.join(sorted(names))}"
                )
            target, convert = names[name]
            try:
                kwargs[target] = convert(values[-1])
            except ValueError:
                raise ValueError(f"option {name}={values[-1]!r} in {url!r} is invalid") from None
        kwargs.update(options)
        return cls(**kwargs)

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"

    def outage_s(self) -> float:
        down = self._down_since
        now = asyncio.get_running_loop().time() if down is not None else 0.0
        return self._outage_total + (now - down if down is not None else 0.0)

    @property
    def connected(self) -> bool:
        return self._conn is not None

    @property
    def pending(self) -> int:
        """Messages published and not yet acknowledged by the broker (a batch's messages count
        until its PUBACK)."""
        return self._held

    @property
    def backlog(self) -> int:
        """Messages received from the broker and not yet in the local mailboxes (unacknowledged)."""
        return len(self._inbox)

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed" if self.closed else "disconnected"
        return f"<MqttBus {self.url} {self.client_id} {state}>"

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, timeout: float | None = None) -> Self:
        """Start the connection loop and wait (``connect_timeout``) for the first connection."""
        self._ensure_started()
        await self.wait_connected(self.connect_timeout if timeout is None else timeout)
        return self

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until the bus is connected; raises :class:`MqttConnectError` after ``timeout``."""
        self._ensure_started()
        try:
            await asyncio.wait_for(self._connected.wait(), timeout)
        except TimeoutError:
            raise MqttConnectError(
                f"no connection to {self.url} after {timeout} s: {self._last_error or 'no answer'}"
            ) from None

    async def __aenter__(self) -> Self:
        try:
            return await self.start()
        except BaseException:
            await self.close()
            raise

    def _ensure_started(self) -> None:
        if self._runner is not None:
            return
        if self.closed:
            raise BusClosed("bus is closed")
        loop = asyncio.get_running_loop()
        if self.tls and self._ssl_context is None:
            self._ssl_context = self._tls_context()  # a missing or bad file fails here, at once
        self._closing = loop.create_future()
        self._runner = loop.create_task(self._run(), name=f"mqtt-connection {self.client_id}")
        self._reader = loop.create_task(self._read_loop(), name=f"mqtt-reader {self.client_id}")

    async def close(self) -> None:
        """Wait (``close_timeout``) for unacknowledged publishes, then disconnect."""
        if self.closed:
            return
        self.closed = True
        self._flush_batches()
        if self._runner is not None and self._pending:
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            self._drain_waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, self.close_timeout)
            except TimeoutError:
                log.warning(
                    "closing %s with %d publishes the broker has not acknowledged",
                    self.client_id,
                    len(self._pending),
                )
        if self._closing is not None and not self._closing.done():
            self._closing.set_result(None)
        if self._runner is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._runner), self.operation_timeout)
            except (TimeoutError, Exception):
                self._runner.cancel()
                with contextlib.suppress(BaseException):
                    await self._runner
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        for waiter in self._space_waiters:
            if not waiter.done():
                waiter.set_exception(BusClosed("bus is closed"))
        self._space_waiters.clear()
        for state in self._filters.values():
            if not state.ready.done():
                state.ready.cancel()
        self._filters.clear()
        await super().close()

    # -- publishing -----------------------------------------------------------------------------

    async def publish(
        self,
        topic: str,
        message: Message,
        *,
        qos: int = 1,
        local: bool = False,
        retain: bool = False,
    ) -> None:
        """Deliver to this process's subscribers and send to the broker (QoS 1: until acked).

        Returns once the message is in every local mailbox and on its way to the broker; waits
        while ``max_inflight`` publishes are unacknowledged (also while disconnected).
        ``local=True`` skips the broker. ``retain=True`` sets the MQTT retain flag: the broker
        keeps the message for later subscribers (and this bus keeps it for its own).

        With ``batch`` on, a QoS 1 message that is not retained waits in its topic's open batch
        until the batching window ends (or the batch is full, or another message on the topic
        cannot join it), and the batch goes to the broker as one PUBLISH (docs/bus.md: the
        wire format). Order on a topic is kept; each message stays pending until its batch's
        PUBACK, and a reconnect sends the batch again whole.
        """
        if self.closed:
            raise BusClosed("bus is closed")
        topics.check_topic(topic)
        if qos not in (0, 1, 2):
            raise ValueError(f"qos must be 0, 1 or 2, not {qos!r}")
        if retain:
            self._retain(topic, message)
        if local:
            self.stats.published += 1
            await self.deliver_local(topic, message)  # shared groups here too: no broker deals
            return
        payload = encode(
            message,
            inline_images=self.inline_images,
            max_bytes=self.max_bytes,
            remember=not retain,  # a retained one is a state, never in a transcript
        )
        v5 = self._v5
        if not v5 or retain:
            # No no_local (MQTT 3), or a retained message the broker hands back to a later
            # subscription of ours: recognise it by id (local subscribers have it already).
            self._remember((topic, message.id), own=True)
        properties = (
            self._plain_properties
            if v5 and message.traceparent is None and self._plain_properties is not None
            else self._properties(message)
        )
        # Waiting for room happens only with the window full (or the bus not started yet):
        # otherwise nothing here awaits, and the message is queued in place.
        if qos == 1 and not retain and self.batch and self._may_batch(topic):
            if self._runner is None or self._held >= self.max_inflight:
                await self._wait_for_room()
            self._held += 1
            self._add_to_batch(topic, payload, properties)
        else:
            if self._batches:
                self._flush_batch(topic)  # what waits on this topic goes first: order per topic
            if self._runner is None or self._held >= self.max_inflight:
                await self._wait_for_room()
            self._queue(_Outgoing(topic, payload, qos, properties, retain))
        self.stats.published += 1
        # Not to this process's shared subscriptions: the broker deals the message to one
        # member of each group, maybe one of ours, and sends it back for that one.
        await self.deliver_local(topic, message, shared="local")
        # publish returns without waiting while the window has room; let the event loop run
        # now and then, or a tight loop of publishes would keep paho from writing any of them
        self._unyielded += len(payload) + 2048
        if self._unyielded >= 256 * 1024:
            self._unyielded = 0
            await asyncio.sleep(0)

    async def clear_retained(self, topic: str) -> None:
        """Publish an empty retained payload, which makes the broker forget the topic's retained
        message; subscribers that receive it (live ones) drop it silently."""
        if self.closed:
            raise BusClosed("bus is closed")
        await super().clear_retained(topic)
        self._flush_batch(topic)  # what waits on this topic goes first
        await self._wait_for_room()
        self._queue(_Outgoing(topic, b"", 1, None, retain=True))

    # -- batching -------------------------------------------------------------------------------

    def _may_batch(self, topic: str) -> bool:
        known = self._batchable.get(topic)
        if known is None:
            if len(self._batchable) > 4096:
                self._batchable.clear()
            levels = topic.count("/") + 1
            known = self._batchable[topic] = not any(
                topics.matches(f, topic)
                for f, needs in self._exclude_levels
                if needs == 0 or needs == levels
            )
        return known

    def _add_to_batch(self, topic: str, payload: bytes, properties: Properties | None) -> None:
        batch = self._batches.get(topic)
        if batch is not None and (
            len(batch.payloads) >= self.batch_messages
            or batch.size + len(payload) + 1 > self.batch_bytes
        ):
            self._flush_batch(topic)
            batch = None
        if batch is not None:
            batch.payloads.append(payload)
            batch.size += len(payload) + 1
            return
        self._batches[topic] = _Batch([payload], properties, len(payload) + 2)
        if self._batch_flush is None:
            loop = asyncio.get_running_loop()
            # Window 0: after the callbacks that are ready now (every actor the loop runs in
            # this pass publishes first), so the batch waits no longer than one pass.
            self._batch_flush = (
                loop.call_later(self.batch_window, self._flush_batches)
                if self.batch_window > 0
                else loop.call_soon(self._flush_batches)
            )

    def _flush_batch(self, topic: str) -> None:
        """Move ``topic``'s open batch, if any, to the pending table (one PUBLISH); it is sent when
        the pass ends (:meth:`_queue`)."""
        batch = self._batches.pop(topic, None)
        if batch is None:
            return
        self._queue_batch(topic, batch)
        self._schedule_pump()

    def _flush_batches(self) -> None:
        """The batching window ended: every open batch goes, oldest first."""
        if self._batch_flush is not None:
            self._batch_flush.cancel()
            self._batch_flush = None
        if self._batches:
            batches, self._batches = self._batches, {}
            for topic, batch in batches.items():
                self._queue_batch(topic, batch)
            self._pump()

    def _queue_batch(self, topic: str, batch: _Batch) -> None:
        # Into the pending table whatever the window: the publishers waited for room before
        # they added to it; the window bounds what goes on the wire (_pump).
        if len(batch.payloads) == 1:
            outgoing = _Outgoing(topic, batch.payloads[0], 1, batch.properties)
        else:
            outgoing = _Outgoing(
                topic,
                encode_batch(batch.payloads),
                1,
                self._batch_props(),
                count=len(batch.payloads),
            )
        self._seq += 1
        self._pending[self._seq] = outgoing
        self._unsent.append(self._seq)

    def _batch_props(self) -> Properties | None:
        if not self._v5:
            return None  # the payload's first byte says it is a batch
        if self._batch_properties is None:
            props = _PackedOnce(PacketTypes.PUBLISH)
            props.ContentType = BATCH_CONTENT_TYPE
            self._batch_properties = props
        return self._batch_properties

    async def _wait_for_room(self) -> None:
        """Start the bus if needed, and wait while ``max_inflight`` messages are held."""
        self._ensure_started()
        while self._held >= self.max_inflight:
            await self._wait_for_space()
            if self.closed:
                raise BusClosed("bus is closed")

    def _queue(self, outgoing: _Outgoing) -> None:
        """Put ``outgoing`` in the pending table (in order; room was made); it is sent, with
        whatever else this pass of the event loop queues, when the pass ends (one pump, one
        join of the packets: paho writes them at the next pass in any case)."""
        self._held += 1
        self._seq += 1
        self._pending[self._seq] = outgoing
        self._unsent.append(self._seq)
        self._schedule_pump()

    def _properties(self, message: Message) -> Properties | None:
        if not self._v5:
            return None
        if message.traceparent is None:
            if self._plain_properties is None:
                plain = _PackedOnce(PacketTypes.PUBLISH)
                plain.ContentType = CONTENT_TYPE
                self._plain_properties = plain
            return self._plain_properties
        props = Properties(PacketTypes.PUBLISH)
        props.ContentType = CONTENT_TYPE
        props.UserProperty = [("traceparent", message.traceparent)]
        return props

    async def _wait_for_space(self) -> None:
        conn = self._conn
        if conn is not None and conn.paused:
            self._resume_reading(conn)  # the PUBACKs we wait for come on that socket
        waiter = asyncio.get_running_loop().create_future()
        self._space_waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter in self._space_waiters:
                self._space_waiters.remove(waiter)
            elif not waiter.cancelled() and waiter.exception() is None:
                self._wake_publisher()  # pass the room it was given on
            raise

    def _wake_publisher(self) -> None:
        while self._space_waiters:
            waiter = self._space_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _pump(self) -> None:
        """Send unsent messages, in order, while the window has room."""
        conn = self._conn
        if conn is None or not self._unsent or self._inflight >= self._window:
            return
        if conn.paho.socket() is None:
            return  # the connection is going down: the next one sends it
        if conn.fast:
            self._pump_fast(conn)
            return
        unsent, pending = self._unsent, self._pending
        room = self._window - self._inflight
        while unsent and room:
            seq = unsent.popleft()
            entry = pending.get(seq)
            if entry is None:
                continue
            if not self._publish_by_paho(conn, seq, entry):
                unsent.appendleft(seq)
                break  # the connection is going down: the next one sends it
            room -= entry.qos != 0
        self._inflight = self._window - room

    def _pump_fast(self, conn: _Connection) -> None:
        """:meth:`_pump` through the accelerator: the QoS 1 packets built here, joined, onto
        paho's queue (paho_fast says why); QoS 0 and 2 through paho's ``publish``."""
        paho = conn.paho
        unsent, pending, mids, names = self._unsent, self._pending, conn.mids, self._topic_names
        no_properties = b"\x00" if self._v5 else None
        room = self._window - self._inflight
        packets: list[bytes] = []
        size = resent = 0
        mid = paho_fast.last_mid(paho)
        while unsent and room:
            seq = unsent.popleft()
            entry = pending.get(seq)
            if entry is None:
                continue
            if entry.qos != 1:
                if packets:
                    paho_fast.queue_packets(paho, b"".join(packets), mid)
                    packets, size = [], 0
                if not self._publish_by_paho(conn, seq, entry):
                    unsent.appendleft(seq)
                    break  # the connection is going down: the next one sends it
                room -= entry.qos != 0
                mid = paho_fast.last_mid(paho)
                continue
            mid = mid + 1 if mid < 65535 else 1  # paho's own counter goes on from here
            props = entry.properties.pack() if entry.properties is not None else no_properties
            name = names.get(entry.topic) or self._topic_name(entry.topic)
            packet = paho_fast.publish_packet(name, entry.payload, mid, props, entry.retain)
            packets.append(packet)
            size += len(packet)
            resent += entry.sent
            entry.sent = True
            mids[mid] = seq
            room -= 1
            if size >= paho_fast.JOIN_BYTES:
                paho_fast.queue_packets(paho, b"".join(packets), mid)
                packets, size = [], 0
        if packets:
            paho_fast.queue_packets(paho, b"".join(packets), mid)
        self._inflight = self._window - room
        self.stats.resent += resent

    def _publish_by_paho(self, conn: _Connection, seq: int, entry: _Outgoing) -> bool:
        """A message through paho's public ``publish`` (every message on the public path, QoS 0
        and 2 on the fast one); False if paho could not take it."""
        info = conn.paho.publish(
            entry.topic, entry.payload, entry.qos, entry.retain, properties=entry.properties
        )
        if info.rc != paho_mqtt.MQTT_ERR_SUCCESS:
            return False
        if entry.sent:
            self.stats.resent += 1
        entry.sent = True
        if entry.qos == 0:
            del self._pending[seq]
            self._freed(entry.count)
        else:
            conn.mids[info.mid] = seq
        return True

    def _topic_name(self, topic: str) -> bytes:
        """``topic`` as a PUBLISH names it (UTF-8, its length first); an episode's few topics
        are published on several times, so each is encoded once (bounded memo)."""
        name = self._topic_names.get(topic)
        if name is None:
            if len(self._topic_names) >= 4096:
                self._topic_names.clear()
            raw = topic.encode()
            name = self._topic_names[topic] = len(raw).to_bytes(2, "big") + raw
        return name

    def _schedule_pump(self) -> None:
        if not self._pump_scheduled:
            self._pump_scheduled = True
            asyncio.get_running_loop().call_soon(self._run_pump)

    def _run_pump(self) -> None:
        self._pump_scheduled = False
        self._pump()

    def _freed(self, count: int) -> None:
        self._held -= count
        if self._space_waiters:
            for _ in range(count):
                self._wake_publisher()
        if not self._pending and self._drain_waiters:
            for waiter in self._drain_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._drain_waiters.clear()

    def _on_puback(
        self,
        conn: _Connection,
        _client: object,
        _userdata: object,
        mid: int,
        reason_code: ReasonCode,
        _properties: object,
    ) -> None:
        self._acked(conn, mid, reason_code.is_failure, reason_code)

    def _acked(self, conn: _Connection, mid: int, failed: bool, reason_code: object) -> None:
        seq = conn.mids.pop(mid, None)
        if seq is None:
            return  # QoS 0, or a message of an earlier connection
        if conn is self._conn:
            self._inflight -= 1
        entry = self._pending.pop(seq, None)
        if entry is not None and failed:
            if isinstance(reason_code, int):
                reason_code = _reason(reason_code)
            self.stats.rejected += entry.count
            log.warning("the broker refused a message on %s: %s", entry.topic, reason_code)
        self._freed(entry.count if entry is not None else 0)
        if self._unsent:
            self._schedule_pump()

    def _acked_all(self, conn: _Connection, acked: list[int]) -> None:
        """:meth:`_acked` for the successful PUBACKs of one read (their packet ids), in one go."""
        mids_pop, pending_pop = conn.mids.pop, self._pending.pop
        found = freed = 0
        for mid in acked:
            seq = mids_pop(mid, None)
            if seq is None:
                continue
            found += 1
            entry = pending_pop(seq, None)
            if entry is not None:
                freed += entry.count
        if conn is self._conn:
            self._inflight -= found
        self._freed(freed)
        if self._unsent:
            self._schedule_pump()

    # -- subscriptions --------------------------------------------------------------------------

    def _on_subscribe(self, sub: Subscription) -> None:
        if topics.is_shared(sub.filter):
            if not self._v5:
                self.router.remove(sub)
                raise ValueError(
                    f"the shared subscription {sub.filter!r} needs MQTT 5: over MQTT 3.1.1 a "
                    "message does not say which subscription it was sent for, so this bus "
                    "could not tell a shared copy from a plain one (use protocol='5')"
                )
            if sub.filter not in self._share_ids:
                ident = len(self._share_ids) + _PLAIN_ID + 1
                self._share_ids[sub.filter] = ident
                self._shared_by_id[ident] = sub.filter
        state = self._filters.get(sub.filter)
        if state is None:
            self._ensure_started()
            ready = asyncio.get_running_loop().create_future()
            ready.add_done_callback(_retrieve)
            state = self._filters[sub.filter] = _Filter(ready)
            self._stale.discard(sub.filter)
            conn = self._conn
            if conn is not None:
                conn.spawn(self._broker_subscribe(conn, [(sub.filter, state)]))
        sub._ready = state.ready

    async def _unsubscribe(self, sub: Subscription) -> None:
        self.router.remove(sub)
        state = self._filters.get(sub.filter)
        if state is None or self.router.count(sub.filter):
            return
        del self._filters[sub.filter]
        if not state.ready.done():
            state.ready.cancel()
        # Wait for the UNSUBACK, so that what is published after close() is not delivered here;
        # without a connection, the next one unsubscribes (the session may still hold it).
        self._stale.add(sub.filter)
        conn = self._conn
        if conn is not None:
            task = conn.spawn(self._broker_unsubscribe(conn, [sub.filter]))
            await asyncio.wait([task], timeout=self.operation_timeout)

    async def _broker_subscribe(
        self, conn: _Connection, filters: list[tuple[str, _Filter]]
    ) -> None:
        """Subscribe ``filters`` on ``conn``: plain ones in batches, with ``no_local`` and
        Subscription Identifier 1; each shared one alone (an identifier is per SUBSCRIBE), with
        its own identifier, without ``no_local`` (a protocol error on a shared subscription;
        and the broker may deal this process's own message to it) and without retained
        messages."""
        v5 = self._v5
        plain = [(f, state) for f, state in filters if not topics.is_shared(f)]
        for start in range(0, len(plain), _SUBSCRIBE_BATCH):
            batch = plain[start : start + _SUBSCRIBE_BATCH]
            options: SubscribeOptions | int = SubscribeOptions(qos=1, noLocal=True) if v5 else 1
            if not await self._subscribe_batch(conn, batch, options, _PLAIN_ID):
                return  # the next connection subscribes again
        for topic_filter, state in filters:
            if not topics.is_shared(topic_filter):
                continue
            if not (conn.shared_available and conn.identifiers_available):
                missing = (
                    "shared subscriptions"
                    if not conn.shared_available
                    else ("subscription identifiers")
                )
                if not state.ready.done():
                    state.ready.set_exception(
                        ConnectionError(
                            f"the broker at {self.url} does not support {missing}, which the "
                            f"shared subscription {topic_filter!r} needs"
                        )
                    )
                continue
            # Retain Handling 2: MQTT 5 sends no retained message to a shared subscription,
            # but Mosquitto 2.0.11 does unless told so.
            options = SubscribeOptions(
                qos=1, noLocal=False, retainHandling=SubscribeOptions.RETAIN_DO_NOT_SEND
            )
            ident = self._share_ids[topic_filter]
            if not await self._subscribe_batch(conn, [(topic_filter, state)], options, ident):
                return

    async def _subscribe_batch(
        self,
        conn: _Connection,
        batch: list[tuple[str, _Filter]],
        options: SubscribeOptions | int,
        ident: int,
    ) -> bool:
        """One SUBSCRIBE; settles each filter's ``ready``. False if the connection failed."""
        properties = None
        if self._v5 and conn.identifiers_available:
            properties = Properties(PacketTypes.SUBSCRIBE)
            properties.SubscriptionIdentifier = ident
        request = [(f, options) for f, _ in batch]
        try:
            codes = await self._request(
                conn,
                lambda: conn.paho.subscribe(request, properties=properties),  # type: ignore[arg-type]
                self.operation_timeout,
            )
        except MqttError as exc:
            log.warning("subscribing to %d filters failed: %s", len(batch), exc)
            return False
        for (topic_filter, state), code in zip(batch, codes, strict=False):
            if self._filters.get(topic_filter) is not state or state.ready.done():
                continue
            failed = code.is_failure if isinstance(code, ReasonCode) else code == 0x80
            if failed:
                state.ready.set_exception(
                    ConnectionError(f"the broker refused the subscription {topic_filter!r}: {code}")
                )
            else:
                state.ready.set_result(None)
        return True

    async def _broker_unsubscribe(
        self, conn: _Connection, filters: list[str], *, timeout: float | None = None
    ) -> None:
        try:
            await self._request(
                conn,
                lambda: conn.paho.unsubscribe(filters),
                self.operation_timeout if timeout is None else timeout,
            )
        except MqttError as exc:
            log.debug("unsubscribing from %s failed: %s", filters, exc)
            return
        for topic_filter in filters:
            if topic_filter not in self._filters:
                self._stale.discard(topic_filter)

    async def _request(
        self, conn: _Connection, send: Callable[[], tuple[Any, int | None]], timeout: float
    ) -> list[Any]:
        """Send a SUBSCRIBE or UNSUBSCRIBE (``send``, paho's call) and wait for its
        acknowledgement: the reason codes, one per filter."""
        rc, mid = send()
        if rc != paho_mqtt.MQTT_ERR_SUCCESS or mid is None:
            raise MqttError(f"could not send the request: {paho_mqtt.error_string(rc)}")
        future: asyncio.Future[list[Any]] = conn.loop.create_future()
        conn.requests[mid] = future
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise MqttError(f"no acknowledgement from {self.url} in {timeout} s") from None
        finally:
            conn.requests.pop(mid, None)

    # -- receiving ------------------------------------------------------------------------------

    def _on_paho_message(
        self, conn: _Connection, _client: object, _userdata: object, message: paho_mqtt.MQTTMessage
    ) -> None:
        self._inbox.append((conn, message))
        self._inbox_bytes += len(message.payload)
        waiter = self._inbox_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if (
            not conn.paused
            and not self._space_waiters
            and (
                len(self._inbox) >= self.max_backlog or self._inbox_bytes >= self.max_backlog_bytes
            )
        ):
            self._pause_reading(conn)

    # A broker that honours our Receive Maximum never lets the backlog pass it; Mosquitto 2.0.11
    # releases up to Receive Maximum queued messages for every PUBACK (eclipse/mosquitto#2301),
    # so under sustained overload the backlog would grow to the broker's whole queue. Past
    # max_backlog the bus stops reading its socket, and TCP flow control holds the broker.
    # It reads again when the backlog halves, or at once when a publisher of this bus waits for
    # PUBACKs (which arrive on the same socket).

    def _pause_reading(self, conn: _Connection) -> None:
        conn.paused = True
        _remove(conn.loop.remove_reader, conn.paho.socket())
        log.debug(
            "%s: %d messages wait for mailboxes; reading paused", self.client_id, len(self._inbox)
        )

    def _resume_reading(self, conn: _Connection) -> None:
        conn.paused = False
        if conn is self._conn:
            _add(conn.loop.add_reader, conn.paho.socket(), self._socket_readable, conn)

    # paho's hooks for an outside event loop: paho says when its socket opens and closes and
    # when it has something to write; the loop says when the socket is readable or writable.
    # A socket may close between paho asking for a callback and the loop running it: _add and
    # _remove let that pass.

    def _install_socket_callbacks(self, conn: _Connection) -> None:
        paho, loop = conn.paho, conn.loop

        def on_open(_c: object, _u: object, sock: Any) -> None:
            if isinstance(sock, socket.socket):
                # Small packets (PUBACKs, short messages) go at once, not after Nagle's delay.
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def register() -> None:
                if not conn.paused:
                    _add(loop.add_reader, sock, self._socket_readable, conn)
                if conn.housekeeping is None:
                    conn.housekeeping = loop.create_task(self._housekeeping(conn))

            loop.call_soon_threadsafe(register)  # paho opens the socket in an executor thread

        def on_register_write(_c: object, _u: object, sock: Any) -> None:
            if threading.get_ident() == conn.loop_thread:
                _add(loop.add_writer, sock, self._socket_writable, conn)
            else:
                loop.call_soon_threadsafe(_add, loop.add_writer, sock, self._socket_writable, conn)

        def on_unregister_write(_c: object, _u: object, sock: Any) -> None:
            _remove(loop.remove_writer, sock)

        def on_close(_c: object, _u: object, sock: Any) -> None:
            def unregister() -> None:
                _remove(loop.remove_reader, sock)
                _remove(loop.remove_writer, sock)
                if conn.housekeeping is not None:
                    conn.housekeeping.cancel()

            if threading.get_ident() == conn.loop_thread:
                unregister()
            else:
                loop.call_soon_threadsafe(unregister)

        paho.on_socket_open = on_open
        paho.on_socket_close = on_close
        paho.on_socket_register_write = on_register_write
        paho.on_socket_unregister_write = on_unregister_write

    def _socket_readable(self, conn: _Connection) -> None:
        paho = conn.paho
        try:
            while True:
                if not conn.fast:
                    paho.loop_read()
                elif conn.mids and paho_fast.take_pubacks(
                    paho, conn.mids.__contains__, conn.acked_all
                ):
                    break  # all it held were PUBACKs (plain TCP: no TLS bytes pending)
                else:
                    paho_fast.loop_read(paho, len(conn.mids))
                sock = paho.socket()
                if sock is not None and hasattr(sock, "pending") and sock.pending() > 0:
                    continue  # TLS: decrypted bytes the selector cannot see
                break
        except Exception as exc:
            conn.fail(exc)

    def _socket_writable(self, conn: _Connection) -> None:
        try:
            conn.paho.loop_write()
        except Exception as exc:
            conn.fail(exc)

    async def _housekeeping(self, conn: _Connection) -> None:
        """paho's ``loop_misc`` once a second while the socket is open: keepalive pings, and
        the end of a connection whose broker stopped answering them."""
        while conn.paho.loop_misc() == paho_mqtt.MQTT_ERR_SUCCESS:
            await asyncio.sleep(1)

    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        inbox = self._inbox
        while True:
            if not inbox:
                self._inbox_waiter = loop.create_future()
                try:
                    await self._inbox_waiter
                finally:
                    self._inbox_waiter = None
                continue
            conn, message = inbox.popleft()
            self._inbox_bytes -= len(message.payload)
            if (
                conn.paused
                and len(inbox) <= self.max_backlog // 2
                and self._inbox_bytes <= self.max_backlog_bytes // 2
            ):
                self._resume_reading(conn)
            try:
                await self._dispatch(message)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("delivering a message from %s failed", self.url)
            if message.qos and conn.paho.is_connected():
                conn.paho.ack(message.mid, message.qos)

    async def _dispatch(self, raw: paho_mqtt.MQTTMessage) -> None:
        try:
            topic = raw.topic
        except UnicodeDecodeError:
            self.stats.count_malformed("bad_topic")
            log.warning("dropped a message whose topic is not UTF-8")
            return
        if not raw.payload:
            return  # a retained message cleared (clear_retained): nothing to deliver
        payload = bytes(raw.payload)
        items: list[Message | CodecError]
        try:
            if is_batch(payload):
                items = decode_batch(
                    payload, max_bytes=self.max_bytes, resolve_image=self.resolve_image
                )
            else:
                items = [
                    decode(payload, max_bytes=self.max_bytes, resolve_image=self.resolve_image)
                ]
        except CodecError as exc:
            self.stats.count_malformed(exc.reason)
            log.warning("dropped a malformed payload on %s: %s", topic, exc)
            return
        # The broker sends one copy per subscription of ours that matches, each with that
        # subscription's identifier: 1 for the plain ones (this process's plain subscribers
        # all get the first such copy), a shared filter's own for that filter (one member of
        # its group gets it). No identifier (a broker without them): plain.
        shared: list[str] = []
        plain = True
        idents = _subscription_ids(raw)
        if idents:
            shared = [self._shared_by_id[i] for i in idents if i in self._shared_by_id]
            plain = len(shared) < len(idents)
        for message in items:  # a batch: its messages in the order they were published
            if isinstance(message, CodecError):
                self.stats.count_malformed(message.reason)
                log.warning("dropped a malformed message of a batch on %s: %s", topic, message)
                continue
            if plain and self._first_copy((topic, message.id)):
                await self.deliver_local(topic, message, shared="none")
            for shared_filter in shared:
                if self._first_copy((topic, message.id, shared_filter)):
                    await self._deliver_to_group(shared_filter, topic, message)

    def _first_copy(self, key: tuple[str, ...]) -> bool:
        """Whether ``key`` is new (remembered now); a redelivery or own message is not."""
        own = self._seen.get(key)
        if own is not None:
            self._seen.move_to_end(key)
            if not own:
                self.stats.duplicates += 1
            return False
        self._remember(key, own=False)
        return True

    async def _deliver_to_group(self, shared_filter: str, topic: str, message: Message) -> None:
        group = self.router.group(shared_filter)
        sub = group.pick() if group is not None else None
        if sub is None:
            # Sent by the broker before it took our UNSUBSCRIBE: acknowledged, and no one else
            # of the group gets it (the layer above re-sends, e.g. the coordinator's leases).
            self.stats.orphaned += 1
            log.warning(
                "dropped a message on %s: the shared subscription %s closed before it arrived",
                topic,
                shared_filter,
            )
            return
        await self.deliver_shared(sub, Delivery(topic, message))

    def _remember(self, key: tuple[str, ...], *, own: bool) -> None:
        self._seen[key] = own
        if len(self._seen) > self.dedup_window:
            self._seen.popitem(last=False)

    # -- the connection loop --------------------------------------------------------------------

    def _client(self) -> _Connection:
        """A new paho client, not connected yet, with this bus's callbacks."""
        v5 = self._v5
        loop = asyncio.get_running_loop()
        paho = paho_mqtt.Client(
            paho_mqtt.CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            clean_session=None if v5 else True,
            protocol=paho_mqtt.MQTTProtocolVersion(int(self.protocol)),
        )
        paho.enable_logger(logging.getLogger("parley.bus.mqtt.client"))
        if self.username is not None:
            paho.username_pw_set(self.username, self.password)
        if self._ssl_context is not None:
            paho.tls_set_context(self._ssl_context)
            if self.tls_insecure:
                paho.tls_insecure_set(True)
        paho.max_inflight_messages_set(0)  # parley's own window (see _pump) decides
        paho.manual_ack_set(True)
        self._generation += 1
        fast = paho_fast.enabled()
        conn = _Connection(
            paho,
            self._generation,
            loop,
            threading.get_ident(),
            fast,
            loop.create_future(),
            loop.create_future(),
        )
        conn.connected.add_done_callback(_retrieve)
        conn.disconnected.add_done_callback(_retrieve)
        self._install_socket_callbacks(conn)
        paho.on_message = lambda c, u, m: self._on_paho_message(conn, c, u, m)
        paho.on_publish = lambda c, u, mid, rc, p: self._on_puback(conn, c, u, mid, rc, p)
        conn.acked = lambda mid, reason: self._acked(conn, mid, reason >= 0x80, reason)
        conn.acked_all = lambda mids: self._acked_all(conn, mids)
        if fast:
            paho_fast.route_pubacks(paho, conn.mids.__contains__, conn.acked)

        def on_connect(c: Any, u: Any, flags: Any, reason: Any, props: Any = None) -> None:
            if props is not None and hasattr(props, "ReceiveMaximum"):
                conn.server_receive_maximum = props.ReceiveMaximum
            if props is not None:
                conn.shared_available = getattr(props, "SharedSubscriptionAvailable", 1) != 0
                conn.identifiers_available = (
                    getattr(props, "SubscriptionIdentifierAvailable", 1) != 0
                )
            if conn.connected.done():
                return
            if reason.is_failure:
                conn.fail(MqttError(f"{self.url} refused the connection: {reason}"))
            else:
                conn.connected.set_result(None)

        def on_disconnect(c: Any, u: Any, flags: Any, reason: Any, props: Any = None) -> None:
            if conn.leaving and not conn.disconnected.done():
                conn.disconnected.set_result(None)
            conn.fail(MqttError(f"disconnected: {reason}"))

        def on_acknowledged(c: Any, u: Any, mid: int, codes: Any, props: Any = None) -> None:
            request = conn.requests.get(mid)
            if request is not None and not request.done():
                request.set_result(list(codes))

        paho.on_connect = on_connect
        paho.on_disconnect = on_disconnect
        paho.on_subscribe = on_acknowledged
        paho.on_unsubscribe = on_acknowledged
        return conn

    async def _connect(self, conn: _Connection) -> None:
        """Open the socket and send CONNECT (paho's ``connect`` blocks on the socket: in a
        thread), then wait for the CONNACK."""
        v5 = self._v5
        properties = None
        if v5:
            properties = Properties(PacketTypes.CONNECT)
            properties.SessionExpiryInterval = self.session_expiry
            properties.ReceiveMaximum = self.receive_maximum
        clean_start = (
            (self.clean_start and not self._ever_connected)
            if v5
            else paho_mqtt.MQTT_CLEAN_START_FIRST_ONLY  # paho's default; MQTT 3 has none
        )

        def connect() -> None:
            conn.paho.connect(
                self.host,
                self.port,
                self.keepalive,
                clean_start=clean_start,
                properties=properties,
            )

        try:
            await conn.loop.run_in_executor(None, connect)
        except (OSError, ValueError) as exc:
            raise MqttError(str(exc) or type(exc).__name__) from None
        try:
            await asyncio.wait_for(asyncio.shield(conn.connected), self.operation_timeout)
        except TimeoutError:
            raise MqttError(f"no CONNACK from {self.url} in {self.operation_timeout} s") from None

    def _discard(self, conn: _Connection) -> None:
        """Let go of a connection's paho client, its tasks and its socket."""
        for task in list(conn.tasks):
            task.cancel()
        if conn.housekeeping is not None:
            conn.housekeeping.cancel()
        conn.fail(MqttError("the connection was closed"))
        paho = conn.paho
        sock = paho.socket()
        if sock is None:
            return
        _remove(conn.loop.remove_reader, sock)
        _remove(conn.loop.remove_writer, sock)
        # paho closes its socket once a DISCONNECT is written; if that cannot be written now,
        # the socket is closed here (the client is never used again).
        conn.leaving = True
        with contextlib.suppress(Exception):
            if paho.disconnect() == paho_mqtt.MQTT_ERR_SUCCESS:
                paho.loop_write()
        sock = paho.socket()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _tls_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        if self.tls_insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    async def _run(self) -> None:
        assert self._closing is not None
        delay = self.reconnect_min
        while not self._closing.done():
            try:
                conn = self._client()
                try:
                    await self._connect(conn)
                    await self._serve(conn)
                finally:
                    self._discard(conn)
                delay = self.reconnect_min
            except MqttError as exc:
                self._last_error = exc
                log.debug("connection to %s failed: %s", self.url, exc)
            except Exception as exc:
                self._last_error = exc
                log.exception("the connection to %s failed unexpectedly", self.url)
            if self._closing.done():
                return
            pause = delay * (0.5 + random.random())
            delay = min(delay * 2, self.reconnect_max)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._closing), pause)

    async def _serve(self, conn: _Connection) -> None:
        assert self._closing is not None
        if self._ever_connected:
            self.stats.reconnects += 1
            log.info("reconnected to %s as %s", self.url, self.client_id)
        self._ever_connected = True
        self._conn = conn
        server_max = conn.server_receive_maximum or 65535
        self._window = max(1, min(self.max_inflight, server_max))
        self._inflight = 0
        self._unsent = deque(self._pending)
        self._pump()
        if self._down_since is not None:
            self._outage_total += asyncio.get_running_loop().time() - self._down_since
            self._down_since = None
        self._connected.set()
        disconnected = conn.disconnected
        try:
            filters = list(self._filters.items())
            if filters:
                conn.spawn(self._broker_subscribe(conn, filters))
            stale = sorted(self._stale - set(self._filters))
            if stale:
                conn.spawn(self._broker_unsubscribe(conn, stale))
            await asyncio.wait({disconnected, self._closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._conn = None
            self._connected.clear()
            if not self.closed:
                self._down_since = asyncio.get_running_loop().time()
            for task in list(conn.tasks):
                task.cancel()
            if disconnected.done():
                self._last_error = disconnected.exception()
                log.warning("lost the connection to %s: %s", self.url, self._last_error)
            else:
                await self._disconnect(conn)

    async def _disconnect(self, conn: _Connection) -> None:
        """Say goodbye; with MQTT 5 also end the session, so the broker stops queueing for us.

        Shared subscriptions are unsubscribed first, and their UNSUBACK awaited: the broker
        reads the DISCONNECT whenever it gets to this socket, and a message published from
        another connection meanwhile could be dealt here and lost with the session. After the
        UNSUBACK the group's later messages go to the other members."""
        shared = [f for f in self._filters if topics.is_shared(f)]
        if shared:
            wait = min(self.operation_timeout, _CLOSE_UNSUBSCRIBE_S)
            await self._broker_unsubscribe(conn, shared, timeout=wait)
        properties = None
        if self._v5:
            properties = Properties(PacketTypes.DISCONNECT)
            properties.SessionExpiryInterval = 0
        conn.leaving = True
        if conn.paho.disconnect(properties=properties) == paho_mqtt.MQTT_ERR_SUCCESS:
            with contextlib.suppress(TimeoutError, MqttError):
                await asyncio.wait_for(asyncio.shield(conn.disconnected), self.operation_timeout)


def _add(register: Callable[..., None], sock: Any, *args: Any) -> None:
    """``loop.add_reader``/``add_writer`` for ``sock``, if it is still open."""
    fd = sock.fileno() if sock is not None else -1
    if fd >= 0:
        with contextlib.suppress(OSError, ValueError):
            register(fd, *args)


def _remove(unregister: Callable[[int], bool], sock: Any) -> None:
    fd = sock.fileno() if sock is not None else -1
    if fd >= 0:
        with contextlib.suppress(OSError, ValueError):
            unregister(fd)


def _reason(code: int) -> ReasonCode:
    reason = ReasonCode(PacketTypes.PUBACK)
    reason.unpack(bytes([code]))
    return reason


def _subscription_ids(message: paho_mqtt.MQTTMessage) -> list[int]:
    """The MQTT 5 Subscription Identifiers a message came with (none over MQTT 3.1.1)."""
    properties = getattr(message, "properties", None)
    idents = getattr(properties, "SubscriptionIdentifier", None) if properties else None
    if idents is None:
        return []
    return list(idents) if isinstance(idents, list) else [idents]


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _truthy(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("", "1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)
