"""Synthetic stand-ins for the photo sets, used when no dataset is on disk.

The paper's photo experiments use ADE20K, DOCCI, CLEVR (Reference game) and Visual Genome
(MatchIt), which parley cannot ship. These generators give pictures with the same kind of
metadata the loaders read (a scene category; a list of concepts; a list of objects with size,
colour, material and shape), so the same target/distractor selection runs on them. Reports mark
them ``source: synthetic``: they are not the paper's photos.

- ``room`` scenes (ADE20K-like: a scene category) come from :mod:`parley.environments.clem.rooms`;
- ``outdoor`` scenes (DOCCI-like: concepts such as tree, house, car);
- ``objects`` scenes (CLEVR-like: cubes, spheres, cylinders of two sizes and materials).
"""

from __future__ import annotations

import random
from typing import Any

from PIL import Image, ImageDraw

from parley.environments.clem import rooms
from parley.environments.clem.common import an
from parley.environments.render import png

RGB = tuple[int, int, int]
W, H, GROUND = 480, 360, 250
DARK: RGB = (40, 40, 40)

# --- DOCCI-like outdoor scenes ------------------------------------------------------------

COLORED = {"house", "car", "balloon", "kite", "flower", "bench", "boat"}
CONCEPTS = (
    "tree",
    "house",
    "car",
    "sun",
    "cloud",
    "flower",
    "mountain",
    "fence",
    "balloon",
    "kite",
    "bird",
    "bench",
)
SKY_ITEMS = {"sun", "cloud", "balloon", "kite", "bird"}


