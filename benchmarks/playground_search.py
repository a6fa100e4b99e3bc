"""Time per move of the playground's search players at their default settings.

Plays games between the scripted player's search and the opponent's (Stockfish for Black in
chess; the first Stockfish move includes starting the engine) and times every move, per side: Gomoku's pattern search
(depth 3, width 10; the budget is 0.5 s a move), Reversi's alpha-beta (depth 3), Tic-Tac-Toe's
minimax, chess (scripted two-ply search; Stockfish at 0.1 s), the Sudoku solver and the
Minesweeper logician. One thread, nothing else running in the process. For Gomoku it also
counts the positions each search visits (``Searcher.nodes``; the tests hold a move to 600, not
to a time) and marks whether the slowest move kept the budget. Then it plays Reversi and
Gomoku games as a run (searches and pictures in worker threads) and reports the event-loop lag
the run saw meanwhile (the tests check only that the work is off the loop's thread). Prints
tables and writes benchmarks/results/playground_search.json.

    python benchmarks/playground_search.py [--games N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from parley.environments.playground import KITS
from parley.environments.playground.gomoku import SIDE_VALUE, GomokuPosition, Searcher
from parley.environments.playground.kit import Position
from parley.runtime.config import load_config
from parley.runtime.scheduler import run_experiment

BUDGET_MS = {"gomoku": 500.0}  # the longest a move may take, where the game has a budget


def _row(
    name: str, side: str, settings: str, times: list[float], nodes: list[int]
) -> dict[str, float | int | str]:
    times = sorted(times)
    row: dict[str, float | int | str] = {
        "game": name,
        "side": side,
        "settings": settings,
        "moves": len(times),
        "p50_ms": round(1000 * statistics.median(times), 2),
        "p95_ms": round(1000 * times[int(0.95 * (len(times) - 1))], 2),
        "max_ms": round(1000 * times[-1], 2),
    }
    if nodes:
        row["nodes_p50"] = int(statistics.median(nodes))
        row["nodes_max"] = max(nodes)
    if name in BUDGET_MS:
        row["in_budget"] = "yes" if 1000 * times[-1] <= BUDGET_MS[name] else "NO"
    return row


def _nodes(position: Position, params: dict[str, Any]) -> int:
    """How many positions Gomoku's search visits for this move (searched again, untimed)."""
    assert isinstance(position, GomokuPosition)
    searcher = Searcher(position.board, int(params.get("width", 10)))
    searcher.best(SIDE_VALUE[position.side], int(params.get("depth", 3)), random.Random(0))
    return searcher.nodes


def measure(name: str, games: int) -> list[dict[str, float | int | str]]:
    kit = KITS[name]
    params = kit.opponent_params({})
    times: dict[str, list[float]] = {"player": [], "opponent": []}
    nodes: dict[str, list[int]] = {"player": [], "opponent": []}
    for game in range(games):
        rng = random.Random(game)
        position = kit.load(kit.e2e_instance(game, {})["start"])
        moves = 0
        while position.result() is None and moves < 300:
            start = time.perf_counter()
            if position.to_move() in (kit.player_side, "you"):
                move, side = kit.player_move(position, rng), "player"
            else:
                move, side = kit.search_move(position, rng, params), "opponent"
            times[side].append(time.perf_counter() - start)
            if name == "gomoku":
                search = params if side == "opponent" else kit.opponent_params({})
                nodes[side].append(_nodes(position, search))
            position.play(move)
            moves += 1
    settings = json.dumps(params) if params else "-"
    rows = [_row(name, "player", "-", times["player"], nodes["player"])]
    if times["opponent"]:
        rows.append(_row(name, "opponent", settings, times["opponent"], nodes["opponent"]))
    return rows


def loop_lag(games: int) -> dict[str, Any]:
    """The event-loop lag of a run of Reversi and Gomoku games (depth 3, pictures drawn)."""
    config = {
        "name": "bench-pg-loop",
        "concurrency": 8,
        "tracing": {"enabled": False},
        "games": [
            {
                "game": f"playground.{game}.e2e",
                "seeds": {"count": 2 * games},
                "pairings": [{"player": "scripted", "opponent": "scripted"}],
                "settings": {"depth": 3, "max_moves": 12},
            }
            for game in ("reversi", "gomoku")
        ],
    }
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        outcome = asyncio.run(run_experiment(load_config(config), f"{out}/run"))
        took = time.perf_counter() - start
    (lag,) = outcome.loop_lag
    return {"episodes": len(outcome.records), "seconds": round(took, 2), **lag}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=3, help="self-play games per game")
    args = parser.parse_args()
    rows = [row for name in KITS for row in measure(name, args.games)]
    header = ["game", "side", "settings", "moves", "p50_ms", "p95_ms", "max_ms"]
    header += ["nodes_p50", "nodes_max", "in_budget"]
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row.get(h, "-")) for h in header))
    lag = loop_lag(args.games)
    print("\nevent-loop lag while Reversi and Gomoku searches and pictures run in threads")
    print(" | ".join(lag))
    print(" | ".join(str(v) for v in lag.values()))
    out = Path(__file__).parent / "results" / "playground_search.json"
    out.parent.mkdir(exist_ok=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "games": args.games}
    out.write_text(json.dumps({"meta": meta, "rows": rows, "loop_lag": lag}, indent=2))


if __name__ == "__main__":
    main()
