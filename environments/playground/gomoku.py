"""Gomoku: 15×15, empty = 0, black = 1, white = 2; five or more in a row wins. The player is
Black and moves first; the opponent is White, played by a pattern-scored alpha-beta search.

Stones sit on the line crossings; the crossings are labelled ``A``–``O`` left to right and
``1``–``15`` top to bottom, and the picture prints each label on its own line, so prompt,
picture and parser share one set of coordinates.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

from parley.environments.playground.common import (
    Grid,
    Matrix,
    cell_name,
    parse_cell,
    scattered_board,
)
from parley.environments.playground.kit import (
    YES_NO_OPTIONS,
    FlatBoardPosition,
    Kit,
    Played,
    Position,
    Question,
    make_question,
    numeric_question,
)

N = 15
EMPTY, BLACK, WHITE = 0, 1, 2
SIDE_VALUE = {"Black": BLACK, "White": WHITE}
VALUE_NAME = {BLACK: "Black", WHITE: "White", EMPTY: "empty"}
STEPS = ((0, 1), (1, 0), (1, 1), (1, -1))


def _lines() -> list[list[int]]:
    """Every row, column and diagonal with room for five."""
    out: list[list[int]] = []
    for start in [(r, c) for r in range(N) for c in range(N)]:
        for dr, dc in STEPS:
            r, c = start
            # Start each line at its first square: step back while still on the board.
            while 0 <= r - dr < N and 0 <= c - dc < N:
                r, c = r - dr, c - dc
            line = []
            while 0 <= r < N and 0 <= c < N:
                line.append(r * N + c)
                r, c = r + dr, c + dc
            if len(line) >= 5:
                out.append(line)
    unique = {tuple(line) for line in out}
    return [list(line) for line in sorted(unique)]


LINES = _lines()
LINES_OF: list[list[int]] = [[] for _ in range(N * N)]
for _i, _line in enumerate(LINES):
    for _sq in _line:
        LINES_OF[_sq].append(_i)
NEIGHBOURS: list[list[int]] = [
    [
        (r + dr) * N + (c + dc)
        for dr in range(-2, 3)
        for dc in range(-2, 3)
        if (dr or dc) and 0 <= r + dr < N and 0 <= c + dc < N
    ]
    for r, c in (divmod(s, N) for s in range(N * N))
]

# Patterns over a line written with "0" empty, the player's digit as "x", anything else
# blocking; each line is padded with "3" so the board edge blocks too.
_PATTERNS = (
    ("xxxxx", 1_000_000),
    ("0xxxx0", 100_000),
    *((p, 10_000) for p in ("xxxx0", "0xxxx", "xxx0x", "x0xxx", "xx0xx")),
    *((p, 5_000) for p in ("00xxx0", "0xxx00", "0xx0x0", "0x0xx0")),
    *((p, 500) for p in ("xxx00", "00xxx", "xx0x0", "0x0xx", "x0xx0", "0xx0x", "xx00x", "x00xx")),
    *((p, 200) for p in ("00xx00", "0x0x0")),
    *((p, 50) for p in ("0xx00", "00xx0")),
)
PATTERNS = {p: tuple((pat.replace("x", str(p)), w) for pat, w in _PATTERNS) for p in (1, 2)}
WIN = 10_000_000
_LINE_CACHE: dict[str, tuple[int, int]] = {}


def line_scores(text: str) -> tuple[int, int]:
    """Pattern scores of one padded line for Black and White (memoised: lines recur)."""
    hit = _LINE_CACHE.get(text)
    if hit is None:
        b = sum(w * text.count(pat) for pat, w in PATTERNS[1]) if "1" in text else 0
        w = sum(wt * text.count(pat) for pat, wt in PATTERNS[2]) if "2" in text else 0
        hit = (b, w)
        if len(_LINE_CACHE) > 500_000:
            _LINE_CACHE.clear()
        _LINE_CACHE[text] = hit
    return hit


def run_length(board: list[int], square: int, player: int, dr: int, dc: int) -> tuple[int, int]:
    """Stones of ``player`` in a row through ``square`` (counted as the player's) along one
    axis, and how many of the two ends are open."""
    r0, c0 = divmod(square, N)
    count, open_ends = 1, 0
    for sign in (1, -1):
        r, c = r0 + sign * dr, c0 + sign * dc
        while 0 <= r < N and 0 <= c < N and board[r * N + c] == player:
            count += 1
            r, c = r + sign * dr, c + sign * dc
        if 0 <= r < N and 0 <= c < N and board[r * N + c] == EMPTY:
            open_ends += 1
    return count, open_ends


_LOCAL = {5: (1_000_000,) * 3, 4: (0, 10_000, 100_000), 3: (0, 500, 5_000), 2: (0, 50, 200)}


def local_value(board: list[int], square: int, player: int) -> tuple[int, bool]:
    """A quick value of playing ``square`` for ``player`` (for move ordering), and whether
    it makes five."""
    total, five = 0, False
    for dr, dc in STEPS:
        count, open_ends = run_length(board, square, player, dr, dc)
        if count >= 5:
            five = True
            count = 5
        total += _LOCAL.get(count, (0, 2, 10))[open_ends]
    return total, five


def _fives(board: list[int]) -> list[list[int]]:
    """Every five same-coloured stones in a row on ``board`` (overlapping runs included)."""
    out = []
    for line in LINES:
        for i in range(len(line) - 4):
            window = line[i : i + 5]
            first = board[window[0]]
            if first != EMPTY and all(board[s] == first for s in window):
                out.append(window)
    return out


def has_five(board: list[int], square: int) -> bool:
    player = board[square]
    return player != EMPTY and any(
        run_length(board, square, player, dr, dc)[0] >= 5 for dr, dc in STEPS
    )


class Searcher:
    """Negamax with alpha-beta over the ``width`` most promising moves, forced replies to
    fours, and a pattern evaluation kept up to date line by line. ``nodes`` counts the
    positions searched (what a move costs, independent of the machine)."""

    def __init__(self, board: list[int], width: int = 10) -> None:
        self.board = list(board)
        self.width = width
        self.nodes = 0
        self.scores = [line_scores(self._text(i)) for i in range(len(LINES))]
        self.total = [0, sum(s[0] for s in self.scores), sum(s[1] for s in self.scores)]

    def _text(self, i: int) -> str:
        b = self.board
        return "3" + "".join("012"[b[s]] for s in LINES[i]) + "3"

    def _set(self, square: int, value: int) -> None:
        self.board[square] = value
        for i in LINES_OF[square]:
            old = self.scores[i]
            new = line_scores(self._text(i))
            self.scores[i] = new
            self.total[1] += new[0] - old[0]
            self.total[2] += new[1] - old[1]

    def candidates(self) -> list[int]:
        board = self.board
        seen: set[int] = set()
        for s in range(N * N):
            if board[s] != EMPTY:
                seen.update(n for n in NEIGHBOURS[s] if board[n] == EMPTY)
        if not seen and board[(N // 2) * N + N // 2] == EMPTY:
            seen.add((N // 2) * N + N // 2)
        return sorted(seen)

    def _moves(self, me: int) -> tuple[list[int], str]:
        """The moves to search and why: ``win`` (a five), ``forced`` (block a five),
        ``lost`` (two fives to block), or ``ordered``."""
        opp = 3 - me
        ranked: list[tuple[int, int]] = []
        blocks: list[int] = []
        for s in self.candidates():
            mine, my_five = local_value(self.board, s, me)
            if my_five:
                return [s], "win"
            theirs, their_five = local_value(self.board, s, opp)
            if their_five:
                blocks.append(s)
            ranked.append((mine + theirs, s))
        if blocks:
            return blocks, "forced" if len(blocks) == 1 else "lost"
        ranked.sort(key=lambda t: (-t[0], t[1]))
        return [s for _, s in ranked[: self.width]], "ordered"

    def evaluate(self, me: int) -> float:
        return self.total[me] - self.total[3 - me]

    def negamax(self, me: int, depth: int, alpha: float, beta: float) -> float:
        self.nodes += 1
        moves, why = self._moves(me)
        if why == "win":
            return WIN + depth
        if not moves:
            return 0.0  # a full board: a draw
        if depth == 0:
            return -WIN if why == "lost" else self.evaluate(me)
        best = -float("inf")
        for s in moves:
            self._set(s, me)
            value = -self.negamax(3 - me, depth - 1, -beta, -alpha)
            self._set(s, EMPTY)
            if value > best:
                best = value
            alpha = max(alpha, value)
            if alpha >= beta:
                break
        return best

    def best(self, me: int, depth: int, rng: random.Random) -> int:
        moves, why = self._moves(me)
        if why in ("win", "forced") or len(moves) == 1:
            return moves[0]
        scored: list[tuple[float, int]] = []
        alpha = -float("inf")
        for s in moves:
            self._set(s, me)
            # One wider than the best so far, so moves that tie keep their exact value.
            value = -self.negamax(3 - me, depth - 1, -float("inf"), -alpha + 1)
            self._set(s, EMPTY)
            scored.append((value, s))
            alpha = max(alpha, value)
        top = max(v for v, _ in scored)
        return rng.choice([s for v, s in scored if v == top])


class GomokuPosition(FlatBoardPosition):
    size: ClassVar[int] = N
    first_side: ClassVar[str] = "Black"

    def __init__(self, board: list[int], to_move: str | None = None) -> None:
        super().__init__(board, to_move)
        self._winner: str | None = self._scan()

    def _scan(self) -> str | None:
        for line in LINES:
            text = "".join("012"[self.board[s]] for s in line)
            if "11111" in text:
                return "Black"
            if "22222" in text:
                return "White"
        return None

    def illegal(self, move: str) -> str | None:
        if self.result() is not None:
            return "the game is over"
        cell = parse_cell(move, N, N)
        if cell is None:
            return f"{move} is not a point of the board"
        if self.board[cell[0] * N + cell[1]] != EMPTY:
            return f"{move} is already occupied"
        return None

    def legal_moves(self) -> list[str]:
        if self.result() is not None:
            return []
        return [cell_name(*divmod(s, N)) for s in range(N * N) if self.board[s] == EMPTY]

    def play(self, move: str) -> Played:
        r, c = parse_cell(move, N, N)  # type: ignore[misc]
        square = r * N + c
        self.board[square] = SIDE_VALUE[self.side]
        if has_five(self.board, square):
            self._winner = self.side
        self.side = "White" if self.side == "Black" else "Black"
        return Played(move)

    def result(self) -> str | None:
        if self._winner:
            return self._winner
        if EMPTY not in self.board:
            return "draw"
        return None


def _longest(values: Sequence[int], target: int) -> int:
    best = run = 0
    for v in values:
        run = run + 1 if v == target else 0
        best = max(best, run)
    return best


def diagonals(matrix: Matrix) -> list[list[int]]:
    """Every diagonal in both directions (any length)."""
    out = []
    for d in range(-(N - 1), N):
        out.append([matrix[r][r - d] for r in range(N) if 0 <= r - d < N])
        out.append([matrix[r][d + (N - 1) - r] for r in range(N) if 0 <= d + (N - 1) - r < N])
    return out


class GomokuKit(Kit):
    name: ClassVar[str] = "gomoku"
    title: ClassVar[str] = "Gomoku"
    rows: ClassVar[int] = N
    cols: ClassVar[int] = N
    values: ClassVar[tuple[int, ...]] = (EMPTY, BLACK, WHITE)
    cell_px: ClassVar[int] = 36
    encoding: ClassVar[str] = "an empty point is 0, a black stone is 1 and a white stone is 2"
    rules: ClassVar[str] = (
        "Gomoku is played on a 15x15 grid; stones are placed on the points where lines cross. "
        "Black moves first, then the players alternate, each placing one stone of their colour "
        "on an empty point. The first to get five or more stones in an unbroken line "
        "(horizontal, vertical or diagonal) wins; a full board without one is a draw."
    )
    board_words: ClassVar[str] = (
        "The vertical lines are labelled A to O from left to right and the horizontal lines 1 "
        "to 15 from top to bottom; a point is named by its column letter and row number, so H8 "
        "is the centre and A1 the top-left corner."
    )
    move_help: ClassVar[str] = "a point name such as H8, A1 or O15"
    rule_task: ClassVar[str] = "A move is valid if it puts a black stone on an empty point."
    player_side: ClassVar[str] = "Black"
    opponent_side: ClassVar[str | None] = "White"

    def grid(self) -> Grid:
        return Grid(N, N, self.cell_px, margin=30, intersections=True)

    def render(self, matrix: Matrix, extra: dict[str, Any]) -> bytes:
        radius = self.cell_px * 2 // 5

        def draw_cell(draw: Any, r: int, c: int, box: tuple[int, int, int, int]) -> None:
            v = matrix[r][c]
            if v in (BLACK, WHITE):
                x, y = (box[0] + box[2]) // 2, (box[1] + box[3]) // 2
                fill = (15, 15, 15) if v == BLACK else (250, 250, 250)
                draw.ellipse(
                    (x - radius, y - radius, x + radius, y + radius),
                    fill=fill,
                    outline=(0, 0, 0),
                    width=2,
                )

        return self.picture(self.grid(), draw_cell)

    def text(self, matrix: Matrix, extra: dict[str, Any]) -> str:
        symbols = {BLACK: "B", WHITE: "W"}
        legend = "B = black stone, W = white stone, . = empty point"
        return self.board_text(matrix, lambda v: symbols.get(v, "."), legend)

    def random_board(self, rng: random.Random) -> tuple[Matrix, dict[str, Any]]:
        return scattered_board(rng, N, (0.05, 0.7), (BLACK, WHITE), EMPTY), {}

    # --- questions (the paper's Gomoku question types) ----------------------------------

    def answer(self, matrix: Matrix, kind: str, params: dict[str, Any]) -> str:
        flat = [v for row in matrix for v in row]
        if kind == "stone_at":
            return VALUE_NAME[matrix[params["row"]][params["col"]]]
        if kind == "count_color":
            return str(flat.count(SIDE_VALUE[params["color"]]))
        if kind == "count_color_in_line":
            return str(self.line(matrix, params).count(SIDE_VALUE[params["color"]]))
        if kind == "winning_line":
            five = any(
                _longest(line, color) >= 5
                for line in [*matrix, *zip(*matrix, strict=True), *diagonals(matrix)]
                for color in (BLACK, WHITE)
            )
            return "Yes" if five else "No"
        if kind == "adjacent":
            r0, c0 = params["row"], params["col"]
            return str(
                sum(
                    1
                    for r in range(r0 - 1, r0 + 2)
                    for c in range(c0 - 1, c0 + 2)
                    if (r, c) != (r0, c0) and 0 <= r < N and 0 <= c < N and matrix[r][c] != EMPTY
                )
            )
        if kind == "count_empty":
            return str(flat.count(EMPTY))
        if kind == "max_run":
            color = SIDE_VALUE[params["color"]]
            lines = [matrix[params["index"]]] if params["where"] == "row" else diagonals(matrix)
            return str(max(_longest(list(line), color) for line in lines))
        if kind == "edge":
            color = SIDE_VALUE[params["color"]]
            return str(
                sum(
                    1
                    for r in range(N)
                    for c in range(N)
                    if matrix[r][c] == color and (r in (0, N - 1) or c in (0, N - 1))
                )
            )
        raise ValueError(f"unknown question kind {kind!r}")

    def question(self, matrix: Matrix, rng: random.Random) -> Question:
        kinds = [
            "stone_at",
            "count_color",
            "count_color_in_line",
            "winning_line",
            "adjacent",
            "count_empty",
            "max_run",
            "edge",
        ]
        kind = rng.choice(kinds)
        color = rng.choice(["Black", "White"])
        params: dict[str, Any]
        if kind == "stone_at":
            r, c = rng.randrange(N), rng.randrange(N)
            params = {"row": r, "col": c}
            text = f"What is on point {cell_name(r, c)}?"
            correct = self.answer(matrix, kind, params)
            return make_question(kind, params, text, correct, ["Black", "White", "empty"], rng)
        if kind == "winning_line":
            params = {}
            text = "Is there an unbroken line of five or more stones of one colour on the board?"
            correct = self.answer(matrix, kind, params)
            return make_question(kind, params, text, correct, YES_NO_OPTIONS, rng, keep_order=True)
        if kind == "count_color":
            params, hi = {"color": color}, N * N
            text = f"How many {color.lower()} stones are on the board?"
        elif kind == "count_color_in_line":
            params = {"color": color, **self.random_line(rng)}
            text, hi = f"How many {color.lower()} stones are in {self.line_words(params)}?", N
        elif kind == "adjacent":
            r, c = rng.randrange(N), rng.randrange(N)
            params, hi = {"row": r, "col": c}, 8
            text = (
                f"How many stones, of either colour, are on the points next to {cell_name(r, c)} "
                "(the up to eight neighbours, diagonals included)?"
            )
        elif kind == "count_empty":
            params, hi = {}, N * N
            text = "How many empty points are on the board?"
        elif kind == "max_run":
            if rng.random() < 0.5:
                params = {"color": color, "where": "row", "index": rng.randrange(N)}
                text = (
                    f"What is the largest number of {color.lower()} stones in an unbroken run in "
                    f"row {params['index'] + 1}?"
                )
            else:
                params = {"color": color, "where": "diagonal"}
                text = (
                    f"What is the largest number of {color.lower()} stones in an unbroken run on "
                    "any diagonal?"
                )
            hi = N
        else:
            params, hi = {"color": color}, 4 * (N - 1)
            text = f"How many {color.lower()} stones are on the edge of the board?"
        count = int(self.answer(matrix, kind, params))
        return numeric_question(kind, params, text, count, 0, hi, rng)

    # --- positions ----------------------------------------------------------------------

    def rule_position(self, rng: random.Random) -> Position:
        """The reference's rule boards: its random board — 30-70 % of the crossings hold a
        stone, 30-70 % of them black, scattered at random — with one stone of every five in a
        row taken away until no five is left (the game must still be on); Black to move."""
        total = rng.randint(N * N * 30 // 100, N * N * 70 // 100)
        black = rng.randint(total * 30 // 100, total * 70 // 100)
        cells = [BLACK] * black + [WHITE] * (total - black) + [EMPTY] * (N * N - total)
        rng.shuffle(cells)
        while fives := _fives(cells):
            cells[rng.choice(fives[0])] = EMPTY
        return GomokuPosition(cells, "Black")

    def random_move_text(self, rng: random.Random) -> str:
        return cell_name(rng.randrange(N), rng.randrange(N))

    def e2e_instance(self, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        return {"seed": seed, "start": GomokuPosition([EMPTY] * (N * N)).state()}

    def load(self, state: dict[str, Any]) -> Position:
        return GomokuPosition([v for row in state["board"] for v in row], state["to_move"])

    def from_view(self, view: dict[str, Any]) -> Position:
        return self.load(view)

    def e2e_score(self, stats: dict[str, Any]) -> float:
        return 10.0 * stats["moves"] + {"win": 1000, "draw": 500}.get(stats["result"], 0)

    def e2e_ceiling(self, instance: dict[str, Any], settings: dict[str, Any]) -> float:
        return 10.0 * 113 + 1000  # Black places at most 113 stones

    def opponent_params(self, settings: dict[str, Any]) -> dict[str, Any]:
        return {"depth": int(settings.get("depth", 3)), "width": int(settings.get("width", 10))}

    def search_move(self, position: Position, rng: random.Random, params: dict[str, Any]) -> str:
        assert isinstance(position, GomokuPosition)
        searcher = Searcher(position.board, int(params.get("width", 10)))
        square = searcher.best(SIDE_VALUE[position.side], int(params.get("depth", 3)), rng)
        return cell_name(*divmod(square, N))
