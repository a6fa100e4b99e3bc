"""Actors and their host: one inbox each, one message at a time, failures contained."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable

from parley.bus.base import Bus, Delivery, Subscription
from parley.observability import tracing

log = logging.getLogger("parley.runtime")

ErrorHandler = Callable[["Actor", BaseException], None]


class Actor(ABC):
    """Owns an inbox topic; :meth:`handle` is never called concurrently for one actor."""

    inbox: str

    @abstractmethod
    async def handle(self, delivery: Delivery) -> None: ...


class ActorHost:
    """Starts, supervises and stops actors on a bus.

    An exception in an actor stops that actor and is handed to the error handler given at
    start (the episode then ends as ``error``); it never reaches the host's caller. Stopped
    actors keep no reference here, so memory does not grow with the number of episodes run.
    """

    def __init__(self, bus: Bus, *, local: bool = True) -> None:
        self.bus = bus
        # An episode's actors all live in this process: their inboxes need no broker round trip
        # (everything they publish still reaches the broker for remote observers).
        self.local = local
        self._tasks: dict[Actor, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    async def start(self, actor: Actor, on_error: ErrorHandler, *, maxsize: int = 64) -> None:
        """Subscribe ``actor`` to its inbox and start feeding it."""
        sub = self.bus.subscribe(actor.inbox, maxsize=maxsize, local=self.local)
        await sub.ready()
        task = asyncio.create_task(self._feed(actor, sub, on_error), name=f"actor:{actor.inbox}")
        self._tasks[actor] = task

    async def _feed(self, actor: Actor, sub: Subscription, on_error: ErrorHandler) -> None:
        # The run's tracing is set before its actors start and stays as it is: asked once.
        spans = tracing.message_spans()
        mailbox = sub.mailbox
        try:
            while True:
                # What ``async for delivery in sub`` does, awaiting the mailbox's future
                # itself: a wake-up resumes this frame alone (see Mailbox.arrival).
                if not len(mailbox):
                    if mailbox.closed:
                        return
                    await mailbox.arrival()
                    continue
                delivery = mailbox.take()
                try:
                    if spans:
                        # A CONSUMER span under the message's traceparent.
                        with tracing.consume(delivery.topic, delivery.message):
                            await actor.handle(delivery)
                    else:
                        await actor.handle(delivery)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.debug("actor %s failed", actor.inbox, exc_info=True)
                    on_error(actor, exc)
                    return
        finally:
            await sub.close()

    async def stop(self, actor: Actor) -> None:
        task = self._tasks.pop(actor, None)
        if task is None:
            return
        if not task.done():
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
        except Exception:  # the error was already handed to on_error
            pass

    async def stop_all(self, actors: list[Actor]) -> None:
        for actor in actors:
            await self.stop(actor)
