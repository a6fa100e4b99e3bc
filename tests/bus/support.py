"""What the MQTT transport's tests share: a numbered event, and collecting deliveries."""

from __future__ import annotations

import asyncio

import pytest

from parley.bus.base import Delivery, Subscription
from parley.bus.messages import TextPart, TranscriptEvent


def event(i: int, episode: str = "e1", run: str = "mqtt") -> TranscriptEvent:
    """A transcript event carrying its number ``i`` (read back with :func:`numbers`)."""
    return TranscriptEvent(
        run=run,
        episode=episode,
        sender="gm",
        event="note",
        from_role="gm",
        content=[TextPart(text=f"message {i}")],
        data={"i": i},
    )


async def take(sub: Subscription, n: int, timeout: float = 15.0) -> list[Delivery]:
    """The next ``n`` deliveries of ``sub``; the test fails saying how many came in time."""
    got: list[Delivery] = []

    async def collect() -> None:
        while len(got) < n:
            got.append(await sub.get())

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        pytest.fail(f"{sub.filter}: {len(got)} of {n} messages arrived in {timeout} s")
    return got


def numbers(deliveries: list[Delivery]) -> list[int]:
    return [d.message.data["i"] for d in deliveries]  # type: ignore[union-attr]
