"""Tic-Tac-Toe: 3×3, X = 1, O = 0, empty = −1. The player is O and moves first; the opponent
is X, played by a perfect minimax search."""

from __future__ import annotations

import random
from functools import cache
from typing import Any, ClassVar

from parley.environments.playground.common import (
    Grid,
    Matrix,
    all_cells,
    canonical_cell,
    cell_name,
    parse_cell,
)
from parley.environments.playground.kit import (
    Kit,
    Played,
    Position,
    Question,
    make_question,
    numeric_question,
)

EMPTY, NOUGHT, CROSS = -1, 0, 1
SIDES = {"O": NOUGHT, "X": CROSS}
NAMES = {NOUGHT: "O", CROSS: "X", EMPTY: "empty"}
LINES = (
    [[(r, c) for c in range(3)] for r in range(3)]
    + [[(r, c) for r in range(3)] for c in range(3)]
    + [[(i, i) for i in range(3)], [(i, 2 - i) for i in range(3)]]
)
RED, BLUE = (214, 39, 40), (31, 90, 200)


def winners(board: Matrix) -> set[int]:
    """The marks that have three in a row (a random board may have both)."""
    out = set()
    for line in LINES:
        values = {board[r][c] for r, c in line}
        if len(values) == 1 and EMPTY not in values:
            out |= values
    return out


class TicTacToePosition(Position):
    def __init__(self, board: Matrix, to_move: str = "O") -> None:
        self.board = [list(row) for row in board]
        self.side = to_move

    def matrix(self) -> Matrix:
        return [list(row) for row in self.board]

    def to_move(self) -> str:
        return self.side

    def parse(self, text: str) -> str | None:
        return canonical_cell(text, 3, 3)

    def illegal(self, move: str) -> str | None:
        if self.result() is not None:
            return "the game is over"
        cell = parse_cell(move, 3, 3)
        if cell is None:
            return f"{move} is not a cell of the board"
        if self.board[cell[0]][cell[1]] != EMPTY:
            return f"{move} is already taken by {NAMES[self.board[cell[0]][cell[1]]]}"
        return None

    def legal_moves(self) -> list[str]:
        if self.result() is not None:
            return []
        return [cell_name(r, c) for r, c in all_cells(3, 3) if self.board[r][c] == EMPTY]

    def play(self, move: str) -> Played:
        r, c = parse_cell(move, 3, 3)  # type: ignore[misc]
        self.board[r][c] = SIDES[self.side]
        self.side = "X" if self.side == "O" else "O"
        return Played(move)

    def result(self) -> str | None:
        won = winners(self.board)
        if won:
            return NAMES[won.pop()]
        if all(v != EMPTY for row in self.board for v in row):
            return "draw"
        return None

    def state(self) -> dict[str, Any]:
        return {"board": self.matrix(), "to_move": self.side}


@cache
def _negamax(cells: tuple[int, ...], mark: int) -> int:
    """Value for the side ``mark`` to move: positive for a win (larger the sooner), 0 for a
    draw, negative for a loss."""
    board = [list(cells[i : i + 3]) for i in (0, 3, 6)]
    if winners(board):
        return -(1 + cells.count(EMPTY))  # the previous mover won; sooner weighs more
    if EMPTY not in cells:
        return 0
    other = CROSS if mark == NOUGHT else NOUGHT
    best = -100
    for i, v in enumerate(cells):
        if v == EMPTY:
            nxt = (*cells[:i], mark, *cells[i + 1 :])
            best = max(best, -_negamax(nxt, other))
    return best


