"""Minesweeper: 8×8 with 10 mines; −1 hidden, 0–8 a revealed cell's count of neighbouring
mines, 9 a revealed mine. A single-player game: reveal every safe cell without hitting a mine.

First reveal is safe: the mines are laid when the first cell is revealed, never on that cell or
its neighbours (so the first reveal always opens an area), from a generator seeded by the
instance seed and that cell — deterministic, and the same for every player who starts there.
A revealed 0 opens its neighbours, as in the usual game. There are no flags: a move reveals.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from parley.environments.playground.common import (
    Grid,
    Matrix,
    canonical_cell,
    cell_name,
    centered_text,
    parse_cell,
    seeded,
)
from parley.environments.playground.kit import (
    YES_NO_OPTIONS,
    Kit,
    Played,
    Position,
    Question,
    make_question,
    numeric_question,
    pick_question,
)

N = 8
MINES = 10
HIDDEN, MINE = -1, 9
NUMBER_COLORS = {
    1: (25, 60, 210),
    2: (20, 130, 30),
    3: (205, 30, 30),
    4: (20, 20, 120),
    5: (130, 20, 20),
    6: (20, 130, 130),
    7: (20, 20, 20),
    8: (110, 110, 110),
}


def neighbours(square: int, n: int = N) -> list[int]:
    r0, c0 = divmod(square, n)
    return [
        r * n + c
        for r in range(r0 - 1, r0 + 2)
        for c in range(c0 - 1, c0 + 2)
        if (r, c) != (r0, c0) and 0 <= r < n and 0 <= c < n
    ]


def lay_mines(seed: int, first: int, count: int) -> list[int]:
    """Mines away from the first revealed cell and its neighbours (deterministic)."""
    rng = seeded("playground.minesweeper.mines", seed, first)
    banned = {first, *neighbours(first)}
    pool = [s for s in range(N * N) if s not in banned]
    if len(pool) < count:
        pool = [s for s in range(N * N) if s != first]
    return sorted(rng.sample(pool, count))


class MinesweeperPosition(Position):
    def __init__(
        self,
        seed: int,
        mines: list[int] | None = None,
        revealed: list[bool] | None = None,
        exploded: int | None = None,
        count: int = MINES,
    ) -> None:
        self.seed = seed
        self.count = count
        self.mines = set(mines) if mines is not None else None
        self.revealed = list(revealed) if revealed else [False] * (N * N)
        self.exploded = exploded

    def number(self, square: int) -> int:
        assert self.mines is not None
        return sum(1 for t in neighbours(square) if t in self.mines)

    def matrix(self) -> Matrix:
        out = []
        for r in range(N):
            row = []
            for c in range(N):
                s = r * N + c
                if not self.revealed[s]:
                    row.append(HIDDEN)
                elif self.mines is not None and s in self.mines:
                    row.append(MINE)
                else:
                    row.append(self.number(s))
            out.append(row)
        return out

    def to_move(self) -> str:
        return "you"

    def parse(self, text: str) -> str | None:
        return canonical_cell(text, N, N)

    def illegal(self, move: str) -> str | None:
        if self.result() is not None:
            return "the game is over"
        cell = parse_cell(move, N, N)
        if cell is None:
            return f"{move} is not a cell of the board"
        if self.revealed[cell[0] * N + cell[1]]:
            return f"{move} is already revealed"
        return None

    def legal_moves(self) -> list[str]:
        if self.result() is not None:
            return []
        return [cell_name(*divmod(s, N)) for s in range(N * N) if not self.revealed[s]]

    def play(self, move: str) -> Played:
        r, c = parse_cell(move, N, N)  # type: ignore[misc]
        square = r * N + c
        if self.mines is None:
            self.mines = set(lay_mines(self.seed, square, self.count))
        if square in self.mines:
            self.revealed[square] = True
            self.exploded = square
            return Played(move, note=f"{move} was a mine")
        opened = 0
        stack = [square]
        while stack:
            s = stack.pop()
            if self.revealed[s]:
                continue
            self.revealed[s] = True
            opened += 1
            if self.number(s) == 0:
                stack.extend(t for t in neighbours(s) if not self.revealed[t])
        return Played(move, note=f"{move} opened {opened} cell(s)")

    def safe_revealed(self) -> int:
        mines = self.mines or set()
        return sum(1 for s in range(N * N) if self.revealed[s] and s not in mines)

    def result(self) -> str | None:
        if self.exploded is not None:
            return "lost"
        if self.mines is not None and self.safe_revealed() == N * N - len(self.mines):
            return "won"
        return None

    def state(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "count": self.count,
            "mines": sorted(self.mines) if self.mines is not None else None,
            "revealed": list(self.revealed),
            "exploded": self.exploded,
        }


def infer(matrix: Matrix) -> tuple[set[int], set[int]]:
    """Cells that must be safe and cells that must be mines, from the visible numbers alone
    (single-cell counting and the subset rule between two numbers, to a fixed point)."""
    flat = [v for row in matrix for v in row]
    n = len(matrix)
    mines: set[int] = {s for s, v in enumerate(flat) if v == MINE}
    safe: set[int] = set()
    changed = True
    while changed:
        changed = False
        constraints: list[tuple[frozenset[int], int]] = []
        for s, v in enumerate(flat):
            if not 0 <= v <= 8:
                continue
            hidden = [t for t in neighbours(s, n) if flat[t] == HIDDEN]
            unknown = frozenset(t for t in hidden if t not in mines and t not in safe)
            need = v - sum(1 for t in neighbours(s, n) if t in mines)
            if not unknown:
                continue
            if need == 0:
                safe |= unknown
                changed = True
            elif need == len(unknown):
                mines |= unknown
                changed = True
            else:
                constraints.append((unknown, need))
        if changed:
            continue
        for a, need_a in constraints:
            for b, need_b in constraints:
                if a < b:
                    rest = b - a
                    if need_b == need_a:
                        safe |= rest
                        changed = True
                    elif need_b - need_a == len(rest):
                        mines |= rest
                        changed = True
            if changed:
                break
    return safe, mines


def choose_reveal(matrix: Matrix, total_mines: int, rng: random.Random) -> str:
    """A logical player's reveal: a cell proved safe, else the least risky guess."""
    n = len(matrix)
    flat = [v for row in matrix for v in row]
    hidden = [s for s, v in enumerate(flat) if v == HIDDEN]
    if len(hidden) == n * n:  # nothing revealed yet: the centre opens the widest area
        centre = [s for s in hidden if divmod(s, n)[0] in (3, 4) and divmod(s, n)[1] in (3, 4)]
        return cell_name(*divmod(rng.choice(centre), n))
    safe, mines = infer(matrix)
    if safe:
        return cell_name(*divmod(min(safe), n))
    candidates = [s for s in hidden if s not in mines]
    left = max(total_mines - len(mines), 0)
    density = left / max(len(candidates), 1)
    risk: dict[int, float] = dict.fromkeys(candidates, density)
    for s, v in enumerate(flat):
        if 0 <= v <= 8:
            unknown = [t for t in neighbours(s, n) if flat[t] == HIDDEN and t not in mines]
            if unknown:
                need = v - sum(1 for t in neighbours(s, n) if t in mines)
                for t in unknown:
                    risk[t] = max(risk[t] if risk[t] != density else 0.0, need / len(unknown))
    low = min(risk.values())
    return cell_name(*divmod(rng.choice([s for s, p in risk.items() if p == low]), n))


