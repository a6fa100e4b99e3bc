"""What full tracing costs per model request: process CPU time, traced against untraced.

Plays the same model-played COMMA wire run (both roles played by models on the stand-in
server, which answers at once: the run is bound by the runtime's CPU) with tracing off and
on, interleaved (off, on, off, on …) so a machine loaded by something else weighs on both
alike. CPU is this process's CPU time (``time.process_time``: every thread, the span writer's
included; the server is another process and not counted), divided by the model requests the
run made. Wall time is printed but says little on a shared machine.

    python benchmarks/tracing_cost.py                          # 300 episodes, 4 rounds
    python benchmarks/tracing_cost.py --episodes 600 --rounds 6 --content --messages
    python benchmarks/tracing_cost.py --transport direct      # the transport concurrency.py uses
    # ... and traced with the span writer's thread encoding every span, as a third mode
    python benchmarks/tracing_cost.py --transport direct --writer-thread --rounds 9
    # What each part of tracing costs: traced runs with parts taken away, as three more
    # interleaved modes (an ablation: what a design without them would save; see PARTS)
    python benchmarks/tracing_cost.py --transport direct --parts --rounds 8
    # By instructions, steady on a busy machine (needs valgrind; a few minutes): one untraced
    # and one traced run of 100 episodes after a warm-up of 100, counted by callgrind
    python benchmarks/tracing_cost.py --instructions
    # which runs, and reads the dumps of (cg.out.2 untraced, cg.out.4 traced; --marks calls
    # os.getppid() around every measured run; the stand-in server is another process)
    valgrind --tool=callgrind --dump-before=os_getppid --callgrind-out-file=cg.out \
        python benchmarks/tracing_cost.py --episodes 100 --warmup 100 --rounds 1 --marks
    # By the Python lines each run executes, with the functions tracing adds most to
    # (benchmarks/linecount.py; no valgrind, about a minute)
    python benchmarks/tracing_cost.py --lines --transport direct

Writes benchmarks/results/tracing_cost.json.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry import trace  # noqa: E402

from parley import event_loop  # noqa: E402
from parley.agents.backends import pool as model_pool  # noqa: E402
from parley.agents.backends.simserver import SimServerProcess  # noqa: E402
from parley.observability import metrics, tracing  # noqa: E402
from parley.observability.otlp_json import OtlpJsonSpanWriter  # noqa: E402
from parley.runtime.config import load_config  # noqa: E402
from parley.runtime.scheduler import run_experiment  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"

# --parts: traced runs with parts of tracing taken away, each removal on top of the one
# before. Not settings a run has: the benchmark replaces the part's entry point for the
# run's duration, to measure what a tracing design without it would cost.
PARTS = {
    "no metrics": "the run's metrics not recorded (an episode's transcript not read back)",
    "no metrics, agent": "nor an invoke_agent span per turn (the turn and chat spans stay)",
    "no metrics, agent, chat": "nor a chat span per model call (the episode and turn spans "
    "stay, and the traceparents on messages)",
}


@contextlib.contextmanager
def without(mode: str) -> Iterator[None]:
    """The parts of tracing that ``mode`` (a key of PARTS, or another mode) takes away, gone
    for the block."""
    saved = (metrics.RunMetrics.record_episode, tracing.handler_span, model_pool.ModelPool.__init__)
    taken = list(PARTS).index(mode) + 1 if mode in PARTS else 0  # each takes the one before's too
    if taken >= 1:
        metrics.RunMetrics.record_episode = lambda self, result: None  # type: ignore[method-assign]
    if taken >= 2:
        # The agent's turn runs in no span of its own: nothing current, nothing recorded.
        tracing.handler_span = lambda *a, **k: contextlib.nullcontext(trace.INVALID_SPAN)
    if taken >= 3:
        # The model clients get a no-op tracer: no chat span, no traceparent header.
        init, off = saved[2], trace.NoOpTracer()

        def no_chat(self: Any, *a: Any, **k: Any) -> None:
            init(self, *a, **{**k, "tracer": lambda: off})

        model_pool.ModelPool.__init__ = no_chat  # type: ignore[method-assign]
    try:
        yield
    finally:
        (
            metrics.RunMetrics.record_episode,
            tracing.handler_span,
            model_pool.ModelPool.__init__,
        ) = saved  # type: ignore[method-assign]


def sim_config() -> dict[str, Any]:
    models = yaml.safe_load((ROOT / "configs" / "sim.yaml").read_text())["models"]
    return {
        "latency": {"ttft_s": 0.0, "tokens_per_s": 0, "max_seqs": 100_000},
        "models": {"sim-solver": models["sim-solver"], "sim-expert": models["sim-expert"]},
    }


def run_config(
    url: str, episodes: int, concurrency: int, tracing: dict[str, Any], transport: str = "sdk"
) -> Any:
    common = {"base_url": url, "images": False, "timeout_s": 60, "transport": transport}
    return load_config(
        {
            "name": "bench-tracing",
            "concurrency": concurrency,
            "workers": 1,
            "tracing": tracing,
            "models": {
                "solver": {"model": "sim-solver", **common},
                "expert": {"model": "sim-expert", **common},
            },
            "games": [
                {
                    "game": "comma.wire",
                    "seeds": {"start": 0, "count": episodes},
                    "pairings": [{"solver": "solver", "expert": "expert"}],
                    "settings": {"max_turns": 4, "variant": "text"},
                }
            ],
        }
    )


async def one_run(url: str, args: argparse.Namespace, tracing: dict[str, Any]) -> dict[str, Any]:
    config = run_config(url, args.episodes, args.concurrency, tracing, args.transport)
    with tempfile.TemporaryDirectory(prefix="parley-tracing-cost-") as folder:
        gc.collect()
        if args.marks:
            os.getppid()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        outcome = await run_experiment(config, Path(folder))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        if args.marks:
            os.getppid()
        requests = sum(
            int(stats.get("requests") or 0)
            for record in outcome.records
            for stats in (record.get("model_calls") or {}).values()
        )
        traces = Path(folder) / "traces.jsonl"
        size = traces.stat().st_size if traces.exists() else 0
    return {"cpu_s": cpu, "wall_s": wall, "requests": requests, "trace_bytes": size}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    modes: dict[str, dict[str, Any]] = {"off": {"enabled": False}}
    modes["on"] = {"enabled": True, "content": args.content, "messages": args.messages}
    if args.writer_thread:
        modes["thread"] = modes["on"]  # traced, the writer thread encoding every span
    if args.parts:
        modes.update({part: modes["on"] for part in PARTS})
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    inline = OtlpJsonSpanWriter.INLINE
    with SimServerProcess(sim_config()) as server:
        # Warm-up: imports, first sockets, caches (untimed, unmarked).
        warm = argparse.Namespace(**{**vars(args), "marks": False})
        if args.warmup is not None:
            warm.episodes = args.warmup
        if warm.episodes:
            await one_run(server.openai_url, warm, modes["on"])
        names = list(modes)
        for r in range(args.rounds):
            # Each mode first in turn (with two: off, on, then on, off).
            order = names[r % len(names) :] + names[: r % len(names)]
            for mode in order:
                OtlpJsonSpanWriter.INLINE = 0 if mode == "thread" else inline
                with without(mode):
                    got = await one_run(server.openai_url, args, modes[mode])
                got["us_per_request"] = 1e6 * got["cpu_s"] / max(1, got["requests"])
                rows[mode].append(got)
                print(
                    f"round {r + 1} {mode:>3}: {got['requests']} requests, "
                    f"{got['us_per_request']:.0f} µs CPU/request, wall {got['wall_s']:.1f} s",
                    flush=True,
                )
        OtlpJsonSpanWriter.INLINE = inline
    summary = {}
    for mode, runs in rows.items():
        per = [x["us_per_request"] for x in runs]
        summary[mode] = {"median_us": statistics.median(per), "min_us": min(per), "runs": per}
    for mode in modes:
        if mode == "off":
            continue
        ratios = [
            on["us_per_request"] / off["us_per_request"]
            for on, off in zip(rows[mode], rows["off"], strict=True)
        ]
        summary["ratio" if mode == "on" else f"ratio_{mode}"] = {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "of_medians": summary[mode]["median_us"] / summary["off"]["median_us"],
        }
    return {"rows": rows, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--episodes", type=int, help="episodes per run (default 300; 100 with --instructions)"
    )
    parser.add_argument("--concurrency", type=int, default=200, help="episodes at once")
    parser.add_argument(
        "--transport",
        choices=["sdk", "direct"],
        default="sdk",
        help="the models' transport (sdk, the default of a model entry; direct, as "
        "concurrency.py and self-hosted servers at thousands of requests a second)",
    )
    parser.add_argument("--rounds", type=int, default=4, help="off/on pairs, interleaved")
    parser.add_argument("--content", action="store_true", help="record message content too")
    parser.add_argument("--messages", action="store_true", help="bus publish/receive spans too")
    parser.add_argument(
        "--writer-thread",
        action="store_true",
        help="a third mode, interleaved: traced with the span writer's thread encoding every "
        "span (as before the thirteenth window), against the loop encoding its own",
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="three more modes, interleaved: traced with parts of tracing taken away (the "
        "run's metrics; then the invoke_agent spans too; then the chat spans too), to measure "
        "what each part costs",
    )
    parser.add_argument(
        "--warmup", type=int, default=None, help="episodes of the untimed warm-up (--episodes)"
    )
    parser.add_argument(
        "--marks",
        action="store_true",
        help="call os.getppid() before and after each run (valgrind --dump-before=os_getppid)",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions instead (valgrind's callgrind): one untraced and one traced "
        "run of --episodes (default 100) after a warm-up of as many",
    )
    parser.add_argument(
        "--lines",
        action="store_true",
        help="count the Python lines each run executes instead (benchmarks/linecount.py), by "
        "function: one untraced and one traced run of --episodes (default 100) after a "
        "warm-up of as many",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where the JSON goes (default benchmarks/results/tracing_cost.json, or "
        "tracing_cost_instructions.json with --instructions, tracing_cost_lines.json with "
        "--lines)",
    )
    args = parser.parse_args()
    kind = "_instructions" if args.instructions else "_lines" if args.lines else ""
    args.out = args.out or RESULTS / f"tracing_cost{kind}.json"
    if args.instructions:
        count_instructions(args)
        return
    if args.lines:
        event_loop.run(count_lines(args))
        return
    args.episodes = args.episodes or 300
    # On the loop `parley run` uses (uvloop where installed; PARLEY_LOOP=asyncio for asyncio's).
    result = event_loop.run(main_async(args))
    s = result["summary"]
    print()
    print("| tracing | CPU µs/request (median) | min |")
    print("|---|---|---|")
    for mode in result["rows"]:
        print(f"| {mode} | {s[mode]['median_us']:.0f} | {s[mode]['min_us']:.0f} |")
    labels = {"on": "traced/untraced", "thread": "writer thread/untraced"}
    for mode in result["rows"]:
        key = "ratio" if mode == "on" else f"ratio_{mode}"
        if key in s:
            r = s[key]
            print(
                f"{labels.get(mode, f'traced, {mode}/untraced')}: median of pairs "
                f"{r['median']:.3f} (range {r['min']:.3f}–{r['max']:.3f}), "
                f"of medians {r['of_medians']:.3f}"
            )
    if args.parts:
        print()
        for part, what in PARTS.items():
            print(f"{part}: {what}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out = {
        "args": vars(args),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        **result,
    }
    args.out.write_text(json.dumps(out, indent=2, default=str))
    print(f"wrote {args.out}")


def count_instructions(args: argparse.Namespace) -> None:
    """Instructions per model request, untraced and traced, each run counted alone."""
    from callgrind import count_benchmark

    episodes = args.episodes or 100
    warmup = episodes if args.warmup is None else args.warmup
    argv = ["--episodes", str(episodes), "--warmup", str(warmup), "--rounds", "1"]
    argv += ["--concurrency", str(args.concurrency), "--transport", args.transport]
    argv += ["--content"] * args.content + ["--messages"] * args.messages
    parts, counted = count_benchmark(__file__, argv)
    # The counted run's requests per mode (its one round plays off, then on).
    requests = {mode: counted["rows"][mode][0]["requests"] for mode in ("off", "on")}
    off, on = parts[2] / requests["off"], parts[4] / requests["on"]
    print()
    print("| tracing | instructions per request | requests |")
    print("|---|---|---|")
    print(f"| off | {off / 1e6:.3f} M | {requests['off']} |")
    print(f"| on | {on / 1e6:.3f} M | {requests['on']} |")
    print(
        f"traced/untraced by instructions: {on / off:.3f} (tracing adds {(on - off) / 1e3:.0f} k)"
    )
    out = {
        "args": vars(args),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "instructions": {
            "per_request": {"off": off, "on": on},
            "requests": requests,
            "parts": parts,
            "ratio": on / off,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=str))
    print(f"wrote {args.out}")


async def count_lines(args: argparse.Namespace) -> None:
    """Python lines per model request, untraced and traced, by function."""
    from linecount import count_runs, print_comparison

    args.episodes = args.episodes or 100
    warmup = args.episodes if args.warmup is None else args.warmup
    traced = {"enabled": True, "content": args.content, "messages": args.messages}
    with SimServerProcess(sim_config()) as server:
        if warmup:
            warm = argparse.Namespace(**{**vars(args), "episodes": warmup, "marks": False})
            await one_run(server.openai_url, warm, traced)

        def run(tracing: dict[str, Any]) -> Callable[[], Awaitable[int]]:
            async def played() -> int:
                return int((await one_run(server.openai_url, args, tracing))["requests"])

            return played

        counts, requests = await count_runs(run({"enabled": False}), run(traced))
    print(f"Python lines per model request: {args.episodes} episodes, transport {args.transport}")
    compared = print_comparison(
        ("untraced", "traced"), (counts[0], counts[1]), (requests[0], requests[1]), "request"
    )
    out = {
        "args": vars(args),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "lines": compared,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
