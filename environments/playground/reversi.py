"""Reversi (Othello): 8×8, empty = 0, black = 1, white = 2. The player is Black and moves
first; the opponent is White, played by an alpha-beta search (depth 3 by default)."""

from __future__ import annotations

import random
from typing import Any, ClassVar

from parley.environments.playground.common import (
    Grid,
    Matrix,
    cell_name,
    parse_cell,
    scattered_board,
)
from parley.environments.playground.kit import (
    FlatBoardPosition,
    Kit,
    Played,
    Position,
    Question,
    make_question,
    numeric_question,
)

N = 8
EMPTY, BLACK, WHITE = 0, 1, 2
SIDE_VALUE = {"Black": BLACK, "White": WHITE}
VALUE_NAME = {BLACK: "Black", WHITE: "White", EMPTY: "empty"}
DIRECTIONS = [(-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)]

# RAYS[square] lists, per direction, the squares outward from it.
RAYS: list[list[list[int]]] = []
for _sq in range(N * N):
    _r0, _c0 = divmod(_sq, N)
    _rays = []
    for _dr, _dc in DIRECTIONS:
        _ray, _r, _c = [], _r0 + _dr, _c0 + _dc
        while 0 <= _r < N and 0 <= _c < N:
            _ray.append(_r * N + _c)
            _r, _c = _r + _dr, _c + _dc
        if len(_ray) >= 2:
            _rays.append(_ray)
    RAYS.append(_rays)

# Square values for the search: corners good, squares next to them bad.
WEIGHTS = [
    *(100, -20, 10, 5, 5, 10, -20, 100),
    *(-20, -50, -2, -2, -2, -2, -50, -20),
    *(10, -2, 1, 1, 1, 1, -2, 10),
    *(5, -2, 1, 0, 0, 1, -2, 5),
    *(5, -2, 1, 0, 0, 1, -2, 5),
    *(10, -2, 1, 1, 1, 1, -2, 10),
    *(-20, -50, -2, -2, -2, -2, -50, -20),
    *(100, -20, 10, 5, 5, 10, -20, 100),
]


def flips(board: list[int], square: int, me: int) -> list[int]:
    """The discs a move by ``me`` on ``square`` would turn over (empty: not a legal move)."""
    if board[square] != EMPTY:
        return []
    opponent = 3 - me
    out: list[int] = []
    for ray in RAYS[square]:
        run: list[int] = []
        for s in ray:
            v = board[s]
            if v == opponent:
                run.append(s)
                continue
            if v == me and run:
                out.extend(run)
            break
    return out


def moves(board: list[int], me: int) -> list[int]:
    return [s for s in range(N * N) if board[s] == EMPTY and flips(board, s, me)]


def apply(board: list[int], square: int, me: int) -> list[int]:
    turned = flips(board, square, me)
    child = list(board)
    child[square] = me
    for s in turned:
        child[s] = me
    return child


def start_board() -> list[int]:
    board = [EMPTY] * (N * N)
    board[3 * N + 3] = WHITE  # D4
    board[3 * N + 4] = BLACK  # E4
    board[4 * N + 3] = BLACK  # D5
    board[4 * N + 4] = WHITE  # E5
    return board


class ReversiPosition(FlatBoardPosition):
    size: ClassVar[int] = N
    first_side: ClassVar[str] = "Black"

    def illegal(self, move: str) -> str | None:
        # No separate game-over check: when the game is over no square turns a disc over.
        cell = parse_cell(move, N, N)
        if cell is None:
            return f"{move} is not a square of the board"
        square = cell[0] * N + cell[1]
        if self.board[square] != EMPTY:
            return f"{move} is already occupied"
        if not flips(self.board, square, SIDE_VALUE[self.side]):
            return f"{move} would not turn over any {VALUE_NAME[3 - SIDE_VALUE[self.side]]} disc"
        return None

    def legal_moves(self) -> list[str]:
        return [cell_name(*divmod(s, N)) for s in moves(self.board, SIDE_VALUE[self.side])]

    def play(self, move: str) -> Played:
        r, c = parse_cell(move, N, N)  # type: ignore[misc]
        me = SIDE_VALUE[self.side]
        turned = len(flips(self.board, r * N + c, me))
        self.board = apply(self.board, r * N + c, me)
        played = Played(move, note=f"{self.side} {move} turned {turned}")
        self.side = VALUE_NAME[3 - me]
        # A side without a legal move passes; when neither can move the game is over.
        if not moves(self.board, SIDE_VALUE[self.side]) and moves(self.board, me):
            played.passed.append(self.side)
            self.side = VALUE_NAME[me]
        return played

    def result(self) -> str | None:
        if moves(self.board, BLACK) or moves(self.board, WHITE):
            return None
        black, white = self.board.count(BLACK), self.board.count(WHITE)
        return "Black" if black > white else "White" if white > black else "draw"


# The squares next to each corner: bad to hold while the corner is free, harmless after.
CORNER_NEIGHBOURS = {0: (1, 8, 9), 7: (6, 14, 15), 56: (48, 57, 49), 63: (62, 55, 54)}


