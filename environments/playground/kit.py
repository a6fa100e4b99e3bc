"""What each playground game provides to the four tasks: a :class:`Kit` (pictures, text,
random boards, questions, states, opponents) and a :class:`Position` (rules of one state).

The task game masters in :mod:`parley.environments.playground.tasks` and the built-in players in
:mod:`parley.environments.playground.players` work on any kit, so a game is written once.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from parley.environments.playground.common import (
    LETTERS,
    DrawCell,
    Grid,
    Matrix,
    board_picture,
    canonical_cell,
    text_board,
)
from parley.environments.registry import Exemption


@dataclass
class Question:
    """A multiple-choice question about a board: ``kind`` and ``params`` say what is asked
    (so it can be recomputed), ``options`` are the choices in order, ``answer`` the index of
    the correct one."""

    kind: str
    params: dict[str, Any]
    text: str
    options: list[str]
    answer: int

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "params": self.params,
            "text": self.text,
            "options": self.options,
            "answer": self.answer,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Question:
        return cls(data["kind"], data["params"], data["text"], data["options"], data["answer"])


@dataclass
class Played:
    """What one move did: the canonical move, material captured (chess), passes that followed
    (Reversi), and a short line for the transcript."""

    move: str
    captured: int = 0
    passed: list[str] = field(default_factory=list)
    note: str = ""


class Position(ABC):
    """One game state under the rules. ``to_move`` is a side name (``"O"``, ``"Black"``…);
    single-player games use ``"you"``. Moves are canonical strings (``B3``, ``B3 7``, UCI)."""

    @abstractmethod
    def matrix(self) -> Matrix:
        """The board in the game's matrix encoding, as the picture shows it."""

    def extra(self) -> dict[str, Any]:
        """What the picture shows besides the matrix (e.g. Sudoku's given digits)."""
        return {}

    @abstractmethod
    def to_move(self) -> str: ...

    @abstractmethod
    def parse(self, text: str) -> str | None:
        """A move written by a player → the canonical move, or None when it names no move of
        this game's notation (whether legal or not is :meth:`illegal`'s business)."""

    @abstractmethod
    def illegal(self, move: str) -> str | None:
        """None when ``move`` is legal now, else why not."""

    @abstractmethod
    def legal_moves(self) -> list[str]: ...

    @abstractmethod
    def play(self, move: str) -> Played:
        """Apply a legal move (passes of a side without moves are applied here too)."""

    @abstractmethod
    def result(self) -> str | None:
        """None while the game goes on; else the winning side, ``"draw"``, ``"won"``/``"lost"``
        for single-player games, or ``"stuck"`` (no legal move and not solved)."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """Everything needed to rebuild this position (hidden parts included)."""

    def view(self) -> dict[str, Any]:
        """What a player may know: the visible board and the facts the prompt states."""
        return {"board": self.matrix(), "to_move": self.to_move(), **self.extra()}

    def status_lines(self) -> list[str]:
        """Facts the prompt states that the picture cannot show (castling rights…)."""
        return []


class FlatBoardPosition(Position):
    """A two-player position on a ``size``×``size`` board of named cells, kept as one flat
    list row by row (``board``), with the side to move (``side``, ``first_side`` unless
    given); its state is the matrix and the side to move."""

    size: ClassVar[int]
    first_side: ClassVar[str]

    def __init__(self, board: list[int], to_move: str | None = None) -> None:
        self.board = list(board)
        self.side = self.first_side if to_move is None else to_move

    def matrix(self) -> Matrix:
        n = self.size
        return [self.board[r * n : (r + 1) * n] for r in range(n)]

    def to_move(self) -> str:
        return self.side

    def parse(self, text: str) -> str | None:
        return canonical_cell(text, self.size, self.size)

    def state(self) -> dict[str, Any]:
        return {"board": self.matrix(), "to_move": self.side}


class Kit(ABC):
    """One game's contribution to the four tasks."""

    name: ClassVar[str]
    title: ClassVar[str]
    rows: ClassVar[int]
    cols: ClassVar[int]
    values: ClassVar[tuple[int, ...]]
    encoding: ClassVar[str]  # what each matrix number means, for the perceiving prompt
    rules: ClassVar[str]  # the rules in a few sentences
    picture_words: ClassVar[str] = ""  # how the picture draws things (image variant only)
    board_words: ClassVar[str]  # how the board is labelled, for every prompt
    move_help: ClassVar[str]  # how to write one move, with examples
    rule_task: ClassVar[str]  # what a valid move is, for the rule-following prompt
    blank: ClassVar[int] = 0  # the matrix value of an empty (or hidden) cell
    player_side: ClassVar[str] = "you"
    opponent_side: ClassVar[str | None] = None
    cell_px: ClassVar[int] = 48
    # What the game can do that the tasks treat apart:
    # its search runs in this process (pure Python, held under ``cpu_bound``); False for a
    # search in a process of its own (Stockfish), which need not hold the lock meanwhile;
    search_in_process: ClassVar[bool] = True
    # the other side is told a move as its note (chess: SAN, with check) rather than as written;
    tells_move_note: ClassVar[bool] = False
    # the material the player captured is one of the E2E scores.
    scores_captured: ClassVar[bool] = False
    # The E2E game's departures from parley check-game's checks (``GameInfo.check_exemptions``).
    e2e_exemptions: ClassVar[Mapping[str, Exemption]] = {}

    # pictures and text ------------------------------------------------------------------

    @abstractmethod
    def render(self, matrix: Matrix, extra: dict[str, Any]) -> bytes: ...

    @abstractmethod
    def text(self, matrix: Matrix, extra: dict[str, Any]) -> str:
        """The board as text, with the same labels as the picture and a legend."""

    # offline tasks ----------------------------------------------------------------------

    @abstractmethod
    def random_board(self, rng: random.Random) -> tuple[Matrix, dict[str, Any]]:
        """A random board for perceiving and QA; it need not be reachable in play."""

    @abstractmethod
    def question(self, matrix: Matrix, rng: random.Random) -> Question: ...

    @abstractmethod
    def answer(self, matrix: Matrix, kind: str, params: dict[str, Any]) -> str:
        """The right option text for a question, computed from the board."""

    @abstractmethod
    def rule_position(self, rng: random.Random) -> Position:
        """A rule-following state as the reference draws them (random boards for some games,
        so not always reachable in play), with the player's side to move and a legal move."""

    @abstractmethod
    def random_move_text(self, rng: random.Random) -> str:
        """A uniformly random move in the game's notation, legal or not (the paper's random
        baseline for rule following)."""

    # end-to-end -------------------------------------------------------------------------

    @abstractmethod
    def e2e_instance(self, seed: int, settings: dict[str, Any]) -> dict[str, Any]: ...

    @abstractmethod
    def load(self, state: dict[str, Any]) -> Position:
        """Rebuild a position from :meth:`Position.state` or an E2E instance's ``start``."""

    @abstractmethod
    def from_view(self, view: dict[str, Any]) -> Position:
        """A position rebuilt from what a player sees (hidden parts unknown)."""

    @abstractmethod
    def e2e_score(self, stats: dict[str, Any]) -> float:
        """The paper's E2E score from ``moves``, ``result`` and the game's own counts."""

    @abstractmethod
    def e2e_ceiling(self, instance: dict[str, Any], settings: dict[str, Any]) -> float:
        """The best E2E score possible on this instance (``main`` = 100 · score / ceiling)."""

    def search_move(self, position: Position, rng: random.Random, params: dict[str, Any]) -> str:
        """The scripted player's and opponent's move (a search); ``params`` from settings."""
        return rng.choice(position.legal_moves())

    def opponent_params(self, settings: dict[str, Any]) -> dict[str, Any]:
        """The search settings shown to the opponent role."""
        return {}

    def player_move(self, position: Position, rng: random.Random) -> str:
        """The scripted player's E2E move: the same search as the opponent's, at defaults."""
        return self.search_move(position, rng, self.opponent_params({}))

    def write_move(self, position: Position, move: str) -> str:
        """A canonical move as a player would write it (chess: SAN)."""
        return move

    def e2e_counts(self, position: Position) -> dict[str, Any]:
        """The game's own counts for its E2E score (discs, filled cells, revealed cells)."""
        return {}

    # shared helpers ---------------------------------------------------------------------

    def picture(self, grid: Grid, draw_cell: DrawCell, **options: Any) -> bytes:
        """:func:`board_picture` labelled with this kit's :attr:`col_labels`/:attr:`row_labels`
        (the labels the prompts and the text board use); ``options`` as there."""
        return board_picture(
            grid, draw_cell, col_labels=self.col_labels, row_labels=self.row_labels, **options
        )

    def board_text(self, matrix: Matrix, symbol: Callable[[int], str], legend: str) -> str:
        """The board as a text grid with this kit's labels, then ``(legend)`` on its own line."""
        grid = text_board(matrix, symbol, self.col_labels, self.row_labels)
        return f"{grid}\n({legend})"

    @property
    def col_labels(self) -> list[str]:
        return list(LETTERS[: self.cols])

    @property
    def row_labels(self) -> list[str]:
        return [str(r + 1) for r in range(self.rows)]

    # Questions about one row or column carry ``{"line": "row" | "column", "index": i}``.

    def random_line(self, rng: random.Random) -> dict[str, Any]:
        """A random row or column, as question params."""
        line = rng.choice(["row", "column"])
        return {"line": line, "index": rng.randrange(self.rows if line == "row" else self.cols)}

    @staticmethod
    def line(matrix: Matrix, params: dict[str, Any]) -> list[int]:
        """The values of the row or column ``params`` names, top to bottom / left to right."""
        if params["line"] == "row":
            return list(matrix[params["index"]])
        return [row[params["index"]] for row in matrix]

    def line_words(self, params: dict[str, Any]) -> str:
        """The row or column ``params`` names, as the prompts write it (``row 3``, ``column C``)."""
        if params["line"] == "row":
            return f"row {self.row_labels[params['index']]}"
        return f"column {self.col_labels[params['index']]}"


