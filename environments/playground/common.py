"""Shared pieces of the playground games: cell names, strict reply parsing, board pictures.

One convention for every grid game except chess: a cell is ``<column letter><row number>``,
columns ``A`` … from the left, rows ``1`` … from the top, and matrix row 0 is the top row. The
same :func:`cell_name` labels the pictures, writes the prompts and (through :func:`parse_cell`)
reads the replies, so the three cannot disagree. Chess uses standard algebraic squares.
"""

from __future__ import annotations

import ast
import json
import random
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from PIL import ImageDraw

from parley.environments.parsing import first_bracketed
from parley.environments.render import canvas, font, png

Matrix = list[list[int]]
Cell = tuple[int, int]  # (row, column), 0-based, row 0 at the top

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


# Searches and pictures run in worker threads, off the event loop; but Python threads share
# one interpreter lock, and several CPU-bound threads at once starve the loop's thread of it
# (every reply and timer of the process then waits). One at a time keeps the loop's waits short
# and loses nothing: the lock lets only one of them run at a time anyway.
_CPU = threading.Lock()


@contextmanager
def cpu_bound() -> Iterator[None]:
    """Hold while doing pure-Python heavy work (a search, a picture) in a worker thread."""
    with _CPU:
        yield


def seeded(*parts: object) -> random.Random:
    """A generator that is a pure function of ``parts`` (stable across processes)."""
    return random.Random(":".join(str(p) for p in parts))


# --- cells ---------------------------------------------------------------------------------


def cell_name(row: int, col: int) -> str:
    """``(0, 1)`` → ``B1``: column letter, then row number counted from 1 at the top."""
    return f"{LETTERS[col]}{row + 1}"


_CELL = re.compile(r"^\s*(?:([A-Za-z])\s*(\d{1,2})|(\d{1,2})\s*([A-Za-z]))\s*$")


def parse_cell(text: str, rows: int, cols: int) -> Cell | None:
    """``B3``/``b3``/``3B`` → ``(2, 1)``; None when it is not exactly one cell on the board."""
    match = _CELL.match(text)
    if not match:
        return None
    letter = match.group(1) or match.group(4)
    number = match.group(2) or match.group(3)
    col = LETTERS.index(letter.upper())
    row = int(number) - 1
    if 0 <= row < rows and 0 <= col < cols:
        return row, col
    return None


def canonical_cell(text: str, rows: int, cols: int) -> str | None:
    """A cell as a player wrote it (``b3``, ``3B``) → its name (``B3``); None when it is not
    exactly one cell on the board."""
    cell = parse_cell(text, rows, cols)
    return cell_name(*cell) if cell else None


def scattered_board(
    rng: random.Random,
    size: int,
    density: tuple[float, float],
    pieces: Sequence[int],
    empty: int,
) -> Matrix:
    """A random ``size``×``size`` board: a fill rate drawn from ``density``, then each cell
    (row by row) holds a random one of ``pieces`` at that rate, else ``empty``."""
    fill = rng.uniform(*density)
    return [
        [rng.choice(pieces) if rng.random() < fill else empty for _ in range(size)]
        for _ in range(size)
    ]


def all_cells(rows: int, cols: int) -> list[Cell]:
    return [(r, c) for r in range(rows) for c in range(cols)]


# --- strict reply fields -------------------------------------------------------------------

_MARKUP = re.compile(r"[*_`]")
_VALUE_EDGES = re.compile(r"^[\s\"'<\[(]+|[\s\"'>\])\.]+$")


def field_values(text: str, name: str) -> list[str]:
    """The values of every ``Name: value`` line of a reply (markdown emphasis ignored).

    A field whose value is empty takes the next non-empty line, as in ``Movement:\\nB3``.
    """
    pattern = re.compile(rf"^\s*[-#>]*\s*{re.escape(name)}\s*[:：]\s*(.*)$", re.IGNORECASE)
    lines = [_MARKUP.sub("", line) for line in text.splitlines()]
    values: list[str] = []
    for i, line in enumerate(lines):
        match = pattern.match(line)
        if not match:
            continue
        value = match.group(1).strip()
        if not value:
            value = next((rest.strip() for rest in lines[i + 1 :] if rest.strip()), "")
        values.append(_VALUE_EDGES.sub("", value))
    return values


