"""Shared headless rendering helpers (Pillow): fonts, PNG encoding, labelled panels."""

from __future__ import annotations

import io
from functools import lru_cache

from PIL import Image, ImageDraw, ImageFont

Color = tuple[int, int, int]

COLORS: dict[str, Color] = {
    "red": (214, 39, 40),
    "blue": (31, 90, 200),
    "yellow": (240, 200, 30),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
    "green": (44, 160, 44),
    "purple": (128, 60, 170),
    "orange": (255, 127, 14),
    "grey": (128, 128, 128),
}
BACKGROUND: Color = (60, 63, 70)


@lru_cache(maxsize=32)
def font(size: int = 16) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's bundled font at ``size`` (the same on every machine, so renders are stable)."""
    return ImageFont.load_default(size=size)


def png(image: Image.Image) -> bytes:
    """Encode as PNG with fixed settings, so the same picture gives the same bytes.

    Level 1 compression: much quicker to encode than the default, for slightly larger files."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False, compress_level=1)
    return buffer.getvalue()


def canvas(
    width: int, height: int, color: Color = BACKGROUND
) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("RGB", (width, height), color)
    return image, ImageDraw.Draw(image)


def label(
    draw: ImageDraw.ImageDraw,
    xy: tuple[float, float],
    text: str,
    size: int = 16,
    fill: Color = (235, 235, 235),
    anchor: str = "la",
) -> None:
    draw.text(xy, text, font=font(size), fill=fill, anchor=anchor)
