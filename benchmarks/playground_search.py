"""Time per move of the playground's search players at their default settings.

Plays games between the scripted player's search and the opponent's (Stockfish for Black in
chess; the first Stockfish move includes starting the engine) and times every move, per side: Gomoku's pattern search
(depth 3, width 10; the budget is 0.5 s a move), Reversi's alpha-beta (depth 3), Tic-Tac-Toe's
minimax, chess (scripted two-ply search; Stockfish at 0.1 s), the Sudoku solver and the
Minesweeper logician. One thread, nothing else running in the process. Prints a table and
writes benchmarks/results/playground_search.json.

    python benchmarks/playground_search.py [--games N]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from pathlib import Path

from parley.environments.playground import KITS


def _row(name: str, side: str, settings: str, times: list[float]) -> dict[str, float | int | str]:
    times = sorted(times)
    return {
        "game": name,
        "side": side,
        "settings": settings,
        "moves": len(times),
        "p50_ms": round(1000 * statistics.median(times), 2),
        "p95_ms": round(1000 * times[int(0.95 * (len(times) - 1))], 2),
        "max_ms": round(1000 * times[-1], 2),
    }


def measure(name: str, games: int) -> list[dict[str, float | int | str]]:
    kit = KITS[name]
    params = kit.opponent_params({})
    times: dict[str, list[float]] = {"player": [], "opponent": []}
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
            position.play(move)
            moves += 1
    settings = json.dumps(params) if params else "-"
    rows = [_row(name, "player", "-", times["player"])]
    if times["opponent"]:
        rows.append(_row(name, "opponent", settings, times["opponent"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=3, help="self-play games per game")
    args = parser.parse_args()
    rows = [row for name in KITS for row in measure(name, args.games)]
    header = ["game", "side", "settings", "moves", "p50_ms", "p95_ms", "max_ms"]
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    out = Path(__file__).parent / "results" / "playground_search.json"
    out.parent.mkdir(exist_ok=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "games": args.games}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
