"""Batching on the MQTT transport, against a real Mosquitto: messages published on one topic close
together travel as one PUBLISH whose payload is a JSON array (docs/bus.md), and every subscriber,
parley's or a foreign one that unpacks the array, sees what it saw before: each message once, in
order, on its own topic."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiomqtt
import pytest

from parley.bus import connect, topics
from parley.bus.codec import BATCH_CONTENT_TYPE, CONTENT_TYPE, encode, encode_batch
from parley.bus.messages import Job, TranscriptEvent
from parley.bus.mqtt import MqttBus
from tests.bus import support
from tests.bus.support import numbers, take
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio

RUN = "batching"


def event(i: int, episode: str = "e1") -> TranscriptEvent:
    return support.event(i, episode, run=RUN)


async def publish_bursts(bus: MqttBus, topic: str, items: range, burst: int = 50) -> None:
    """Publish ``items`` in bursts of ``burst`` without yielding: one batch per burst."""
    for i in items:
        await bus.publish(topic, event(i))
        if i % burst == burst - 1:
            await asyncio.sleep(0.002)


@dataclass
class Raw:
    """What a plain MQTT 5 client (no parley) received: one entry per PUBLISH."""

    publishes: list[tuple[str, str | None, object]] = field(default_factory=list)

    def messages(self, topic: str | None = None) -> list[dict]:
        """Every message, batches unpacked the way docs/bus.md tells a foreign tool to."""
        out: list[dict] = []
        for t, _, value in self.publishes:
            if topic is None or t == topic:
                out.extend(value if isinstance(value, list) else [value])  # type: ignore[arg-type]
        return out


@asynccontextmanager
async def raw_client(broker: MqttBroker, *filters: str) -> AsyncIterator[Raw]:
    caught = Raw()
    async with aiomqtt.Client(
        broker.host, broker.port, protocol=aiomqtt.ProtocolVersion.V5
    ) as client:
        for topic_filter in filters:
            await client.subscribe(topic_filter, qos=1)

        async def listen() -> None:
            async for message in client.messages:
                payload = message.payload
                assert isinstance(payload, bytes)
                content_type = getattr(message.properties, "ContentType", None)
                caught.publishes.append((str(message.topic), content_type, json.loads(payload)))

        task = asyncio.create_task(listen())
        try:
            yield caught
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def until(predicate: object, what: str, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"never happened: {what}")


async def test_a_burst_arrives_once_in_order_as_few_publishes(mqtt5_broker: MqttBroker) -> None:
    n = 600
    topic = topics.events(RUN, "burst")
    async with (
        raw_client(mqtt5_broker, topic) as raw,
        mqtt5_broker.bus() as publisher,
        mqtt5_broker.bus() as subscriber,
    ):
        sub = subscriber.subscribe(topic, maxsize=n)
        await sub.ready()
        await publish_bursts(publisher, topic, range(n))
        assert numbers(await take(sub, n)) == list(range(n))
        await until(lambda: len(raw.messages()) >= n, "the raw client got every message")
        await asyncio.sleep(0.1)
        assert publisher.pending == 0
    assert [m["data"]["i"] for m in raw.messages()] == list(range(n))
    batches = [p for p in raw.publishes if isinstance(p[2], list)]
    assert len(raw.publishes) < n and batches  # batched: fewer PUBLISHes than messages
    assert {ct for _, ct, v in raw.publishes if isinstance(v, list)} == {BATCH_CONTENT_TYPE}
    assert {ct for _, ct, v in raw.publishes if isinstance(v, dict)} <= {CONTENT_TYPE}
    assert subscriber.stats.duplicates == 0 and subscriber.stats.malformed == 0


async def test_a_shared_group_gets_each_message_once_in_order(mqtt5_broker: MqttBroker) -> None:
    n = 400
    topic = topics.events(RUN, "shared")
    group = f"$share/batchers/{topic}"
    async with (
        mqtt5_broker.bus() as publisher,
        mqtt5_broker.bus() as first,
        mqtt5_broker.bus() as second,
    ):
        members = [first.subscribe(group, maxsize=n), second.subscribe(group, maxsize=n)]
        for member in members:
            await member.ready()
        got: list[list[int]] = [[], []]

        async def collect(k: int) -> None:
            async for delivery in members[k]:
                got[k].append(delivery.message.data["i"])  # type: ignore[union-attr]

        collectors = [asyncio.create_task(collect(k)) for k in range(2)]
        await publish_bursts(publisher, topic, range(n), burst=20)
        await until(lambda: len(got[0]) + len(got[1]) >= n, "every message reached the group")
        await asyncio.sleep(0.2)  # a copy dealt twice would arrive by now
        for task in collectors:
            task.cancel()
    assert sorted(got[0] + got[1]) == list(range(n))  # each once
    assert all(part == sorted(part) for part in got)  # each member's share in order
    assert got[0] and got[1]  # the broker dealt to both


async def test_jobs_are_never_batched(mqtt5_broker: MqttBroker) -> None:
    """A shared subscription deals a whole PUBLISH to one worker: each job goes alone."""
    topic = topics.jobs(RUN)
    async with raw_client(mqtt5_broker, topic) as raw, mqtt5_broker.bus() as coordinator:
        for i in range(30):
            job = Job(run=RUN, episode=f"e{i}", sender="coordinator", spec={"i": i})
            await coordinator.publish(topic, job)
        await until(lambda: len(raw.publishes) >= 30, "30 jobs")
    assert all(isinstance(value, dict) for _, _, value in raw.publishes)
    assert [v["episode"] for _, _, v in raw.publishes] == [f"e{i}" for i in range(30)]


async def test_batches_keep_to_their_topic(mqtt5_broker: MqttBroker) -> None:
    """Interleaved publishes on two topics: each PUBLISH holds messages of its own topic only,
    so a client that may read one topic (subscription or ACL) gets none of the other's."""
    a, b = topics.events(RUN, "ta"), topics.events(RUN, "tb")
    async with (
        raw_client(mqtt5_broker, a) as only_a,
        raw_client(mqtt5_broker, topics.all_events(RUN)) as both,
        mqtt5_broker.bus() as publisher,
    ):
        for i in range(200):
            await publisher.publish(a, event(i, "ta"))
            await publisher.publish(b, event(i, "tb"))
        await until(lambda: len(both.messages()) >= 400, "400 messages")
        await until(lambda: len(only_a.messages()) >= 200, "200 messages on a")
    assert {t for t, _, _ in only_a.publishes} == {a}
    assert [m["data"]["i"] for m in only_a.messages()] == list(range(200))
    for topic, _, value in both.publishes:
        episode = topics.parse(topic).episode
        assert {m["episode"] for m in (value if isinstance(value, list) else [value])} == {episode}
    for topic in (a, b):
        assert [m["data"]["i"] for m in both.messages(topic)] == list(range(200))


