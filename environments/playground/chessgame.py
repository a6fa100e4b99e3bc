"""Chess through python-chess: the matrix has row 0 = rank 8 and column 0 = file a; white
pawn, knight, bishop, rook, queen, king are 1–6 and black pieces the same numbers negated.
The player is White; the opponent is Black, played by Stockfish.

Moves are read in standard algebraic notation (``Nf3``, ``exd5``, ``O-O``, ``0-0-0``,
``e8=Q``, with or without ``+``/``#``) or UCI (``g1f3``, ``e7e8q``): castling, en passant and
promotion all go through python-chess, so every legal move parses.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import chess

from parley.environments.playground import stockfish
from parley.environments.playground.common import Grid, Matrix, centered_text
from parley.environments.playground.kit import (
    Kit,
    Played,
    Position,
    Question,
    make_question,
    numeric_question,
    pick_question,
)
from parley.environments.registry import Exemption

FILES = "abcdefgh"
PIECE_NAMES = {1: "pawn", 2: "knight", 3: "bishop", 4: "rook", 5: "queen", 6: "king"}
PIECE_LETTERS = {1: "P", 2: "N", 3: "B", 4: "R", 5: "Q", 6: "K"}
MATERIAL = {1: 1, 2: 3, 3: 3, 4: 5, 5: 9, 6: 0}  # the paper's capture values
# The Stockfish opponent's default search: a fixed depth, the same work on any machine (a time
# limit, the reference's choice, makes its moves depend on load). 12 plies trades strength for
# time: a strong opponent, whose move stays short beside a model's turn.
STOCKFISH_DEPTH = 12
_UCI = re.compile(r"^[a-h][1-8][a-h][1-8][qrbn]?$")
_MOVE_NUMBER = re.compile(r"^\d+\s*\.+\s*")


def square_name(row: int, col: int) -> str:
    """Matrix (row, col) → square name; row 0 is rank 8."""
    return f"{FILES[col]}{8 - row}"


def board_matrix(board: chess.Board) -> Matrix:
    out = []
    for row in range(8):
        line = []
        for col in range(8):
            piece = board.piece_at(chess.square(col, 7 - row))
            if piece is None:
                line.append(0)
            else:
                line.append(piece.piece_type if piece.color == chess.WHITE else -piece.piece_type)
        out.append(line)
    return out


class ChessPosition(Position):
    def __init__(self, board: chess.Board) -> None:
        self.board = board

    def matrix(self) -> Matrix:
        return board_matrix(self.board)

    def to_move(self) -> str:
        return "White" if self.board.turn == chess.WHITE else "Black"

    def parse(self, text: str) -> str | None:
        """UCI → itself (legal or not); SAN → the UCI of the move it names; SAN that names no
        legal move → ``san:<text>``, so the rules can say why; anything else → None."""
        move = _MOVE_NUMBER.sub("", text.strip()).rstrip("!?").strip()
        if not move or " " in move:
            return None
        if _UCI.match(move.lower()):
            return move.lower()
        tries = [move]
        if move[0] in "nrqk":  # a lower-case piece letter; "b" stays a pawn on the b-file
            tries.append(move[0].upper() + move[1:])
        for candidate in tries:
            try:
                return self.board.parse_san(candidate).uci()
            except (chess.IllegalMoveError, chess.AmbiguousMoveError):
                return f"san:{move}"
            except chess.InvalidMoveError:
                continue
        return None

    def illegal(self, move: str) -> str | None:
        # Mate and stalemate leave no legal move; the game master ends a game on a draw by
        # repetition or the fifty-move rule (claimed automatically) before asking for a move.
        if move.startswith("san:"):
            written = move[4:]
            try:
                self.board.parse_san(written)
            except chess.AmbiguousMoveError:
                return f"{written} is ambiguous: say which piece moves"
            except ValueError:
                pass
            return f"{written} is not a legal move for {self.to_move()} here"
        candidate = chess.Move.from_uci(move)
        if candidate in self.board.legal_moves:
            return None
        promoted = chess.Move(candidate.from_square, candidate.to_square, chess.QUEEN)
        if candidate.promotion is None and promoted in self.board.legal_moves:
            return f"{move} promotes a pawn: add the piece, e.g. {promoted.uci()}"
        return f"{move} is not a legal move for {self.to_move()} here"

    def legal_moves(self) -> list[str]:
        if self.result() is not None:
            return []
        return [m.uci() for m in self.board.legal_moves]

    def play(self, move: str) -> Played:
        chosen = chess.Move.from_uci(move)
        san = self.board.san(chosen)
        captured = 0
        if self.board.is_en_passant(chosen):
            captured = MATERIAL[chess.PAWN]
        elif self.board.is_capture(chosen):
            piece = self.board.piece_at(chosen.to_square)
            captured = MATERIAL[piece.piece_type] if piece else 0
        self.board.push(chosen)
        return Played(move, captured=captured, note=san)

    def result(self) -> str | None:
        outcome = self.board.outcome(claim_draw=True)
        if outcome is None:
            return None
        if outcome.winner is None:
            return "draw"
        return "White" if outcome.winner == chess.WHITE else "Black"

    def state(self) -> dict[str, Any]:
        root = self.board.root()
        return {"fen": root.fen(), "moves": [m.uci() for m in self.board.move_stack]}

    def view(self) -> dict[str, Any]:
        # Only what the text and picture show (no last move: neither draws it).
        return {"board": self.matrix(), "to_move": self.to_move(), "fen": self.board.fen()}

    def status_lines(self) -> list[str]:
        board = self.board
        rights = []
        for color, name in ((chess.WHITE, "White"), (chess.BLACK, "Black")):
            sides = [
                label
                for label, ok in (
                    ("kingside (O-O)", board.has_kingside_castling_rights(color)),
                    ("queenside (O-O-O)", board.has_queenside_castling_rights(color)),
                )
                if ok
            ]
            rights.append(f"{name}: {', '.join(sides) if sides else 'no castling left'}")
        lines = ["Castling rights: " + "; ".join(rights) + "."]
        if board.ep_square is not None and board.has_legal_en_passant():
            lines.append(
                f"An en passant capture onto {chess.square_name(board.ep_square)} is possible."
            )
        if board.is_check():
            lines.append(f"{self.to_move()} is in check.")
        return lines


# --- the scripted player's own search (Stockfish is the opponent, not the player) ----------

_VALUE = {1: 100, 2: 320, 3: 330, 4: 500, 5: 900, 6: 0}
_CENTRE = chess.SquareSet([chess.D4, chess.E4, chess.D5, chess.E5])
MATE = 100_000


def _evaluate(board: chess.Board) -> int:
    """Material and a little centre control, for the side to move."""
    score = 0
    for piece_type, value in _VALUE.items():
        score += value * (
            len(board.pieces(piece_type, chess.WHITE)) - len(board.pieces(piece_type, chess.BLACK))
        )
    score += 10 * (
        len(board.pieces(chess.PAWN, chess.WHITE) & _CENTRE)
        - len(board.pieces(chess.PAWN, chess.BLACK) & _CENTRE)
    )
    return score if board.turn == chess.WHITE else -score


def _ordered(board: chess.Board, moves: list[chess.Move]) -> list[chess.Move]:
    def key(move: chess.Move) -> int:
        victim = board.piece_at(move.to_square)
        attacker = board.piece_at(move.from_square)
        gain = _VALUE[victim.piece_type] if victim else 0
        return -(gain * 10 - (_VALUE[attacker.piece_type] if attacker else 0) // 10) - (
            900 if move.promotion else 0
        )

    return sorted(moves, key=key)


def _quiesce(board: chess.Board, alpha: float, beta: float, depth: int) -> float:
    stand = _evaluate(board)
    if depth == 0 or stand >= beta:
        return stand
    alpha = max(alpha, stand)
    captures = [m for m in board.legal_moves if board.is_capture(m)]
    for move in _ordered(board, captures):
        board.push(move)
        value = -_quiesce(board, -beta, -alpha, depth - 1)
        board.pop()
        if value >= beta:
            return value
        alpha = max(alpha, value)
    return alpha


def _negamax(board: chess.Board, depth: int, alpha: float, beta: float) -> float:
    moves = list(board.legal_moves)
    if not moves:
        return -MATE - depth if board.is_check() else 0
    if board.is_repetition(3) or board.halfmove_clock >= 100:
        return 0
    if depth == 0:
        return _quiesce(board, alpha, beta, 3)
    best = -float("inf")
    for move in _ordered(board, moves):
        board.push(move)
        value = -_negamax(board, depth - 1, -beta, -alpha)
        board.pop()
        best = max(best, value)
        alpha = max(alpha, value)
        if alpha >= beta:
            break
    return best


def search(board: chess.Board, depth: int, rng: random.Random) -> chess.Move:
    scored = []
    alpha = -float("inf")
    for move in _ordered(board, list(board.legal_moves)):
        board.push(move)
        value = -_negamax(board, depth - 1, -float("inf"), -alpha + 1)
        board.pop()
        scored.append((value, move))
        alpha = max(alpha, value)
    top = max(v for v, _ in scored)
    return rng.choice([m for v, m in scored if v == top])


def _timed_search(settings: dict[str, Any]) -> str:
    """Chess E2E departs from determinism only when Stockfish searches against the clock."""
    if not settings.get("stockfish_time"):
        return ""
    return (
        "the Stockfish opponent searches for stockfish_time seconds a move, so its moves "
        "depend on the machine's load; with stockfish_time: 0 and a stockfish_depth they repeat"
    )


class ChessKit(Kit):
    name: ClassVar[str] = "chess"
    title: ClassVar[str] = "Chess"
    rows: ClassVar[int] = 8
    cols: ClassVar[int] = 8
    values: ClassVar[tuple[int, ...]] = tuple(range(-6, 7))
    cell_px: ClassVar[int] = 60
    encoding: ClassVar[str] = (
        "row 0 is rank 8 (the top of the picture) and column 0 is file a; an empty square is 0, "
        "white pawn, knight, bishop, rook, queen and king are 1, 2, 3, 4, 5 and 6, and black "
        "pieces are the same numbers negated (-1 to -6)"
    )
    rules: ClassVar[str] = (
        "Chess follows the standard rules (FIDE), including castling, en passant, promotion, "
        "and draws by stalemate, repetition, the fifty-move rule and insufficient material."
    )
    picture_words: ClassVar[str] = (
        "In the picture each piece is a disc with a letter: K king, Q queen, R rook, B bishop, "
        "N knight, P pawn; white pieces are white discs and black pieces black discs."
    )
    board_words: ClassVar[str] = (
        "The board is drawn from White's side: files a to h run from left to right and ranks 1 "
        "to 8 from bottom to top, so White starts on ranks 1 and 2."
    )
    move_help: ClassVar[str] = (
        "standard algebraic notation (e4, Nf3, exd5, O-O, e8=Q) or UCI (e2e4, e7e8q)"
    )
    rule_task: ClassVar[str] = "A move is valid if it is a legal chess move for White."
    player_side: ClassVar[str] = "White"
    opponent_side: ClassVar[str | None] = "Black"
    search_in_process: ClassVar[bool] = False  # Stockfish thinks in its own process
    tells_move_note: ClassVar[bool] = True
    scores_captured: ClassVar[bool] = True
    e2e_exemptions: ClassVar[Mapping[str, Exemption]] = {
        "deterministic": _timed_search,
    }

    @property
    def col_labels(self) -> list[str]:
        return list(FILES)

    @property
    def row_labels(self) -> list[str]:
        return [str(8 - r) for r in range(8)]

    def render(self, matrix: Matrix, extra: dict[str, Any]) -> bytes:
        px = self.cell_px

        def square(r: int, c: int) -> tuple[int, int, int]:
            return (240, 217, 181) if (r + c) % 2 == 0 else (181, 136, 99)

        def draw_cell(draw: Any, r: int, c: int, box: tuple[int, int, int, int]) -> None:
            v = matrix[r][c]
            if not v:
                return
            pad = px // 8
            white = v > 0
            draw.ellipse(
                (box[0] + pad, box[1] + pad, box[2] - pad, box[3] - pad),
                fill=(250, 250, 250) if white else (25, 25, 25),
                outline=(0, 0, 0) if white else (200, 200, 200),
                width=2,
            )
            letter = PIECE_LETTERS[abs(v)]
            centered_text(draw, box, letter, px // 2, (10, 10, 10) if white else (245, 245, 245))

        return self.picture(
            Grid(8, 8, px),
            draw_cell,
            square=square,
        )

    def text(self, matrix: Matrix, extra: dict[str, Any]) -> str:
        def symbol(v: int) -> str:
            if not v:
                return "."
            letter = PIECE_LETTERS[abs(v)]
            return letter if v > 0 else letter.lower()

        legend = (
            "upper case = White, lower case = Black: K king, Q queen, R rook, B bishop, "
            "N knight, P pawn; . = empty"
        )
        return self.board_text(matrix, symbol, legend)

    def random_board(self, rng: random.Random) -> tuple[Matrix, dict[str, Any]]:
        matrix = [[0] * 8 for _ in range(8)]
        for square in rng.sample(range(64), rng.randint(2, 32)):
            matrix[square // 8][square % 8] = rng.choice([1, -1]) * rng.randint(1, 6)
        return matrix, {}

    # --- questions (the paper's chess question types) -----------------------------------

    def answer(self, matrix: Matrix, kind: str, params: dict[str, Any]) -> str:
        flat = [v for row in matrix for v in row]
        if kind == "color_at":
            v = matrix[params["row"]][params["col"]]
            return "White" if v > 0 else "Black" if v < 0 else "empty"
        if kind == "piece_at":
            v = matrix[params["row"]][params["col"]]
            return PIECE_NAMES[abs(v)] if v else "empty"
        if kind == "count_piece":
            sign = 1 if params["color"] == "White" else -1
            return str(flat.count(sign * params["piece"]))
        if kind == "count_in_line":
            if params["line"] == "rank":
                line = matrix[8 - params["index"]]
            else:
                line = [row[params["index"]] for row in matrix]
            return str(sum(1 for v in line if v))
        if kind == "compare_colors":
            white = sum(1 for v in flat if v > 0)
            black = sum(1 for v in flat if v < 0)
            return "White" if white > black else "Black" if black > white else "equal"
        if kind == "compare_types":
            a = sum(1 for v in flat if abs(v) == params["a"])
            b = sum(1 for v in flat if abs(v) == params["b"])
            return (
                PIECE_NAMES[params["a"]] + "s"
                if a > b
                else PIECE_NAMES[params["b"]] + "s"
                if b > a
                else "equal"
            )
        if kind == "count_edge":
            return str(
                sum(
                    1
                    for r in range(8)
                    for c in range(8)
                    if matrix[r][c] and (r in (0, 7) or c in (0, 7))
                )
            )
        if kind == "half_empty":
            top = sum(1 for row in matrix[:4] for v in row if not v)
            bottom = sum(1 for row in matrix[4:] for v in row if not v)
            return "top" if top > bottom else "bottom" if bottom > top else "equal"
        raise ValueError(f"unknown question kind {kind!r}")

    def question(self, matrix: Matrix, rng: random.Random) -> Question:
        kind = rng.choice(
            [
                "color_at",
                "piece_at",
                "count_piece",
                "count_in_line",
                "compare_colors",
                "compare_types",
                "count_edge",
                "half_empty",
            ]
        )
        params: dict[str, Any]
        if kind in ("color_at", "piece_at"):
            if rng.random() < 0.7:  # mostly ask about an occupied square
                occupied = [(r, c) for r in range(8) for c in range(8) if matrix[r][c]]
                r, c = rng.choice(occupied) if occupied else (rng.randrange(8), rng.randrange(8))
            else:
                r, c = rng.randrange(8), rng.randrange(8)
            params = {"row": r, "col": c}
            correct = self.answer(matrix, kind, params)
            if kind == "color_at":
                text = f"What colour is the piece on {square_name(r, c)}?"
                options = ["White", "Black", "empty"]
                return make_question(kind, params, text, correct, options, rng, keep_order=True)
            text = f"Which piece stands on {square_name(r, c)}?"
            pool = [*PIECE_NAMES.values(), "empty"]
            return pick_question(kind, params, text, correct, pool, rng)
        if kind == "compare_colors":
            params = {}
            text = "Which colour has more pieces on the board?"
            correct = self.answer(matrix, kind, params)
            options = ["White", "Black", "equal"]
            return make_question(kind, params, text, correct, options, rng, keep_order=True)
        if kind == "compare_types":
            a, b = sorted(rng.sample(range(1, 7), 2))
            params = {"a": a, "b": b}
            names = (PIECE_NAMES[a] + "s", PIECE_NAMES[b] + "s")
            text = f"Counting both colours, which are there more of: {names[0]} or {names[1]}?"
            correct = self.answer(matrix, kind, params)
            # A fourth option, another piece, as the reference offers four (never right).
            other = PIECE_NAMES[rng.choice([t for t in range(1, 7) if t not in (a, b)])] + "s"
            return make_question(kind, params, text, correct, [*names, other, "equal"], rng)
        if kind == "half_empty":
            params = {}
            text = (
                "Which half of the board has more empty squares: the top half (ranks 5 to 8) or "
                "the bottom half (ranks 1 to 4)?"
            )
            correct = self.answer(matrix, kind, params)
            options = ["top", "bottom", "equal"]
            return make_question(kind, params, text, correct, options, rng, keep_order=True)
        if kind == "count_piece":
            params = {"color": rng.choice(["White", "Black"]), "piece": rng.randint(1, 6)}
            text = f"How many {params['color'].lower()} {PIECE_NAMES[params['piece']]}s are on the board?"
            hi = 16
        elif kind == "count_in_line":
            line = rng.choice(["rank", "file"])
            params = {
                "line": line,
                "index": rng.randint(1, 8) if line == "rank" else rng.randrange(8),
            }
            where = (
                f"rank {params['index']}"
                if line == "rank"
                else f"the {FILES[params['index']]}-file"
            )
            text, hi = f"How many pieces are on {where}?", 8
        else:
            params, hi = {}, 28
            text = "How many pieces stand on the edge of the board (the outer ring of squares)?"
        count = int(self.answer(matrix, kind, params))
        return numeric_question(kind, params, text, count, 0, hi, rng)

    # --- positions ----------------------------------------------------------------------

    def rule_position(self, rng: random.Random) -> Position:
        """The reference's rule states: 5-55 random legal plies from the start, then more until
        White is to move; drawn again when the game is over there (the reference kept such
        states, which have no valid move)."""
        while True:
            board = chess.Board()
            for _ in range(rng.randint(5, 55)):
                moves = list(board.legal_moves)
                if not moves:
                    break
                board.push(rng.choice(moves))
            while board.turn != chess.WHITE and (moves := list(board.legal_moves)):
                board.push(rng.choice(moves))
            if not board.is_game_over(claim_draw=True):
                return ChessPosition(board)

    def random_move_text(self, rng: random.Random) -> str:
        a, b = rng.sample(range(64), 2)
        return chess.square_name(a) + chess.square_name(b)

    def e2e_instance(self, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        return {"seed": seed, "start": {"fen": chess.STARTING_FEN, "moves": []}}

    def load(self, state: dict[str, Any]) -> Position:
        board = chess.Board(state["fen"])
        for move in state.get("moves", []):
            board.push_uci(move)
        return ChessPosition(board)

    def from_view(self, view: dict[str, Any]) -> Position:
        return ChessPosition(chess.Board(view["fen"]))

    def e2e_score(self, stats: dict[str, Any]) -> float:
        bonus = {"win": 1000, "draw": 500}.get(stats["result"], 0)
        return 10.0 * stats["moves"] + 5.0 * stats["captured"] + bonus

    def e2e_ceiling(self, instance: dict[str, Any], settings: dict[str, Any]) -> float:
        # A won game of the paper's typical length (80 plies: 40 White moves) taking all of
        # Black's material (8 + 2·3 + 2·3 + 2·5 + 9 = 39).
        return 10.0 * 40 + 5.0 * 39 + 1000

    def opponent_params(self, settings: dict[str, Any]) -> dict[str, Any]:
        return {
            "time": float(settings.get("stockfish_time", 0.0)),
            "skill": settings.get("stockfish_skill", 20),
            "depth": settings.get("stockfish_depth", STOCKFISH_DEPTH),
            "path": settings.get("stockfish_path", ""),
        }

    def search_move(self, position: Position, rng: random.Random, params: dict[str, Any]) -> str:
        """Stockfish's move (the opponent)."""
        assert isinstance(position, ChessPosition)
        skill = params.get("skill")
        move = stockfish.best_move(
            position.board,
            time_s=params.get("time", 0.0),
            skill=int(skill) if skill is not None else None,
            depth=params.get("depth", STOCKFISH_DEPTH),
            path=params.get("path") or "",
        )
        return move.uci()

    def write_move(self, position: Position, move: str) -> str:
        assert isinstance(position, ChessPosition)
        return position.board.san(chess.Move.from_uci(move))

    def player_move(self, position: Position, rng: random.Random) -> str:
        """The scripted player's own two-ply search with captures resolved."""
        assert isinstance(position, ChessPosition)
        return search(position.board, 2, rng).uci()
