"""How close the scripted navigator gets on the real MANGO data, and why it misses.

    python benchmarks/mango_scripted.py [DATA_DIR] [--cutoff 70]

Plays every answerable DF and RF question offline (no bus) with the oracle, scripted and
random navigators, prints success (strict) and reasoning accuracy per type × difficulty, and
sorts each scripted miss by its first wrong step: the map has a move the maze does not
(``misread``: the walkthrough was read wrong, split by whether the place shares its heading
with others), a reverse it guessed that the maze lacks (``bad reverse``), or no move at all
where one was needed (``missing``: DF answers that the player stays, RF finds no route).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parley.environments.mango.game import make_instance, plan, source_game
from parley.environments.mango.mapper import _base
from parley.environments.mango.offline import play_episode
from parley.environments.mango.players import (
    oracle_navigator,
    random_navigator,
    scripted_navigator,
)
from parley.environments.mango.scoring import Maze, parse_answer, snap

PLAYERS = {"oracle": oracle_navigator, "scripted": scripted_navigator, "random": random_navigator}


def cause(reply: str, q: dict, maze: Maze, shared: set[str]) -> str:
    """Why a scripted answer failed: its first step that is not a move of the maze."""
    steps = parse_answer(reply)
    if not steps:
        return "missing (no route on its map)"
    here = q["src"]
    for step in steps:
        action = snap(step.action, maze.allowed) or ""
        real = maze.targets(here, action)
        if step.after not in real:
            if step.after == step.before:
                return "missing (a move it never saw)"
            ambiguous = step.after in shared or any(p in shared for p in real)
            if here != step.before:
                return "misread (wrong place before)"
            if not real:
                return "bad reverse (guessed a move the maze lacks)"
            return "misread (place shares its heading)" if ambiguous else "misread (other)"
        here = step.after
    return "other (nondeterministic maze)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir", nargs="?", default="../shared/data/mango")
    parser.add_argument("--cutoff", type=int, default=70)
    args = parser.parse_args()
    settings = {"data_dir": args.data_dir, "questions_per_episode": 0, "cutoff": args.cutoff}
    causes: Counter[str] = Counter()
    by_game: dict[str, list[float]] = defaultdict(list)
    for name, player in PLAYERS.items():
        start = time.perf_counter()
        table: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for kind in ("df", "rf"):
            for seed in range(len(plan(kind, settings))):
                instance = make_instance(kind, seed, settings)
                replies: list[str] = []

                def recording(view, rng, player=player, replies=replies):  # type: ignore[no-untyped-def]
                    reply = player(view, rng)
                    replies.append(reply)
                    return reply

                gm = play_episode(instance, settings, recording)
                game = source_game(instance["source"])
                maze = Maze(game.graph, gm.actions)
                bases = Counter(_base(p) for p in game.locations)
                shared = {p for p in game.locations if bases[_base(p)] > 1}
                for row, q, reply in zip(gm.results, instance["questions"], replies, strict=True):
                    cell = table[(kind, row["label"])]
                    cell[0] += row["success_strict"]
                    cell[1] += row["reasoning"]
                    cell[2] += 1
                    if name == "scripted":
                        by_game[game.name].append(row["success_strict"])
                        if row["success_strict"] < 1:
                            causes[f"{kind}: {cause(reply, q, maze, shared)}"] += 1
        cells = ", ".join(
            f"{k}-{d} {v[0] / v[2]:.3f}/{v[1] / v[2]:.3f} (n={int(v[2])})"
            for (k, d), v in sorted(table.items())
        )
        print(f"{name:9s} success/reasoning: {cells}  [{time.perf_counter() - start:.1f} s]")
    print("\nscripted misses by cause:")
    for key, n in causes.most_common():
        print(f"  {n:6d}  {key}")
    worst = sorted(by_game.items(), key=lambda kv: sum(kv[1]) / len(kv[1]))[:12]
    print("\nscripted, worst games:", json.dumps({g: round(sum(v) / len(v), 2) for g, v in worst}))


if __name__ == "__main__":
    main()
