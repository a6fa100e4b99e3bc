"""Sudoku: 9×9, 0 = empty, 1–9 digits; a single-player puzzle with a unique solution.

A move writes one digit into an empty cell (``B3 7``: column B, row 3, digit 7). It is valid
when the digit is not already in that row, column or 3×3 box; digits, once written, stay. The
game is won when the grid is full and lost when some empty cell has no digit left that fits.
"""

from __future__ import annotations

import random
import re
from typing import Any, ClassVar

from parley.environments.playground.common import (
    Grid,
    Matrix,
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

N = 9
ALL = 0x3FE  # bits 1..9
BOX_OF = [(s // 9 // 3) * 3 + (s % 9) // 3 for s in range(81)]
PEERS: list[list[int]] = [
    sorted(
        {
            t
            for t in range(81)
            if t != s and (t // 9 == s // 9 or t % 9 == s % 9 or BOX_OF[t] == BOX_OF[s])
        }
    )
    for s in range(81)
]


def candidates(grid: list[int], square: int) -> list[int]:
    """Digits that fit an empty square (none for a filled one)."""
    if grid[square]:
        return []
    used = {grid[t] for t in PEERS[square]}
    return [d for d in range(1, 10) if d not in used]


def conflicts(grid: list[int], square: int, digit: int) -> list[int]:
    return [t for t in PEERS[square] if grid[t] == digit]


def solve(grid: list[int], limit: int = 2) -> tuple[int, list[int] | None]:
    """How many solutions (counting stops at ``limit``) and the first one; bitmask search
    that always branches on the square with the fewest candidates."""
    rows, cols, boxes = [0] * 9, [0] * 9, [0] * 9
    work = list(grid)
    for s, d in enumerate(work):
        if d:
            bit = 1 << d
            r, c, b = s // 9, s % 9, BOX_OF[s]
            if rows[r] & bit or cols[c] & bit or boxes[b] & bit:
                return 0, None
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
    empties = [s for s in range(81) if not work[s]]
    found: list[list[int]] = []
    count = 0

    def search() -> None:
        nonlocal count
        best, best_mask, best_n = -1, 0, 10
        for s in empties:
            if work[s]:
                continue
            mask = ALL & ~(rows[s // 9] | cols[s % 9] | boxes[BOX_OF[s]])
            n = mask.bit_count()
            if n < best_n:
                best, best_mask, best_n = s, mask, n
                if n <= 1:
                    break
        if best < 0:
            count += 1
            if not found:
                found.append(list(work))
            return
        if best_n == 0:
            return
        r, c, b = best // 9, best % 9, BOX_OF[best]
        for d in range(1, 10):
            bit = 1 << d
            if best_mask & bit:
                work[best] = d
                rows[r] |= bit
                cols[c] |= bit
                boxes[b] |= bit
                search()
                rows[r] ^= bit
                cols[c] ^= bit
                boxes[b] ^= bit
                work[best] = 0
                if count >= limit:
                    return

    search()
    return count, (found[0] if found else None)


def full_grid(rng: random.Random) -> list[int]:
    """A random solved grid: a base pattern with digits, rows, columns, bands and stacks
    shuffled (every such shuffle keeps it valid)."""

    def shuffled(groups: int) -> list[int]:
        order = rng.sample(range(3), 3)
        return [g * 3 + i for g in order for i in rng.sample(range(3), 3)][: groups * 3]

    rows, cols = shuffled(3), shuffled(3)
    digits = rng.sample(range(1, 10), 9)
    grid = [digits[(r * 3 + r // 3 + c) % 9] for r in rows for c in cols]
    if rng.random() < 0.5:
        grid = [grid[c * 9 + r] for r in range(9) for c in range(9)]
    return grid


def make_puzzle(rng: random.Random, empty_cells: int) -> tuple[list[int], list[int]]:
    """A puzzle with a unique solution and up to ``empty_cells`` blanks, and its solution."""
    solution = full_grid(rng)
    puzzle = list(solution)
    removed = 0
    for s in rng.sample(range(81), 81):
        if removed >= empty_cells:
            break
        keep = puzzle[s]
        puzzle[s] = 0
        if solve(puzzle, 2)[0] == 1:
            removed += 1
        else:
            puzzle[s] = keep
    return puzzle, solution


def dig_puzzle(rng: random.Random, attempts: int = 5) -> tuple[list[int], list[int]]:
    """A puzzle made the reference's way: blank a random filled cell of a solved grid, keep it
    blank while the solution stays unique, and stop after ``attempts`` cells that could not be
    blanked; returns the puzzle and its solution."""
    solution = full_grid(rng)
    puzzle = list(solution)
    while attempts > 0:
        square = rng.choice([s for s in range(81) if puzzle[s]])
        keep, puzzle[square] = puzzle[square], 0
        if solve(puzzle, 2)[0] != 1:
            puzzle[square] = keep
            attempts -= 1
    return puzzle, solution


_MOVE = re.compile(r"^\s*([A-Za-z]\s*\d|\d\s*[A-Za-z])\s*(?:[,:=]\s*|\s+)(\d)\s*$")


class SudokuPosition(Position):
    def __init__(
        self, grid: list[int], given: list[bool], solution: list[int] | None = None
    ) -> None:
        self.grid = list(grid)
        self.given = list(given)
        self.solution = list(solution) if solution else None

    def matrix(self) -> Matrix:
        return [self.grid[r * 9 : (r + 1) * 9] for r in range(9)]

    def extra(self) -> dict[str, Any]:
        return {"given": [self.given[r * 9 : (r + 1) * 9] for r in range(9)]}

    def to_move(self) -> str:
        return "you"

    def parse(self, text: str) -> str | None:
        match = _MOVE.match(text)
        if not match:
            return None
        cell = parse_cell(match.group(1), 9, 9)
        return f"{cell_name(*cell)} {match.group(2)}" if cell else None

    @staticmethod
    def _split(move: str) -> tuple[int, int]:
        name, digit = move.split()
        r, c = parse_cell(name, 9, 9)  # type: ignore[misc]
        return r * 9 + c, int(digit)

    def illegal(self, move: str) -> str | None:
        if self.result() is not None:
            return "the game is over"
        square, digit = self._split(move)
        name = move.split()[0]
        if not 1 <= digit <= 9:
            return "digits are 1 to 9"
        if self.grid[square]:
            return f"{name} already holds {self.grid[square]}"
        clash = conflicts(self.grid, square, digit)
        if clash:
            where = ", ".join(cell_name(*divmod(t, 9)) for t in clash)
            return f"{digit} is already in the same row, column or box ({where})"
        return None

    def legal_moves(self) -> list[str]:
        if self.result() is not None:
            return []
        return [
            f"{cell_name(*divmod(s, 9))} {d}" for s in range(81) for d in candidates(self.grid, s)
        ]

    def play(self, move: str) -> Played:
        square, digit = self._split(move)
        self.grid[square] = digit
        return Played(move)

    def result(self) -> str | None:
        if 0 not in self.grid:
            return "won"
        if any(not self.grid[s] and not candidates(self.grid, s) for s in range(81)):
            return "stuck"
        return None

    def filled(self) -> int:
        return sum(1 for s in range(81) if self.grid[s] and not self.given[s])

    def correct(self) -> int:
        if self.solution is None:
            return 0
        return sum(
            1
            for s in range(81)
            if self.grid[s] and not self.given[s] and self.grid[s] == self.solution[s]
        )

    def state(self) -> dict[str, Any]:
        return {
            "board": self.matrix(),
            "given": self.extra()["given"],
            "solution": [self.solution[r * 9 : (r + 1) * 9] for r in range(9)]
            if self.solution
            else None,
        }


def box_name(box: int) -> str:
    """A 3×3 box by its top-left cell: box 4 (the centre) is "the box whose top-left cell is D4"."""
    return cell_name((box // 3) * 3, (box % 3) * 3)


def box_cells(matrix: Matrix, box: int) -> list[int]:
    r0, c0 = (box // 3) * 3, (box % 3) * 3
    return [matrix[r][c] for r in range(r0, r0 + 3) for c in range(c0, c0 + 3)]


class SudokuKit(Kit):
    name: ClassVar[str] = "sudoku"
    title: ClassVar[str] = "Sudoku"
    rows: ClassVar[int] = N
    cols: ClassVar[int] = N
    values: ClassVar[tuple[int, ...]] = tuple(range(10))
    cell_px: ClassVar[int] = 50
    encoding: ClassVar[str] = "a digit is itself (1 to 9) and an empty cell is 0"
    rules: ClassVar[str] = (
        "Sudoku is a 9x9 grid divided into nine 3x3 boxes. Fill the empty cells so that every "
        "row, every column and every box contains each digit from 1 to 9 exactly once."
    )
    picture_words: ClassVar[str] = (
        "In the picture the digits given at the start are black and digits written later blue."
    )
    board_words: ClassVar[str] = (
        "Columns are labelled A to I from left to right and rows 1 to 9 from top to bottom; a "
        "cell is named by its column letter and row number, such as E5 for the centre cell."
    )
    move_help: ClassVar[str] = (
        "a cell name, a space and a digit, such as B3 7 (write 7 in column B, row 3)"
    )
    rule_task: ClassVar[str] = (
        "A move is valid if it writes a digit from 1 to 9 into an empty cell and that digit does "
        "not already appear in the same row, column or 3x3 box."
    )

    def render(self, matrix: Matrix, extra: dict[str, Any]) -> bytes:
        given = extra.get("given")

        def draw_cell(draw: Any, r: int, c: int, box: tuple[int, int, int, int]) -> None:
            v = matrix[r][c]
            if v:
                color = (20, 20, 20) if given is None or given[r][c] else (31, 90, 200)
                centered_text(draw, box, str(v), self.cell_px * 3 // 5, color)

        return self.picture(
            Grid(N, N, self.cell_px),
            draw_cell,
            background=(252, 252, 250),
            thick_every=3,
        )

    def text(self, matrix: Matrix, extra: dict[str, Any]) -> str:
        legend = ". = empty cell; boxes are columns A-C, D-F, G-I by rows 1-3, 4-6, 7-9"
        return self.board_text(matrix, lambda v: str(v) if v else ".", legend)

    def random_board(self, rng: random.Random) -> tuple[Matrix, dict[str, Any]]:
        grid = full_grid(rng)
        keep = rng.uniform(0.25, 0.9)
        grid = [v if rng.random() < keep else 0 for v in grid]
        return [grid[r * 9 : (r + 1) * 9] for r in range(9)], {}

    # --- questions (the paper's Sudoku question types) ----------------------------------

    def answer(self, matrix: Matrix, kind: str, params: dict[str, Any]) -> str:
        flat = [v for row in matrix for v in row]
        if kind == "number_at":
            v = matrix[params["row"]][params["col"]]
            return str(v) if v else "empty"
        if kind == "count_number":
            return str(flat.count(params["number"]))
        if kind == "count_empty":
            return str(flat.count(0))
        if kind == "count_number_in_line":
            return str(self.line(matrix, params).count(params["number"]))
        if kind == "count_number_in_box":
            return str(box_cells(matrix, params["box"]).count(params["number"]))
        if kind == "sum_line":
            return str(sum(self.line(matrix, params)))
        if kind == "sum_box":
            return str(sum(box_cells(matrix, params["box"])))
        if kind == "contains":
            return "Yes" if params["number"] in self.line(matrix, params) else "No"
        if kind == "empty_in_box":
            return str(box_cells(matrix, params["box"]).count(0))
        raise ValueError(f"unknown question kind {kind!r}")

    def question(self, matrix: Matrix, rng: random.Random) -> Question:
        kind = rng.choice(
            [
                "number_at",
                "count_number",
                "count_empty",
                "count_number_in_line",
                "count_number_in_box",
                "sum_line",
                "sum_box",
                "contains",
                "empty_in_box",
            ]
        )
        number = rng.randint(1, 9)
        line = self.random_line(rng)
        box = rng.randrange(9)
        params: dict[str, Any]
        if kind == "number_at":
            r, c = rng.randrange(9), rng.randrange(9)
            params = {"row": r, "col": c}
            text = f"What is in cell {cell_name(r, c)}?"
            correct = self.answer(matrix, kind, params)
            pool = [str(d) for d in range(1, 10)] + ["empty"]
            return pick_question(kind, params, text, correct, pool, rng)
        if kind == "contains":
            params = {"number": number, **line}
            text = f"Does {self.line_words(params)} contain the digit {number}?"
            correct = self.answer(matrix, kind, params)
            return make_question(kind, params, text, correct, YES_NO_OPTIONS, rng, keep_order=True)
        where_box = f"the 3x3 box whose top-left cell is {box_name(box)}"
        if kind == "count_number":
            params, hi = {"number": number}, 9
            text = f"How many times does the digit {number} appear on the board?"
        elif kind == "count_empty":
            params, hi = {}, 81
            text = "How many empty cells are on the board?"
        elif kind == "count_number_in_line":
            params, hi = {"number": number, **line}, 9
            text = f"How many times does the digit {number} appear in {self.line_words(params)}?"
        elif kind == "count_number_in_box":
            params, hi = {"number": number, "box": box}, 9
            text = f"How many times does the digit {number} appear in {where_box}?"
        elif kind == "sum_line":
            params, hi = dict(line), 81
            text = f"What is the sum of the digits in {self.line_words(params)}?"
        elif kind == "sum_box":
            params, hi = {"box": box}, 81
            text = f"What is the sum of the digits in {where_box}?"
        else:
            params, hi = {"box": box}, 9
            text = f"How many empty cells are in {where_box}?"
        count = int(self.answer(matrix, kind, params))
        return numeric_question(kind, params, text, count, 0, hi, rng)

    # --- positions ----------------------------------------------------------------------

    def rule_position(self, rng: random.Random) -> Position:
        """The reference's rule boards: its puzzle generator — blank random cells of a solved
        grid while the solution stays unique, and stop after five blanks that would not — which
        leaves about 49 blanks and about 0.21 of all (cell, digit) pairs legal."""
        puzzle, solution = dig_puzzle(rng)
        return SudokuPosition(puzzle, [bool(v) for v in puzzle], solution)

    def random_move_text(self, rng: random.Random) -> str:
        return f"{cell_name(rng.randrange(9), rng.randrange(9))} {rng.randint(1, 9)}"

    def e2e_instance(self, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        empty = int(settings.get("empty_cells", 45))
        puzzle, solution = make_puzzle(seeded("playground.sudoku.e2e", seed), empty)
        given = [bool(v) for v in puzzle]
        return {"seed": seed, "start": SudokuPosition(puzzle, given, solution).state()}

    def load(self, state: dict[str, Any]) -> Position:
        grid = [v for row in state["board"] for v in row]
        given = [bool(v) for row in state["given"] for v in row]
        solution = state.get("solution")
        flat = [v for row in solution for v in row] if solution else None
        return SudokuPosition(grid, given, flat)

    def from_view(self, view: dict[str, Any]) -> Position:
        return self.load({"board": view["board"], "given": view["given"], "solution": None})

    def e2e_counts(self, position: Position) -> dict[str, Any]:
        assert isinstance(position, SudokuPosition)
        return {"filled": position.filled(), "correct": position.correct()}

    def e2e_score(self, stats: dict[str, Any]) -> float:
        bonus = 1000 if stats["result"] == "win" else 0
        return 2.0 * stats["filled"] + 10.0 * stats["correct"] + bonus

    def e2e_ceiling(self, instance: dict[str, Any], settings: dict[str, Any]) -> float:
        empty = sum(1 for row in instance["start"]["board"] for v in row if v == 0)
        return 12.0 * empty + 1000

    def search_move(self, position: Position, rng: random.Random, params: dict[str, Any]) -> str:
        """Solve the grid as it stands and write the digit of its most constrained cell."""
        assert isinstance(position, SudokuPosition)
        grid = position.grid
        _, solution = solve(grid, 1)
        empties = [s for s in range(81) if not grid[s]]
        if solution is not None and empties:
            square = min(empties, key=lambda s: (len(candidates(grid, s)), s))
            return f"{cell_name(*divmod(square, 9))} {solution[square]}"
        return rng.choice(position.legal_moves())
