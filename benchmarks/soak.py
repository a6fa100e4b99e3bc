"""Soak: a long run through every fault at once, counted for lost and duplicated episodes.

``parley run`` (the real command, as a child process) plays model-played COMMA wire episodes in
worker processes over a real Mosquitto broker, against the stand-in model server answering 20 %
of requests with a fault (429, 500, a body cut short, a body that is not JSON, a dropped
connection). Partway through, one worker is SIGKILLed; later the broker is SIGKILLed and comes
back after a few seconds. Reported:

- lost episodes (planned but not in ``episodes.jsonl`` at the end) and duplicated ones (an
  episode id finished twice): both must be 0;
- the resumes needed (0: the run finished by itself);
- memory of the run's processes over time (RSS of ``parley run`` and its workers, sampled each
  second) and its growth after warm-up: flat means no leak;
- for each fault, the time from the fault until the episode rate is back to 80 % of what it was
  before it.

    python benchmarks/soak.py                          # 50,000 episodes
    python benchmarks/soak.py --episodes 5000          # a shorter soak

Writes benchmarks/results/soak.json. Needs Mosquitto and psutil (``pip install -e ".[bench]"``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import yaml
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

from parley.agents.backends.simserver import SimServerProcess  # noqa: E402
from parley.bus.broker import BrokerProcess, start_mosquitto  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from concurrency import sim_config as concurrency_sim_config  # noqa: E402

FAULTS = [  # 20 % of requests in all (few 429s: each one halves an endpoint's adaptive limit)
    {"kind": "rate_limit", "rate": 0.02, "retry_after_s": 0.2},
    {"kind": "server_error", "rate": 0.06},
    {"kind": "truncated", "rate": 0.04},
    {"kind": "garbage", "rate": 0.04},
    {"kind": "disconnect", "rate": 0.04},
]


def sim_config(latency: float) -> dict[str, Any]:
    """The concurrency benchmark's stand-in server, answering a fifth of requests with a fault."""
    return {**concurrency_sim_config(latency), "faults": FAULTS}


