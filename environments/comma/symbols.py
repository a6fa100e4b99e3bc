"""The keypad's symbols: each drawn with Pillow primitives and known by a short name.

Every symbol is a function ``draw(d, x, y, s, ink)`` that draws inside the square whose top-left
corner is ``(x, y)`` and whose side is ``s``. ``SYMBOLS`` maps name → (drawer, how it looks in
words), the words being what the manual prints beside the name.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from PIL import ImageDraw

Ink = tuple[int, int, int]
Drawer = Callable[[ImageDraw.ImageDraw, float, float, float, Ink], None]


def _w(s: float) -> int:
    return max(2, round(s / 11))


def _pts(x: float, y: float, s: float, rel: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(x + s * a, y + s * b) for a, b in rel]


def _star(cx: float, cy: float, r: float, points: int = 5) -> list[tuple[float, float]]:
    out = []
    for i in range(points * 2):
        radius = r if i % 2 == 0 else r * 0.42
        angle = -math.pi / 2 + i * math.pi / points
        out.append((cx + radius * math.cos(angle), cy + radius * math.sin(angle)))
    return out


def ring(d, x, y, s, ink):
    d.ellipse((x + 0.2 * s, y + 0.2 * s, x + 0.8 * s, y + 0.8 * s), outline=ink, width=_w(s))


def dotted_ring(d, x, y, s, ink):
    ring(d, x, y, s, ink)
    d.ellipse((x + 0.43 * s, y + 0.43 * s, x + 0.57 * s, y + 0.57 * s), fill=ink)


def target(d, x, y, s, ink):
    ring(d, x, y, s, ink)
    d.ellipse((x + 0.35 * s, y + 0.35 * s, x + 0.65 * s, y + 0.65 * s), outline=ink, width=_w(s))


def plus(d, x, y, s, ink):
    w = _w(s) + 1
    d.line(_pts(x, y, s, [(0.5, 0.18), (0.5, 0.82)]), fill=ink, width=w)
    d.line(_pts(x, y, s, [(0.18, 0.5), (0.82, 0.5)]), fill=ink, width=w)


def cross(d, x, y, s, ink):
    w = _w(s) + 1
    d.line(_pts(x, y, s, [(0.22, 0.22), (0.78, 0.78)]), fill=ink, width=w)
    d.line(_pts(x, y, s, [(0.78, 0.22), (0.22, 0.78)]), fill=ink, width=w)


def triangle(d, x, y, s, ink):
    d.polygon(_pts(x, y, s, [(0.5, 0.18), (0.82, 0.78), (0.18, 0.78)]), outline=ink, width=_w(s))


def square(d, x, y, s, ink):
    d.rectangle((x + 0.24 * s, y + 0.24 * s, x + 0.76 * s, y + 0.76 * s), outline=ink, width=_w(s))


def diamond(d, x, y, s, ink):
    d.polygon(_pts(x, y, s, [(0.5, 0.15), (0.82, 0.5), (0.5, 0.85), (0.18, 0.5)]), fill=ink)


def star(d, x, y, s, ink):
    d.polygon(_star(x + 0.5 * s, y + 0.53 * s, 0.36 * s), fill=ink)


def hollow_star(d, x, y, s, ink):
    points = _star(x + 0.5 * s, y + 0.53 * s, 0.36 * s)
    d.line([*points, points[0], points[1]], fill=ink, width=_w(s), joint="curve")


def crescent(d, x, y, s, ink):
    d.ellipse((x + 0.18 * s, y + 0.18 * s, x + 0.82 * s, y + 0.82 * s), fill=ink)
    d.ellipse((x + 0.36 * s, y + 0.1 * s, x + 0.96 * s, y + 0.74 * s), fill=_paper)


def hourglass(d, x, y, s, ink):
    d.polygon(_pts(x, y, s, [(0.22, 0.18), (0.78, 0.18), (0.5, 0.5)]), fill=ink)
    d.polygon(_pts(x, y, s, [(0.5, 0.5), (0.78, 0.82), (0.22, 0.82)]), fill=ink)


def bowtie(d, x, y, s, ink):
    d.polygon(_pts(x, y, s, [(0.18, 0.22), (0.5, 0.5), (0.18, 0.78)]), fill=ink)
    d.polygon(_pts(x, y, s, [(0.82, 0.22), (0.5, 0.5), (0.82, 0.78)]), fill=ink)


def lightning(d, x, y, s, ink):
    d.polygon(
        _pts(
            x,
            y,
            s,
            [(0.58, 0.12), (0.28, 0.55), (0.48, 0.55), (0.4, 0.88), (0.72, 0.42), (0.52, 0.42)],
        ),
        fill=ink,
    )


def arrow_up(d, x, y, s, ink):
    d.polygon(_pts(x, y, s, [(0.5, 0.15), (0.8, 0.48), (0.2, 0.48)]), fill=ink)
    d.rectangle((x + 0.42 * s, y + 0.46 * s, x + 0.58 * s, y + 0.85 * s), fill=ink)


def trident(d, x, y, s, ink):
    w = _w(s)
    d.line(_pts(x, y, s, [(0.5, 0.2), (0.5, 0.85)]), fill=ink, width=w)
    d.line(_pts(x, y, s, [(0.25, 0.2), (0.25, 0.45), (0.75, 0.45), (0.75, 0.2)]), fill=ink, width=w)


def eye(d, x, y, s, ink):
    # Two circle arcs whose ends meet at the eye's corners make the almond outline.
    w = _w(s)
    d.arc((x + 0.12 * s, y + 0.32 * s, x + 0.88 * s, y + 1.08 * s), 210, 330, fill=ink, width=w)
    d.arc((x + 0.12 * s, y - 0.08 * s, x + 0.88 * s, y + 0.68 * s), 30, 150, fill=ink, width=w)
    d.ellipse((x + 0.4 * s, y + 0.4 * s, x + 0.6 * s, y + 0.6 * s), fill=ink)


def spiral(d, x, y, s, ink):
    cx, cy = x + 0.5 * s, y + 0.5 * s
    points = []
    for i in range(60):
        t = i / 59 * 3.2 * math.pi
        r = 0.03 * s + 0.32 * s * i / 59
        points.append((cx + r * math.cos(t), cy + r * math.sin(t)))
    d.line(points, fill=ink, width=_w(s), joint="curve")


def wave(d, x, y, s, ink):
    points = [
        (x + s * (0.15 + 0.7 * i / 40), y + s * (0.5 + 0.18 * math.sin(i / 40 * 4 * math.pi)))
        for i in range(41)
    ]
    d.line(points, fill=ink, width=_w(s) + 1, joint="curve")


def double_bar(d, x, y, s, ink):
    d.rectangle((x + 0.3 * s, y + 0.18 * s, x + 0.42 * s, y + 0.82 * s), fill=ink)
    d.rectangle((x + 0.58 * s, y + 0.18 * s, x + 0.7 * s, y + 0.82 * s), fill=ink)


def hash_sign(d, x, y, s, ink):
    w = _w(s)
    for a in (0.38, 0.62):
        d.line(_pts(x, y, s, [(a, 0.18), (a, 0.82)]), fill=ink, width=w)
        d.line(_pts(x, y, s, [(0.18, a), (0.82, a)]), fill=ink, width=w)


def heart(d, x, y, s, ink):
    d.ellipse((x + 0.17 * s, y + 0.22 * s, x + 0.53 * s, y + 0.56 * s), fill=ink)
    d.ellipse((x + 0.47 * s, y + 0.22 * s, x + 0.83 * s, y + 0.56 * s), fill=ink)
    d.polygon(_pts(x, y, s, [(0.19, 0.46), (0.81, 0.46), (0.5, 0.84)]), fill=ink)


def horseshoe(d, x, y, s, ink):
    d.arc(
        (x + 0.2 * s, y + 0.18 * s, x + 0.8 * s, y + 0.78 * s), 135, 405, fill=ink, width=_w(s) + 2
    )
    d.line(_pts(x, y, s, [(0.18, 0.82), (0.36, 0.82)]), fill=ink, width=_w(s))
    d.line(_pts(x, y, s, [(0.64, 0.82), (0.82, 0.82)]), fill=ink, width=_w(s))


def ladder(d, x, y, s, ink):
    w = _w(s)
    d.line(_pts(x, y, s, [(0.32, 0.15), (0.32, 0.85)]), fill=ink, width=w)
    d.line(_pts(x, y, s, [(0.68, 0.15), (0.68, 0.85)]), fill=ink, width=w)
    for a in (0.3, 0.5, 0.7):
        d.line(_pts(x, y, s, [(0.32, a), (0.68, a)]), fill=ink, width=w)


def sun(d, x, y, s, ink):
    d.ellipse((x + 0.36 * s, y + 0.36 * s, x + 0.64 * s, y + 0.64 * s), fill=ink)
    for i in range(8):
        a = i * math.pi / 4
        d.line(
            [
                (x + s * (0.5 + 0.22 * math.cos(a)), y + s * (0.5 + 0.22 * math.sin(a))),
                (x + s * (0.5 + 0.38 * math.cos(a)), y + s * (0.5 + 0.38 * math.sin(a))),
            ],
            fill=ink,
            width=_w(s),
        )


def chevron(d, x, y, s, ink):
    d.line(_pts(x, y, s, [(0.2, 0.3), (0.5, 0.72), (0.8, 0.3)]), fill=ink, width=_w(s) + 2)


def key(d, x, y, s, ink):
    w = _w(s)
    d.ellipse((x + 0.15 * s, y + 0.35 * s, x + 0.45 * s, y + 0.65 * s), outline=ink, width=w)
    d.line(_pts(x, y, s, [(0.45, 0.5), (0.85, 0.5)]), fill=ink, width=w)
    d.line(_pts(x, y, s, [(0.72, 0.5), (0.72, 0.66)]), fill=ink, width=w)
    d.line(_pts(x, y, s, [(0.84, 0.5), (0.84, 0.66)]), fill=ink, width=w)


# The symbols' panel colour, which the crescent's cut-out must match.
_paper = (238, 232, 214)

SYMBOLS: dict[str, tuple[Drawer, str]] = {
    "ring": (ring, "an empty circle"),
    "dotted-ring": (dotted_ring, "an empty circle with a dot in its centre"),
    "target": (target, "two circles, one inside the other"),
    "plus": (plus, "a plus sign"),
    "cross": (cross, "an X, two crossing diagonal lines"),
    "triangle": (triangle, "an outlined triangle pointing up"),
    "square": (square, "an outlined square"),
    "diamond": (diamond, "a solid diamond (a square standing on a corner)"),
    "star": (star, "a solid five-pointed star"),
    "hollow-star": (hollow_star, "an outlined five-pointed star"),
    "crescent": (crescent, "a crescent moon opening to the upper right"),
    "hourglass": (hourglass, "two solid triangles meeting at their tips, one above the other"),
    "bowtie": (bowtie, "two solid triangles meeting at their tips, side by side"),
    "lightning": (lightning, "a solid lightning bolt"),
    "arrow-up": (arrow_up, "a solid arrow pointing up"),
    "trident": (trident, "a fork with three prongs pointing up"),
    "eye": (eye, "an eye: an almond outline with a dot in the middle"),
    "spiral": (spiral, "a spiral line"),
    "wave": (wave, "a horizontal wavy line"),
    "double-bar": (double_bar, "two solid vertical bars side by side"),
    "hash": (hash_sign, "a hash sign: two vertical and two horizontal lines crossing"),
    "heart": (heart, "a solid heart"),
    "horseshoe": (horseshoe, "an arch open at the bottom with a short foot on each side"),
    "ladder": (ladder, "a ladder: two uprights joined by three rungs"),
    "sun": (sun, "a small solid circle with eight short rays"),
    "chevron": (chevron, "a V-shaped chevron"),
    "key": (key, "a key lying on its side, ring on the left"),
}


def draw_symbol(
    d: ImageDraw.ImageDraw, name: str, x: float, y: float, s: float, ink: Ink = (25, 25, 25)
) -> None:
    """Draw symbol ``name`` in the square at ``(x, y)`` of side ``s`` (on the keypad's paper)."""
    SYMBOLS[name][0](d, x, y, s, ink)
