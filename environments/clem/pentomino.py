"""Pentomino boards: several coloured pentomino pieces on a board (seed 000, after Sadler et al.).

A board is split into 3×3 regions of 5×5 cells and holds at most one piece per region, so
pieces never overlap and each piece can be named by colour, shape and region ("a red F piece in
the top left"). Sets of boards differing in one small detail (a piece recoloured, reshaped,
moved, removed or added) are the hard cases of the Reference game and MatchIt.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from PIL import Image, ImageDraw

from parley.environments.clem.common import an
from parley.environments.render import png

SHAPES: dict[str, tuple[str, ...]] = {
    "F": (".##", "##.", ".#."),
    "I": ("#", "#", "#", "#", "#"),
    "L": ("#.", "#.", "#.", "##"),
    "N": (".#", ".#", "##", "#."),
    "P": ("##", "##", "#."),
    "T": ("###", ".#.", ".#."),
    "U": ("#.#", "###"),
    "V": ("#..", "#..", "###"),
    "W": ("#..", "##.", ".##"),
    "X": (".#.", "###", ".#."),
    "Y": (".#", "##", ".#", ".#"),
    "Z": ("##.", ".#.", ".##"),
}

REGIONS = (
    "top left",
    "top",
    "top right",
    "left",
    "centre",
    "right",
    "bottom left",
    "bottom",
    "bottom right",
)

PIECE_COLORS: dict[str, tuple[int, int, int]] = {
    "red": (214, 39, 40),
    "blue": (31, 90, 200),
    "green": (44, 160, 44),
    "yellow": (240, 200, 30),
    "purple": (128, 60, 170),
    "orange": (255, 127, 14),
    "grey": (128, 128, 128),
}

REGION_CELLS = 5
BOARD_CELLS = 3 * REGION_CELLS
CHANGES = ("recolour", "reshape", "move", "remove", "add")

Board = dict[str, Any]
Piece = dict[str, Any]


def cells(piece: Piece) -> list[tuple[int, int]]:
    """The board cells (row, column) the piece covers."""
    rows = SHAPES[piece["shape"]]
    pattern = [(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "#"]
    if piece.get("mirror"):
        pattern = [(r, -c) for r, c in pattern]
    for _ in range(piece.get("rotation", 0) % 4):
        pattern = [(c, -r) for r, c in pattern]
    r0 = min(r for r, _ in pattern)
    c0 = min(c for _, c in pattern)
    pattern = [(r - r0, c - c0) for r, c in pattern]
    height = max(r for r, _ in pattern) + 1
    width = max(c for _, c in pattern) + 1
    region = REGIONS.index(piece["region"])
    top = (region // 3) * REGION_CELLS + (REGION_CELLS - height) // 2
    left = (region % 3) * REGION_CELLS + (REGION_CELLS - width) // 2
    return [(top + r, left + c) for r, c in pattern]


def _piece(rng: random.Random, region: str, avoid: set[tuple[str, str]]) -> Piece:
    while True:
        piece = {
            "shape": rng.choice(sorted(SHAPES)),
            "color": rng.choice(sorted(PIECE_COLORS)),
            "region": region,
            "rotation": rng.randrange(4),
            "mirror": rng.random() < 0.5,
        }
        if (piece["color"], piece["shape"]) not in avoid:
            return piece


def random_board(rng: random.Random, pieces: tuple[int, int] = (3, 6)) -> Board:
    """A board with a few pieces in distinct regions; no two share colour and shape, so each
    piece can be named without its region."""
    regions = rng.sample(REGIONS, rng.randint(*pieces))
    placed: list[Piece] = []
    for region in sorted(regions, key=REGIONS.index):
        placed.append(_piece(rng, region, {(p["color"], p["shape"]) for p in placed}))
    return {"kind": "pentomino", "pieces": placed}


def vary(board: Board, rng: random.Random, change: str | None = None) -> tuple[Board, str]:
    """The board with one small change; returns it and what changed.

    ``add`` is only used where the original may be the poorer board (MatchIt); for Reference
    distractors the target keeps a detail the distractor lacks (recolour, reshape, move, remove).
    """
    new = copy.deepcopy(board)
    pieces = new["pieces"]
    free = [r for r in REGIONS if r not in {p["region"] for p in pieces}]
    options = [c for c in CHANGES if change is None or c == change]
    if len(pieces) < 2:
        options = [c for c in options if c != "remove"]
    if not free:
        options = [c for c in options if c not in ("move", "add")]
    kind = rng.choice(options)
    taken = {(p["color"], p["shape"]) for p in pieces}
    if kind == "add":
        pieces.append(_piece(rng, rng.choice(free), taken))
        pieces.sort(key=lambda p: REGIONS.index(p["region"]))
        return new, kind
    index = rng.randrange(len(pieces))
    piece = pieces[index]
    if kind == "recolour":
        piece["color"] = rng.choice(
            [c for c in PIECE_COLORS if c != piece["color"] and (c, piece["shape"]) not in taken]
        )
    elif kind == "reshape":
        piece["shape"] = rng.choice(
            [s for s in SHAPES if s != piece["shape"] and (piece["color"], s) not in taken]
        )
    elif kind == "move":
        piece["region"] = rng.choice(free)
        pieces.sort(key=lambda p: REGIONS.index(p["region"]))
    else:
        pieces.pop(index)
    return new, kind


def units(board: Board) -> list[str]:
    """Each piece named by colour, shape and region."""
    return [an(f"{p['color']} {p['shape']} piece in the {p['region']}") for p in board["pieces"]]


def features(board: Board) -> list[str]:
    """Facts a referring expression can use: short ones (colour and shape) first."""
    short = [an(f"{p['color']} {p['shape']} piece") for p in board["pieces"]]
    return short + units(board)


def render(board: Board, cell: int = 26) -> bytes:
    """The board: a light grid with the pieces as coloured cells outlined in black."""
    margin = cell
    side = BOARD_CELLS * cell + 2 * margin
    image = Image.new("RGB", (side, side), (250, 250, 245))
    draw = ImageDraw.Draw(image)
    for i in range(BOARD_CELLS + 1):
        pos = margin + i * cell
        draw.line((margin, pos, side - margin, pos), fill=(215, 215, 210))
        draw.line((pos, margin, pos, side - margin), fill=(215, 215, 210))
    for piece in board["pieces"]:
        fill = PIECE_COLORS[piece["color"]]
        for r, c in cells(piece):
            x0, y0 = margin + c * cell, margin + r * cell
            draw.rectangle((x0, y0, x0 + cell, y0 + cell), fill=fill, outline=(20, 20, 20))
    draw.rectangle((margin, margin, side - margin, side - margin), outline=(90, 90, 90), width=2)
    return png(image)
