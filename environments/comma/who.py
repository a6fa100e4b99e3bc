"""COMMA's "who" puzzle: a display word says which button's label to read; that label's list
says which button to press (pass/fail)."""

from __future__ import annotations

import random
import re
from typing import Any, ClassVar

from parley.environments.base import StepResult, View
from parley.environments.comma.base import Puzzle, seeded
from parley.environments.comma.talk import (
    ACKNOWLEDGE,
    POSITIONS6,
    latest_instruction,
    looks_like_actions,
    positions_in,
    words,
)
from parley.environments.render import canvas, label, png

# Step 1: the display word → the button whose label to read ("" is an empty display).
STEP1: dict[str, str] = {
    "YES": "middle_left",
    "FIRST": "top_right",
    "DISPLAY": "bottom_right",
    "OKAY": "top_right",
    "SAYS": "bottom_right",
    "NOTHING": "middle_left",
    "": "bottom_left",
    "BLANK": "middle_right",
    "NO": "bottom_right",
    "LED": "middle_left",
    "LEAD": "bottom_right",
    "READ": "middle_right",
    "RED": "middle_right",
    "REED": "bottom_left",
    "LEED": "bottom_left",
    "HOLD ON": "bottom_right",
    "YOU": "middle_right",
    "YOU ARE": "bottom_right",
    "YOUR": "middle_right",
    "YOU'RE": "middle_right",
    "UR": "top_left",
    "THERE": "bottom_right",
    "THEY'RE": "bottom_left",
    "THEIR": "middle_right",
    "THEY ARE": "middle_left",
    "SEE": "bottom_right",
    "C": "top_right",
    "CEE": "bottom_right",
}

