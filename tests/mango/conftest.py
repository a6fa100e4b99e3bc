"""Shared MANGO test fixtures: where the real data lives (``../shared/data/mango`` from the repo
root; required in CI) and a small hand-made maze."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.environments.mango.data import build_graph
from parley.environments.mango.scoring import Maze
from tests.conftest import require

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data" / "mango"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    require(DATA.is_dir(), f"the MANGO data is not at {DATA} (it is not part of the project)")
    return DATA


def edge(src: str, action: str, dst: str, fwd: int = 1, rev: int = 9999) -> dict:
    return {
        "src_node": src,
        "dst_node": dst,
        "action": action,
        "seen_in_forward": fwd,
        "seen_in_reversed": rev,
        "edge_min_step": min(fwd, rev),
        "seen_in_forward_answerable": fwd,
        "seen_in_reversed_answerable": rev,
        "edge_min_step_answerable": min(fwd, rev),
    }


# west of house -north-> kitchen -east-> attic -up-> cellar (one way), with the reverses of
# the first two; "dark room" is reached from the kitchen by "west", and "west" from the attic
# leads to two places (a maze that is not deterministic, as in eight real games); "down" from
# the kitchen leads to "cellars", a name one letter away from "cellar".
TOY_EDGES = [
    edge("west of house", "north", "kitchen", 1),
    edge("kitchen", "south", "west of house", 9999, 1),
    edge("kitchen", "east", "attic", 2),
    edge("attic", "west", "kitchen", 9999, 2),
    edge("attic", "up", "cellar", 3),
    edge("kitchen", "west", "dark room", 4),
    edge("attic", "west", "dark room", 5),
    edge("kitchen", "down", "cellars", 6),
]
TOY_ACTIONS = ["north", "south", "east", "west", "up", "down"]


@pytest.fixture
def toy() -> Maze:
    return Maze(build_graph(TOY_EDGES), TOY_ACTIONS)
