"""The paper's per-game ability ratings (Table 1 stars, Table 6 values) and the star-weighted
aggregate of a task's scores over the six games.

The aggregate of task t is  sum_g w(g, t) · s(g, t) / sum_g w(g, t),  where s(g, t) in [0, 1]
is the game's score on the task and w(g, t) the sum of the game's stars over the abilities the
task needs (an N/A rating counts 0, as the paper's Appendix A.3 does). Which abilities each
task needs is the paper's Figure 3, which the text does not spell out; ``TASK_ABILITIES``
below is our reading of its description (Section 3.4) and is kept as data so it can change.
"""

from __future__ import annotations

GAMES = ("tictactoe", "reversi", "sudoku", "minesweeper", "gomoku", "chess")
ABILITIES = ("perception", "reasoning", "decision", "adversary")

# Table 1 (stars: ✩ = 0.5, ★ = 1); None = N/A (single-player games have no adversary).
STARS: dict[str, dict[str, float | None]] = {
    "tictactoe": {"perception": 0.5, "reasoning": 0.5, "decision": 0.5, "adversary": 0.5},
    "reversi": {"perception": 1.5, "reasoning": 1.5, "decision": 2.5, "adversary": 2.5},
    "sudoku": {"perception": 3.5, "reasoning": 2.0, "decision": 2.0, "adversary": None},
    "minesweeper": {"perception": 4.0, "reasoning": 5.0, "decision": 3.0, "adversary": None},
    "gomoku": {"perception": 5.0, "reasoning": 4.0, "decision": 3.5, "adversary": 4.0},
    "chess": {"perception": 3.5, "reasoning": 3.0, "decision": 5.0, "adversary": 5.0},
}

# Table 6: the normalised values the stars are rounded from (to the nearest half).
NORMALISED: dict[str, dict[str, float | None]] = {
    "tictactoe": {"perception": 0.5, "reasoning": 0.5, "decision": 0.5, "adversary": 0.5},
    "minesweeper": {"perception": 3.86, "reasoning": 5.0, "decision": 3.08, "adversary": None},
    "gomoku": {"perception": 5.0, "reasoning": 4.22, "decision": 3.57, "adversary": 3.83},
    "sudoku": {"perception": 3.70, "reasoning": 1.82, "decision": 1.92, "adversary": None},
    "chess": {"perception": 3.45, "reasoning": 2.87, "decision": 5.0, "adversary": 5.0},
    "reversi": {"perception": 1.72, "reasoning": 1.39, "decision": 2.42, "adversary": 2.62},
}

# Our reading of Figure 3: perceiving needs perception; QA adds reasoning; rule following
# adds decision (choosing a move); E2E needs all four.
TASK_ABILITIES: dict[str, tuple[str, ...]] = {
    "perceiving": ("perception",),
    "qa": ("perception", "reasoning"),
    "rule": ("perception", "reasoning", "decision"),
    "e2e": ("perception", "reasoning", "decision", "adversary"),
}


def weight(game: str, task: str) -> float:
    return sum(STARS[game][a] or 0.0 for a in TASK_ABILITIES[task])


def aggregate(task: str, scores: dict[str, float]) -> float | None:
    """Star-weighted mean of per-game scores in [0, 1] (games without a score are left out)."""
    present = [g for g in GAMES if scores.get(g) is not None]
    total = sum(weight(g, task) for g in present)
    if not present or total == 0:
        return None
    return sum(weight(g, task) * scores[g] for g in present) / total


def stars_text(value: float | None) -> str:
    """4.5 → ★★★★✩ (the paper's notation: ✩ is half a star)."""
    if value is None:
        return "N/A"
    return "★" * int(value) + ("✩" if value % 1 else "")