def _evaluate(board: list[int], me: int) -> int:
    score = 0
    for s in range(N * N):
        v = board[s]
        if v == me:
            score += WEIGHTS[s]
        elif v != EMPTY:
            score -= WEIGHTS[s]
    for corner, around in CORNER_NEIGHBOURS.items():
        if board[corner] != EMPTY:
            for s in around:
                v = board[s]
                if v != EMPTY:
                    delta = 5 - WEIGHTS[s]
                    score += delta if v == me else -delta
    return score


def _negamax(board: list[int], me: int, depth: int, alpha: float, beta: float) -> float:
    mine = moves(board, me)
    if not mine:
        if not moves(board, 3 - me):
            diff = board.count(me) - board.count(3 - me)
            return (10_000 if diff > 0 else -10_000 if diff < 0 else 0) + diff
        if depth == 0:
            return _evaluate(board, me)
        return -_negamax(board, 3 - me, depth - 1, -beta, -alpha)  # a pass
    if depth == 0:
        return _evaluate(board, me)
    mine.sort(key=lambda s: -WEIGHTS[s])
    best = -float("inf")
    for s in mine:
        value = -_negamax(apply(board, s, me), 3 - me, depth - 1, -beta, -alpha)
        best = max(best, value)
        alpha = max(alpha, value)
        if alpha >= beta:
            break
    return best


def search(board: list[int], me: int, depth: int, rng: random.Random) -> int:
    """Alpha-beta over ``depth`` plies; ties broken at random."""
    mine = moves(board, me)
    scored = []
    alpha = -float("inf")
    for s in sorted(mine, key=lambda s: -WEIGHTS[s]):
        # A window one wider than the best so far, so equal moves keep their exact value.
        value = -_negamax(apply(board, s, me), 3 - me, depth - 1, -float("inf"), -alpha + 1)
        scored.append((value, s))
        alpha = max(alpha, value)
    top = max(v for v, _ in scored)
    return rng.choice([s for v, s in scored if v == top])


