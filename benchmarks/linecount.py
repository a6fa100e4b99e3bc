"""Python lines a measured run executes, by function: a profile that other load does not move.

callgrind's instruction counts (``callgrind.py``) are steady, but they weigh a line of Python
bookkeeping (a dict lookup, an attribute, a branch) as the few instructions it is, while on
the CPU such lines run at a fraction of the speed of the C code a line can call (orjson,
pydantic-core; likely the interpreter's branches and memory accesses). A change that adds
mostly bookkeeping (publishing a message to Mosquitto: 11 % more instructions a turn, 25 %
more lines, 22–28 % more CPU, docs/performance.md) looks cheaper by instructions than it is.
Counting the lines each run executes, and in which functions, gives the other steady view,
and says where the difference lies.

The count runs under ``sys.settrace`` (every thread started while it runs too), which slows
Python about tenfold: timings taken meanwhile mean nothing, and work that batches by time
(the MQTT bus's writes and acknowledgements) batches differently than at full speed. A line
is a line event: a statement written over several lines counts once per line it runs, so the
counts say where to look, not what each line costs.

    from linecount import counting
    with counting() as counted:
        await run_something()
    counted.lines, counted.calls       # totals
    counted.by_function[("mqtt.py", "publish")]   # (lines, calls) of one function
    # or each of several runs alone, each returning its units (turns, requests)
    counts, units = await count_runs(run_local, run_mqtt)
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

# A function as the tables name it: its file's name (not its path) and its name.
Function = tuple[str, str]


@dataclass
class LineCount:
    """Lines executed and calls made, in all and per function."""

    lines_of: Counter[Function] = field(default_factory=Counter)
    calls_of: Counter[Function] = field(default_factory=Counter)

    @property
    def lines(self) -> int:
        return sum(self.lines_of.values())

    @property
    def calls(self) -> int:
        return sum(self.calls_of.values())

    @property
    def by_function(self) -> dict[Function, tuple[int, int]]:
        return {f: (self.lines_of[f], self.calls_of[f]) for f in self.lines_of | self.calls_of}


def _name(frame: FrameType) -> Function:
    code = frame.f_code
    return code.co_filename.rsplit("/", 1)[-1], code.co_name


@contextmanager
def counting() -> Iterator[LineCount]:
    """Count what runs inside the block: this thread, and threads started inside it."""
    counted = LineCount()
    lines, calls = counted.lines_of, counted.calls_of

    def on_line(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            lines[_name(frame)] += 1
        return on_line

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            calls[_name(frame)] += 1
            return on_line
        return None

    previous, previous_threads = sys.gettrace(), threading.gettrace()
    threading.settrace(on_call)
    sys.settrace(on_call)
    try:
        yield counted
    finally:
        sys.settrace(previous)
        threading.settrace(previous_threads)  # type: ignore[arg-type]


async def count_runs(
    *runs: Callable[[], Awaitable[int]],
) -> tuple[list[LineCount], list[int]]:
    """Count each run alone, one after another: what it executed, and the units it returns
    (turns, requests)."""
    counts, units = [], []
    for run in runs:
        with counting() as counted:
            units.append(await run())
        counts.append(counted)
    return counts, units


def difference(
    base: LineCount, base_units: int, other: LineCount, other_units: int, top: int = 25
) -> list[dict[str, Any]]:
    """The functions whose lines per unit (request, turn) differ most from ``base`` to
    ``other``, largest increase first: ``function``, ``lines`` and ``calls`` added per unit."""
    rows = []
    for function in base.lines_of | other.lines_of | base.calls_of | other.calls_of:
        lines = other.lines_of[function] / other_units - base.lines_of[function] / base_units
        calls = other.calls_of[function] / other_units - base.calls_of[function] / base_units
        rows.append({"function": ":".join(function), "lines": lines, "calls": calls})
    rows.sort(key=lambda row: -row["lines"])
    return rows[:top]


def print_comparison(
    names: tuple[str, str],
    counts: tuple[LineCount, LineCount],
    units: tuple[int, int],
    unit: str,
    top: int = 25,
) -> dict[str, Any]:
    """Print lines and calls per ``unit`` of two runs, their ratio and the functions that
    differ most (a markdown table); return the same as JSON-able data."""
    (a, b), (count_a, count_b), (units_a, units_b) = names, counts, units
    per = {
        name: {"lines": count.lines / n, "calls": count.calls / n, unit + "s": n}
        for name, count, n in ((a, count_a, units_a), (b, count_b, units_b))
    }
    print()
    print(f"| run | {unit}s | lines per {unit} | calls per {unit} |")
    print("|---|---|---|---|")
    for name in names:
        row = per[name]
        print(f"| {name} | {row[unit + 's']} | {row['lines']:.0f} | {row['calls']:.0f} |")
    ratio = per[b]["lines"] / per[a]["lines"]
    print(f"{b}/{a} by lines: {ratio:.3f} ({a}/{b}: {1 / ratio:.3f})")
    rows = difference(count_a, units_a, count_b, units_b, top)
    print()
    print(f"| function | lines added per {unit} | calls added per {unit} |")
    print("|---|---|---|")
    for row in rows:
        print(f"| {row['function']} | {row['lines']:.1f} | {row['calls']:.2f} |")
    return {"per_" + unit: per, "ratio": ratio, "functions": rows}
