"""Stimuli: the pictures the clem games show, as JSON specs.

A stimulus is a dict with a ``kind``: ``grid`` (5×5 pixel grid), ``pentomino`` (board),
``scene`` (synthetic room, outdoor or object scene) or ``photo`` (a file on disk with its
annotations). For each, this module gives the PNG, the text rendering (grids only), the
*units* a player states when describing it completely, and the *features* a referring
expression may use. Units and features are facts the picture shows, nothing more, so scripted
players may rely on them.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from PIL import Image

from parley.environments.clem import grids, pentomino, rooms, scenes
from parley.environments.clem.common import an
from parley.environments.render import png

Stimulus = dict[str, Any]
MAX_PHOTO_SIDE = 768


def grid_stimulus(grid: grids.Grid) -> Stimulus:
    return {"kind": "grid", "rows": list(grid)}


def noun(stim: Stimulus) -> str:
    return {"grid": "grid", "pentomino": "board"}.get(stim["kind"], "picture")


@lru_cache(maxsize=512)
def _render(key: str) -> bytes:
    stim = json.loads(key)
    kind = stim["kind"]
    if kind == "grid":
        return grids.render(tuple(stim["rows"]))
    if kind == "pentomino":
        return pentomino.render(stim)
    if kind == "scene":
        return scenes.render(stim)
    if kind == "photo":
        with Image.open(stim["path"]) as image:
            picture = image.convert("RGB")
        picture.thumbnail((MAX_PHOTO_SIDE, MAX_PHOTO_SIDE))
        return png(picture)
    raise ValueError(f"unknown stimulus kind {kind!r}")


def render(stim: Stimulus) -> bytes:
    """The stimulus as PNG bytes (cached: the same spec always gives the same bytes)."""
    return _render(json.dumps(stim, sort_keys=True))


def as_text(stim: Stimulus) -> str:
    """The text rendering; only grids have one (the paper's text variants use grids)."""
    if stim["kind"] != "grid":
        raise ValueError(f"a {stim['kind']} stimulus has no text rendering; use variant: image")
    return grids.as_text(tuple(stim["rows"]))


def units(stim: Stimulus) -> list[str]:
    """A complete description, piece by piece (what MatchIt players state and ask about)."""
    kind = stim["kind"]
    if kind == "grid":
        return grids.units(tuple(stim["rows"]))
    if kind == "pentomino":
        return pentomino.units(stim)
    if kind == "scene" and stim["style"] == "room":
        return [an(stim["category"]), *rooms.room_features(stim)]
    if kind == "scene":
        return scenes.features(stim)
    return list(stim.get("features", []))


def features(stim: Stimulus) -> list[str]:
    """Facts a referring expression may pick from, preferred ones first."""
    kind = stim["kind"]
    if kind == "grid":
        return grids.features(tuple(stim["rows"]))
    if kind == "pentomino":
        return pentomino.features(stim)
    return units(stim)