# Yes/No questions offer four options, as the reference does (it pads "yes"/"no" with "maybe"
# and "unknown"); the board always decides, so the two extra options are never right. Two
# options would double a random guess's chance on these questions.
YES_NO_OPTIONS = ["Yes", "No", "Maybe", "Unknown"]


def numeric_options(correct: int, lo: int, hi: int, rng: random.Random, n: int = 4) -> list[int]:
    """``n`` distinct numbers in [lo, hi] containing ``correct``, the others near it."""
    pool = [v for v in range(max(lo, correct - 4), min(hi, correct + 4) + 1) if v != correct]
    if len(pool) < n - 1:
        pool = [v for v in range(lo, hi + 1) if v != correct]
    chosen = [*rng.sample(pool, min(n - 1, len(pool))), correct]
    return sorted(chosen)


def make_question(
    kind: str,
    params: dict[str, Any],
    text: str,
    correct: str,
    options: list[str],
    rng: random.Random,
    *,
    keep_order: bool = False,
) -> Question:
    """A question with ``options`` (which must contain ``correct``), shuffled unless their
    order is natural (numbers ascending, Yes/No)."""
    if correct not in options:
        raise ValueError(f"the correct answer {correct!r} is not among {options}")
    if len(set(options)) != len(options):
        raise ValueError(f"duplicate options {options}")
    ordered = list(options)
    if not keep_order:
        rng.shuffle(ordered)
    return Question(kind, params, text, ordered, ordered.index(correct))


def pick_question(
    kind: str,
    params: dict[str, Any],
    text: str,
    correct: str,
    pool: list[str],
    rng: random.Random,
    n: int = 4,
) -> Question:
    """A question whose options are ``correct`` and ``n - 1`` others drawn from ``pool``,
    shuffled."""
    others = rng.sample([p for p in pool if p != correct], n - 1)
    return make_question(kind, params, text, correct, [correct, *others], rng)


def numeric_question(
    kind: str,
    params: dict[str, Any],
    text: str,
    correct: int,
    lo: int,
    hi: int,
    rng: random.Random,
) -> Question:
    options = [str(v) for v in numeric_options(correct, lo, hi, rng)]
    return make_question(kind, params, text, str(correct), options, rng, keep_order=True)
