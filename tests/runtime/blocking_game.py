"""A test game whose player blocks its process's event loop: a worker that is slow, not dead.

``test.blocking``: ``test.counter``'s game master; the ``blocks_loop`` player sleeps on the
event loop (``PARLEY_TEST_BLOCK_S`` seconds, 1.5 by default) before each reply.
"""

from __future__ import annotations

import os
import random
import time

from parley.environments.base import View
from parley.environments.registry import GameInfo, register
from tests.runtime.faulty_game import SETTINGS, CounterMaster, instance


def blocks_loop(view: View, rng: random.Random) -> str:
    """Counts, holding the event loop up first (the game does not offload its players)."""
    time.sleep(float(os.environ.get("PARLEY_TEST_BLOCK_S", "1.5")))
    return str((view.data or {})["next"])


INFO = register(
    GameInfo(
        name="test.blocking",
        family="test",
        roles=("counter",),
        game_master=CounterMaster,
        instance=instance,
        players={"counter": {"blocks_loop": blocks_loop}},
        description="test game whose player blocks the event loop",
        text_only=True,
        default_settings=dict(SETTINGS),
        offload_players=False,
    )
)
