"""A small real game for the dashboard's browser tests: it draws a picture every turn.

``test.paint``: the painter is shown a numbered square in a new colour each turn and says
anything; the game notes what it said (so a reply shows in the transcript as the player wrote
it) and ends in success after ``turns`` turns. Players: ``scripted`` (at once), ``slow`` (a
quarter of a second per reply, in a worker thread, so a browser can watch an episode run) and
``xss`` (as slow, replying with markup that would run script if a page inserted it as HTML).
"""

from __future__ import annotations

import io
import random
import time
from typing import Any

from PIL import Image, ImageDraw

from parley.environments.base import GameMaster, Observation, View
from parley.environments.registry import GameInfo, register

SETTINGS = {"turns": 4, "delay_s": 0.25}
XSS = '<script>window.__parley_xss = 1</script><img src=x onerror="window.__parley_xss = 2">'


def square(step: int) -> bytes:
    """A 64×64 PNG: a square in a colour of its own for each step, with the step's number."""
    colour = ((step * 70) % 256, (120 + step * 40) % 256, (200 - step * 30) % 256)
    image = Image.new("RGB", (64, 64), colour)
    ImageDraw.Draw(image).text((26, 24), str(step), fill=(0, 0, 0))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


class PaintMaster(GameMaster):
    roles = ("painter",)

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.step = 1
        self.turns = int(self.settings.get("turns", SETTINGS["turns"]))

    def system_prompt(self, role: str) -> str:
        return "Say anything about the square you are shown."

    def whose_turn(self) -> str | None:
        return "painter"

    def observe(self, role: str) -> Observation:
        step = min(self.step, self.turns)  # the last square stays shown once all are painted
        return Observation(
            text=f"square {step} of {self.turns}",
            images=[square(step)],
            data={"step": self.step, "delay_s": float(self.settings.get("delay_s", 0.25))},
        )

    def handle_reply(self, role: str, text: str) -> None:
        self.note(f"painter said: {text}")
        self.step += 1
        if self.step > self.turns:
            self.end("success", "painted every square")

    def scores(self) -> dict[str, float | None]:
        return {"main": None if self.outcome == "aborted" else 100.0 * (self.step - 1) / self.turns}


def scripted(view: View, rng: random.Random) -> str:
    return f"a square numbered {(view.data or {})['step']}"


def slow(view: View, rng: random.Random) -> str:
    time.sleep(float((view.data or {}).get("delay_s", 0.25)))
    return scripted(view, rng)


def xss(view: View, rng: random.Random) -> str:
    time.sleep(float((view.data or {}).get("delay_s", 0.25)))
    return XSS


INFO = register(
    GameInfo(
        name="test.paint",
        family="test",
        roles=("painter",),
        game_master=PaintMaster,
        instance=lambda seed, settings: {"seed": seed},
        players={"painter": {"scripted": scripted, "slow": slow, "xss": xss}},
        description="dashboard test game: a picture a turn",
        text_only=False,
        default_settings=dict(SETTINGS),
        offload_players=True,
    )
)