def _tree(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    d.rectangle((x + 30, GROUND - 60, x + 42, GROUND), fill=(110, 75, 45))
    d.ellipse((x, GROUND - 140, x + 72, GROUND - 50), fill=(50, 130, 60), outline=(30, 90, 40))


def _house(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    d.rectangle((x, GROUND - 80, x + 100, GROUND), fill=c, outline=DARK, width=2)
    d.polygon(
        [(x - 8, GROUND - 80), (x + 50, GROUND - 125), (x + 108, GROUND - 80)],
        fill=(150, 60, 50),
        outline=DARK,
    )
    d.rectangle((x + 40, GROUND - 45, x + 60, GROUND), fill=(110, 75, 45), outline=DARK)
    d.rectangle((x + 12, GROUND - 65, x + 32, GROUND - 45), fill=(170, 210, 235), outline=DARK)
    d.rectangle((x + 68, GROUND - 65, x + 88, GROUND - 45), fill=(170, 210, 235), outline=DARK)


def _car(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    d.rounded_rectangle((x, GROUND - 40, x + 110, GROUND - 12), radius=9, fill=c, outline=DARK)
    d.polygon(
        [
            (x + 22, GROUND - 40),
            (x + 38, GROUND - 62),
            (x + 78, GROUND - 62),
            (x + 94, GROUND - 40),
        ],
        fill=c,
        outline=DARK,
    )
    for wx in (x + 14, x + 74):
        d.ellipse((wx, GROUND - 24, wx + 22, GROUND - 2), fill=DARK)


def _flower(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    d.line((x + 20, GROUND, x + 20, GROUND - 45), fill=(50, 130, 60), width=3)
    for dx, dy in ((-9, 0), (9, 0), (0, -9), (0, 9)):
        d.ellipse(
            (x + 20 + dx - 8, GROUND - 52 + dy - 8, x + 20 + dx + 8, GROUND - 52 + dy + 8), fill=c
        )
    d.ellipse((x + 14, GROUND - 58, x + 26, GROUND - 46), fill=(240, 200, 40))


def _mountain(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    d.polygon(
        [(x, GROUND), (x + 70, GROUND - 150), (x + 140, GROUND)], fill=(120, 120, 130), outline=DARK
    )
    d.polygon(
        [(x + 52, GROUND - 113), (x + 70, GROUND - 150), (x + 88, GROUND - 113)],
        fill=(250, 250, 250),
    )


def _fence(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    for px in range(x, x + 120, 20):
        d.polygon(
            [
                (px, GROUND),
                (px, GROUND - 45),
                (px + 7, GROUND - 52),
                (px + 14, GROUND - 45),
                (px + 14, GROUND),
            ],
            fill=(235, 230, 215),
            outline=DARK,
        )
    for y in (GROUND - 36, GROUND - 16):
        d.rectangle((x - 4, y, x + 118, y + 5), fill=(235, 230, 215), outline=DARK)


def _bench(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    d.rectangle((x, GROUND - 30, x + 100, GROUND - 24), fill=c, outline=DARK)
    d.rectangle((x, GROUND - 55, x + 100, GROUND - 45), fill=c, outline=DARK)
    for lx in (x + 8, x + 86):
        d.rectangle((lx, GROUND - 45, lx + 6, GROUND), fill=DARK)


def _boat(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    d.rectangle((x - 10, GROUND - 12, x + 130, GROUND), fill=(70, 130, 200))
    d.polygon(
        [(x, GROUND - 30), (x + 120, GROUND - 30), (x + 100, GROUND - 8), (x + 20, GROUND - 8)],
        fill=c,
        outline=DARK,
    )
    d.line((x + 60, GROUND - 30, x + 60, GROUND - 100), fill=DARK, width=3)
    d.polygon(
        [(x + 62, GROUND - 98), (x + 62, GROUND - 36), (x + 105, GROUND - 36)],
        fill=(250, 250, 250),
        outline=DARK,
    )


def _sun(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    d.ellipse((x, 20, x + 60, 80), fill=(250, 210, 50))


def _cloud(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    for dx, dy, r in ((0, 10, 22), (25, 0, 28), (52, 10, 22)):
        d.ellipse((x + dx, 40 + dy, x + dx + 2 * r, 40 + dy + 2 * r - 10), fill=(250, 250, 250))


def _balloon(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    d.ellipse((x, 30, x + 44, 84), fill=c, outline=DARK)
    d.line((x + 22, 84, x + 26, 130), fill=DARK)


def _kite(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    d.polygon([(x + 25, 20), (x + 50, 55), (x + 25, 100), (x, 55)], fill=c, outline=DARK)
    d.line((x + 25, 100, x + 45, 150), fill=DARK)


def _bird(d: ImageDraw.ImageDraw, x: int, c: RGB) -> None:
    d.line((x, 60, x + 15, 70, x + 30, 60), fill=DARK, width=3)


OUTDOOR_DRAW = {
    "tree": (72, _tree),
    "house": (108, _house),
    "car": (110, _car),
    "flower": (40, _flower),
    "mountain": (140, _mountain),
    "fence": (120, _fence),
    "bench": (100, _bench),
    "boat": (130, _boat),
    "sun": (60, _sun),
    "cloud": (100, _cloud),
    "balloon": (44, _balloon),
    "kite": (50, _kite),
    "bird": (30, _bird),
}
OUTDOOR_COLORS = ("red", "blue", "yellow", "purple", "orange", "pink", "white", "green")


def random_outdoor(rng: random.Random, n: tuple[int, int] = (3, 5)) -> dict[str, Any]:
    """An outdoor scene with a few concepts, at most two of them in the sky."""
    names = list(OUTDOOR_DRAW)
    while True:
        chosen = rng.sample(names, rng.randint(*n))
        if (
            sum(c in SKY_ITEMS for c in chosen) <= 2
            and sum(c not in SKY_ITEMS for c in chosen) <= 3
        ):
            break
    items = [
        {"name": c, "color": rng.choice(OUTDOOR_COLORS) if c in COLORED else ""} for c in chosen
    ]
    return {"kind": "scene", "style": "outdoor", "items": items}


def render_outdoor(spec: dict[str, Any]) -> bytes:
    image = Image.new("RGB", (W, H), (170, 210, 240))
    d = ImageDraw.Draw(image)
    d.rectangle((0, GROUND, W, H), fill=(110, 170, 90))
    for group in (SKY_ITEMS, set(OUTDOOR_DRAW) - SKY_ITEMS):
        items = [i for i in spec["items"] if i["name"] in group]
        widths = [OUTDOOR_DRAW[i["name"]][0] for i in items]
        gap = max(6, (W - sum(widths)) // (len(items) + 1)) if items else 0
        x = gap
        for item, width in zip(items, widths, strict=True):
            color = rooms.PALETTE.get(item["color"], (200, 200, 200))
            OUTDOOR_DRAW[item["name"]][1](d, x, color)
            x += width + gap
    return png(image)


def outdoor_features(spec: dict[str, Any]) -> list[str]:
    facts = [
        an(f"{i['color']} {i['name']}") if i["color"] else an(i["name"]) for i in spec["items"]
    ]
    return facts


def outdoor_concepts(spec: dict[str, Any]) -> list[str]:
    return [i["name"] for i in spec["items"]]


# --- CLEVR-like object scenes ---------------------------------------------------------------

CLEVR_COLORS: dict[str, RGB] = {
    "gray": (87, 87, 87),
    "red": (173, 35, 35),
    "blue": (42, 75, 215),
    "green": (29, 105, 20),
    "brown": (129, 74, 25),
    "purple": (129, 38, 192),
    "cyan": (41, 208, 208),
    "yellow": (255, 238, 51),
}
CLEVR_SHAPES = ("cube", "sphere", "cylinder")
CLEVR_SIZES = {"small": 26, "large": 46}
CLEVR_MATERIALS = ("rubber", "metal")


def random_objects(rng: random.Random, n: tuple[int, int] = (3, 6)) -> dict[str, Any]:
    """A CLEVR-like scene: objects on a grey floor, none overlapping."""
    objects: list[dict[str, Any]] = []
    tries = 0
    count = rng.randint(*n)
    while len(objects) < count and tries < 500:
        tries += 1
        size = rng.choice(sorted(CLEVR_SIZES))
        r = CLEVR_SIZES[size]
        x, y = rng.randint(40 + r, W - 40 - r), rng.randint(120 + r, H - 20 - r)
        if any(
            abs(x - o["x"]) < r + CLEVR_SIZES[o["size"]] + 8
            and abs(y - o["y"]) < r + CLEVR_SIZES[o["size"]] + 8
            for o in objects
        ):
            continue
        objects.append(
            {
                "size": size,
                "color": rng.choice(sorted(CLEVR_COLORS)),
                "material": rng.choice(CLEVR_MATERIALS),
                "shape": rng.choice(CLEVR_SHAPES),
                "x": x,
                "y": y,
            }
        )
    objects.sort(key=lambda o: o["y"])  # far to near, as a painter would draw them
    return {"kind": "scene", "style": "objects", "objects": objects}


def _light(c: RGB, f: float) -> RGB:
    return tuple(min(255, int(v + (255 - v) * f)) if f > 0 else int(v * (1 + f)) for v in c)  # type: ignore[return-value]


def render_objects(spec: dict[str, Any]) -> bytes:
    image = Image.new("RGB", (W, H), (128, 128, 126))
    d = ImageDraw.Draw(image)
    d.rectangle((0, 0, W, 110), fill=(150, 150, 148))
    for o in spec["objects"]:
        x, y, r = o["x"], o["y"], CLEVR_SIZES[o["size"]]
        c = CLEVR_COLORS[o["color"]]
        d.ellipse((x - r, y + r - 8, x + r, y + r + 8), fill=(100, 100, 98))  # shadow
        if o["shape"] == "sphere":
            d.ellipse((x - r, y - r, x + r, y + r), fill=c)
            d.ellipse((x - r, y - r, x + r // 2, y + r // 2), fill=_light(c, 0.12))
        elif o["shape"] == "cube":
            t = r // 2
            d.polygon(
                [(x - r, y - r + t), (x - r + t, y - r), (x + r, y - r), (x + r - t, y - r + t)],
                fill=_light(c, 0.3),
            )
            d.polygon(
                [(x + r - t, y - r + t), (x + r, y - r), (x + r, y + r - t), (x + r - t, y + r)],
                fill=_light(c, -0.3),
            )
            d.rectangle((x - r, y - r + t, x + r - t, y + r), fill=c)
        else:
            t = r // 3
            d.rectangle((x - r, y - r + t, x + r, y + r - t), fill=c)
            d.ellipse((x - r, y + r - 2 * t, x + r, y + r), fill=c)
            d.ellipse((x - r, y - r, x + r, y - r + 2 * t), fill=_light(c, 0.3))
        if o["material"] == "metal":  # a bright specular highlight tells metal from rubber
            d.ellipse(
                (x - r // 2, y - r // 2, x - r // 2 + r // 3, y - r // 2 + r // 3),
                fill=(250, 250, 250),
            )
    return png(image)


def object_categories(spec: dict[str, Any]) -> list[str]:
    """CLEVR's per-object categories: size, colour, material and shape."""
    return [f"{o['size']} {o['color']} {o['material']} {o['shape']}" for o in spec["objects"]]


def object_features(spec: dict[str, Any]) -> list[str]:
    out = []
    for cat in object_categories(spec):
        fact = an(cat)
        if fact not in out:
            out.append(fact)
    return out


# --- dispatch --------------------------------------------------------------------------------


def render(spec: dict[str, Any]) -> bytes:
    style = spec["style"]
    if style == "room":
        return rooms.render_room(spec)
    if style == "outdoor":
        return render_outdoor(spec)
    return render_objects(spec)


def features(spec: dict[str, Any]) -> list[str]:
    style = spec["style"]
    if style == "room":
        return rooms.room_features(spec)
    if style == "outdoor":
        return outdoor_features(spec)
    return object_features(spec)
