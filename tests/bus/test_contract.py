"""The bus contract: every transport must pass this suite unchanged.

Each test runs on ``bus_pair`` = (publisher, subscriber): one ``local`` bus; one ``mqtt`` bus
(delivery inside the process: local routing); and ``mqtt-remote``, two MQTT buses standing for
two processes, where every message goes through the broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

import pytest

from parley.bus import topics
from parley.bus.base import Bus, BusClosed, Delivery, Subscription
from parley.bus.messages import ImagePart, Message, StateUpdate, TextPart, TranscriptEvent

pytestmark = pytest.mark.anyio

RUN = "contract"


def event(i: int, episode: str = "e1", text: str = "") -> TranscriptEvent:
    return TranscriptEvent(
        run=RUN,
        episode=episode,
        sender="gm",
        event="note",
        from_role="gm",
        content=[TextPart(text=text or f"message {i}")],
        data={"i": i},
    )


async def take(
    sub: Subscription,
    n: int,
    timeout: float = 10.0,
    keep: Callable[[Delivery], bool] | None = None,
) -> list[Delivery]:
    """The next ``n`` deliveries (those ``keep`` keeps); fails (with what arrived) if they do not
    come in time."""
    got: list[Delivery] = []

    async def collect() -> None:
        while len(got) < n:
            delivery = await sub.get()
            if keep is None or keep(delivery):
                got.append(delivery)

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        pytest.fail(f"{sub.filter}: {len(got)} of {n} messages arrived in {timeout} s")
    return got


async def nothing_more(
    sub: Subscription, wait: float = 0.3, keep: Callable[[Delivery], bool] | None = None
) -> None:
    await asyncio.sleep(wait)
    left = [d.topic for d in sub.mailbox._items if keep is None or keep(d)]
    assert not left, left


def numbers(deliveries: list[Delivery]) -> list[int]:
    return [d.message.data["i"] for d in deliveries]  # type: ignore[union-attr]


async def test_delivery_keeps_topic_message_and_order_per_topic(bus_pair: tuple[Bus, Bus]) -> None:
    pub, bus = bus_pair
    sub = bus.subscribe(f"parley/{RUN}/#", maxsize=2000)
    await sub.ready()
    eps = ["e1", "e2", "e3"]
    for i in range(300):
        ep = eps[i % 3]
        await pub.publish(topics.events(RUN, ep), event(i, ep))
    got = await take(sub, 300)
    for ep in eps:
        mine = [d for d in got if d.topic == topics.events(RUN, ep)]
        assert numbers(mine) == [i for i in range(300) if eps[i % 3] == ep]
        assert all(d.message.episode == ep for d in mine)
    assert isinstance(got[0].message, TranscriptEvent)
    await nothing_more(sub)


async def test_wildcards_deliver_exactly_the_matching_topics(bus_pair: tuple[Bus, Bus]) -> None:
    pub, bus = bus_pair
    filters = [
        f"parley/{RUN}/+/events",
        f"parley/{RUN}/#",
        f"parley/{RUN}/e1/agent/+",
        f"parley/{RUN}/e1/gm",
        "parley/+/+/+",
        "#",
    ]
    subs = {f: bus.subscribe(f) for f in filters}
    for sub in subs.values():
        await sub.ready()
    published = [
        topics.events(RUN, "e1"),
        topics.events(RUN, "e2"),
        topics.gm_inbox(RUN, "e1"),
        topics.agent_inbox(RUN, "e1", "solver"),
        topics.agent_inbox(RUN, "e2", "solver"),
        topics.results(RUN),
        topics.events("elsewhere", "e1"),
    ]
    sent = [event(i) for i in range(len(published))]
    for topic, message in zip(published, sent, strict=True):
        await pub.publish(topic, message)

    # "parley/+/+/+" and "#" match every run on the broker, which other tests share: only
    # this test's own messages are counted.
    ours = {m.id for m in sent}

    def own(delivery: Delivery) -> bool:
        return delivery.message.id in ours

    for topic_filter, sub in subs.items():
        expected = [t for t in published if topics.matches(topic_filter, t)]
        got = await take(sub, len(expected), keep=own)
        assert [d.topic for d in got] == expected, topic_filter
        await nothing_more(sub, 0.05, keep=own)
    await nothing_more(subs["#"], 0.2, keep=own)


async def test_many_subscribers_each_get_every_message(bus_pair: tuple[Bus, Bus]) -> None:
    pub, bus = bus_pair
    same = [bus.subscribe(topics.events(RUN, "e1")) for _ in range(40)]
    wild = [bus.subscribe(f"parley/{RUN}/+/events") for _ in range(10)]
    other = bus.subscribe(topics.events(RUN, "other"))
    for sub in [*same, *wild, other]:
        await sub.ready()
    for i in range(100):
        await pub.publish(topics.events(RUN, "e1"), event(i))
    for sub in [*same, *wild]:
        assert numbers(await take(sub, 100)) == list(range(100))
    await nothing_more(other, 0.1)


async def test_unsubscribe_stops_delivery_to_that_subscription_only(
    bus_pair: tuple[Bus, Bus],
) -> None:
    pub, bus = bus_pair
    topic = topics.gm_inbox(RUN, "e1")
    first = bus.subscribe(topic)
    second = bus.subscribe(topic)
    await first.ready()
    await second.ready()
    await pub.publish(topic, event(0))
    assert numbers(await take(first, 1)) == [0]
    await first.close()
    await pub.publish(topic, event(1))
    assert numbers(await take(second, 2)) == [0, 1]
    assert len(first.mailbox) == 0
    with pytest.raises(BusClosed):
        await first.get()

    await second.close()
    async with bus.subscribe(topic) as again:  # subscribing anew works
        await pub.publish(topic, event(2))
        assert numbers(await take(again, 1)) == [2]


async def test_iteration_ends_when_the_subscription_closes(bus_pair: tuple[Bus, Bus]) -> None:
    pub, bus = bus_pair
    topic = topics.events(RUN, "e1")
    sub = bus.subscribe(topic)
    await sub.ready()
    for i in range(3):
        await pub.publish(topic, event(i))
    seen: list[int] = []
    async for delivery in sub:
        seen.append(delivery.message.data["i"])  # type: ignore[union-attr]
        if len(seen) == 3:
            await sub.close()
    assert seen == [0, 1, 2]


async def test_one_megabyte_images_arrive_intact(bus_pair: tuple[Bus, Bus]) -> None:
    pub, bus = bus_pair
    sub = bus.subscribe(topics.state(RUN, "e1"))
    await sub.ready()
    sent = []
    for i in range(3):
        image = ImagePart.from_bytes(os.urandom(1024 * 1024))
        message = StateUpdate(
            run=RUN, episode="e1", sender="gm", content=[TextPart(text=f"board {i}"), image]
        )
        sent.append(message)
        await pub.publish(topics.state(RUN, "e1"), message)
    got = await take(sub, 3, timeout=20)
    for delivery, message in zip(got, sent, strict=True):
        assert delivery.message == message
        image = delivery.message.content[1]  # type: ignore[union-attr]
        assert isinstance(image, ImagePart) and image.size == 1024 * 1024
        assert image.data == message.content[1].data  # type: ignore[union-attr]


async def test_ten_thousand_messages_none_lost(bus_pair: tuple[Bus, Bus]) -> None:
    pub, bus = bus_pair
    n = 10_000
    sub = bus.subscribe(f"parley/{RUN}/+/events", maxsize=500)
    await sub.ready()
    received: list[int] = []

    async def consume() -> None:
        async for delivery in sub:
            received.append(delivery.message.data["i"])  # type: ignore[union-attr]
            if len(received) == n:
                return

    consumer = asyncio.create_task(consume())
    text = "x" * 900  # about 1 KB on the wire
    for i in range(n):
        await pub.publish(topics.events(RUN, "e1"), event(i, text=text))
    await asyncio.wait_for(consumer, 30)
    assert received == list(range(n))
    assert pub.stats.published >= n


async def test_a_slow_subscriber_slows_the_publisher_and_loses_nothing(
    bus_pair: tuple[Bus, Bus],
) -> None:
    """In one process the publisher waits for a full mailbox. Across processes the broker holds
    the backlog (its queue is unbounded by config) while the subscriber's bus stops
    acknowledging and reading, so what it has taken from the broker stays bounded."""
    pub, bus = bus_pair
    topic = topics.agent_inbox(RUN, "e1", "solver")
    slow = bus.subscribe(topic, maxsize=10)
    await slow.ready()
    n = 200 if pub is bus else 3000  # remote: more than Mosquitto's default queue of 1000
    published = 0

    async def publish_all() -> None:
        nonlocal published
        for i in range(n):
            await pub.publish(topic, event(i))
            published += 1

    publisher = asyncio.create_task(publish_all())
    if pub is bus:
        await asyncio.sleep(0.3)
        assert len(slow.mailbox) == 10  # full, and nothing was dropped to make room
        assert not publisher.done()
        stalled_at = published
        assert stalled_at <= 11
        await asyncio.sleep(0.2)
        assert published == stalled_at  # the publisher waits for the subscriber
    else:
        await asyncio.wait_for(publisher, 20)  # the broker absorbs the backlog
        for _ in range(100):
            if len(slow.mailbox) == 10:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        assert len(slow.mailbox) == 10
        backlog = getattr(bus, "backlog", 0)
        assert backlog <= getattr(bus, "max_backlog", 0) + 1, backlog

    got: list[Delivery] = []
    while len(got) < n:
        got.append(await asyncio.wait_for(slow.get(), 10))
        if len(got) % 50 == 0:
            await asyncio.sleep(0.01)  # still slow
    await asyncio.wait_for(publisher, 10)
    assert numbers(got) == list(range(n))
    await nothing_more(slow, 0.1)


async def test_a_malformed_payload_is_counted_and_logged_and_the_subscriber_goes_on(
    bus_pair: tuple[Bus, Bus], inject_raw, caplog: pytest.LogCaptureFixture
) -> None:
    pub, bus = bus_pair
    topic = topics.gm_inbox(RUN, "e1")
    sub = bus.subscribe(topic)
    await sub.ready()
    caplog.set_level(logging.WARNING, logger="parley.bus")
    await inject_raw(bus, topic, b"\x00\x01 not a message")
    await inject_raw(bus, topic, b'{"v": 1, "kind": "telepathy", "run": "r", "sender": "x"}')
    await pub.publish(topic, event(7))
    got = await take(sub, 1)
    assert numbers(got) == [7]
    for _ in range(50):  # MQTT: the broker may hand the garbage over after the good message
        if bus.stats.malformed == 2:
            break
        await asyncio.sleep(0.02)
    assert bus.stats.malformed == 2
    assert bus.stats.malformed_reasons == {"malformed": 1, "unknown_kind": 1}
    assert sum("malformed payload" in r.getMessage() for r in caplog.records) == 2
    await pub.publish(topic, event(8))
    assert numbers(await take(sub, 1)) == [8]


async def test_messages_are_the_published_messages(bus_pair: tuple[Bus, Bus]) -> None:
    pub, bus = bus_pair
    topic = topics.events(RUN, "e9")
    sub = bus.subscribe(topic)
    await sub.ready()
    message: Message = event(1)
    message = message.model_copy(update={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"})
    await pub.publish(topic, message)
    (delivery,) = await take(sub, 1)
    assert delivery == Delivery(topic, message)
    assert delivery.message.traceparent == message.traceparent


async def test_closing_the_bus_ends_subscriptions_and_refuses_publishing(
    bus_pair: tuple[Bus, Bus],
) -> None:
    pub, bus = bus_pair
    sub = bus.subscribe(topics.events(RUN, "e1"))
    await sub.ready()
    await bus.close()
    await pub.close()
    with pytest.raises(StopAsyncIteration):
        await sub.__anext__()
    with pytest.raises(BusClosed):
        await pub.publish(topics.events(RUN, "e1"), event(0))
    with pytest.raises(BusClosed):
        bus.subscribe(topics.events(RUN, "e1"))


async def test_invalid_topics_and_filters_are_refused(bus_pair: tuple[Bus, Bus]) -> None:
    pub, bus = bus_pair
    with pytest.raises(topics.TopicError):
        await pub.publish("parley/+/x", event(0))
    with pytest.raises(topics.TopicError):
        bus.subscribe("parley/#/x")


async def test_bus_factory_buses_are_separate_processes(
    any_bus: Bus, bus_factory, bus_kind: str
) -> None:
    """``any_bus``/``bus_factory``: every bus stands for a process of its own; MQTT buses
    reach each other through the broker, local buses share nothing."""
    other = await bus_factory()
    assert other is not any_bus
    sub = other.subscribe(topics.results(RUN))
    await sub.ready()
    await any_bus.publish(topics.results(RUN), event(1))
    if bus_kind == "mqtt":
        assert numbers(await take(sub, 1)) == [1]
    else:
        await nothing_more(sub, 0.1)
