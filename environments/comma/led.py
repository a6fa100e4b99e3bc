"""COMMA's LED puzzle: 2–5 stages, each with an LED colour (a multiplier) and four lettered
buttons; press a button whose letter times the multiplier, modulo 26, is the letter diagonally
opposite (partial score: stages done / stages)."""

from __future__ import annotations

import random
import re
import string
from typing import Any, ClassVar

from parley.environments.base import StepResult, View
from parley.environments.comma.base import Puzzle, seeded
from parley.environments.comma.talk import (
    ACKNOWLEDGE,
    OPPOSITE,
    POSITIONS4,
    latest_instruction,
    looks_like_actions,
    positions_in,
    words,
)
from parley.environments.render import COLORS, canvas, label, png

MULTIPLIERS = {"red": 2, "green": 3, "blue": 4, "yellow": 5, "purple": 6, "orange": 7}
LETTERS = string.ascii_uppercase

MANUAL = """\
LED module. A row of two to five LEDs sits at the top of the module, one per stage, and a \
number in the top-left corner shows the current stage. Solve the stages in order. Below are \
four buttons (top left, top right, bottom left, bottom right), each with a letter; the letters \
change from one stage to the next.

The current stage's LED (the first LED for stage 1, the second for stage 2, and so on) gives \
the stage's multiplier:
- red: 2
- green: 3
- blue: 4
- yellow: 5
- purple: 6
- orange: 7

Number the letters from A = 0, B = 1, … up to Z = 25. A button is correct when its letter's \
number times the multiplier, modulo 26, equals the number of the letter on the button \
diagonally opposite it (top left is opposite bottom right; top right is opposite bottom left). \
Press one correct button to finish the stage; more than one may be correct. Pressing a button \
that is not correct is a mistake, and the stage stays the same."""


def value(letter: str) -> int:
    return LETTERS.index(letter.upper())


def correct_buttons(letters: dict[str, str], color: str) -> list[str]:
    """The manual's answer: every position whose button is correct."""
    m = MULTIPLIERS[color]
    return [
        pos for pos in POSITIONS4 if value(letters[pos]) * m % 26 == value(letters[OPPOSITE[pos]])
    ]


def _stage(rng: random.Random, color: str) -> dict[str, str]:
    m = MULTIPLIERS[color]
    while True:
        pos = rng.choice(POSITIONS4)
        a = rng.randrange(26)
        b = a * m % 26
        if a == b:
            continue
        others = [p for p in POSITIONS4 if p not in (pos, OPPOSITE[pos])]
        rest = rng.sample([i for i in range(26) if i not in (a, b)], 2)
        letters = {pos: LETTERS[a], OPPOSITE[pos]: LETTERS[b]}
        letters.update({p: LETTERS[i] for p, i in zip(others, rest, strict=True)})
        return {p: letters[p] for p in POSITIONS4}


