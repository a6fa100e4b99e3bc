"""The in-process transport: zero-copy delivery through bounded mailboxes."""

from __future__ import annotations

from parley.bus import topics
from parley.bus.base import Bus, BusClosed
from parley.bus.messages import Message


class LocalBus(Bus):
    """Subscribers receive the very object that was published (treat messages as immutable).

    A full subscriber mailbox makes ``publish`` wait, so a slow subscriber slows its publisher
    and nothing is dropped. Retained messages live in :attr:`Bus.retained` (MQTT semantics).
    """

    async def publish(
        self,
        topic: str,
        message: Message,
        *,
        qos: int = 1,
        local: bool = False,
        retain: bool = False,
    ) -> None:
        if self.closed:
            raise BusClosed("bus is closed")
        topics.check_topic(topic)
        self.stats.published += 1
        if retain:
            self._retain(topic, message)
        if not self.deliver_now(topic, message):
            await self.deliver_local(topic, message)