def run_config(url: str, episodes: int, concurrency: int, workers: int) -> dict[str, Any]:
    common = {
        "base_url": url,
        "images": False,
        "concurrency": {"start": 1024, "min": 16, "max": 4096},
        "retry": {"max_attempts": 10, "backoff_s": 0.05},
        "timeout_s": 30,
    }
    return {
        "name": "soak",
        "concurrency": concurrency,
        "workers": workers,
        "episode_timeout_s": 300,
        "record_prompts": False,
        "tracing": {"enabled": False},
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


class EpisodeCounter:
    """Counts the lines of ``episodes.jsonl`` as they are appended (reads only what is new)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0

    def count(self) -> int:
        if self.path.exists():
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
            self.lines += chunk.count(b"\n")
            self.offset += len(chunk)
        return self.lines


def tree_rss(process: psutil.Process) -> int:
    rss = 0
    for p in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            rss += p.memory_info().rss
    return rss


def workers_of(process: psutil.Process) -> list[psutil.Process]:
    found = []
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "parley.runtime.workers" in " ".join(child.cmdline()):
                found.append(child)
    return found


def recovery_s(samples: list[tuple[float, int, int]], at: float) -> float | None:
    """Seconds from ``at`` until the 3 s episode rate is back to 80 % of the 10 s before it."""

    def rate(t0: float, t1: float) -> float:
        inside = [s for s in samples if t0 <= s[0] <= t1]
        if len(inside) < 2 or inside[-1][0] == inside[0][0]:
            return 0.0
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    before = rate(at - 10, at)
    if before <= 0:
        return None
    for t, _, _ in samples:
        if t > at + 3 and rate(t - 3, t) >= 0.8 * before:
            return round(t - at, 1)
    return None


def play(args: argparse.Namespace, sim: SimServerProcess, broker: BrokerProcess) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="parley-soak-"))
    config_file = work / "soak.yaml"
    config_file.write_text(
        yaml.safe_dump(run_config(sim.openai_url, args.episodes, args.concurrency, args.workers))
    )
    out = work / "run"
    bus = f"mqtt://{broker.host}:{broker.port}"
    command = [sys.executable, "-m", "parley.runtime.cli", "run", str(config_file)]
    command += ["--bus", bus, "--out", str(out)]
    counter = EpisodeCounter(out / "episodes.jsonl")
    samples: list[tuple[float, int, int]] = []  # (seconds, episodes written, RSS of the run)
    faults: list[dict[str, Any]] = []
    resumes = 0
    start = time.monotonic()
    log = (work / "run.log").open("w")
    child = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    codes = []
    while True:
        process = psutil.Process(child.pid)
        while child.poll() is None:
            now = time.monotonic() - start
            done = counter.count()
            samples.append((now, done, tree_rss(process)))
            share = done / args.episodes
            if not any(f["kind"] == "worker killed" for f in faults) and share >= 0.3:
                victims = workers_of(process)
                if victims:
                    victims[0].send_signal(signal.SIGKILL)
                    faults.append({"kind": "worker killed", "at_s": now, "pid": victims[0].pid})
            if not any(f["kind"] == "broker killed" for f in faults) and share >= 0.6:
                faults.append({"kind": "broker killed", "at_s": now, "down_s": args.broker_down})
                broker.restart(hard=True, downtime=args.broker_down)
            time.sleep(1.0)
        codes.append(child.returncode)
        if counter.count() >= args.episodes or resumes >= 3 or child.returncode == 0:
            break
        resumes += 1  # the run ended short: resume it, as a user would
        child = subprocess.Popen(
            [*command, "--resume"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
        )
    wall = time.monotonic() - start
    log.close()

    finished: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for line in (out / "episodes.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["outcome"] == "cancelled":
            continue
        finished[record["episode"]] = finished.get(record["episode"], 0) + 1
        outcomes[record["outcome"]] = outcomes.get(record["outcome"], 0) + 1
    run_meta = json.loads((out / "run.json").read_text())
    for fault in faults:
        fault["recovery_s"] = recovery_s([(t, d, 0) for t, d, _ in samples], fault["at_s"])
    # Memory after warm-up (the first fifth): the mean of its first and last quarter.
    warm = [rss for t, _, rss in samples if t >= wall / 5 and rss > 0]
    quarter = max(1, len(warm) // 4)
    early, late = statistics.fmean(warm[:quarter] or [0]), statistics.fmean(warm[-quarter:] or [0])
    return {
        "episodes": args.episodes,
        "concurrency": args.concurrency,
        "workers": args.workers,
        "model_fault_rate": sum(f["rate"] for f in FAULTS),
        "wall_s": round(wall, 1),
        "episodes_per_s": round(args.episodes / wall, 1),
        "exit_codes": codes,
        "resumes": resumes,
        "lost": args.episodes - len(finished),
        "duplicated": sum(1 for n in finished.values() if n > 1),
        "outcomes": outcomes,
        "takeovers": run_meta.get("takeovers", []),
        "faults": faults,
        "peak_rss_mb": round(max((s[2] for s in samples), default=0) / 2**20, 1),
        "rss_after_warmup_mb": [round(early / 2**20, 1), round(late / 2**20, 1)],
        "rss_growth_after_warmup": round(late / early - 1, 3) if early else None,
        "rss_timeline_mb": [
            [round(t), round(rss / 2**20)] for t, _, rss in samples[:: max(1, len(samples) // 60)]
        ],
        "run_folder": str(out),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }


def show(result: dict[str, Any]) -> None:
    table = Table(
        title=f"soak: {result['episodes']:,} episodes, {result['model_fault_rate']:.0%} model faults"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("lost episodes", str(result["lost"]))
    table.add_row("duplicated episodes", str(result["duplicated"]))
    table.add_row("resumes needed", str(result["resumes"]))
    table.add_row(
        "outcomes", ", ".join(f"{k} {v:,}" for k, v in sorted(result["outcomes"].items()))
    )
    table.add_row("wall time", f"{result['wall_s']} s ({result['episodes_per_s']} episodes/s)")
    table.add_row("peak RSS of the run", f"{result['peak_rss_mb']} MB")
    early, late = result["rss_after_warmup_mb"]
    table.add_row("RSS after warm-up, first → last quarter", f"{early} → {late} MB")
    for fault in result["faults"]:
        recovered = fault["recovery_s"]
        table.add_row(
            f"{fault['kind']} at {fault['at_s']:.0f} s: recovered in",
            "—" if recovered is None else f"{recovered} s",
        )
    Console().print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per model reply")
    parser.add_argument("--broker-down", type=float, default=3.0, help="seconds the broker is away")
    args = parser.parse_args()
    broker = start_mosquitto()
    try:
        with SimServerProcess(sim_config(args.latency)) as sim:
            result = play(args, sim, broker)
    finally:
        broker.close()
    show(result)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "soak.json").write_text(json.dumps(result, indent=2))
    return 0 if result["lost"] == 0 and result["duplicated"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