# Step 2: a label → the labels to look for, in order; press the first one on the module.
STEP2: dict[str, list[str]] = {
    k: v.split(", ")
    for k, v in {
        "READY": "YES, OKAY, WHAT, MIDDLE, LEFT, PRESS, RIGHT, BLANK, READY, NO, FIRST, UHHH, NOTHING, WAIT",
        "FIRST": "LEFT, OKAY, YES, MIDDLE, NO, RIGHT, NOTHING, UHHH, WAIT, READY, BLANK, WHAT, PRESS, FIRST",
        "NO": "BLANK, UHHH, WAIT, FIRST, WHAT, READY, RIGHT, YES, NOTHING, LEFT, PRESS, OKAY, NO, MIDDLE",
        "BLANK": "WAIT, RIGHT, OKAY, MIDDLE, BLANK, PRESS, READY, NOTHING, NO, WHAT, LEFT, UHHH, YES, FIRST",
        "NOTHING": "UHHH, RIGHT, OKAY, MIDDLE, YES, BLANK, NO, PRESS, LEFT, WHAT, WAIT, FIRST, NOTHING, READY",
        "YES": "OKAY, RIGHT, UHHH, MIDDLE, FIRST, WHAT, PRESS, READY, NOTHING, YES, LEFT, BLANK, NO, WAIT",
        "WHAT": "UHHH, WHAT, LEFT, NOTHING, READY, BLANK, MIDDLE, NO, OKAY, FIRST, WAIT, YES, PRESS, RIGHT",
        "UHHH": "READY, NOTHING, LEFT, WHAT, OKAY, YES, RIGHT, NO, PRESS, BLANK, UHHH, MIDDLE, WAIT, FIRST",
        "LEFT": "RIGHT, LEFT, FIRST, NO, MIDDLE, YES, BLANK, WHAT, UHHH, WAIT, PRESS, READY, OKAY, NOTHING",
        "RIGHT": "YES, NOTHING, READY, PRESS, NO, WAIT, WHAT, RIGHT, MIDDLE, LEFT, UHHH, BLANK, OKAY, FIRST",
        "MIDDLE": "BLANK, READY, OKAY, WHAT, NOTHING, PRESS, NO, WAIT, LEFT, MIDDLE, RIGHT, FIRST, UHHH, YES",
        "OKAY": "MIDDLE, NO, FIRST, YES, UHHH, NOTHING, WAIT, OKAY, LEFT, READY, BLANK, PRESS, WHAT, RIGHT",
        "WAIT": "UHHH, NO, BLANK, OKAY, YES, LEFT, FIRST, PRESS, WHAT, WAIT, NOTHING, READY, RIGHT, MIDDLE",
        "PRESS": "RIGHT, MIDDLE, YES, READY, PRESS, OKAY, NOTHING, UHHH, BLANK, LEFT, FIRST, WHAT, NO, WAIT",
        "YOU": "SURE, YOU ARE, YOUR, YOU'RE, NEXT, UH HUH, UR, HOLD, WHAT?, YOU, UH UH, LIKE, DONE, U",
        "YOU ARE": "YOUR, NEXT, LIKE, UH HUH, WHAT?, DONE, UH UH, HOLD, YOU, U, YOU'RE, SURE, UR, YOU ARE",
        "YOUR": "UH UH, YOU ARE, UH HUH, YOUR, NEXT, UR, SURE, U, YOU'RE, YOU, WHAT?, HOLD, LIKE, DONE",
        "YOU'RE": "YOU, YOU'RE, UR, NEXT, UH UH, YOU ARE, U, YOUR, WHAT?, UH HUH, SURE, DONE, LIKE, HOLD",
        "UR": "DONE, U, UR, UH HUH, WHAT?, SURE, YOUR, HOLD, YOU'RE, LIKE, NEXT, UH UH, YOU ARE, YOU",
        "U": "UH HUH, SURE, NEXT, WHAT?, YOU'RE, UR, UH UH, DONE, U, YOU, LIKE, HOLD, YOU ARE, YOUR",
        "UH HUH": "UH HUH, YOUR, YOU ARE, YOU, DONE, HOLD, UH UH, NEXT, SURE, LIKE, YOU'RE, UR, U, WHAT?",
        "UH UH": "UR, U, YOU ARE, YOU'RE, NEXT, UH UH, DONE, YOU, UH HUH, LIKE, YOUR, SURE, HOLD, WHAT?",
        "WHAT?": "YOU, HOLD, YOU'RE, YOUR, U, DONE, UH UH, LIKE, YOU ARE, UH HUH, UR, NEXT, WHAT?, SURE",
        "DONE": "SURE, UH HUH, NEXT, WHAT?, YOUR, UR, YOU'RE, HOLD, LIKE, YOU, U, YOU ARE, UH UH, DONE",
        "NEXT": "WHAT?, UH HUH, UH UH, YOUR, HOLD, SURE, NEXT, LIKE, DONE, YOU ARE, UR, YOU'RE, U, YOU",
        "HOLD": "YOU ARE, U, DONE, UH UH, YOU, UR, SURE, WHAT?, YOU'RE, NEXT, HOLD, UH HUH, YOUR, LIKE",
        "SURE": "YOU ARE, DONE, LIKE, YOU'RE, YOU, HOLD, UH HUH, UR, SURE, U, WHAT?, NEXT, YOUR, UH UH",
        "LIKE": "YOU'RE, NEXT, U, UR, HOLD, DONE, UH UH, WHAT?, UH HUH, YOU, LIKE, SURE, YOU ARE, YOUR",
    }.items()
}


def _manual() -> str:
    step1 = "\n".join(
        f'- "{word}": {words(pos)}' if word else f"- (empty display): {words(pos)}"
        for word, pos in STEP1.items()
    )
    step2 = "\n".join(f'- "{label_}": ' + ", ".join(lst) for label_, lst in STEP2.items())
    return f"""\
Who module. The module has a display at the top and six buttons below it in three rows of \
two: top left, top right, middle left, middle right, bottom left, bottom right. Each button \
carries a word or phrase (its label).

Step 1. Look up the display in the first list: it names the button whose label you need.
Step 2. Look up that label in the second list. Go through its list in order and stop at the \
first entry that is the label of one of the six buttons; press that button. Pressing any \
other button is a mistake.

First list (display → button to read):
{step1}

Second list (label → labels to look for, in order):
{step2}"""


MANUAL = _manual()


def button_to_press(display: str, labels: dict[str, str]) -> str:
    """The manual's answer: the position to press."""
    read = labels[STEP1[display]]
    on_module = {v: k for k, v in labels.items()}
    for candidate in STEP2[read]:
        if candidate in on_module:
            return on_module[candidate]
    raise ValueError(f"no entry of {read!r}'s list is on the module")


