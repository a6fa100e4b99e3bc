"""benchmarks/linecount.py counts what runs, in this thread and in threads started meanwhile."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from linecount import count_runs, counting, difference


def _three_lines(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def test_lines_and_calls_are_counted_per_function() -> None:
    with counting() as counted:
        _three_lines(10)
        _three_lines(10)
    lines, calls = counted.by_function[("test_linecount.py", "_three_lines")]
    # Per call: total = 0, the for line 11 times (10 items and the end), the body 10 times,
    # the return: 23 lines (2n + 3).
    assert (lines, calls) == (46, 2)


def test_a_thread_started_inside_is_counted_and_tracing_ends_with_the_block() -> None:
    with counting() as counted:
        worker = threading.Thread(target=_three_lines, args=(5,))
        worker.start()
        worker.join()
    assert counted.by_function[("test_linecount.py", "_three_lines")] == (13, 1)
    _three_lines(5)  # after the block: not counted
    assert counted.by_function[("test_linecount.py", "_three_lines")] == (13, 1)


def test_difference_is_per_unit_and_largest_first() -> None:
    with counting() as base:
        _three_lines(2)
    with counting() as more:
        _three_lines(2)
        _three_lines(20)
    rows = difference(base, 1, more, 2)
    top = rows[0]
    assert top["function"] == "test_linecount.py:_three_lines"
    # 2n + 3 lines a call. base: 7 lines in 1 unit; more: 7 + 43 lines in 2 units.
    assert top["lines"] == (7 + 43) / 2 - 7
    assert top["calls"] == 0


def test_runs_are_counted_each_alone_with_their_units() -> None:
    async def short() -> int:
        _three_lines(1)
        return 1

    async def long() -> int:
        _three_lines(30)
        return 3

    counts, units = asyncio.run(count_runs(short, long))
    assert units == [1, 3]
    assert counts[0].by_function[("test_linecount.py", "_three_lines")] == (5, 1)
    assert counts[1].by_function[("test_linecount.py", "_three_lines")] == (63, 1)