class MinesweeperKit(Kit):
    name: ClassVar[str] = "minesweeper"
    title: ClassVar[str] = "Minesweeper"
    rows: ClassVar[int] = N
    cols: ClassVar[int] = N
    values: ClassVar[tuple[int, ...]] = (HIDDEN, *range(10))
    blank: ClassVar[int] = HIDDEN
    cell_px: ClassVar[int] = 52
    encoding: ClassVar[str] = (
        "a hidden cell is -1, a revealed cell is the number of mines next to it (0 to 8; a "
        "revealed cell showing no number is 0) and a revealed mine is 9"
    )
    rules: ClassVar[str] = (
        "Minesweeper is played on an 8x8 grid hiding 10 mines. Revealing a cell shows how many "
        "of its up to eight neighbours hold a mine (an empty revealed cell means none, and its "
        "neighbours open automatically); revealing a mine loses. You win by revealing every "
        "cell without a mine. Your first reveal is always safe."
    )
    picture_words: ClassVar[str] = (
        "In the picture hidden cells are raised grey squares, revealed cells are flat and light, "
        "and a revealed mine is a black ball on red."
    )
    board_words: ClassVar[str] = (
        "Columns are labelled A to H from left to right and rows 1 to 8 from top to bottom; a "
        "cell is named by its column letter and row number, such as C5."
    )
    move_help: ClassVar[str] = "the name of a hidden cell to reveal, such as C5"
    rule_task: ClassVar[str] = "A move is valid if it reveals a cell that is still hidden."

    def render(self, matrix: Matrix, extra: dict[str, Any]) -> bytes:
        def square(r: int, c: int) -> tuple[int, int, int]:
            v = matrix[r][c]
            if v == HIDDEN:
                return (150, 150, 155)
            return (225, 40, 40) if v == MINE else (236, 236, 232)

        px = self.cell_px

        def draw_cell(draw: Any, r: int, c: int, box: tuple[int, int, int, int]) -> None:
            v = matrix[r][c]
            x0, y0, x1, y1 = box
            if v == HIDDEN:  # a raised tile: light top-left edge, dark bottom-right edge
                draw.line((x0 + 2, y0 + 2, x1 - 2, y0 + 2), fill=(235, 235, 240), width=3)
                draw.line((x0 + 2, y0 + 2, x0 + 2, y1 - 2), fill=(235, 235, 240), width=3)
                draw.line((x0 + 2, y1 - 2, x1 - 2, y1 - 2), fill=(90, 90, 95), width=3)
                draw.line((x1 - 2, y0 + 2, x1 - 2, y1 - 2), fill=(90, 90, 95), width=3)
            elif v == MINE:
                cx, cy, rad = (x0 + x1) // 2, (y0 + y1) // 2, px // 4
                for dx, dy in ((1, 0), (0, 1), (1, 1), (1, -1)):
                    draw.line(
                        (
                            cx - dx * (rad + 6),
                            cy - dy * (rad + 6),
                            cx + dx * (rad + 6),
                            cy + dy * (rad + 6),
                        ),
                        fill=(10, 10, 10),
                        width=3,
                    )
                draw.ellipse((cx - rad, cy - rad, cx + rad, cy + rad), fill=(10, 10, 10))
            elif v > 0:
                centered_text(draw, box, str(v), px * 3 // 5, NUMBER_COLORS[v])

        return self.picture(
            Grid(N, N, px),
            draw_cell,
            square=square,
        )

    def text(self, matrix: Matrix, extra: dict[str, Any]) -> str:
        def symbol(v: int) -> str:
            return "#" if v == HIDDEN else "*" if v == MINE else str(v)

        legend = "# = hidden, 0-8 = revealed with that many neighbouring mines, * = mine"
        return self.board_text(matrix, symbol, legend)

    def random_board(self, rng: random.Random) -> tuple[Matrix, dict[str, Any]]:
        mines = set(rng.sample(range(N * N), MINES))
        show = rng.uniform(0.1, 0.9)
        show_mine = rng.choice([0.0, 0.2, 0.5])
        position = MinesweeperPosition(0, sorted(mines))
        for s in range(N * N):
            chance = show_mine if s in mines else show
            position.revealed[s] = rng.random() < chance
        return position.matrix(), {}

    # --- questions (the paper's Minesweeper question types) -----------------------------

    def answer(self, matrix: Matrix, kind: str, params: dict[str, Any]) -> str:
        flat = [v for row in matrix for v in row]
        if kind == "symbol_at":
            v = matrix[params["row"]][params["col"]]
            return "hidden" if v == HIDDEN else "mine" if v == MINE else str(v)
        if kind == "count_mines":
            return str(flat.count(MINE))
        if kind == "count_revealed":
            return str(sum(1 for v in flat if v != HIDDEN))
        if kind == "count_revealed_in_line":
            return str(sum(1 for v in self.line(matrix, params) if v != HIDDEN))
        if kind == "adjacent_mines":
            return str(matrix[params["row"]][params["col"]])
        if kind == "is_mine":
            return "Yes" if matrix[params["row"]][params["col"]] == MINE else "No"
        raise ValueError(f"unknown question kind {kind!r}")

    def question(self, matrix: Matrix, rng: random.Random) -> Question:
        kind = rng.choice(
            [
                "symbol_at",
                "count_mines",
                "count_revealed",
                "count_revealed_in_line",
                "adjacent_mines",
                "is_mine",
            ]
        )
        numbered = [(r, c) for r in range(N) for c in range(N) if 0 <= matrix[r][c] <= 8]
        if kind == "adjacent_mines" and not numbered:
            kind = "count_revealed"
        params: dict[str, Any]
        if kind == "symbol_at":
            r, c = rng.randrange(N), rng.randrange(N)
            params = {"row": r, "col": c}
            text = f"What does cell {cell_name(r, c)} show?"
            correct = self.answer(matrix, kind, params)
            pool = ["hidden", "mine", *(str(d) for d in range(9))]
            return pick_question(kind, params, text, correct, pool, rng)
        if kind == "is_mine":
            r, c = rng.randrange(N), rng.randrange(N)
            params = {"row": r, "col": c}
            text = f"Is there a revealed mine on cell {cell_name(r, c)}?"
            correct = self.answer(matrix, kind, params)
            return make_question(kind, params, text, correct, YES_NO_OPTIONS, rng, keep_order=True)
        if kind == "adjacent_mines":
            r, c = rng.choice(numbered)
            params, hi = {"row": r, "col": c}, 8
            text = f"Cell {cell_name(r, c)} is revealed. How many mines are next to it?"
        elif kind == "count_mines":
            params, hi = {}, MINES
            text = "How many revealed mines are on the board?"
        elif kind == "count_revealed":
            params, hi = {}, N * N
            text = "How many cells are revealed (mines included)?"
        else:
            params = self.random_line(rng)
            text, hi = f"How many revealed cells are in {self.line_words(params)}?", N
        count = int(self.answer(matrix, kind, params))
        return numeric_question(kind, params, text, count, 0, hi, rng)

    # --- positions ----------------------------------------------------------------------

    def rule_position(self, rng: random.Random) -> Position:
        """The reference's rule boards: 10 mines laid at random, then half the cells plus one
        (33 of 64) revealed at random, so 31 hidden cells, every one a valid move. The
        reference may reveal mines among the 33 (a board on which the game would be over);
        here the 33 are drawn from the safe cells, which leaves the count of valid moves, and
        so a random move's chance, the same."""
        mines = rng.sample(range(N * N), MINES)
        safe = [s for s in range(N * N) if s not in mines]
        shown = set(rng.sample(safe, N * N // 2 + 1))
        revealed = [s in shown for s in range(N * N)]
        return MinesweeperPosition(rng.randrange(1 << 30), sorted(mines), revealed)

    def random_move_text(self, rng: random.Random) -> str:
        return cell_name(rng.randrange(N), rng.randrange(N))

    def e2e_instance(self, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        return {"seed": seed, "start": MinesweeperPosition(seed).state()}

    def load(self, state: dict[str, Any]) -> Position:
        return MinesweeperPosition(
            state["seed"],
            state.get("mines"),
            state.get("revealed"),
            state.get("exploded"),
            state.get("count", MINES),
        )

    def from_view(self, view: dict[str, Any]) -> Position:
        """What a player knows: hidden cells stay hidden (mines unknown)."""
        flat = [v for row in view["board"] for v in row]
        return _VisibleMinesweeper([v != HIDDEN for v in flat], view["board"])

    def e2e_counts(self, position: Position) -> dict[str, Any]:
        assert isinstance(position, MinesweeperPosition)
        return {"revealed": position.safe_revealed()}

    def e2e_score(self, stats: dict[str, Any]) -> float:
        bonus = 1000 if stats["result"] == "win" else 0
        return 10.0 * stats["moves"] + 2.0 * stats["revealed"] + bonus

    def e2e_ceiling(self, instance: dict[str, Any], settings: dict[str, Any]) -> float:
        safe = N * N - int(instance["start"].get("count", MINES))
        return 12.0 * safe + 1000

    def search_move(self, position: Position, rng: random.Random, params: dict[str, Any]) -> str:
        return choose_reveal(position.matrix(), MINES, rng)


class _VisibleMinesweeper(MinesweeperPosition):
    """A board as a player sees it: enough to list and check reveals, not to play them."""

    def __init__(self, revealed: list[bool], board: Matrix) -> None:
        super().__init__(0, None, revealed)
        self._board = [list(row) for row in board]

    def matrix(self) -> Matrix:
        return [list(row) for row in self._board]

    def result(self) -> str | None:
        return "lost" if any(v == MINE for row in self._board for v in row) else None