class WhoPuzzle(Puzzle):
    name: ClassVar[str] = "who"
    title: ClassVar[str] = "Who module"
    manual: ClassVar[str] = MANUAL
    controls: ClassVar[str] = "Press a button by its position."

    @classmethod
    def generate(cls, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        rng = seeded(seed, "comma.who")
        display = rng.choice(list(STEP1))
        labels = rng.sample(list(STEP2), len(POSITIONS6))
        return {
            "seed": seed,
            "display": display,
            "labels": dict(zip(POSITIONS6, labels, strict=True)),
        }

    def reset(self, instance: dict[str, Any]) -> None:
        self.instance = instance
        self.display: str = instance["display"]
        self.labels: dict[str, str] = dict(instance["labels"])
        self.answer = button_to_press(self.display, self.labels)
        self.solved = False
        self.progress = 0.0

    def legal_actions(self, role: str = "solver") -> list[str]:
        return [f"press_{pos}_button" for pos in POSITIONS6]

    def apply(self, action: str) -> StepResult:
        if action == f"press_{self.answer}_button":
            self.solved = True
            self.progress = 1.0
            return StepResult("performed successfully", progress=1.0)
        return StepResult("mistake", mistake=True, progress=0.0)

    def visible(self) -> dict[str, Any]:
        return {"display": self.display, "labels": dict(self.labels)}

    def describe(self) -> str:
        shown = f'"{self.display}"' if self.display else "(empty)"
        lines = [f"Display: {shown}", "Buttons:"]
        lines += [f'  {words(pos)}: "{self.labels[pos]}"' for pos in POSITIONS6]
        return "\n".join(lines)

    def render(self) -> bytes:
        image, draw = canvas(420, 440)
        draw.rectangle((16, 16, 404, 424), fill=(92, 96, 104), outline=(150, 150, 150), width=3)
        draw.rectangle((60, 36, 360, 100), fill=(20, 40, 60))
        label(draw, (210, 68), self.display, 30, fill=(230, 240, 255), anchor="mm")
        for i, pos in enumerate(POSITIONS6):
            x = 50 + (i % 2) * 170
            y = 130 + (i // 2) * 95
            draw.rounded_rectangle((x, y, x + 150, y + 75), 8, fill=(225, 215, 180))
            label(draw, (x + 75, y + 38), self.labels[pos], 22, fill=(20, 20, 20), anchor="mm")
        return png(image)


# Players -------------------------------------------------------------------------------------


def scripted_solver(view: View, rng: random.Random) -> str:
    """Reads out the display and all six labels; presses the button the expert names."""
    said = latest_instruction(view)
    if said:
        named = [f"press_{pos}_button" for pos in positions_in(said)]
        if named and named[-1] in view.legal_actions:
            return named[-1]
    data = view.data or {}
    labels = data.get("labels", {})
    display = data.get("display", "")
    shown = f'the display shows "{display}"' if display else "the display is empty"
    buttons = "; ".join(f'{words(pos)} "{labels.get(pos, "?")}"' for pos in POSITIONS6)
    return f"On this module {shown}. The buttons are: {buttons}. Which button?"


_DISPLAY = re.compile(r'the display (?:shows "([^"]*)"|is (empty))', re.IGNORECASE)
_LABEL = re.compile(r'\b(top|middle|bottom) (left|right) "([^"]*)"', re.IGNORECASE)


def scripted_expert(view: View, rng: random.Random) -> str:
    """Step 1 from the display, step 2 from the labels the solver listed."""
    said = view.last_from("solver") or ""
    if looks_like_actions(said):
        return ACKNOWLEDGE
    display = _DISPLAY.search(said)
    labels = {f"{a.lower()}_{b.lower()}": text.upper() for a, b, text in _LABEL.findall(said)}
    shown = "" if display and display.group(2) else (display.group(1).upper() if display else None)
    if (
        shown is None
        or shown not in STEP1
        or len(labels) != 6
        or any(v not in STEP2 for v in labels.values())
    ):
        return "Tell me exactly what the display says and the label on each of the six buttons, by position."
    pos = button_to_press(shown, labels)
    return f'Press the button labelled "{labels[pos]}", which is the {words(pos)} button.'