async def test_foreign_publishes_decode_single_and_batched(mqtt_broker: MqttBroker) -> None:
    topic = topics.events(RUN, "foreign")
    async with mqtt_broker.bus() as bus:
        sub = bus.subscribe(topic)
        await sub.ready()
        await mqtt_broker.publish_raw(topic, encode(event(0)))  # one message, as before
        bad = b'{"kind": "no_such_kind"}'
        batch = encode_batch([encode(event(1)), bad, encode(event(2))])
        await mqtt_broker.publish_raw(topic, batch)
        await mqtt_broker.publish_raw(topic, b"[not json")
        await mqtt_broker.publish_raw(topic, encode(event(3)))
        assert numbers(await take(sub, 4)) == [0, 1, 2, 3]
        await until(lambda: bus.stats.malformed >= 2, "both bad payloads counted")
    assert bus.stats.malformed_reasons == {"unknown_kind": 1, "malformed": 1}


async def test_a_broker_restart_mid_batch_loses_and_repeats_nothing(
    mosquitto_broker: MqttBroker,
) -> None:
    n = 2000
    topic = topics.events(RUN, "restart")
    fast = {"reconnect_min": 0.02, "reconnect_max": 0.3}
    async with (
        mosquitto_broker.bus(**fast) as publisher,
        mosquitto_broker.bus(**fast) as subscriber,
    ):
        sub = subscriber.subscribe(topic, maxsize=n)
        await sub.ready()
        producer = asyncio.create_task(publish_bursts(publisher, topic, range(n), burst=40))
        await until(lambda: publisher.stats.published >= n // 4, "a quarter published")
        await asyncio.to_thread(mosquitto_broker.restart, downtime=0.3)
        await asyncio.wait_for(producer, 30)
        assert numbers(await take(sub, n, timeout=30)) == list(range(n))
        await asyncio.sleep(0.3)
        assert len(sub.mailbox) == 0  # nothing twice
        assert publisher.stats.reconnects >= 1


async def test_batching_can_be_turned_off_by_url(mqtt5_broker: MqttBroker) -> None:
    topic = topics.events(RUN, "off")
    bus = connect(f"{mqtt5_broker.url}?batch=off")
    assert isinstance(bus, MqttBus) and not bus.batch
    with pytest.raises(ValueError, match="batch_window"):
        connect(f"{mqtt5_broker.url}?batch_window=soon")
    async with raw_client(mqtt5_broker, topic) as raw, bus:
        for i in range(50):
            await bus.publish(topic, event(i))
        await until(lambda: len(raw.publishes) >= 50, "50 publishes")
    assert all(isinstance(value, dict) for _, _, value in raw.publishes)


async def test_pending_counts_messages_until_acked_and_close_sends_an_open_batch(
    mqtt_broker: MqttBroker,
) -> None:
    topic = topics.events(RUN, "close")
    async with mqtt_broker.bus() as receiver:
        sub = receiver.subscribe(topic, maxsize=100)
        await sub.ready()
        sender = await mqtt_broker.bus(batch_window=30.0).start()
        for i in range(10):
            await sender.publish(topic, event(i))
        assert sender.pending == 10  # in the open batch: the window is long
        await sender.close()  # sends the batch and waits for its PUBACK
        assert sender.pending == 0
        assert numbers(await take(sub, 10)) == list(range(10))


async def test_mqtt_311_batches_are_told_by_their_first_byte(mqtt_broker: MqttBroker) -> None:
    topic = topics.events(RUN, "v311")
    async with (
        mqtt_broker.bus(protocol="3.1.1") as publisher,
        mqtt_broker.bus(protocol="3.1.1") as subscriber,
    ):
        sub = subscriber.subscribe(topic, maxsize=200)
        await sub.ready()
        await publish_bursts(publisher, topic, range(200))
        assert numbers(await take(sub, 200)) == list(range(200))
        await asyncio.sleep(0.2)
        assert len(sub.mailbox) == 0 and subscriber.stats.malformed == 0
