"""How long ``parley`` takes to start: to refuse a bad config, and to list the games.

Each command runs ``--repeat`` times in a fresh process; the table gives the median wall time
and the median CPU time of the process (user + system: on a shared machine the wall clock
measures the neighbours as much as parley), and how many modules the process imported
(``python -X importtime``) with the heavy ones among them (model SDKs, the runtime). parley's
modules are compiled to bytecode first (benchmarks/precompile.py), so a start is timed as a
user's second start is, not as one that compiles every module.
Prints a table and writes benchmarks/results/startup.json.

    python benchmarks/startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from precompile import compile_parley
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
HEAVY = (
    "openai",
    "anthropic",
    "aiohttp",
    "opentelemetry.sdk",
    "scipy",
    "pandas",
    "matplotlib",
    "networkx",
    "parley.runtime.scheduler",
    "parley.agents.backends.client",
)


def _timed(args: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def _imports(args: list[str]) -> tuple[int, list[str]]:
    """Modules imported by the command, and which of ``HEAVY`` are among them."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    names = [
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "self [us]" not in line
    ]
    heavy = sorted(h for h in HEAVY if any(n == h or n.startswith(h + ".") for n in names))
    return len(names), heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    compile_parley()  # a start as a user's second one, with bytecode (precompile.py)
    bad = Path(tempfile.mkdtemp()) / "bad.yaml"
    bad.write_text("name: bad\ngames: 7\n")
    cli = [sys.executable, "-m", "parley.runtime.cli"]
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "parley run bad.yaml": [*cli, "run", str(bad)],
        "parley games": [*cli, "games"],
    }
    rows: list[dict[str, Any]] = []
    for label, command in commands.items():
        runs = [_timed(command) for _ in range(args.repeat)]
        modules, heavy = _imports(command)
        rows.append(
            {
                "command": label,
                "exit": runs[0][2],
                "wall_s_median": statistics.median(r[0] for r in runs),
                "cpu_s_median": statistics.median(r[1] for r in runs),
                "modules": modules,
                "heavy_imported": heavy,
            }
        )
    table = Table(title=f"parley start-up ({args.repeat} runs each; load {os.getloadavg()[0]:.1f})")
    for column in ("command", "exit", "wall s", "CPU s", "modules", "heavy modules imported"):
        table.add_column(
            column, justify="left" if column.startswith(("command", "heavy")) else "right"
        )
    for row in rows:
        table.add_row(
            row["command"],
            str(row["exit"]),
            f"{row['wall_s_median']:.2f}",
            f"{row['cpu_s_median']:.2f}",
            str(row["modules"]),
            ", ".join(row["heavy_imported"]) or "–",
        )
    Console().print(table)
    out = ROOT / "benchmarks" / "results" / "startup.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                "load_average": os.getloadavg(),
                "repeat": args.repeat,
                "rows": rows,
            },
            indent=2,
        )
    )
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
