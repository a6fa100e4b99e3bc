"""A tiny real game for runtime tests: players and a game master that fail on purpose.

``test.counter``: the player says a number; the game master expects 1, 2, 3 … and ends in
success after ``target``. The ``gm_raises_on`` setting breaks the game master on one seed; named
players break in other ways, so tests can check the runtime contains each failure to its own
episode.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from parley.environments.base import GameMaster, Observation, View
from parley.environments.registry import GameInfo, register

SETTINGS = {"target": 3, "gm_raises_on": -1}


class CounterMaster(GameMaster):
    roles = ("counter",)

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.next = 1
        self.target = int(self.settings.get("target", 3))

    def system_prompt(self, role: str) -> str:
        return "Count upwards from 1, one number per reply."

    def whose_turn(self) -> str | None:
        return "counter"

    def observe(self, role: str) -> Observation:
        self.note(f"asking for {self.next}")
        return Observation(
            text=f"say {self.next}", data={"next": self.next, "seed": self.instance["seed"]}
        )

    def handle_reply(self, role: str, text: str) -> None:
        if self.instance["seed"] == self.settings.get("gm_raises_on"):
            raise ValueError("the game master broke on purpose")
        if text.strip() != str(self.next):
            self.violation(role, f"expected {self.next}, got {text[:20]!r}")
            return
        self.next += 1
        if self.next > self.target:
            self.end("success", "counted to the target")

    def scores(self) -> dict[str, float | None]:
        return {
            "main": None if self.outcome == "aborted" else 100.0 * (self.next - 1) / self.target
        }


def scripted(view: View, rng: random.Random) -> str:
    data = view.data or {}
    return str(data["next"])


def raises_on_3(view: View, rng: random.Random) -> str:
    """Counts, but raises in episodes of seed 3."""
    data = view.data or {}
    if data["seed"] == 3:
        raise RuntimeError("the player broke on purpose")
    return str(data["next"])


def wordy(view: View, rng: random.Random) -> str:
    """Replies with far more text than any game wants."""
    return "x" * 200_000


def slow(view: View, rng: random.Random) -> str:
    """Counts, taking a fifth of a second per reply (runs in a worker thread; a process started
    with PARLEY_TEST_SLOW_S takes that many seconds instead)."""
    time.sleep(float(os.environ.get("PARLEY_TEST_SLOW_S", "0.2")))
    return str((view.data or {})["next"])


def kills_process_on_5(view: View, rng: random.Random) -> str:
    """Counts, but ends the whole process in the episode of seed 5 while PARLEY_TEST_CRASH is
    set (a crashed worker; only for runs with worker processes)."""
    data = view.data or {}
    if data["seed"] == 5 and os.environ.get("PARLEY_TEST_CRASH"):
        os._exit(3)
    return str(data["next"])


def random_number(view: View, rng: random.Random) -> str:
    return str(rng.randint(1, 3))


def instance(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    return {"seed": seed}


INFO = register(
    GameInfo(
        name="test.counter",
        family="test",
        roles=("counter",),
        game_master=CounterMaster,
        instance=instance,
        players={
            "counter": {
                "scripted": scripted,
                "random": random_number,
                "raises_on_3": raises_on_3,
                "wordy": wordy,
                "slow": slow,
                "kills_process_on_5": kills_process_on_5,
            }
        },
        description="test game",
        text_only=True,
        default_settings=dict(SETTINGS),
        offload_players=True,
    )
)