def movement_field(text: str) -> tuple[str | None, str]:
    """The move named by a reply's ``Movement:`` field, and why not when there is none.

    Only that field counts (prose elsewhere that mentions a cell never becomes the move); a
    reply that is nothing but a move is accepted as well. Two fields that disagree are refused.
    """
    values = field_values(text, "movement")
    if not values:
        bare = _VALUE_EDGES.sub("", _MARKUP.sub("", text.strip()))
        if bare and "\n" not in bare and len(bare) <= 12:
            return bare, ""
        return None, "no 'Movement:' field"
    distinct = {v.lower() for v in values}
    if len(distinct) > 1:
        return None, f"several 'Movement:' fields that disagree ({', '.join(values)})"
    if not values[0]:
        return None, "the 'Movement:' field is empty"
    return values[0], ""


_LETTER = re.compile(r"^([A-Za-z])(?:$|[\s).:\]-])")


def answer_letter(text: str, letters: str) -> str | None:
    """The option letter of a reply: its ``Answer:`` field, or a reply that is a bare letter.

    The letter must stand alone (``B``, ``(B)``, ``B) 7``); words that merely begin with a
    letter (``Because``) are not answers. Several disagreeing answers count as none.
    """
    values = field_values(text, "answer")
    if not values:
        bare = _VALUE_EDGES.sub("", _MARKUP.sub("", text.strip()))
        values = [bare] if len(bare) == 1 else []
    found: set[str] = set()
    for value in values:
        match = _LETTER.match(value.strip().lstrip("([").strip())
        if match and match.group(1).upper() in letters:
            found.add(match.group(1).upper())
        else:
            return None
    return found.pop() if len(found) == 1 else None


def parse_matrix(text: str, rows: int, cols: int) -> Matrix | None:
    """The ``rows``×``cols`` integer matrix a reply gives after ``Game State:`` (or its only
    bracketed matrix); None if missing, malformed or of another shape (scored 0)."""
    label = re.search(r"game\s*state\s*[:：]", text, re.IGNORECASE)
    block = first_bracketed(text[label.end() :] if label else text)
    if block is None:
        return None
    value: Any = None
    try:
        value = json.loads(block)
    except ValueError:
        try:
            value = ast.literal_eval(block)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    if not isinstance(value, list | tuple) or len(value) != rows:
        return None
    out: Matrix = []
    for row in value:
        if not isinstance(row, list | tuple) or len(row) != cols:
            return None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in row):
            return None
        out.append([int(v) for v in row])
    return out


def matrix_text(matrix: Matrix) -> str:
    """A matrix as one line of JSON, the format the prompts ask for."""
    return json.dumps(matrix)


# --- pictures ------------------------------------------------------------------------------

BOARD_BG = (226, 196, 140)
LINE = (60, 45, 30)
LABEL = (30, 30, 30)
PAPER = (250, 250, 248)


class Grid:
    """Geometry of a labelled board picture: ``margin`` pixels for labels on every side,
    square cells of ``cell`` pixels. ``intersections`` puts pieces on line crossings (Gomoku)
    instead of inside squares. Labels are drawn at exactly the positions :meth:`center`
    gives, so a label and the piece it names always line up."""

    def __init__(
        self, rows: int, cols: int, cell: int, margin: int = 34, intersections: bool = False
    ) -> None:
        self.rows, self.cols, self.cell, self.margin = rows, cols, cell, margin
        self.intersections = intersections
        span_w = (cols - 1 if intersections else cols) * cell
        span_h = (rows - 1 if intersections else rows) * cell
        pad = cell // 2 if intersections else 0
        self.left = margin + pad
        self.top = margin + pad
        self.width = span_w + 2 * (margin + pad)
        self.height = span_h + 2 * (margin + pad)

    def center(self, row: int, col: int) -> tuple[int, int]:
        offset = 0 if self.intersections else self.cell // 2
        return self.left + col * self.cell + offset, self.top + row * self.cell + offset

    def box(self, row: int, col: int) -> tuple[int, int, int, int]:
        x, y = self.center(row, col)
        h = self.cell // 2
        return x - h, y - h, x + h, y + h


