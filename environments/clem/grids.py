"""5×5 pixel grids (seed 000's Reference-game and MatchIt grid stimuli).

A grid is five strings of ``X`` (filled) and ``▢`` (empty). Sets range from patterns people
recognise at a glance (rows, columns, diagonals, letters, shapes) to random placements. Grids
render as text (``X ▢ ▢ ▢ X`` lines, the text variant) and as images (filled cells dark).
"""

from __future__ import annotations

import random
from functools import lru_cache

from PIL import Image, ImageDraw

from parley.environments.render import png

FILLED, EMPTY = "X", "▢"
SIZE = 5

Grid = tuple[str, ...]


def _g(*rows: str) -> Grid:
    """A grid from compact rows written with ``#`` (filled) and ``.`` (empty)."""
    assert len(rows) == SIZE and all(len(r) == SIZE for r in rows)
    return tuple(r.replace("#", FILLED).replace(".", EMPTY) for r in rows)


def _rows() -> list[Grid]:
    out = []
    for k in range(SIZE):
        out.append(tuple(FILLED * SIZE if i == k else EMPTY * SIZE for i in range(SIZE)))
        out.append(tuple(EMPTY * SIZE if i == k else FILLED * SIZE for i in range(SIZE)))
    return out


DIAGONALS: list[Grid] = [
    _g("#....", ".#...", "..#..", "...#.", "....#"),
    _g("....#", "...#.", "..#..", ".#...", "#...."),
    _g(".####", "#.###", "##.##", "###.#", "####."),
    _g("####.", "###.#", "##.##", "#.###", ".####"),
    _g("#...#", ".#.#.", "..#..", ".#.#.", "#...#"),
    _g(".###.", "#.#.#", "##.##", "#.#.#", ".###."),
    _g("#....", "##...", "###..", "####.", "#####"),
    _g("....#", "...##", "..###", ".####", "#####"),
    _g("#####", "####.", "###..", "##...", "#...."),
    _g("#####", ".####", "..###", "...##", "....#"),
]

LETTERS: list[Grid] = [
    _g("#####", "#....", "###..", "#....", "#####"),  # E
    _g("#####", "#....", "###..", "#....", "#...."),  # F
    _g("#...#", "#...#", "#####", "#...#", "#...#"),  # H
    _g("#...#", "#..#.", "###..", "#..#.", "#...#"),  # K
    _g("#....", "#....", "#....", "#....", "#####"),  # L
    _g("#...#", "##.##", "#.#.#", "#...#", "#...#"),  # M
    _g("#...#", "##..#", "#.#.#", "#..##", "#...#"),  # N
    _g("#####", "..#..", "..#..", "..#..", "..#.."),  # T
    _g("#...#", ".#.#.", "..#..", "..#..", "..#.."),  # Y
    _g("#####", "...#.", "..#..", ".#...", "#####"),  # Z
]

SHAPES: list[Grid] = [
    _g("#####", "#...#", "#...#", "#...#", "#####"),  # frame
    _g("..#..", "..#..", "#####", "..#..", "..#.."),  # plus
    _g("..#..", ".###.", "#####", ".###.", "..#.."),  # diamond
    _g(".....", ".###.", ".###.", ".###.", "....."),  # centre block
    _g("..#..", ".###.", "#####", "..#..", "..#.."),  # arrow up
    _g("#.#.#", ".#.#.", "#.#.#", ".#.#.", "#.#.#"),  # checkerboard
    _g(".#.#.", "#####", "#####", ".###.", "..#.."),  # heart
    _g("..#..", ".#.#.", "#...#", ".#.#.", "..#.."),  # diamond outline
    _g("##.##", "##.##", ".....", "##.##", "##.##"),  # four blocks
    _g("..#..", ".###.", "#####", ".....", "....."),  # triangle
]

SETS: dict[str, list[Grid]] = {
    "rows": _rows(),
    "columns": [],  # filled below (needs ``rotate``)
    "diagonals": DIAGONALS,
    "letters": LETTERS,
    "shapes": SHAPES,
}


