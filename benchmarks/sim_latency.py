"""Does the stand-in server keep its latency model? Many requests at once against a server with
``ttft_s`` to the first token, ``tokens_per_s`` after it and ``max_seqs`` sequences at a time:
the requests beyond ``max_seqs`` queue, so they finish in waves, and the whole batch should take
(waves) x (ttft_s + reply tokens / tokens_per_s).

The tests only count (all in at once, ``max_seqs`` running, the rest queued); how long the waves
take is measured here, where a loaded machine shows as a ratio, not as a failed test. Prints a
table (expected and measured seconds per case, plain and streamed) and writes
benchmarks/results/sim_latency.json.

    python benchmarks/sim_latency.py [--repeat N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parley.agents.backends.simserver import SimServerProcess  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TOKENS = 20  # words in the reply: one token each

# (requests, max_seqs, ttft_s, tokens_per_s)
CASES = [
    (6, 2, 0.2, 100.0),  # three waves of 0.4 s: the case the test used to time
    (1, 1, 0.2, 100.0),  # one request: the latency of one reply
    (32, 8, 0.1, 200.0),  # four waves of 0.2 s
    (64, 64, 0.3, 0.0),  # no queue: one wave, first token only (tokens_per_s 0: all at once)
]


def expected_s(requests: int, max_seqs: int, ttft_s: float, tokens_per_s: float) -> float:
    waves = -(-requests // max_seqs)
    decode = TOKENS / tokens_per_s if tokens_per_s > 0 else 0.0
    return waves * (ttft_s + decode)


async def batch(url: str, requests: int, stream: bool) -> float:
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "stream": stream}

    async def one(session: aiohttp.ClientSession) -> None:
        async with session.post(f"{url}/v1/chat/completions", json=body) as response:
            assert response.status == 200, response.status
            await response.read()

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        await asyncio.gather(*(one(session) for _ in range(requests)))
        return time.perf_counter() - start


def measure(sim: SimServerProcess, repeat: int) -> list[dict[str, Any]]:
    rows = []
    for requests, max_seqs, ttft_s, tokens_per_s in CASES:
        sim.configure(
            latency={"ttft_s": ttft_s, "tokens_per_s": tokens_per_s, "max_seqs": max_seqs},
            replies={"text": " ".join(["word"] * TOKENS)},
            models={},
        )
        for stream in (False, True):
            sim.reset()
            took = [asyncio.run(batch(sim.url, requests, stream)) for _ in range(repeat)]
            stats = sim.stats()
            want = expected_s(requests, max_seqs, ttft_s, tokens_per_s)
            median = statistics.median(took)
            rows.append(
                {
                    "requests": requests,
                    "max_seqs": max_seqs,
                    "ttft_s": ttft_s,
                    "tokens_per_s": tokens_per_s,
                    "stream": stream,
                    "expected_s": round(want, 3),
                    "median_s": round(median, 3),
                    "max_s": round(max(took), 3),
                    "ratio": round(median / want, 3),
                    "peak_running": stats["peak_running"],
                    "peak_queued": stats["peak_queued"],
                }
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="batches per case")
    args = parser.parse_args()
    with SimServerProcess({}) as sim:
        rows = measure(sim, args.repeat)
    header = list(rows[0])
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    RESULTS.mkdir(exist_ok=True)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "repeat": args.repeat,
    }
    path = RESULTS / "sim_latency.json"
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
