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
        [--tracing on|off|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

from rich.console import Console
from rich.table import Table

from parley.bus.broker import find_mosquitto, start_mosquitto
from parley.runtime.config import load_config
from parley.runtime.scheduler import run_experiment

RESULTS = Path(__file__).parent / "results"


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


async def measure(
    episodes: int, concurrency: int, variant: str, bus: str | None, tracing: bool, state: bool
) -> dict:
    out = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    try:
        cfg = load_config(config(episodes, concurrency, variant, tracing, state))
        start = time.perf_counter()
        outcome = await run_experiment(cfg, out / "run", bus_url=bus)
        elapsed = time.perf_counter() - start
        turns = sum(r["turns"] for r in outcome.records)
        ok = sum(r["outcome"] == "success" for r in outcome.records)
        return {
            "episodes": len(outcome.records),
            "won": ok,
            "turns": turns,
            "seconds": round(elapsed, 3),
            "turns_per_s": round(turns / elapsed, 1),
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


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--no-mqtt", action="store_true")
    both = {"on": (True,), "off": (False,), "both": (False, True)}
    parser.add_argument("--state", choices=sorted(both), default="both")
    parser.add_argument("--tracing", choices=sorted(both), default="both")
    args = parser.parse_args()
    n = args.episodes
    rows: list[dict] = []
    broker = None
    buses: list[tuple[str, str | None]] = [("local", None)]
    if not args.no_mqtt and find_mosquitto():
        broker = start_mosquitto()
        buses.append(("mosquitto", broker.url))
    try:
        for bus_name, url in buses:
            for concurrency in (1, 1000):
                for variant in ("text", "image"):
                    for tracing in both[args.tracing]:
                        for state in both[args.state]:
                            result = await measure(n, concurrency, variant, url, tracing, state)
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
    ):
        table.add_column(col, justify="right")
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
        )
    console = Console()
    console.print(table)
    console.print(
        f"peak memory per live episode (text, 1000 in flight): {per_episode / 1024:.1f} KB"
    )
    RESULTS.mkdir(exist_ok=True)
    report = {
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "rows": rows,
        "memory_per_live_episode_bytes": round(per_episode),
    }
    (RESULTS / "runtime_overhead.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
