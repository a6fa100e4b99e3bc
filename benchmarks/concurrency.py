"""How many model requests a run keeps going: thousands of concurrent COMMA wire episodes, both
roles played by models, against the stand-in server answering each request after a fixed delay.

The ideal is (requests in flight) ÷ (latency per reply): with 2,000 episodes at once and 1 s per
reply, 2,000 requests/s. Reported: achieved requests/s in the steady part of the run against
that ideal, event-loop lag (p50/p99 of how late a 10 ms timer fires), peak memory and CPU of
the runtime process and of the server.

    python benchmarks/concurrency.py                       # 2,000 at once, 1 s per reply
    python benchmarks/concurrency.py --concurrency 500 --episodes 1500 --profile

Writes benchmarks/results/concurrency.json (and concurrency.prof with --profile).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.backends.simserver import SimServerProcess  # noqa: E402
from runtime.config import load_config  # noqa: E402
from runtime.scheduler import Scheduler, run_experiment  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def sim_config(latency: float) -> dict[str, Any]:
    models = yaml.safe_load((ROOT / "configs" / "sim.yaml").read_text())["models"]
    return {
        "latency": {"ttft_s": latency, "tokens_per_s": 0, "max_seqs": 100_000},
        "models": {"sim-solver": models["sim-solver"], "sim-expert": models["sim-expert"]},
    }


def run_config(url: str, episodes: int, concurrency: int, tracing: bool, transport: str) -> Any:
    limits = {"start": 4096, "min": 64, "max": 4096}
    common = {
        "base_url": url,
        "images": False,
        "concurrency": limits,
        "timeout_s": 60,
        "transport": transport,
    }
    return load_config(
        {
            "name": "bench-concurrency",
            "concurrency": concurrency,
            "tracing": {"enabled": tracing},
            "models": {
                "solver": {"model": "sim-solver", **common},
                "expert": {"model": "sim-expert", **common},
            },
            "games": [
                {
                    "game": "comma.wire",
                    "seeds": {"start": 0, "count": episodes},
                    "pairings": [{"solver": "solver", "expert": "expert"}],
                    "settings": {"max_turns": 4},
                }
            ],
        }
    )


class Monitor:
    """Samples requests done, requests outstanding, loop lag and memory while the run goes."""

    def __init__(self, server_pid: int) -> None:
        self.scheduler: Scheduler | None = None
        self.samples: list[tuple[float, int, int]] = []  # (time, requests ok, outstanding)
        self.lags: list[float] = []
        self.me = psutil.Process()
        self.server = psutil.Process(server_pid)
        self.peak_rss = 0
        self.server_peak_rss = 0
        self._stop = False

    def attach(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def _requests(self) -> tuple[int, int]:
        pool = self.scheduler.options.models if self.scheduler is not None else None
        endpoints = getattr(pool, "_endpoints", None)
        if not endpoints:  # not open yet, or closed at the end of the run
            return (self.samples[-1][1] if self.samples else 0), 0
        ok = sum(e.counts["ok"] for e in endpoints.values())
        outstanding = sum(e.outstanding for e in endpoints.values())
        return ok, outstanding

    async def lag_probe(self) -> None:
        interval = 0.01
        while not self._stop:
            start = time.perf_counter()
            await asyncio.sleep(interval)
            self.lags.append(time.perf_counter() - start - interval)

    async def sampler(self) -> None:
        while not self._stop:
            ok, outstanding = self._requests()
            self.samples.append((time.monotonic(), ok, outstanding))
            self.peak_rss = max(self.peak_rss, self.me.memory_info().rss)
            with contextlib.suppress(psutil.Error):
                self.server_peak_rss = max(self.server_peak_rss, self.server.memory_info().rss)
            await asyncio.sleep(0.25)

    def stop(self) -> None:
        self._stop = True


def steady(samples: list[tuple[float, int, int]], target: int) -> tuple[float, float, float]:
    """(requests/s, mean outstanding, seconds) over the samples with at least 90 % of the
    target in flight (the ramp-up and the tail left out)."""
    window = [s for s in samples if s[2] >= 0.9 * target]
    if len(window) < 2:
        window = samples
    if len(window) < 2:
        return 0.0, 0.0, 0.0
    seconds = window[-1][0] - window[0][0]
    done = window[-1][1] - window[0][1]
    return (
        done / seconds if seconds > 0 else 0.0,
        statistics.fmean(s[2] for s in window),
        seconds,
    )


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench(args: argparse.Namespace, sim: SimServerProcess) -> dict[str, Any]:
    monitor = Monitor(sim.process.pid if sim.process else os.getpid())
    config = run_config(
        sim.openai_url, args.episodes, args.concurrency, not args.no_tracing, args.transport
    )
    server = psutil.Process(sim.process.pid) if sim.process else None
    cpu0 = (time.process_time(), server.cpu_times() if server else None)
    tasks = [asyncio.create_task(monitor.lag_probe()), asyncio.create_task(monitor.sampler())]
    out = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    start = time.monotonic()
    outcome = await run_experiment(config, out / "run", on_start=monitor.attach)
    wall = time.monotonic() - start
    monitor.stop()
    await asyncio.gather(*tasks)
    cpu_me = time.process_time() - cpu0[0]
    cpu_server = (
        sum(server.cpu_times()[:2]) - sum(cpu0[1][:2]) if server and cpu0[1] is not None else 0.0
    )
    rate, outstanding, seconds = steady(monitor.samples, args.concurrency)
    total_ok = monitor.samples[-1][1] if monitor.samples else 0
    outcomes: dict[str, int] = {}
    for r in outcome.records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    ideal = args.concurrency / args.latency
    return {
        "episodes": args.episodes,
        "concurrent_episodes": args.concurrency,
        "latency_s": args.latency,
        "tracing": not args.no_tracing,
        "transport": args.transport,
        "outcomes": outcomes,
        "requests": total_ok,
        "wall_s": round(wall, 2),
        "steady_window_s": round(seconds, 2),
        "ideal_requests_per_s": round(ideal, 1),
        "achieved_requests_per_s": round(rate, 1),
        "achieved_vs_ideal": round(rate / ideal, 3) if ideal else 0.0,
        "mean_requests_in_flight": round(outstanding, 1),
        "loop_lag_p50_ms": round(1000 * percentile(monitor.lags, 0.5), 2),
        "loop_lag_p99_ms": round(1000 * percentile(monitor.lags, 0.99), 2),
        "loop_lag_max_ms": round(1000 * max(monitor.lags, default=0.0), 2),
        "peak_rss_mb": round(monitor.peak_rss / 2**20, 1),
        "server_peak_rss_mb": round(monitor.server_peak_rss / 2**20, 1),
        "runtime_cpu_s_per_request_ms": round(1000 * cpu_me / max(1, total_ok), 3),
        "runtime_cpu_share": round(cpu_me / wall, 2),
        "server_cpu_share": round(cpu_server / wall, 2),
        "run_folder": str(out / "run"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=2000, help="episodes at once")
    parser.add_argument("--episodes", type=int, help="episodes in all (default 3 × concurrency)")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per reply")
    parser.add_argument("--no-tracing", action="store_true", help="turn span recording off")
    parser.add_argument(
        "--transport", choices=["direct", "sdk"], default="direct", help="model entry transport"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the runtime process")
    args = parser.parse_args()
    args.episodes = args.episodes or 3 * args.concurrency
    with SimServerProcess(sim_config(args.latency)) as sim:
        profiler = cProfile.Profile() if args.profile else None
        if profiler is not None:
            profiler.enable()
        result = asyncio.run(bench(args, sim))
        if profiler is not None:
            profiler.disable()
    result["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_1m_after": round(os.getloadavg()[0], 2),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "concurrency.json"
    # Keep earlier runs (other settings) beside the latest one, for comparison.
    runs: list[dict[str, Any]] = []
    with contextlib.suppress(OSError, ValueError, AttributeError):
        runs = list(json.loads(path.read_text()).get("runs", []))
    result["finished_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
    runs = [*runs, result][-10:]
    path.write_text(json.dumps({"latest": result, "runs": runs}, indent=2) + "\n")
    rows = [
        ("episodes at once", f"{result['concurrent_episodes']:,}"),
        ("latency per reply", f"{result['latency_s']:g} s"),
        ("transport, tracing", f"{result['transport']}, {'on' if result['tracing'] else 'off'}"),
        ("ideal requests/s", f"{result['ideal_requests_per_s']:,.0f}"),
        ("achieved requests/s (steady)", f"{result['achieved_requests_per_s']:,.0f}"),
        ("achieved / ideal", f"{100 * result['achieved_vs_ideal']:.0f} %"),
        ("requests in flight (mean)", f"{result['mean_requests_in_flight']:,.0f}"),
        (
            "event-loop lag p50 / p99",
            f"{result['loop_lag_p50_ms']} / {result['loop_lag_p99_ms']} ms",
        ),
        (
            "peak memory: runtime / server",
            f"{result['peak_rss_mb']} / {result['server_peak_rss_mb']} MB",
        ),
        (
            "CPU: runtime / server",
            f"{result['runtime_cpu_share']} / {result['server_cpu_share']} cores",
        ),
        ("runtime CPU per request", f"{result['runtime_cpu_s_per_request_ms']} ms"),
        ("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(result["outcomes"].items()))),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    if profiler is not None:
        profiler.dump_stats(str(RESULTS / "concurrency.prof"))
        stats = pstats.Stats(profiler).sort_stats("tottime")
        stats.print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
