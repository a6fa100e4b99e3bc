"""Runtime overhead: turns/s with scripted players and no model latency, and memory per episode.

Plays COMMA's wire puzzle (scripted solver and expert) at 1 and 1,000 concurrent episodes, on
the local bus and through a Mosquitto it starts from the project config. The text variant
measures the runtime itself; the image variant adds rendering a PNG per solver turn. Tracing
"on" is the default tracing of a run (spans to traces.jsonl; bus publish/receive spans only over
MQTT, where messages cross processes). State "on" publishes the observer's view after every
step (``state: {publish: every_step}``, the default of a run: text, and the puzzle's picture in
the image variant, retained over MQTT and cleared at each episode's end); "off" publishes none.
Memory per live episode is the tracemalloc peak of 1,000 episodes in flight at once, less the
peak of one, divided by 999 (text variant: images excluded). Prints a table, writes
benchmarks/results/runtime_overhead.json.

    python benchmarks/runtime_overhead.py [--episodes 3000] [--no-mqtt] [--state on|off|both]
        [--tracing on|off|both] [--concurrency 1,1000] [--variant text,image] [--no-memory]
    # MQTT against the local bus, scripted wire at 100 in flight (docs/performance.md):
    python benchmarks/runtime_overhead.py --concurrency 100 --variant text --tracing off \
        --state on --episodes 2000 --no-memory
    # The same by instructions, steady on a busy machine (needs valgrind; a few minutes): one
    # local and one Mosquitto run of 300 episodes after a warm-up, counted by callgrind
    python benchmarks/runtime_overhead.py --instructions
    # ... and by the Python lines each run executes, with the functions that differ most
    # (benchmarks/linecount.py: instructions undercount the transport's bookkeeping)
    python benchmarks/runtime_overhead.py --lines
    # which runs, and reads the dumps of (cg.out.2 local, cg.out.4 Mosquitto; --marks calls
    # os.getppid() around every measured run; Mosquitto is another process, not counted)
    valgrind --tool=callgrind --dump-before=os_getppid --callgrind-out-file=cg.out \
        python benchmarks/runtime_overhead.py --concurrency 100 --variant text --tracing off \
        --state on --episodes 300 --no-memory --marks
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from parley import event_loop
from parley.bus.broker import find_mosquitto, start_mosquitto
from parley.runtime.config import load_config
from parley.runtime.scheduler import run_experiment

RESULTS = Path(__file__).parent / "results"
# --state and --tracing: the settings each runs
BOTH = {"on": (True,), "off": (False,), "both": (False, True)}


def config(
    episodes: int, concurrency: int, variant: str, tracing: bool, state: bool = True
) -> dict:
    return {
        "name": "overhead",
        "concurrency": concurrency,
        "tracing": {"enabled": tracing},
        "state": {"publish": "every_step" if state else "off"},
        "games": [
            {
                "game": "comma.wire",
                "seeds": {"count": episodes},
                "settings": {"variant": variant},
                "pairings": [{"solver": "scripted", "expert": "scripted"}],
            }
        ],
    }


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user and system) of another process so far, from /proc (0 for none, or
    elsewhere)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(
    episodes: int,
    concurrency: int,
    variant: str,
    bus: str | None,
    tracing: bool,
    state: bool,
    broker_pid: int | None = None,
) -> dict:
    out = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    try:
        cfg = load_config(config(episodes, concurrency, variant, tracing, state))
        # A run freezes what exists when it starts and turns automatic collection off
        # (parley.event_loop.responsive_gc): the garbage of the runs before would stay in this
        # one's heap, and the later runs of a process measured slower. Each starts collected.
        gc.collect()
        broker_cpu = process_cpu(broker_pid)
        start, cpu = time.perf_counter(), time.process_time()
        outcome = await run_experiment(cfg, out / "run", bus_url=bus)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        broker_cpu = process_cpu(broker_pid) - broker_cpu
        turns = sum(r["turns"] for r in outcome.records)
        ok = sum(r["outcome"] == "success" for r in outcome.records)
        return {
            "episodes": len(outcome.records),
            "won": ok,
            "turns": turns,
            "seconds": round(elapsed, 3),
            "turns_per_s": round(turns / elapsed, 1),
            # This process's CPU (the broker's not included): steadier than turns/s on a
            # machine shared with other work.
            "cpu_us_per_turn": round(1e6 * cpu / max(1, turns), 1),
            # Mosquitto's CPU (clock ticks: coarse over a short run).
            "broker_cpu_us_per_turn": round(1e6 * broker_cpu / max(1, turns), 1),
            "episodes_per_s": round(len(outcome.records) / elapsed, 1),
        }
    finally:
        shutil.rmtree(out, ignore_errors=True)


async def peak_memory(concurrency: int) -> int:
    out = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    try:
        cfg = load_config(config(concurrency, concurrency, "text", tracing=False, state=False))
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        await run_experiment(cfg, out / "run")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak - base
    finally:
        shutil.rmtree(out, ignore_errors=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--episodes", type=int, help="episodes per run (default 3000; 300 with --instructions)"
    )
    parser.add_argument("--no-mqtt", action="store_true")
    parser.add_argument("--state", choices=sorted(BOTH), default="both")
    parser.add_argument("--tracing", choices=sorted(BOTH), default="both")
    parser.add_argument(
        "--concurrency", default="1,1000", help="episodes at once, comma-separated (1,1000)"
    )
    parser.add_argument("--variant", default="text,image", help="text, image or both")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    parser.add_argument(
        "--warmup",
        type=int,
        default=100,
        help="episodes played first on each bus, untimed (0: none); without them the first run "
        "on a bus also pays the process's first imports and caches",
    )
    parser.add_argument(
        "--marks",
        action="store_true",
        help="call os.getppid() before and after each run (valgrind --dump-before=os_getppid)",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions instead (valgrind's callgrind): one local and one Mosquitto "
        "run of --episodes (default 300), scripted wire, 100 in flight, state on, untraced",
    )
    parser.add_argument(
        "--lines",
        action="store_true",
        help="count the Python lines each run executes instead (benchmarks/linecount.py), by "
        "function: one local and one Mosquitto run of --episodes (default 300), as "
        "--instructions plays them",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where the JSON goes (default benchmarks/results/runtime_overhead.json, or "
        "runtime_overhead_instructions.json with --instructions, runtime_overhead_lines.json "
        "with --lines)",
    )
    args = parser.parse_args()
    kind = "_instructions" if args.instructions else "_lines" if args.lines else ""
    args.out = args.out or RESULTS / f"runtime_overhead{kind}.json"
    return args


async def main(args: argparse.Namespace) -> None:
    n = args.episodes or 3000
    rows: list[dict] = []
    broker = None
    buses: list[tuple[str, str | None]] = [("local", None)]
    broker_pid = None
    if not args.no_mqtt and find_mosquitto():
        broker = start_mosquitto()
        buses.append(("mosquitto", broker.url))
        broker_pid = broker.process.pid if broker.process is not None else None
    try:
        if args.warmup > 0:
            first = int(args.concurrency.split(",")[0])
            for _, url in buses:
                await measure(args.warmup, first, args.variant.split(",")[0], url, False, True)
        for bus_name, url in buses:
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                for variant in args.variant.split(","):
                    for tracing in BOTH[args.tracing]:
                        for state in BOTH[args.state]:
                            if args.marks:
                                os.getppid()
                            result = await measure(
                                n,
                                concurrency,
                                variant,
                                url,
                                tracing,
                                state,
                                broker_pid if url else None,
                            )
                            if args.marks:
                                os.getppid()
                            rows.append(
                                {
                                    "bus": bus_name,
                                    "concurrency": concurrency,
                                    "variant": variant,
                                    "tracing": tracing,
                                    "state": state,
                                    **result,
                                }
                            )
    finally:
        if broker is not None:
            broker.close()
    per_episode = 0.0
    if not args.no_memory:
        one = await peak_memory(1)
        many = await peak_memory(1000)
        per_episode = (many - one) / 999

    table = Table(title="runtime overhead: scripted wire puzzle, zero model latency")
    for col in (
        "bus",
        "episodes at once",
        "variant",
        "tracing",
        "state",
        "episodes",
        "turns/s",
        "episodes/s",
        "CPU µs/turn",
        "broker CPU µs/turn",
        "mosquitto/local",
    ):
        table.add_column(col, justify="right")
    local = {
        (r["concurrency"], r["variant"], r["tracing"], r["state"]): r
        for r in rows
        if r["bus"] == "local"
    }
    for r in rows:
        twin = local.get((r["concurrency"], r["variant"], r["tracing"], r["state"]))
        if r["bus"] != "local" and twin is not None and twin["turns_per_s"]:
            # The target is >= 0.9 (docs/performance.md); CPU gives the same ratio steadier.
            r["vs_local_turns"] = round(r["turns_per_s"] / twin["turns_per_s"], 3)
            r["vs_local_cpu"] = round(twin["cpu_us_per_turn"] / r["cpu_us_per_turn"], 3)
    for r in rows:
        table.add_row(
            r["bus"],
            str(r["concurrency"]),
            r["variant"],
            "on" if r["tracing"] else "off",
            "on" if r["state"] else "off",
            str(r["episodes"]),
            f"{r['turns_per_s']:,.0f}",
            f"{r['episodes_per_s']:,.0f}",
            f"{r['cpu_us_per_turn']:,.0f}",
            f"{r['broker_cpu_us_per_turn']:,.0f}" if r["bus"] != "local" else "",
            f"{r['vs_local_turns']:.2f} (CPU {r['vs_local_cpu']:.2f})"
            if "vs_local_turns" in r
            else "",
        )
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(table)
    if not args.no_memory:
        console.print(
            f"peak memory per live episode (text, 1000 in flight): {per_episode / 1024:.1f} KB"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "rows": rows,
        "memory_per_live_episode_bytes": round(per_episode),
    }
    args.out.write_text(json.dumps(report, indent=2))


def count_instructions(args: argparse.Namespace) -> None:
    """Instructions per turn on the local bus and over Mosquitto, each run counted alone."""
    from callgrind import count_benchmark

    if args.no_mqtt or not find_mosquitto():
        raise SystemExit("counting the Mosquitto run needs mosquitto (Debian: mosquitto)")
    argv = ["--concurrency", "100", "--variant", "text", "--tracing", "off", "--state", "on"]
    argv += ["--episodes", str(args.episodes or 300), "--no-memory", "--warmup", str(args.warmup)]
    parts, counted = count_benchmark(__file__, argv)
    # The counted run's order: the local bus, then Mosquitto (parts 2 and 4).
    turns = {row["bus"]: row["turns"] for row in counted["rows"]}
    local, mqtt = parts[2] / turns["local"], parts[4] / turns["mosquitto"]
    table = Table(title="instructions per turn (scripted wire, 100 in flight)")
    for col in ("bus", "turns", "instructions/turn", "mosquitto/local"):
        table.add_column(col, justify="right")
    table.add_row("local", str(turns["local"]), f"{local / 1e6:.3f} M", "")
    table.add_row(
        "mosquitto", str(turns["mosquitto"]), f"{mqtt / 1e6:.3f} M", f"{local / mqtt:.3f}"
    )
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    report = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "instructions_per_turn": {"local": local, "mosquitto": mqtt},
        "turns": turns,
        "parts": parts,
        # As the turns/s ratio reads: the target is >= 0.9 (docs/performance.md).
        "mosquitto_vs_local": local / mqtt,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


async def count_lines(args: argparse.Namespace) -> None:
    """Python lines per turn on the local bus and over Mosquitto, by function."""
    from linecount import count_runs, print_comparison

    if args.no_mqtt or not find_mosquitto():
        raise SystemExit("the Mosquitto run needs mosquitto (Debian: mosquitto)")
    episodes = args.episodes or 300

    def run(url: str | None) -> Callable[[], Awaitable[int]]:
        async def played() -> int:
            return int((await measure(episodes, 100, "text", url, False, True))["turns"])

        return played

    with start_mosquitto() as broker:
        for url in (None, broker.url) if args.warmup > 0 else ():
            await measure(args.warmup, 100, "text", url, False, True)
        counts, turns = await count_runs(run(None), run(broker.url))
    print(f"Python lines per turn: scripted wire, {episodes} episodes, 100 in flight, state on")
    compared = print_comparison(
        ("local", "mosquitto"), (counts[0], counts[1]), (turns[0], turns[1]), "turn"
    )
    report = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "episodes": episodes,
        **compared,
        # As the turns/s ratio reads: the target is >= 0.9 (docs/performance.md).
        "mosquitto_vs_local": 1 / compared["ratio"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.instructions:
        count_instructions(arguments)
    elif arguments.lines:
        event_loop.run(count_lines(arguments))
    else:
        # On the loop `parley run` uses (uvloop where installed; PARLEY_LOOP=asyncio for asyncio's).
        event_loop.run(main(arguments))
