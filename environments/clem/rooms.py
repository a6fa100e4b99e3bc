"""Procedural room pictures for MapWorld (and the ADE20K-like stand-in scenes).

Each room category has its own furniture, drawn in a simple side view against a wall; no room
name is written in the picture. A room is a JSON spec (category, wall and floor colours, items
with colours), so the same spec always gives the same PNG, and rooms of one category still
differ in their colours and extras (a window, a painting, a plant, a rug).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from PIL import Image, ImageDraw

from parley.environments.clem.common import an
from parley.environments.render import png

RGB = tuple[int, int, int]
WIDTH, HEIGHT, FLOOR = 480, 360, 240

PALETTE: dict[str, RGB] = {
    "red": (200, 50, 50),
    "blue": (50, 90, 190),
    "green": (60, 150, 70),
    "yellow": (230, 200, 60),
    "purple": (130, 70, 160),
    "orange": (235, 140, 40),
    "brown": (130, 85, 50),
    "grey": (140, 140, 140),
    "white": (240, 240, 235),
    "black": (40, 40, 40),
    "pink": (230, 150, 180),
    "teal": (40, 150, 150),
}
WALLS: dict[str, RGB] = {
    "cream": (236, 226, 200),
    "pale blue": (200, 218, 232),
    "pale green": (210, 228, 200),
    "light grey": (215, 215, 215),
    "peach": (240, 212, 190),
}
FLOORS: dict[str, RGB] = {
    "wooden": (160, 115, 70),
    "tiled": (190, 190, 185),
    "carpeted": (120, 100, 120),
    "stone": (150, 145, 135),
}

Draw = ImageDraw.ImageDraw
Drawer = Callable[[Draw, int, RGB], None]

DARK: RGB = (40, 40, 40)
METAL: RGB = (175, 175, 180)
WOOD: RGB = (140, 95, 55)
GLASS: RGB = (170, 210, 235)


def _shade(color: RGB, factor: float) -> RGB:
    return tuple(max(0, min(255, int(v * factor))) for v in color)  # type: ignore[return-value]


# --- floor furniture: drawn with the left edge at x, standing on the floor line ------------


def fridge(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 175, x + 70, FLOOR), fill=c, outline=DARK, width=2)
    d.line((x, FLOOR - 115, x + 70, FLOOR - 115), fill=DARK, width=2)
    d.rectangle((x + 58, FLOOR - 160, x + 62, FLOOR - 130), fill=DARK)
    d.rectangle((x + 58, FLOOR - 100, x + 62, FLOOR - 60), fill=DARK)


def stove(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 90, x + 90, FLOOR), fill=c, outline=DARK, width=2)
    d.rectangle((x, FLOOR - 98, x + 90, FLOOR - 90), fill=DARK)
    for i in range(4):
        d.ellipse((x + 6 + 21 * i, FLOOR - 104, x + 22 + 21 * i, FLOOR - 96), fill=(90, 90, 90))
    d.rectangle((x + 15, FLOOR - 70, x + 75, FLOOR - 20), fill=(60, 60, 60), outline=DARK)
    d.line((x + 20, FLOOR - 78, x + 70, FLOOR - 78), fill=METAL, width=3)


def sink_counter(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 85, x + 120, FLOOR), fill=c, outline=DARK, width=2)
    d.line((x + 60, FLOOR - 75, x + 60, FLOOR - 5), fill=DARK, width=2)
    d.rectangle((x - 4, FLOOR - 92, x + 124, FLOOR - 85), fill=(120, 120, 120))
    d.ellipse((x + 30, FLOOR - 97, x + 90, FLOOR - 87), fill=METAL, outline=DARK)
    d.line((x + 60, FLOOR - 97, x + 60, FLOOR - 120), fill=METAL, width=4)
    d.line((x + 60, FLOOR - 120, x + 75, FLOOR - 120), fill=METAL, width=4)


def bed(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 110, x + 14, FLOOR), fill=WOOD, outline=DARK)
    d.rectangle((x + 14, FLOOR - 55, x + 180, FLOOR - 25), fill=WOOD, outline=DARK)
    d.rectangle((x + 14, FLOOR - 68, x + 180, FLOOR - 55), fill=(245, 245, 245), outline=DARK)
    d.ellipse((x + 18, FLOOR - 85, x + 60, FLOOR - 62), fill=(250, 250, 250), outline=DARK)
    d.rectangle((x + 70, FLOOR - 72, x + 180, FLOOR - 40), fill=c, outline=DARK)
    d.rectangle((x + 170, FLOOR - 25, x + 180, FLOOR), fill=WOOD)


def nightstand(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 55, x + 50, FLOOR), fill=c, outline=DARK, width=2)
    d.line((x, FLOOR - 28, x + 50, FLOOR - 28), fill=DARK)
    d.line((x + 25, FLOOR - 55, x + 25, FLOOR - 90), fill=DARK, width=3)
    d.polygon(
        [(x + 8, FLOOR - 88), (x + 42, FLOOR - 88), (x + 34, FLOOR - 112), (x + 16, FLOOR - 112)],
        fill=(250, 230, 150),
        outline=DARK,
    )


def bathtub(d: Draw, x: int, c: RGB) -> None:
    d.rounded_rectangle(
        (x, FLOOR - 70, x + 170, FLOOR - 12), radius=22, fill=c, outline=DARK, width=2
    )
    d.rectangle((x - 4, FLOOR - 74, x + 174, FLOOR - 66), fill=(245, 245, 245), outline=DARK)
    for fx in (x + 18, x + 145):
        d.rectangle((fx, FLOOR - 12, fx + 8, FLOOR), fill=METAL)
    d.line((x + 150, FLOOR - 74, x + 150, FLOOR - 105), fill=METAL, width=4)
    d.line((x + 150, FLOOR - 105, x + 130, FLOOR - 105), fill=METAL, width=4)


def toilet(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x + 30, FLOOR - 110, x + 60, FLOOR - 55), fill=c, outline=DARK, width=2)
    d.ellipse((x, FLOOR - 62, x + 60, FLOOR - 42), fill=c, outline=DARK, width=2)
    d.polygon(
        [(x + 12, FLOOR - 50), (x + 50, FLOOR - 50), (x + 42, FLOOR), (x + 20, FLOOR)],
        fill=c,
        outline=DARK,
    )


def washbasin(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 190, x + 70, FLOOR - 120), fill=GLASS, outline=METAL, width=4)
    d.polygon(
        [(x + 25, FLOOR - 80), (x + 45, FLOOR - 80), (x + 42, FLOOR), (x + 28, FLOOR)],
        fill=c,
        outline=DARK,
    )
    d.pieslice((x - 5, FLOOR - 115, x + 75, FLOOR - 60), 0, 180, fill=c, outline=DARK)


def sofa(d: Draw, x: int, c: RGB) -> None:
    d.rounded_rectangle(
        (x + 10, FLOOR - 100, x + 170, FLOOR - 50), radius=12, fill=_shade(c, 0.85), outline=DARK
    )
    d.rectangle((x + 10, FLOOR - 55, x + 170, FLOOR - 20), fill=c, outline=DARK)
    d.rounded_rectangle((x, FLOOR - 75, x + 22, FLOOR - 15), radius=8, fill=c, outline=DARK)
    d.rounded_rectangle((x + 158, FLOOR - 75, x + 180, FLOOR - 15), radius=8, fill=c, outline=DARK)
    d.line((x + 90, FLOOR - 55, x + 90, FLOOR - 20), fill=DARK)
    for fx in (x + 8, x + 166):
        d.rectangle((fx, FLOOR - 15, fx + 6, FLOOR), fill=DARK)


def television(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 40, x + 120, FLOOR), fill=c, outline=DARK, width=2)
    d.line((x + 60, FLOOR - 40, x + 60, FLOOR), fill=DARK)
    d.rectangle((x + 55, FLOOR - 52, x + 65, FLOOR - 40), fill=DARK)
    d.rectangle((x + 5, FLOOR - 125, x + 115, FLOOR - 52), fill=(25, 25, 30), outline=DARK, width=3)
    d.polygon(
        [(x + 15, FLOOR - 115), (x + 45, FLOOR - 115), (x + 15, FLOOR - 90)], fill=(60, 60, 80)
    )


def coffee_table(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 38, x + 90, FLOOR - 30), fill=c, outline=DARK)
    for fx in (x + 6, x + 78):
        d.rectangle((fx, FLOOR - 30, fx + 6, FLOOR), fill=_shade(c, 0.7))
    d.rectangle((x + 30, FLOOR - 48, x + 50, FLOOR - 38), fill=(230, 230, 230), outline=DARK)


def dining_table(d: Draw, x: int, c: RGB) -> None:
    for cx in (x, x + 170):  # chairs at both ends, backs outward
        back = cx if cx == x else cx + 26
        d.rectangle((back, FLOOR - 105, back + 6, FLOOR), fill=_shade(c, 0.8), outline=DARK)
        d.rectangle((cx, FLOOR - 50, cx + 32, FLOOR - 44), fill=_shade(c, 0.8), outline=DARK)
        d.rectangle(
            (cx + (26 if cx == x else 0), FLOOR - 44, cx + (32 if cx == x else 6), FLOOR),
            fill=_shade(c, 0.8),
        )
    d.rectangle((x + 36, FLOOR - 75, x + 166, FLOOR - 66), fill=c, outline=DARK)
    for fx in (x + 42, x + 152):
        d.rectangle((fx, FLOOR - 66, fx + 8, FLOOR), fill=c)
    d.ellipse((x + 80, FLOOR - 84, x + 120, FLOOR - 75), fill=(245, 245, 245), outline=DARK)


def desk_computer(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 78, x + 140, FLOOR - 70), fill=c, outline=DARK)
    d.rectangle((x + 4, FLOOR - 70, x + 12, FLOOR), fill=c)
    d.rectangle((x + 95, FLOOR - 70, x + 136, FLOOR), fill=_shade(c, 0.85), outline=DARK)
    d.rectangle(
        (x + 30, FLOOR - 140, x + 100, FLOOR - 92), fill=(30, 30, 35), outline=DARK, width=3
    )
    d.rectangle((x + 60, FLOOR - 92, x + 70, FLOOR - 78), fill=DARK)
    d.rectangle((x + 35, FLOOR - 84, x + 90, FLOOR - 79), fill=(90, 90, 90))


def office_chair(d: Draw, x: int, c: RGB) -> None:
    d.rounded_rectangle((x + 10, FLOOR - 120, x + 50, FLOOR - 65), radius=8, fill=c, outline=DARK)
    d.rectangle((x + 5, FLOOR - 62, x + 55, FLOOR - 52), fill=c, outline=DARK)
    d.line((x + 30, FLOOR - 52, x + 30, FLOOR - 12), fill=DARK, width=4)
    d.line((x + 5, FLOOR - 6, x + 55, FLOOR - 6), fill=DARK, width=4)
    for wx in (x + 3, x + 27, x + 51):
        d.ellipse((wx, FLOOR - 7, wx + 7, FLOOR), fill=DARK)


BOOK_COLORS = [PALETTE[n] for n in ("red", "blue", "green", "yellow", "purple", "orange", "teal")]


def bookshelf(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 170, x + 80, FLOOR), fill=c, outline=DARK, width=2)
    for shelf in range(4):
        y = FLOOR - 166 + shelf * 42
        d.line((x, y + 38, x + 80, y + 38), fill=DARK, width=3)
        for b in range(7):
            color = BOOK_COLORS[(b * 3 + shelf) % len(BOOK_COLORS)]
            d.rectangle(
                (x + 5 + b * 10, y + 6 + (b % 3) * 3, x + 13 + b * 10, y + 37),
                fill=color,
                outline=DARK,
            )


def crib(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 95, x + 130, FLOOR - 88), fill=c, outline=DARK)
    d.rectangle((x, FLOOR - 30, x + 130, FLOOR - 22), fill=c, outline=DARK)
    for bx in range(x, x + 131, 13):
        d.line((bx, FLOOR - 88, bx, FLOOR - 30), fill=c, width=3)
    for fx in (x, x + 124):
        d.rectangle((fx, FLOOR - 105, fx + 6, FLOOR), fill=c, outline=DARK)


def toy_blocks(d: Draw, x: int, c: RGB) -> None:
    colors = [c, PALETTE["yellow"], PALETTE["blue"], PALETTE["red"]]
    for i, (bx, by) in enumerate([(0, 0), (26, 0), (52, 0), (13, 1), (39, 1), (26, 2)]):
        y = FLOOR - 24 * (by + 1)
        d.rectangle((x + bx, y, x + bx + 24, y + 24), fill=colors[i % 4], outline=DARK)


def rocking_horse(d: Draw, x: int, c: RGB) -> None:
    d.arc((x, FLOOR - 40, x + 110, FLOOR + 20), 200, 340, fill=WOOD, width=5)
    d.rectangle((x + 25, FLOOR - 70, x + 85, FLOOR - 45), fill=c, outline=DARK)
    d.line((x + 35, FLOOR - 45, x + 30, FLOOR - 22), fill=c, width=5)
    d.line((x + 75, FLOOR - 45, x + 80, FLOOR - 22), fill=c, width=5)
    d.polygon(
        [(x + 80, FLOOR - 70), (x + 95, FLOOR - 105), (x + 110, FLOOR - 95), (x + 92, FLOOR - 62)],
        fill=c,
        outline=DARK,
    )


def armchair(d: Draw, x: int, c: RGB) -> None:
    d.rounded_rectangle(
        (x + 8, FLOOR - 105, x + 82, FLOOR - 50), radius=14, fill=_shade(c, 0.85), outline=DARK
    )
    d.rectangle((x + 8, FLOOR - 55, x + 82, FLOOR - 22), fill=c, outline=DARK)
    d.rounded_rectangle((x, FLOOR - 75, x + 18, FLOOR - 18), radius=7, fill=c, outline=DARK)
    d.rounded_rectangle((x + 72, FLOOR - 75, x + 90, FLOOR - 18), radius=7, fill=c, outline=DARK)
    for fx in (x + 6, x + 78):
        d.rectangle((fx, FLOOR - 18, fx + 6, FLOOR), fill=DARK)


def washing_machine(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 95, x + 80, FLOOR), fill=c, outline=DARK, width=2)
    d.line((x, FLOOR - 78, x + 80, FLOOR - 78), fill=DARK)
    d.ellipse((x + 62, FLOOR - 91, x + 72, FLOOR - 81), fill=DARK)
    d.ellipse((x + 12, FLOOR - 70, x + 68, FLOOR - 14), fill=METAL, outline=DARK, width=3)
    d.ellipse((x + 20, FLOOR - 62, x + 60, FLOOR - 22), fill=(70, 100, 150))


def laundry_basket(d: Draw, x: int, c: RGB) -> None:
    d.polygon(
        [(x, FLOOR - 60), (x + 70, FLOOR - 60), (x + 60, FLOOR), (x + 10, FLOOR)],
        fill=c,
        outline=DARK,
    )
    for y in range(FLOOR - 50, FLOOR, 12):
        d.line((x + 5, y, x + 65, y), fill=_shade(c, 0.7), width=2)
    d.ellipse((x + 8, FLOOR - 75, x + 40, FLOOR - 55), fill=PALETTE["white"], outline=DARK)
    d.ellipse((x + 30, FLOOR - 72, x + 62, FLOOR - 56), fill=PALETTE["pink"], outline=DARK)


def ironing_board(d: Draw, x: int, c: RGB) -> None:
    d.line((x + 20, FLOOR, x + 80, FLOOR - 70), fill=METAL, width=4)
    d.line((x + 80, FLOOR, x + 20, FLOOR - 70), fill=METAL, width=4)
    d.rounded_rectangle((x, FLOOR - 78, x + 110, FLOOR - 68), radius=5, fill=c, outline=DARK)
    d.polygon(
        [(x + 70, FLOOR - 78), (x + 100, FLOOR - 78), (x + 95, FLOOR - 92), (x + 75, FLOOR - 92)],
        fill=METAL,
        outline=DARK,
    )


def car(d: Draw, x: int, c: RGB) -> None:
    d.rounded_rectangle(
        (x, FLOOR - 70, x + 210, FLOOR - 22), radius=16, fill=c, outline=DARK, width=2
    )
    d.polygon(
        [
            (x + 45, FLOOR - 70),
            (x + 75, FLOOR - 112),
            (x + 150, FLOOR - 112),
            (x + 180, FLOOR - 70),
        ],
        fill=c,
        outline=DARK,
    )
    d.polygon(
        [
            (x + 58, FLOOR - 72),
            (x + 80, FLOOR - 104),
            (x + 110, FLOOR - 104),
            (x + 110, FLOOR - 72),
        ],
        fill=GLASS,
    )
    d.polygon(
        [
            (x + 118, FLOOR - 72),
            (x + 118, FLOOR - 104),
            (x + 146, FLOOR - 104),
            (x + 168, FLOOR - 72),
        ],
        fill=GLASS,
    )
    for wx in (x + 30, x + 150):
        d.ellipse((wx, FLOOR - 40, wx + 40, FLOOR), fill=DARK)
        d.ellipse((wx + 12, FLOOR - 28, wx + 28, FLOOR - 12), fill=METAL)


def workbench(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 80, x + 130, FLOOR - 70), fill=c, outline=DARK)
    for fx in (x + 5, x + 117):
        d.rectangle((fx, FLOOR - 70, fx + 8, FLOOR), fill=_shade(c, 0.8))
    d.rectangle((x, FLOOR - 175, x + 130, FLOOR - 100), fill=(205, 180, 140), outline=DARK)
    d.line((x + 20, FLOOR - 165, x + 20, FLOOR - 115), fill=DARK, width=4)
    d.rectangle((x + 12, FLOOR - 170, x + 28, FLOOR - 160), fill=DARK)
    d.line((x + 55, FLOOR - 165, x + 70, FLOOR - 112), fill=METAL, width=5)
    d.ellipse((x + 90, FLOOR - 165, x + 115, FLOOR - 140), outline=PALETTE["red"], width=4)


def piano(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 120, x + 140, FLOOR - 10), fill=c, outline=DARK, width=2)
    d.rectangle((x + 8, FLOOR - 62, x + 132, FLOOR - 48), fill=(250, 250, 250), outline=DARK)
    for k in range(8, 132, 9):
        d.line((x + k, FLOOR - 62, x + k, FLOOR - 48), fill=DARK)
        if (k // 9) % 7 not in (2, 6):
            d.rectangle((x + k + 5, FLOOR - 62, x + k + 9, FLOOR - 54), fill=DARK)
    for fx in (x + 8, x + 126):
        d.rectangle((fx, FLOOR - 10, fx + 6, FLOOR), fill=DARK)
    d.rectangle((x + 45, FLOOR - 105, x + 95, FLOOR - 75), fill=(250, 250, 240), outline=DARK)


def guitar(d: Draw, x: int, c: RGB) -> None:
    d.line((x + 30, FLOOR, x + 30, FLOOR - 30), fill=DARK, width=3)
    d.ellipse((x + 8, FLOOR - 75, x + 52, FLOOR - 30), fill=c, outline=DARK, width=2)
    d.ellipse((x + 13, FLOOR - 105, x + 47, FLOOR - 68), fill=c, outline=DARK, width=2)
    d.ellipse((x + 24, FLOOR - 62, x + 36, FLOOR - 50), fill=DARK)
    d.rectangle((x + 27, FLOOR - 170, x + 33, FLOOR - 90), fill=WOOD, outline=DARK)


def drum(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 60, x + 70, FLOOR - 10), fill=c, outline=DARK, width=2)
    d.ellipse((x, FLOOR - 68, x + 70, FLOOR - 52), fill=(245, 240, 225), outline=DARK)
    for lx in (x + 8, x + 58):
        d.line((lx, FLOOR - 10, lx, FLOOR), fill=METAL, width=3)
    d.line((x + 75, FLOOR - 110, x + 35, FLOOR - 70), fill=WOOD, width=3)


def treadmill(d: Draw, x: int, c: RGB) -> None:
    d.polygon([(x, FLOOR - 12), (x + 170, FLOOR - 22), (x + 170, FLOOR), (x, FLOOR)], fill=DARK)
    d.line((x + 150, FLOOR - 20, x + 140, FLOOR - 110), fill=METAL, width=6)
    d.rectangle((x + 115, FLOOR - 125, x + 165, FLOOR - 105), fill=c, outline=DARK)
    d.line((x + 120, FLOOR - 105, x + 95, FLOOR - 80), fill=METAL, width=4)


def dumbbell_rack(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 70, x + 110, FLOOR - 62), fill=METAL, outline=DARK)
    d.rectangle((x, FLOOR - 35, x + 110, FLOOR - 27), fill=METAL, outline=DARK)
    for fx in (x, x + 104):
        d.rectangle((fx, FLOOR - 70, fx + 6, FLOOR), fill=DARK)
    for row, y in enumerate((FLOOR - 82, FLOOR - 47)):
        for i in range(3):
            bx = x + 10 + i * 33
            size = 10 + row * 3
            d.line((bx, y + 6, bx + 26, y + 6), fill=DARK, width=3)
            d.ellipse(
                (bx - 2, y + 6 - size // 2 - 2, bx + 8, y + 6 + size // 2 + 2), fill=c, outline=DARK
            )
            d.ellipse(
                (bx + 18, y + 6 - size // 2 - 2, bx + 28, y + 6 + size // 2 + 2),
                fill=c,
                outline=DARK,
            )


def exercise_ball(d: Draw, x: int, c: RGB) -> None:
    d.ellipse((x, FLOOR - 80, x + 80, FLOOR), fill=c, outline=DARK, width=2)
    d.arc((x + 12, FLOOR - 70, x + 50, FLOOR - 35), 180, 270, fill=_shade(c, 1.3), width=5)


def barrels(d: Draw, x: int, c: RGB) -> None:
    for bx, by in ((0, 0), (70, 0), (35, 1)):
        y1 = FLOOR - by * 72
        d.rounded_rectangle(
            (x + bx, y1 - 72, x + bx + 66, y1), radius=20, fill=c, outline=DARK, width=2
        )
        for hy in (y1 - 58, y1 - 14):
            d.line((x + bx + 4, hy, x + bx + 62, hy), fill=DARK, width=3)
        d.ellipse((x + bx + 26, y1 - 42, x + bx + 40, y1 - 30), fill=_shade(c, 0.6))


def wine_rack(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 150, x + 100, FLOOR), fill=c, outline=DARK, width=2)
    for r in range(6):
        for k in range(4):
            cx, cy = x + 14 + k * 24, FLOOR - 138 + r * 24
            d.ellipse((cx - 8, cy - 8, cx + 8, cy + 8), fill=(70, 20, 30), outline=DARK)


def clothes_rail(d: Draw, x: int, c: RGB) -> None:
    for px in (x, x + 150):
        d.rectangle((px, FLOOR - 170, px + 5, FLOOR), fill=METAL)
    d.line((x, FLOOR - 165, x + 155, FLOOR - 165), fill=METAL, width=4)
    shades = [c, PALETTE["blue"], PALETTE["white"], PALETTE["black"], _shade(c, 0.7)]
    for i in range(5):
        gx = x + 12 + i * 28
        d.line((gx + 12, FLOOR - 165, gx + 12, FLOOR - 155), fill=DARK, width=2)
        d.polygon(
            [
                (gx, FLOOR - 155),
                (gx + 24, FLOOR - 155),
                (gx + 28, FLOOR - 80),
                (gx - 4, FLOOR - 80),
            ],
            fill=shades[i],
            outline=DARK,
        )


def shoe_shelf(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 60, x + 110, FLOOR), fill=c, outline=DARK, width=2)
    d.line((x, FLOOR - 30, x + 110, FLOOR - 30), fill=DARK, width=2)
    for row, y in enumerate((FLOOR - 42, FLOOR - 12)):
        for i in range(3):
            sx = x + 8 + i * 34
            d.polygon(
                [(sx, y + 10), (sx, y), (sx + 10, y), (sx + 28, y + 6), (sx + 28, y + 10)],
                fill=BOOK_COLORS[(i + row) % 7],
                outline=DARK,
            )


def pool_table(d: Draw, x: int, c: RGB) -> None:
    d.polygon(
        [(x + 15, FLOOR - 95), (x + 185, FLOOR - 95), (x + 200, FLOOR - 70), (x, FLOOR - 70)],
        fill=c,
        outline=DARK,
    )
    d.rectangle((x, FLOOR - 70, x + 200, FLOOR - 55), fill=WOOD, outline=DARK)
    for fx in (x + 10, x + 180):
        d.rectangle((fx, FLOOR - 55, fx + 10, FLOOR), fill=WOOD, outline=DARK)
    for i, ball in enumerate(("red", "yellow", "blue", "white")):
        bx = x + 60 + i * 25
        d.ellipse(
            (bx, FLOOR - 88 + (i % 2) * 6, bx + 9, FLOOR - 79 + (i % 2) * 6),
            fill=PALETTE[ball],
            outline=DARK,
        )
    d.line((x + 20, FLOOR - 110, x + 120, FLOOR - 82), fill=WOOD, width=3)


def pantry_shelf(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, FLOOR - 175, x + 120, FLOOR), fill=c, outline=DARK, width=2)
    for shelf in range(4):
        y = FLOOR - 170 + shelf * 43
        d.line((x, y + 40, x + 120, y + 40), fill=DARK, width=3)
        for j in range(4):
            jx = x + 6 + j * 28
            if (shelf + j) % 2:
                d.rounded_rectangle(
                    (jx, y + 12, jx + 20, y + 39), radius=5, fill=(225, 235, 240), outline=DARK
                )
                d.rectangle(
                    (jx + 2, y + 8, jx + 18, y + 13),
                    fill=PALETTE["red"] if j % 3 else PALETTE["green"],
                )
                d.rectangle(
                    (jx + 4, y + 22, jx + 16, y + 34),
                    fill=PALETTE["orange"] if shelf % 2 else PALETTE["purple"],
                )
            else:
                d.rectangle(
                    (jx, y + 6, jx + 22, y + 39),
                    fill=PALETTE["yellow"] if j % 2 else PALETTE["teal"],
                    outline=DARK,
                )


def sacks(d: Draw, x: int, c: RGB) -> None:
    for i in range(3):
        sx = x + i * 32
        d.rounded_rectangle((sx, FLOOR - 55, sx + 30, FLOOR), radius=9, fill=c, outline=DARK)
        d.line((sx + 8, FLOOR - 50, sx + 22, FLOOR - 50), fill=DARK, width=2)


def plant(d: Draw, x: int, c: RGB) -> None:
    d.polygon(
        [(x + 8, FLOOR - 40), (x + 42, FLOOR - 40), (x + 36, FLOOR), (x + 14, FLOOR)],
        fill=c,
        outline=DARK,
    )
    for dx, dy in ((-18, -40), (0, -58), (18, -40), (-10, -28), (10, -30)):
        d.ellipse(
            (x + 25 + dx - 10, FLOOR - 40 + dy - 8, x + 25 + dx + 10, FLOOR - 40 + dy + 24),
            fill=(50, 130, 60),
            outline=(30, 80, 40),
        )


def floor_lamp(d: Draw, x: int, c: RGB) -> None:
    d.line((x + 25, FLOOR, x + 25, FLOOR - 150), fill=DARK, width=3)
    d.ellipse((x + 10, FLOOR - 6, x + 40, FLOOR), fill=DARK)
    d.polygon(
        [(x + 5, FLOOR - 140), (x + 45, FLOOR - 140), (x + 36, FLOOR - 175), (x + 14, FLOOR - 175)],
        fill=c,
        outline=DARK,
    )


# --- wall things: drawn with the left edge at x, top at ``WALL_TOP`` ----------------------

WALL_TOP = 30


def window(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, WALL_TOP, x + 90, WALL_TOP + 80), fill=GLASS, outline=c, width=5)
    d.line((x + 45, WALL_TOP, x + 45, WALL_TOP + 80), fill=c, width=4)
    d.line((x, WALL_TOP + 40, x + 90, WALL_TOP + 40), fill=c, width=4)


def painting(d: Draw, x: int, c: RGB) -> None:
    d.rectangle(
        (x, WALL_TOP + 10, x + 70, WALL_TOP + 60), fill=(245, 240, 225), outline=WOOD, width=5
    )
    d.ellipse((x + 12, WALL_TOP + 20, x + 38, WALL_TOP + 46), fill=c)
    d.polygon(
        [(x + 30, WALL_TOP + 52), (x + 50, WALL_TOP + 24), (x + 62, WALL_TOP + 52)],
        fill=_shade(c, 0.6),
    )


def chandelier(d: Draw, x: int, c: RGB) -> None:
    d.line((x + 50, 0, x + 50, WALL_TOP + 20), fill=DARK, width=2)
    d.arc((x, WALL_TOP, x + 100, WALL_TOP + 45), 0, 180, fill=c, width=4)
    for cx in (x + 4, x + 30, x + 50, x + 70, x + 96):
        d.rectangle((cx - 3, WALL_TOP + 10, cx + 3, WALL_TOP + 26), fill=(250, 245, 220))
        d.ellipse((cx - 3, WALL_TOP + 2, cx + 3, WALL_TOP + 10), fill=PALETTE["orange"])


def mobile(d: Draw, x: int, c: RGB) -> None:
    d.line((x + 50, 0, x + 50, WALL_TOP), fill=DARK, width=2)
    d.line((x, WALL_TOP, x + 100, WALL_TOP), fill=DARK, width=2)
    for i, mx in enumerate((x, x + 33, x + 66, x + 100)):
        d.line((mx, WALL_TOP, mx, WALL_TOP + 25 + 10 * (i % 2)), fill=DARK)
        y = WALL_TOP + 25 + 10 * (i % 2)
        shape = [(mx, y), (mx + 8, y + 16), (mx - 8, y + 16)] if i % 2 else None
        if shape:
            d.polygon(shape, fill=c, outline=DARK)
        else:
            d.ellipse((mx - 8, y, mx + 8, y + 16), fill=PALETTE["yellow"], outline=DARK)


def dartboard(d: Draw, x: int, c: RGB) -> None:
    for i, r in enumerate((40, 32, 24, 16, 8)):
        fill = c if i % 2 == 0 else (240, 235, 210)
        d.ellipse(
            (x + 45 - r, WALL_TOP + 45 - r, x + 45 + r, WALL_TOP + 45 + r), fill=fill, outline=DARK
        )
    d.ellipse((x + 42, WALL_TOP + 42, x + 48, WALL_TOP + 48), fill=PALETTE["red"])


def wall_cabinets(d: Draw, x: int, c: RGB) -> None:
    d.rectangle((x, WALL_TOP, x + 130, WALL_TOP + 60), fill=c, outline=DARK, width=2)
    for k in (43, 86):
        d.line((x + k, WALL_TOP, x + k, WALL_TOP + 60), fill=DARK, width=2)
    for k in (35, 50, 78, 93):
        d.rectangle((x + k, WALL_TOP + 40, x + k + 3, WALL_TOP + 52), fill=DARK)


def towel_rail(d: Draw, x: int, c: RGB) -> None:
    d.line((x, WALL_TOP + 60, x + 80, WALL_TOP + 60), fill=METAL, width=4)
    d.rectangle((x + 10, WALL_TOP + 60, x + 45, WALL_TOP + 120), fill=c, outline=DARK)
    d.rectangle(
        (x + 48, WALL_TOP + 60, x + 72, WALL_TOP + 105), fill=PALETTE["white"], outline=DARK
    )


def clock(d: Draw, x: int, c: RGB) -> None:
    d.ellipse((x, WALL_TOP + 10, x + 50, WALL_TOP + 60), fill=(250, 250, 245), outline=c, width=5)
    d.line((x + 25, WALL_TOP + 35, x + 25, WALL_TOP + 18), fill=DARK, width=3)
    d.line((x + 25, WALL_TOP + 35, x + 37, WALL_TOP + 40), fill=DARK, width=3)


FLOOR_ITEMS: dict[str, tuple[int, Drawer]] = {
    "fridge": (70, fridge),
    "stove": (90, stove),
    "sink": (124, sink_counter),
    "bed": (180, bed),
    "nightstand": (50, nightstand),
    "bathtub": (174, bathtub),
    "toilet": (60, toilet),
    "washbasin": (75, washbasin),
    "sofa": (180, sofa),
    "television": (120, television),
    "coffee table": (90, coffee_table),
    "dining table": (202, dining_table),
    "desk with a computer": (140, desk_computer),
    "office chair": (60, office_chair),
    "bookshelf": (80, bookshelf),
    "crib": (130, crib),
    "pile of toy blocks": (76, toy_blocks),
    "rocking horse": (110, rocking_horse),
    "armchair": (90, armchair),
    "washing machine": (80, washing_machine),
    "laundry basket": (70, laundry_basket),
    "ironing board": (110, ironing_board),
    "car": (210, car),
    "workbench": (130, workbench),
    "piano": (140, piano),
    "guitar": (60, guitar),
    "drum": (80, drum),
    "treadmill": (170, treadmill),
    "dumbbell rack": (110, dumbbell_rack),
    "exercise ball": (80, exercise_ball),
    "stack of barrels": (136, barrels),
    "wine rack": (100, wine_rack),
    "clothes rail": (155, clothes_rail),
    "shoe shelf": (110, shoe_shelf),
    "pool table": (200, pool_table),
    "pantry shelf": (120, pantry_shelf),
    "row of sacks": (96, sacks),
    "plant": (50, plant),
    "floor lamp": (50, floor_lamp),
}
WALL_ITEMS: dict[str, tuple[int, Drawer]] = {
    "window": (90, window),
    "painting": (70, painting),
    "chandelier": (100, chandelier),
    "mobile": (100, mobile),
    "dartboard": (90, dartboard),
    "wall cabinet": (130, wall_cabinets),
    "towel rail": (80, towel_rail),
    "clock": (50, clock),
}

# Each category's own furniture (distinct per category) and the extras a room of it may have.
CATEGORIES: dict[str, dict[str, list[str]]] = {
    "kitchen": {"core": ["fridge", "stove", "sink", "wall cabinet"], "extra": ["window", "clock"]},
    "bedroom": {"core": ["bed", "nightstand"], "extra": ["window", "painting", "floor lamp"]},
    "bathroom": {"core": ["bathtub", "toilet", "washbasin", "towel rail"], "extra": ["plant"]},
    "living room": {
        "core": ["sofa", "television", "coffee table"],
        "extra": ["painting", "plant", "floor lamp"],
    },
    "dining room": {
        "core": ["dining table", "chandelier"],
        "extra": ["painting", "plant", "window"],
    },
    "home office": {
        "core": ["desk with a computer", "office chair", "bookshelf"],
        "extra": ["clock", "plant"],
    },
    "nursery": {
        "core": ["crib", "pile of toy blocks", "rocking horse", "mobile"],
        "extra": ["window"],
    },
    "library": {
        "core": ["bookshelf", "armchair", "bookshelf"],
        "extra": ["floor lamp", "painting"],
    },
    "laundry room": {
        "core": ["washing machine", "laundry basket", "ironing board"],
        "extra": ["window", "clock"],
    },
    "garage": {"core": ["car", "workbench"], "extra": ["window"]},
    "music room": {"core": ["piano", "guitar", "drum"], "extra": ["painting", "window"]},
    "gym": {"core": ["treadmill", "dumbbell rack", "exercise ball"], "extra": ["clock", "window"]},
    "wine cellar": {"core": ["stack of barrels", "wine rack"], "extra": ["clock"]},
    "closet": {"core": ["clothes rail", "shoe shelf"], "extra": ["painting"]},
    "game room": {"core": ["pool table", "dartboard"], "extra": ["painting", "floor lamp"]},
    "pantry": {"core": ["pantry shelf", "row of sacks", "pantry shelf"], "extra": ["clock"]},
}

# Items whose colour is fixed by what they are (so the colour is not a distinguishing detail).
_PLAIN = {"toilet", "washbasin", "stove", "fridge", "sink", "crib", "bookshelf", "wine rack"}


def random_room(rng: random.Random, category: str) -> dict[str, Any]:
    """A room of ``category`` with random colours and extras."""
    spec = CATEGORIES[category]
    extras = rng.sample(spec["extra"], rng.randint(0, min(2, len(spec["extra"]))))
    items = []
    for name in [*spec["core"], *extras]:
        if name in _PLAIN:
            color = (
                rng.choice(["white", "grey"])
                if name not in ("crib", "bookshelf", "wine rack")
                else "brown"
            )
        else:
            color = rng.choice(sorted(PALETTE))
        items.append({"name": name, "color": color})
    return {
        "kind": "scene",
        "style": "room",
        "category": category,
        "wall": rng.choice(sorted(WALLS)),
        "floor": rng.choice(sorted(FLOORS)),
        "items": items,
    }


def _layout(
    names: list[str], table: dict[str, tuple[int, Drawer]]
) -> list[tuple[int, Drawer, str]]:
    widths = [table[n][0] for n in names]
    gap = max(8, (WIDTH - sum(widths)) // (len(names) + 1)) if names else 0
    scale = min(1.0, (WIDTH - gap * (len(names) + 1)) / max(1, sum(widths)))
    x = float(gap)
    out = []
    for name, width in zip(names, widths, strict=True):
        out.append((int(x), table[name][1], name))
        x += width * scale + gap
    return out


def render_room(spec: dict[str, Any]) -> bytes:
    """The room spec as a PNG: wall, floor, then wall things and furniture left to right."""
    image = Image.new("RGB", (WIDTH, HEIGHT), WALLS[spec["wall"]])
    d = ImageDraw.Draw(image)
    d.rectangle((0, FLOOR, WIDTH, HEIGHT), fill=FLOORS[spec["floor"]])
    d.line((0, FLOOR, WIDTH, FLOOR), fill=_shade(FLOORS[spec["floor"]], 0.6), width=3)
    wall = [i for i in spec["items"] if i["name"] in WALL_ITEMS]
    floor = [i for i in spec["items"] if i["name"] in FLOOR_ITEMS]
    for (x, drawer, _), item in zip(
        _layout([i["name"] for i in wall], WALL_ITEMS), wall, strict=True
    ):
        drawer(d, x, PALETTE[item["color"]])
    for (x, drawer, _), item in zip(
        _layout([i["name"] for i in floor], FLOOR_ITEMS), floor, strict=True
    ):
        drawer(d, x, PALETTE[item["color"]])
    return png(image)


def room_features(spec: dict[str, Any]) -> list[str]:
    """What the picture shows, as facts: each item with its colour (plain items without), then
    the walls and the floor."""
    out = []
    for item in spec["items"]:
        name = item["name"]
        fact = an(name) if name in _PLAIN else an(f"{item['color']} {name}")
        if fact not in out:
            out.append(fact)
    return [*out, f"{spec['wall']} walls", f"a {spec['floor']} floor"]