def random_grid(rng: random.Random, filled: tuple[int, int] = (8, 14)) -> Grid:
    """Filled cells at random places (the paper's least compressible grids)."""
    cells = rng.sample(range(SIZE * SIZE), rng.randint(*filled))
    return tuple(
        "".join(FILLED if r * SIZE + c in cells else EMPTY for c in range(SIZE))
        for r in range(SIZE)
    )


# --- transforms (MatchIt's similar pairs) ---------------------------------------------------


def mirror_horizontal(grid: Grid) -> Grid:
    """Left and right swapped."""
    return tuple(row[::-1] for row in grid)


def mirror_vertical(grid: Grid) -> Grid:
    """Top and bottom swapped."""
    return tuple(reversed(grid))


def rotate(grid: Grid) -> Grid:
    """Turned 90 degrees clockwise."""
    return tuple("".join(grid[SIZE - 1 - r][c] for r in range(SIZE)) for c in range(SIZE))


TRANSFORMS = {
    "mirrored left to right": mirror_horizontal,
    "mirrored top to bottom": mirror_vertical,
    "rotated by 90 degrees": rotate,
}


def flip_cells(grid: Grid, cells: list[tuple[int, int]]) -> Grid:
    """The grid with the given (row, column) cells inverted."""
    rows = [list(r) for r in grid]
    for r, c in cells:
        rows[r][c] = EMPTY if rows[r][c] == FILLED else FILLED
    return tuple("".join(r) for r in rows)


def difference(a: Grid, b: Grid) -> int:
    """Number of cells in which two grids differ (edit distance by substitution)."""
    return sum(x != y for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


SETS["columns"] = [rotate(g) for g in SETS["rows"]]


# --- rendering ------------------------------------------------------------------------------


# The sets hold a few dozen grids, drawn again and again by thousands of episodes: their text,
# units and features are worked out once each (a run's episodes start faster).
_CACHED = 4096


@lru_cache(maxsize=_CACHED)
def as_text(grid: Grid) -> str:
    """Character rendering: ``X ▢ ▢ ▢ X`` per row (clembench's ASCII grids)."""
    return "\n".join(" ".join(row) for row in grid)


def parse_text(text: str) -> Grid | None:
    """A grid from its character rendering (spaces optional); None if it is not one."""
    rows = [r.replace(" ", "") for r in text.strip().splitlines() if r.strip()]
    if len(rows) != SIZE or any(len(r) != SIZE or set(r) - {FILLED, EMPTY} for r in rows):
        return None
    return tuple(rows)


def render(grid: Grid, cell: int = 64) -> bytes:
    """The grid as a picture: dark filled cells, white empty cells, thin grid lines."""
    margin = cell // 2
    side = SIZE * cell + 2 * margin
    image = Image.new("RGB", (side, side), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for r, row in enumerate(grid):
        for c, ch in enumerate(row):
            x0, y0 = margin + c * cell, margin + r * cell
            fill = (30, 30, 30) if ch == FILLED else (255, 255, 255)
            draw.rectangle((x0, y0, x0 + cell, y0 + cell), fill=fill, outline=(150, 150, 150))
    return png(image)


def units(grid: Grid) -> list[str]:
    """The grid row by row, as a player would state it."""
    return list(_units(grid))  # a list of its own: the caller may change it


@lru_cache(maxsize=_CACHED)
def _units(grid: Grid) -> tuple[str, ...]:
    return tuple(f"row {r + 1}: {' '.join(row)}" for r, row in enumerate(grid))


def features(grid: Grid) -> list[str]:
    """Cell facts a referring expression can use, filled cells first."""
    return list(_features(grid))  # a list of its own: the caller may change it


@lru_cache(maxsize=_CACHED)
def _features(grid: Grid) -> tuple[str, ...]:
    filled = [
        f"row {r + 1} column {c + 1} filled"
        for r in range(SIZE)
        for c in range(SIZE)
        if grid[r][c] == FILLED
    ]
    empty = [
        f"row {r + 1} column {c + 1} empty"
        for r in range(SIZE)
        for c in range(SIZE)
        if grid[r][c] == EMPTY
    ]
    return (*filled, *empty)