class LedPuzzle(Puzzle):
    name: ClassVar[str] = "led"
    title: ClassVar[str] = "LED module"
    manual: ClassVar[str] = MANUAL
    multi_step: ClassVar[bool] = True
    controls: ClassVar[str] = "Press a button by its position."

    @classmethod
    def generate(cls, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        # Every stage's letters are drawn here, so what the solver sees after each press is
        # fixed by the seed.
        rng = seeded(seed, "comma.led")
        n = rng.randint(2, 5)
        leds = [rng.choice(list(MULTIPLIERS)) for _ in range(n)]
        return {"seed": seed, "leds": leds, "stages": [_stage(rng, c) for c in leds]}

    def reset(self, instance: dict[str, Any]) -> None:
        self.instance = instance
        self.leds: list[str] = list(instance["leds"])
        self.stages: list[dict[str, str]] = [dict(s) for s in instance["stages"]]
        self.stage = 0
        self.solved = False
        self.progress = 0.0

    def legal_actions(self, role: str = "solver") -> list[str]:
        return [f"press_{pos}_button" for pos in POSITIONS4]

    def apply(self, action: str) -> StepResult:
        pos = action.removeprefix("press_").removesuffix("_button")
        if pos not in correct_buttons(self.stages[self.stage], self.leds[self.stage]):
            return StepResult("mistake", mistake=True, progress=self.progress)
        self.stage += 1
        self.progress = self.stage / len(self.leds)
        self.solved = self.stage == len(self.leds)
        return StepResult("performed successfully", progress=self.progress)

    def _current(self) -> int:
        return min(self.stage, len(self.leds) - 1)

    def visible(self) -> dict[str, Any]:
        return {
            "stage": self._current() + 1,
            "leds": list(self.leds),
            "letters": dict(self.stages[self._current()]),
        }

    def describe(self) -> str:
        letters = self.stages[self._current()]
        lines = [
            f"Stage number shown: {self._current() + 1}",
            "LEDs, left to right: " + ", ".join(self.leds),
            "Buttons:",
        ]
        lines += [f"  {words(pos)}: {letters[pos]}" for pos in POSITIONS4]
        return "\n".join(lines)

    def render(self) -> bytes:
        image, draw = canvas(400, 420)
        draw.rectangle((16, 16, 384, 404), fill=(92, 96, 104), outline=(150, 150, 150), width=3)
        draw.rectangle((28, 28, 78, 78), fill=(20, 20, 20))
        label(draw, (53, 53), str(self._current() + 1), 30, fill=(120, 255, 120), anchor="mm")
        n = len(self.leds)
        for i, color in enumerate(self.leds):
            cx = 200 + (i - (n - 1) / 2) * 56
            draw.ellipse((cx - 18, 36, cx + 18, 72), fill=COLORS[color], outline=(0, 0, 0), width=2)
        letters = self.stages[self._current()]
        for i, pos in enumerate(POSITIONS4):
            x = 50 + (i % 2) * 160
            y = 110 + (i // 2) * 145
            draw.rounded_rectangle((x, y, x + 140, y + 125), 10, fill=(225, 225, 225))
            label(draw, (x + 70, y + 62), letters[pos], 56, fill=(20, 20, 20), anchor="mm")
        return png(image)


# Players -------------------------------------------------------------------------------------


def scripted_solver(view: View, rng: random.Random) -> str:
    """Reads out the stage, the LED colours and the letters; presses the button it is told."""
    said = latest_instruction(view)
    if said:
        named = [f"press_{pos}_button" for pos in positions_in(said)]
        if named and named[0] in view.legal_actions:
            return named[0]
    data = view.data or {}
    letters = data.get("letters", {})
    buttons = ", ".join(f"{words(pos)} {letters.get(pos, '?')}" for pos in POSITIONS4)
    return (
        f"Stage {data.get('stage', '?')}. The LEDs from left to right are "
        f"{', '.join(data.get('leds', []))}. The buttons show: {buttons}. Which button?"
    )


_STAGE = re.compile(r"\bstage\s+(\d)", re.IGNORECASE)
_LEDS = re.compile(r"LEDs from left to right are\s+([a-z ,]+?)\.", re.IGNORECASE)
_BUTTON = re.compile(r"\b(top|bottom)\s+(left|right)\s+([A-Z])\b")


def scripted_expert(view: View, rng: random.Random) -> str:
    """Takes the multiplier from the current stage's LED and checks the diagonals."""
    said = view.last_from("solver") or ""
    if looks_like_actions(said):
        return ACKNOWLEDGE
    stage, leds = _STAGE.search(said), _LEDS.search(said)
    letters = {f"{a.lower()}_{b.lower()}": c for a, b, c in _BUTTON.findall(said)}
    colors = [c.strip().lower() for c in leds.group(1).split(",")] if leds else []
    if (
        not stage
        or len(letters) != 4
        or not 0 < int(stage.group(1)) <= len(colors)
        or any(c not in MULTIPLIERS for c in colors)
    ):
        return (
            "Tell me the stage number, the colours of all LEDs from left to right, and the "
            "letter on each button (top left, top right, bottom left, bottom right)."
        )
    color = colors[int(stage.group(1)) - 1]
    answer = correct_buttons(letters, color)
    if not answer:
        return "None of those buttons works with that LED. Please read the letters again."
    return f"The stage LED is {color}, multiplier {MULTIPLIERS[color]}. Press the {words(answer[0])} button."
