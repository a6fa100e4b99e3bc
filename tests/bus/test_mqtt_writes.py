"""How the MQTT transport writes and encodes, against a real Mosquitto: what one pass of the
event loop publishes goes out, in order per topic, whatever mix of batched and retained
messages it is; and a payload sent is reused for the message's transcript line."""

from __future__ import annotations

import asyncio
import gc

import pytest

from parley.bus import codec, topics
from parley.bus.codec import encode, sent_by_reference
from parley.bus.messages import ImagePart, StateUpdate, TextPart, TranscriptEvent
from parley.bus.mqtt import MqttBus
from tests.bus import support
from tests.bus.support import numbers, take
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio

RUN = "writes"


def event(i: int, episode: str = "e1") -> TranscriptEvent:
    return support.event(i, episode, run=RUN)


def state(i: int, episode: str = "e1") -> StateUpdate:
    return StateUpdate(run=RUN, episode=episode, sender="gm", step=i, data={"i": i})


async def drained(bus: MqttBus, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while bus.pending:
            await asyncio.sleep(0.01)


async def test_a_pass_of_batched_and_retained_messages_all_go_out(
    mqtt_broker: MqttBroker,
) -> None:
    # A retained message takes its topic's open batch with it, and the batches left go at the
    # end of the pass: each topic's messages arrive in the order they were published.
    topic = topics.state(RUN, "mixed")
    other = topics.events(RUN, "mixed")
    async with mqtt_broker.bus() as receiver, mqtt_broker.bus() as sender:
        sub = receiver.subscribe(topic, maxsize=100)
        events = receiver.subscribe(other, maxsize=100)
        await sub.ready()
        await events.ready()
        for round_ in range(5):
            base = 10 * round_
            await sender.publish(topic, event(base))  # batched
            await sender.publish(topic, state(base + 1), retain=True)  # flushes the batch
            await sender.publish(other, event(base + 2))  # a batch of its own
            await sender.publish(other, event(base + 3))
            await sender.publish(topic, event(base + 4))  # a batch again
            await asyncio.sleep(0)
        await drained(sender)
        got = numbers(await take(sub, 15))
        assert got == [n for r in range(5) for n in (10 * r, 10 * r + 1, 10 * r + 4)]
        assert numbers(await take(events, 10)) == [
            n for r in range(5) for n in (10 * r + 2, 10 * r + 3)
        ]


async def test_a_retained_message_that_takes_the_only_batch_with_it_is_written(
    mqtt_broker: MqttBroker,
) -> None:
    topic = topics.state(RUN, "only")
    async with mqtt_broker.bus() as receiver, mqtt_broker.bus() as sender:
        sub = receiver.subscribe(topic, maxsize=10)
        await sub.ready()
        first = topics.state(RUN, "first")
        await sender.publish(first, state(0), retain=True)  # queued: a write is due
        await sender.publish(topic, event(1))  # opens the pass's only batch
        await sender.publish(topic, state(2), retain=True)  # sends it, and itself, at once
        await drained(sender, timeout=5.0)  # nothing else is published to push it out
        assert numbers(await take(sub, 2)) == [1, 2]


async def test_a_lone_retained_message_is_written_without_any_batch(
    mqtt_broker: MqttBroker,
) -> None:
    topic = topics.state(RUN, "lone")
    async with mqtt_broker.bus() as sender:
        await sender.publish(topic, state(7), retain=True)
        await drained(sender)  # acknowledged: it was written
        async with mqtt_broker.bus() as late:
            sub = late.subscribe(topic)
            assert numbers(await take(sub, 1)) == [7]


async def test_the_transcript_line_of_a_sent_message_is_its_payload(
    mqtt_broker: MqttBroker,
) -> None:
    message = event(1)
    retained = state(2)
    async with mqtt_broker.bus() as sender:
        await sender.publish(topics.events(RUN, "sent"), message)
        await sender.publish(topics.state(RUN, "sent"), retained, retain=True)
        await drained(sender)
    kept = sent_by_reference(message)
    assert kept is not None
    assert kept == message.model_dump_json(context={"images": "ref"}).encode()
    assert encode(message, inline_images=False) is kept
    assert sent_by_reference(retained) is None  # a state never makes a transcript line


def test_a_remembered_payload_goes_with_its_message() -> None:
    message = event(3)
    encode(message, remember=True)
    key = id(message)
    assert key in codec._sent
    del message
    gc.collect()
    assert key not in codec._sent


def test_an_inline_image_is_not_taken_for_its_reference() -> None:
    picture = ImagePart.from_bytes(b"\x89PNG not really")
    message = TranscriptEvent(
        run=RUN, sender="gm", event="note", from_role="gm", content=[TextPart(text="x"), picture]
    )
    inline = encode(message, remember=True)
    assert sent_by_reference(message) is None
    by_reference = encode(message, inline_images=False)
    assert by_reference != inline
    assert b'"data":null' in by_reference
    # Encoded by reference for the wire (inline_images=False on the bus): the same bytes.
    wire = encode(message, inline_images=False, remember=True)
    assert sent_by_reference(message) is wire


def test_a_remembered_payload_still_obeys_the_size_limit() -> None:
    message = event(4)
    payload = encode(message, remember=True)
    with pytest.raises(codec.PayloadTooLarge):
        encode(message, inline_images=False, max_bytes=len(payload) - 1)


def test_a_shared_filter_excludes_from_batches_what_its_filter_matches() -> None:
    bus = MqttBus("localhost", batch_exclude=("$share/g/parley/+/jobs", "parley/+/+/gm"))
    assert not bus._may_batch(topics.jobs(RUN))
    assert not bus._may_batch(topics.gm_inbox(RUN, "e1"))
    assert bus._may_batch(topics.events(RUN, "e1"))