# Draws what stands on one cell: (draw, row, col, the cell's box in pixels).
DrawCell = Callable[[ImageDraw.ImageDraw, int, int, tuple[int, int, int, int]], None]


def board_picture(
    grid: Grid,
    draw_cell: DrawCell,
    *,
    col_labels: Sequence[str],
    row_labels: Sequence[str],
    background: tuple[int, int, int] = BOARD_BG,
    square: Callable[[int, int], tuple[int, int, int]] | None = None,
    thick_every: int = 0,
) -> bytes:
    """Draw a labelled board and encode it as PNG.

    ``square(row, col)`` colours the cells (chess, minesweeper); ``thick_every`` draws heavier
    lines between blocks (Sudoku's 3×3 boxes); labels go on all four sides.
    """
    image, draw = canvas(grid.width, grid.height, PAPER)
    label_font = font(max(12, min(18, grid.cell // 2)))
    if grid.intersections:
        x0, y0 = grid.center(0, 0)
        x1, y1 = grid.center(grid.rows - 1, grid.cols - 1)
        h = grid.cell // 2
        draw.rectangle((x0 - h, y0 - h, x1 + h, y1 + h), fill=background)
        for r in range(grid.rows):
            draw.line((x0, grid.center(r, 0)[1], x1, grid.center(r, 0)[1]), fill=LINE, width=1)
        for c in range(grid.cols):
            draw.line((grid.center(0, c)[0], y0, grid.center(0, c)[0], y1), fill=LINE, width=1)
    else:
        for r in range(grid.rows):
            for c in range(grid.cols):
                fill = square(r, c) if square else background
                draw.rectangle(grid.box(r, c), fill=fill, outline=LINE, width=1)
        if thick_every:
            x0, y0, _, _ = grid.box(0, 0)
            _, _, x1, y1 = grid.box(grid.rows - 1, grid.cols - 1)
            for k in range(0, grid.rows + 1, thick_every):
                y = y0 + k * grid.cell
                draw.line((x0, y, x1, y), fill=LINE, width=3)
            for k in range(0, grid.cols + 1, thick_every):
                x = x0 + k * grid.cell
                draw.line((x, y0, x, y1), fill=LINE, width=3)
    for r in range(grid.rows):
        for c in range(grid.cols):
            draw_cell(draw, r, c, grid.box(r, c))
    far_x = grid.width - grid.margin // 2
    far_y = grid.height - grid.margin // 2
    for c, text in enumerate(col_labels):
        x, _ = grid.center(0, c)
        draw.text((x, grid.margin // 2), text, font=label_font, fill=LABEL, anchor="mm")
        draw.text((x, far_y), text, font=label_font, fill=LABEL, anchor="mm")
    for r, text in enumerate(row_labels):
        _, y = grid.center(r, 0)
        draw.text((grid.margin // 2, y), text, font=label_font, fill=LABEL, anchor="mm")
        draw.text((far_x, y), text, font=label_font, fill=LABEL, anchor="mm")
    return png(image)


def centered_text(
    draw: ImageDraw.ImageDraw,
    box: tuple[int, int, int, int],
    text: str,
    size: int,
    fill: tuple[int, int, int],
) -> None:
    x = (box[0] + box[2]) // 2
    y = (box[1] + box[3]) // 2
    draw.text((x, y), text, font=font(size), fill=fill, anchor="mm")


def text_board(
    matrix: Matrix,
    symbol: Callable[[int], str],
    col_labels: Sequence[str],
    row_labels: Sequence[str],
) -> str:
    """A board as a labelled text grid, for text-only models and the terminal."""
    width = max(len(r) for r in row_labels)
    cell_w = max(2, *(len(c) for c in col_labels), *(len(symbol(v)) for row in matrix for v in row))
    head = " " * (width + 1) + " ".join(c.rjust(cell_w) for c in col_labels)
    lines = [head]
    for label_text, row in zip(row_labels, matrix, strict=True):
        cells = " ".join(symbol(v).rjust(cell_w) for v in row)
        lines.append(f"{label_text.rjust(width)} {cells}")
    return "\n".join(lines)