class ReversiKit(Kit):
    name: ClassVar[str] = "reversi"
    title: ClassVar[str] = "Reversi"
    rows: ClassVar[int] = N
    cols: ClassVar[int] = N
    values: ClassVar[tuple[int, ...]] = (EMPTY, BLACK, WHITE)
    cell_px: ClassVar[int] = 56
    encoding: ClassVar[str] = "an empty square is 0, a black disc is 1 and a white disc is 2"
    rules: ClassVar[str] = (
        "Reversi (Othello) is played on an 8x8 board with discs that are black on one side and "
        "white on the other. Black moves first. A move places a disc of your colour on an empty "
        "square so that, in at least one of the eight directions, a straight unbroken line of "
        "the opponent's discs lies between it and another of your discs; all such lines are "
        "turned over to your colour. A player without such a move passes. When neither player "
        "can move, whoever has more discs wins."
    )
    board_words: ClassVar[str] = (
        "Columns are labelled A to H from left to right and rows 1 to 8 from top to bottom; a "
        "square is named by its column letter and row number, such as D3."
    )
    move_help: ClassVar[str] = "a square name such as D3 or F5"
    rule_task: ClassVar[str] = (
        "A move is valid if it puts a black disc on an empty square and turns over at least one "
        "white disc."
    )
    player_side: ClassVar[str] = "Black"
    opponent_side: ClassVar[str | None] = "White"

    def render(self, matrix: Matrix, extra: dict[str, Any]) -> bytes:
        grid = Grid(N, N, self.cell_px)

        def draw_cell(draw: Any, r: int, c: int, box: tuple[int, int, int, int]) -> None:
            v = matrix[r][c]
            if v in (BLACK, WHITE):
                pad = 6
                fill = (15, 15, 15) if v == BLACK else (245, 245, 245)
                draw.ellipse(
                    (box[0] + pad, box[1] + pad, box[2] - pad, box[3] - pad),
                    fill=fill,
                    outline=(0, 0, 0),
                    width=2,
                )

        return self.picture(
            grid,
            draw_cell,
            background=(30, 120, 60),
        )

    def text(self, matrix: Matrix, extra: dict[str, Any]) -> str:
        symbols = {BLACK: "B", WHITE: "W"}
        legend = "B = black disc, W = white disc, . = empty"
        return self.board_text(matrix, lambda v: symbols.get(v, "."), legend)

    def random_board(self, rng: random.Random) -> tuple[Matrix, dict[str, Any]]:
        return scattered_board(rng, N, (0.15, 0.95), (BLACK, WHITE), EMPTY), {}

    # --- questions (the paper's Reversi question types) ---------------------------------

    def answer(self, matrix: Matrix, kind: str, params: dict[str, Any]) -> str:
        flat = [v for row in matrix for v in row]
        if kind == "symbol_at":
            return VALUE_NAME[matrix[params["row"]][params["col"]]]
        if kind == "count_color":
            return str(flat.count(SIDE_VALUE[params["color"]]))
        if kind == "count_empty":
            return str(flat.count(EMPTY))
        if kind == "count_color_in_line":
            return str(self.line(matrix, params).count(SIDE_VALUE[params["color"]]))
        if kind == "row_most":
            counts = [row.count(SIDE_VALUE[params["color"]]) for row in matrix]
            return self.row_labels[counts.index(max(counts))]
        if kind == "compare":
            black, white = flat.count(BLACK), flat.count(WHITE)
            return "Black" if black > white else "White" if white > black else "equal"
        if kind == "total_in_line":
            return str(sum(1 for v in self.line(matrix, params) if v != EMPTY))
        raise ValueError(f"unknown question kind {kind!r}")

    def question(self, matrix: Matrix, rng: random.Random) -> Question:
        kinds = [
            "symbol_at",
            "count_color",
            "count_empty",
            "count_color_in_line",
            "row_most",
            "compare",
            "total_in_line",
        ]
        kind = rng.choice(kinds)
        color = rng.choice(["Black", "White"])
        if kind == "row_most":
            counts = [row.count(SIDE_VALUE[color]) for row in matrix]
            if counts.count(max(counts)) > 1:  # only ask when one row has the most
                kind = "count_color"
            else:
                params: dict[str, Any] = {"color": color}
                correct = self.answer(matrix, kind, params)
                others = [r for r in self.row_labels if r != correct]
                options = sorted([correct, *rng.sample(others, 3)], key=int)
                text = f"Which row contains the most {color.lower()} discs?"
                return make_question(kind, params, text, correct, options, rng, keep_order=True)
        if kind == "symbol_at":
            r, c = rng.randrange(N), rng.randrange(N)
            params = {"row": r, "col": c}
            text = f"What is on square {cell_name(r, c)}?"
            correct = self.answer(matrix, kind, params)
            return make_question(kind, params, text, correct, ["Black", "White", "empty"], rng)
        if kind == "compare":
            params = {}
            text = "Which colour has more discs on the board?"
            correct = self.answer(matrix, kind, params)
            options = ["Black", "White", "equal"]
            return make_question(kind, params, text, correct, options, rng, keep_order=True)
        if kind == "count_color":
            params = {"color": color}
            text, hi = f"How many {color.lower()} discs are on the board?", N * N
        elif kind == "count_empty":
            params = {}
            text, hi = "How many empty squares are on the board?", N * N
        else:
            params = self.random_line(rng)
            if kind == "count_color_in_line":
                params["color"] = color
                text = f"How many {color.lower()} discs are in {self.line_words(params)}?"
            else:
                text = f"How many discs, of either colour, are in {self.line_words(params)}?"
            hi = N
        count = int(self.answer(matrix, kind, params))
        return numeric_question(kind, params, text, count, 0, hi, rng)

    # --- positions ----------------------------------------------------------------------

    def rule_position(self, rng: random.Random) -> Position:
        """The reference's rule boards: its random board — a sparse (10-25), mild (26-40) or
        dense (41-56) count of discs, 30-70 % of them black, scattered at random — drawn again
        until Black, to move, has a legal move. Such boards need not be reachable in play (the
        paper's rule states are not either); the rules of a move are the same on them."""
        while True:
            low, high = rng.choice(((10, 25), (26, 40), (41, 56)))
            total = rng.randint(low, high)
            black = rng.randint(total * 30 // 100, total * 70 // 100)
            cells = [BLACK] * black + [WHITE] * (total - black) + [EMPTY] * (N * N - total)
            rng.shuffle(cells)
            if moves(cells, BLACK):
                return ReversiPosition(cells, "Black")

    def random_move_text(self, rng: random.Random) -> str:
        return cell_name(rng.randrange(N), rng.randrange(N))

    def e2e_instance(self, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        return {"seed": seed, "start": ReversiPosition(start_board(), "Black").state()}

    def load(self, state: dict[str, Any]) -> Position:
        return ReversiPosition([v for row in state["board"] for v in row], state["to_move"])

    def from_view(self, view: dict[str, Any]) -> Position:
        return self.load(view)

    def e2e_counts(self, position: Position) -> dict[str, Any]:
        assert isinstance(position, ReversiPosition)
        return {"black_discs": position.board.count(BLACK)}

    def e2e_score(self, stats: dict[str, Any]) -> float:
        bonus = {"win": 1000, "draw": 500}.get(stats["result"], 0)
        return 10.0 * stats["moves"] + 20.0 * stats["black_discs"] + bonus

    def e2e_ceiling(self, instance: dict[str, Any], settings: dict[str, Any]) -> float:
        # 30 moves of Black ending with all 64 discs black and a win.
        return 10.0 * 30 + 20.0 * 64 + 1000

    def opponent_params(self, settings: dict[str, Any]) -> dict[str, Any]:
        return {"depth": int(settings.get("depth", 3))}

    def search_move(self, position: Position, rng: random.Random, params: dict[str, Any]) -> str:
        assert isinstance(position, ReversiPosition)
        square = search(position.board, SIDE_VALUE[position.side], int(params.get("depth", 3)), rng)
        return cell_name(*divmod(square, N))
