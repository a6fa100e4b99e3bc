"""Instruction counts of a benchmark's measured runs, steady where CPU time is not.

On a shared or noisy machine a run's CPU time moves by 10–20 % from one run to the next, more
than the effects the ratio benchmarks look for (traced against untraced, Mosquitto against the
local bus). valgrind's callgrind counts the instructions a process executes, which other load
does not change. A benchmark run with ``--marks`` calls ``os.getppid()`` before and after each
measured run; callgrind, started with ``--dump-before=os_getppid``, then writes each measured
run's counts to a dump of its own: dump k holds what ran before the k-th call, so with two
measured runs dump 2 is the first and dump 4 the second (what runs after the last call is not
read).

Instructions are a lower bound of CPU time: they leave out the kernel, cache misses and the
cost of moving work between cores, so a ratio of instructions is the part of a CPU ratio that
the code itself decides. The stand-in model server and Mosquitto are other processes and are
not counted.

    from callgrind import count_benchmark
    parts, report = count_benchmark("benchmarks/tracing_cost.py", ["--episodes", "100"])
    parts[2], parts[4]  # the instructions of the first and the second measured run
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


class CallgrindError(RuntimeError):
    """valgrind is missing, or the counted run failed."""


def counted_parts(argv: list[str], *, parts: int, timeout_s: float = 3600) -> dict[int, int]:
    """Run ``python argv…`` under callgrind, a dump before every ``os.getppid()``; the
    instructions of each dump (k → count of what ran before the k-th call). ``parts``: how many
    calls the run must make (two measured runs, each between two: 4); another number means
    something else called ``os.getppid()``, and the dumps would not be the runs."""
    valgrind = _valgrind()
    with tempfile.TemporaryDirectory(prefix="parley-callgrind-") as folder:
        out = Path(folder) / "cg.out"
        command = [
            valgrind,
            "--tool=callgrind",
            "--dump-before=os_getppid",
            f"--callgrind-out-file={out}",
            sys.executable,
            *argv,
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, errors="replace", timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            raise CallgrindError(
                f"the counted run did not end within {timeout_s:.0f} s (under callgrind a run "
                "takes some 50 times as long: count fewer episodes)"
            ) from None
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise CallgrindError(f"the counted run failed (exit {done.returncode}):\n{tail}")
        found: dict[int, int] = {}
        for dump in Path(folder).glob("cg.out.*"):
            suffix = dump.name.rsplit(".", 1)[1]
            if suffix.isdigit():
                found[int(suffix)] = summary(dump)
        if sorted(found) != list(range(1, parts + 1)):
            raise CallgrindError(
                f"the counted run made dumps {sorted(found)}, not 1 to {parts}: something "
                "besides the marks called os.getppid(), so the dumps are not the measured runs"
            )
        return found


def _valgrind() -> str:
    found = shutil.which("valgrind")
    if found is None:
        raise CallgrindError(
            "counting instructions needs valgrind (Debian: apt-get install valgrind)"
        )
    return found


def summary(dump: Path) -> int:
    """The instructions a callgrind dump counted (its ``summary:`` or ``totals:`` line)."""
    totals = None
    with dump.open() as lines:
        for line in lines:
            if line.startswith("summary:"):
                return int(line.split()[1])
            if line.startswith("totals:"):
                totals = int(line.split()[1])
    if totals is None:
        raise CallgrindError(f"{dump} has no summary line")
    return totals


def count_benchmark(script: str, argv: list[str]) -> tuple[dict[int, int], Any]:
    """Run the benchmark ``script`` with ``argv``, ``--marks`` and ``--out`` under callgrind; the
    instructions of its dumps (2: its first measured run, 4: its second) and the JSON it
    wrote (its rows name what each run played). Exits with the reason where valgrind is
    missing or the counted run failed."""
    with tempfile.TemporaryDirectory(prefix="parley-counted-") as folder:
        written = Path(folder) / "counted.json"
        command = [script, *argv, "--marks", "--out", str(written)]
        try:
            _valgrind()  # said before the run is announced
            print(f"counting: valgrind --tool=callgrind … python {' '.join(command)}", flush=True)
            parts = counted_parts(command, parts=4)
        except CallgrindError as exc:
            raise SystemExit(str(exc)) from None
        return parts, json.loads(written.read_text())
