"""Episode starts through the StartPacer: in the order asked, a few per pass of the event loop,
more while passes are short and fewer while they are long; a caller that gives up waiting
takes no one's turn."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest

from parley.runtime.scheduler import StartPacer

pytestmark = pytest.mark.anyio


def ticking(step_s: float) -> Callable[[], float]:
    """A clock on which every pass takes ``step_s``, however long it really took."""
    now = 0.0

    def clock() -> float:
        nonlocal now
        now += step_s
        return now

    return clock


async def _starts(pacer: StartPacer, n: int) -> list[tuple[int, int]]:
    """(caller, pass of the loop it started in) for ``n`` callers."""
    passes = 0
    started: list[tuple[int, int]] = []

    async def tick() -> None:
        nonlocal passes
        while True:
            passes += 1
            await asyncio.sleep(0)

    async def caller(i: int) -> None:
        await pacer.turn()
        started.append((i, passes))

    ticker = asyncio.create_task(tick())
    await asyncio.gather(*(caller(i) for i in range(n)))
    ticker.cancel()
    await pacer.close()
    return started


async def test_starts_come_in_order_a_few_per_pass_then_more_while_passes_are_short() -> None:
    started = await _starts(StartPacer(first=4, most=16, clock=ticking(0.001)), 60)
    assert [i for i, _ in started] == list(range(60))
    per_pass = list(Counter(p for _, p in started).values())
    assert per_pass[0] == 4
    assert max(per_pass) == 16
    assert per_pass == sorted(per_pass)  # it only grew: each pass was short


async def test_fewer_start_per_pass_while_passes_are_long() -> None:
    started = await _starts(StartPacer(first=4, clock=ticking(0.05)), 9)
    per_pass = list(Counter(p for _, p in started).values())
    assert per_pass == [4, 2, 1, 1, 1]


async def test_a_caller_that_gives_up_takes_no_turn() -> None:
    # Two a pass (each pass neither short nor long): "c" takes the turn "b" gave up, in the
    # same pass as "a".
    pacer = StartPacer(first=2, most=2, clock=ticking(0.01))
    order: list[str] = []
    passes = 0
    started: dict[str, int] = {}

    async def tick() -> None:
        nonlocal passes
        while True:
            passes += 1
            await asyncio.sleep(0)

    async def caller(name: str) -> None:
        await pacer.turn()
        order.append(name)
        started[name] = passes

    ticker = asyncio.create_task(tick())
    first = asyncio.create_task(caller("a"))
    gone = asyncio.create_task(caller("b"))
    last = asyncio.create_task(caller("c"))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.gather(first, last)
    ticker.cancel()
    await pacer.close()
    assert order == ["a", "c"]
    assert started["a"] == started["c"]


async def test_a_backlog_at_once_starts_the_waiting_callers_in_the_first_pass() -> None:
    # Long passes: without a backlog this would start 4, then 2, then 1 a pass.
    pacer = StartPacer(first=4, clock=ticking(0.05), backlog_at_once=100)
    started = await _starts(pacer, 30)
    per_pass = list(Counter(p for _, p in started).values())
    assert [i for i, _ in started] == list(range(30))
    assert per_pass == [30]
    # Later callers are paced again, from ``first`` halved after the long first pass.
    later = await _starts(pacer, 5)
    assert list(Counter(p for _, p in later).values()) == [2, 1, 1, 1]


async def test_the_backlog_at_once_is_capped() -> None:
    started = await _starts(StartPacer(first=4, clock=ticking(0.05), backlog_at_once=10), 14)
    assert list(Counter(p for _, p in started).values()) == [10, 2, 1, 1]