def best_moves(position: TicTacToePosition) -> list[str]:
    """Every move minimax rates best (quickest win, slowest loss)."""
    cells = tuple(v for row in position.board for v in row)
    mark = SIDES[position.side]
    other = CROSS if mark == NOUGHT else NOUGHT
    scored: dict[str, int] = {}
    for i, v in enumerate(cells):
        if v == EMPTY:
            nxt = (*cells[:i], mark, *cells[i + 1 :])
            scored[cell_name(i // 3, i % 3)] = -_negamax(nxt, other)
    top = max(scored.values())
    return [m for m, s in scored.items() if s == top]


class TicTacToeKit(Kit):
    name: ClassVar[str] = "tictactoe"
    title: ClassVar[str] = "Tic-Tac-Toe"
    rows: ClassVar[int] = 3
    cols: ClassVar[int] = 3
    values: ClassVar[tuple[int, ...]] = (EMPTY, NOUGHT, CROSS)
    blank: ClassVar[int] = EMPTY
    cell_px: ClassVar[int] = 110
    encoding: ClassVar[str] = "X is 1, O is 0 and an empty cell is -1"
    rules: ClassVar[str] = (
        "Tic-Tac-Toe is played on a 3x3 grid. Two players take turns putting their mark (X or "
        "O) in an empty cell; the first to get three marks in a row, a column or a diagonal "
        "wins, and a full board without such a line is a draw."
    )
    picture_words: ClassVar[str] = "In the picture X is drawn in red and O in blue."
    board_words: ClassVar[str] = (
        "Columns are labelled A to C from left to right and rows 1 to 3 from top to bottom; a "
        "cell is named by its column letter and row number, so B1 is the middle cell of the "
        "top row."
    )
    move_help: ClassVar[str] = "a cell name such as A1, B2 or C3"
    rule_task: ClassVar[str] = "A move is valid if it puts O in an empty cell."
    player_side: ClassVar[str] = "O"
    opponent_side: ClassVar[str | None] = "X"

    def render(self, matrix: Matrix, extra: dict[str, Any]) -> bytes:
        grid = Grid(3, 3, self.cell_px, margin=36)

        def draw_cell(draw: Any, r: int, c: int, box: tuple[int, int, int, int]) -> None:
            pad = self.cell_px // 5
            x0, y0, x1, y1 = box[0] + pad, box[1] + pad, box[2] - pad, box[3] - pad
            if matrix[r][c] == CROSS:
                draw.line((x0, y0, x1, y1), fill=RED, width=9)
                draw.line((x0, y1, x1, y0), fill=RED, width=9)
            elif matrix[r][c] == NOUGHT:
                draw.ellipse((x0, y0, x1, y1), outline=BLUE, width=9)

        return self.picture(
            grid,
            draw_cell,
            background=(245, 245, 240),
        )

    def text(self, matrix: Matrix, extra: dict[str, Any]) -> str:
        symbols = {CROSS: "X", NOUGHT: "O"}
        return self.board_text(matrix, lambda v: symbols.get(v, "."), "X = X, O = O, . = empty")

    def random_board(self, rng: random.Random) -> tuple[Matrix, dict[str, Any]]:
        return [[rng.choice(self.values) for _ in range(3)] for _ in range(3)], {}

    # --- questions (the paper's Tic-Tac-Toe question types) -------------------------------

    def answer(self, matrix: Matrix, kind: str, params: dict[str, Any]) -> str:
        flat = [v for row in matrix for v in row]
        if kind == "symbol_at":
            return NAMES[matrix[params["row"]][params["col"]]]
        if kind == "count_symbol":
            return str(flat.count(SIDES[params["symbol"]]))
        if kind == "count_empty":
            return str(flat.count(EMPTY))
        if kind == "count_in_line":
            return str(self.line(matrix, params).count(SIDES[params["symbol"]]))
        if kind == "winner":
            won = winners(matrix)
            return {0: "neither", 2: "both"}.get(len(won)) or NAMES[won.pop()]
        if kind == "count_color":
            mark = CROSS if params["color"] == "red" else NOUGHT
            cells = flat if params.get("line") is None else self.line(matrix, params)
            return str(cells.count(mark))
        raise ValueError(f"unknown question kind {kind!r}")

    def question(self, matrix: Matrix, rng: random.Random) -> Question:
        kind = rng.choice(
            ["symbol_at", "count_symbol", "count_empty", "count_in_line", "winner", "count_color"]
        )
        params: dict[str, Any] = {}
        if kind == "symbol_at":
            r, c = rng.randrange(3), rng.randrange(3)
            params = {"row": r, "col": c}
            text = f"What is in cell {cell_name(r, c)} (column {self.col_labels[c]}, row {r + 1})?"
            correct = self.answer(matrix, kind, params)
            return make_question(kind, params, text, correct, ["X", "O", "empty"], rng)
        if kind == "winner":
            text = "Which mark has three in a row (a row, a column or a diagonal)?"
            correct = self.answer(matrix, kind, params)
            return make_question(kind, params, text, correct, ["X", "O", "both", "neither"], rng)
        if kind == "count_symbol":
            params = {"symbol": rng.choice("XO")}
            text = f"How many {params['symbol']} marks are on the board?"
            hi = 9
        elif kind == "count_empty":
            text = "How many empty cells are on the board?"
            hi = 9
        elif kind == "count_in_line":
            params = {"symbol": rng.choice("XO"), **self.random_line(rng)}
            text = f"How many {params['symbol']} marks are in {self.line_words(params)}?"
            hi = 3
        else:
            params = {"color": rng.choice(["red", "blue"])}
            if rng.random() < 0.5:
                params.update(self.random_line(rng))
                text = f"How many {params['color']} marks are in {self.line_words(params)}?"
                hi = 3
            else:
                params["line"] = None
                text = f"How many {params['color']} marks are on the board?"
                hi = 9
        count = int(self.answer(matrix, kind, params))
        return numeric_question(kind, params, text, count, 0, hi, rng)

    # --- positions ----------------------------------------------------------------------

    def rule_position(self, rng: random.Random) -> Position:
        """The reference's rule boards: 1-5 X's and as many O's or one fewer (never empty, never
        full), shuffled, with no three in a row; O to move. Either side may have started (the
        reference draws who plays X), so O-to-move is reachable either way."""
        while True:
            crosses = rng.randint(1, 5)
            noughts = crosses if rng.random() < 0.5 else crosses - 1
            if crosses + noughts >= 9:
                continue
            cells = [CROSS] * crosses + [NOUGHT] * noughts + [EMPTY] * (9 - crosses - noughts)
            rng.shuffle(cells)
            board = [cells[r * 3 : r * 3 + 3] for r in range(3)]
            if not winners(board):
                return TicTacToePosition(board, "O")

    def random_move_text(self, rng: random.Random) -> str:
        return cell_name(rng.randrange(3), rng.randrange(3))

    def e2e_instance(self, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        return {"seed": seed, "start": {"board": [[EMPTY] * 3 for _ in range(3)], "to_move": "O"}}

    def load(self, state: dict[str, Any]) -> Position:
        return TicTacToePosition(state["board"], state["to_move"])

    def from_view(self, view: dict[str, Any]) -> Position:
        return TicTacToePosition(view["board"], view["to_move"])

    def e2e_score(self, stats: dict[str, Any]) -> float:
        bonus = {"win": 50, "draw": 20}.get(stats["result"], 0)
        return 10.0 * stats["moves"] + bonus

    def e2e_ceiling(self, instance: dict[str, Any], settings: dict[str, Any]) -> float:
        return 10.0 * 5 + 50

    def search_move(self, position: Position, rng: random.Random, params: dict[str, Any]) -> str:
        assert isinstance(position, TicTacToePosition)
        return rng.choice(best_moves(position))
