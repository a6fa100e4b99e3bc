"""Publishing over MQTT without waiting for the broker: the window of unacknowledged messages
is freed by the broker's PUBACKs, whichever form Mosquitto gives them (success, or "no
matching subscribers" when nobody listens), and nothing is lost, repeated or reordered."""

from __future__ import annotations

import asyncio

import pytest

from parley.bus import topics
from parley.bus.base import Subscription
from parley.bus.messages import TextPart, TranscriptEvent
from parley.bus.mqtt import MqttBus
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio
RUN = "pipe"


def event(n: int) -> TranscriptEvent:
    return TranscriptEvent(
        run=RUN,
        episode="e1",
        sender="gm",
        turn=n,
        event="note",
        from_role="gm",
        content=[TextPart(text=f"message {n}")],
    )


async def turns_heard(heard: Subscription, n: int) -> list[int]:
    """The turns of the next ``n`` messages ``heard`` gets."""
    got: list[int] = []
    async with asyncio.timeout(60):
        async for delivery in heard:
            got.append(delivery.message.turn)
            if len(got) == n:
                break
    return got


async def all_acknowledged(sender: MqttBus) -> None:
    """Wait until the broker has acknowledged all ``sender`` published, and refused none."""
    async with asyncio.timeout(30):
        while sender.pending:
            await asyncio.sleep(0.05)
    assert sender.stats.rejected == 0


async def test_a_small_window_passes_many_messages_heard_or_not(
    mosquitto_broker: MqttBroker,
) -> None:
    # A window of 4: without the PUBACKs read right, the fifth publish would wait for ever.
    async with mosquitto_broker.bus(max_inflight=4) as sender, mosquitto_broker.bus() as hearer:
        nobody = topics.events(RUN, "unheard")
        for n in range(100):  # acknowledged as "no matching subscribers"
            await asyncio.wait_for(sender.publish(nobody, event(n)), 30)
        heard = hearer.subscribe(topics.events(RUN, "e1"), maxsize=1000)
        await heard.ready()
        for n in range(200):  # acknowledged as success
            await asyncio.wait_for(sender.publish(topics.events(RUN, "e1"), event(n)), 30)
        assert await turns_heard(heard, 200) == list(range(200))  # all, once each, in order
        await all_acknowledged(sender)


async def test_acknowledgements_of_both_forms_in_one_read_free_the_window(
    mosquitto_broker: MqttBroker,
) -> None:
    # Publishes to a heard and an unheard topic in turn: the broker's PUBACKs alternate between
    # success and "no matching subscribers", and a read holds both forms.
    async with mosquitto_broker.bus(max_inflight=8) as sender, mosquitto_broker.bus() as hearer:
        heard = hearer.subscribe(topics.events(RUN, "mixed"), maxsize=1000)
        await heard.ready()
        for n in range(300):
            topic = topics.events(RUN, "mixed" if n % 2 else "nobody")
            await asyncio.wait_for(sender.publish(topic, event(n)), 30)
        assert await turns_heard(heard, 150) == list(range(1, 300, 2))  # all, once each, in order
        await all_acknowledged(sender)
