"""COMMA's memory puzzle: five stages, a display digit and four labelled buttons; the rule for
each stage refers to what was pressed before. A mistake resets to stage 1.

``rules: comma`` (as COMMA plays it): each stage's button labels are the same for every
instance (only the displays are drawn), and the partial score is the latest one: the stages
completed at the last correct press / 5. ``rules: parley``: each instance shuffles the labels
of every stage, and the partial score is the most stages ever completed / 5.
"""

from __future__ import annotations

import random
import re
from typing import Any, ClassVar

from parley.environments.base import StepResult, View
from parley.environments.comma.base import Puzzle, rules_of, seeded
from parley.environments.comma.talk import ACKNOWLEDGE, latest_instruction, looks_like_actions
from parley.environments.render import canvas, label, png

STAGES = 5
# The labels, left to right, of each stage under ``rules: comma`` (COMMA's configs fix them per
# stage; this arrangement is this project's own, chosen so that no label sits in its position).
FIXED_LABELS = ([2, 4, 1, 3], [3, 1, 4, 2], [4, 3, 2, 1], [2, 1, 4, 3], [3, 4, 1, 2])

MANUAL = """\
Memory module. The module has a display showing a number from 1 to 4, four buttons in a row \
labelled 1, 2, 3 and 4 in some order, and a stage indicator (stage 1 to 5). Positions count \
from the left: position 1 is the leftmost button. Press the right button at each stage; after \
stage 5 the module is solved. A wrong press is a mistake and sends the module back to stage 1 \
(the stages then have to be done again, with the same displays and buttons as before).

Stage 1:
- display 1: press the button in position 2
- display 2: press the button in position 2
- display 3: press the button in position 3
- display 4: press the button in position 4

Stage 2:
- display 1: press the button labelled 4
- display 2: press the button in the same position you pressed in stage 1
- display 3: press the button in position 1
- display 4: press the button in the same position you pressed in stage 1

Stage 3:
- display 1: press the button with the same label you pressed in stage 2
- display 2: press the button with the same label you pressed in stage 1
- display 3: press the button in position 3
- display 4: press the button labelled 4

Stage 4:
- display 1: press the button in the same position you pressed in stage 1
- display 2: press the button in position 1
- display 3: press the button in the same position you pressed in stage 2
- display 4: press the button in the same position you pressed in stage 2

Stage 5:
- display 1: press the button with the same label you pressed in stage 1
- display 2: press the button with the same label you pressed in stage 2
- display 3: press the button with the same label you pressed in stage 4
- display 4: press the button with the same label you pressed in stage 3"""

# (kind, argument) per stage and display: ("pos", n) position n; ("label", n) label n;
# ("same_pos", s) the position pressed in stage s; ("same_label", s) the label pressed in stage s.
RULES: dict[int, dict[int, tuple[str, int]]] = {
    1: {1: ("pos", 2), 2: ("pos", 2), 3: ("pos", 3), 4: ("pos", 4)},
    2: {1: ("label", 4), 2: ("same_pos", 1), 3: ("pos", 1), 4: ("same_pos", 1)},
    3: {1: ("same_label", 2), 2: ("same_label", 1), 3: ("pos", 3), 4: ("label", 4)},
    4: {1: ("same_pos", 1), 2: ("pos", 1), 3: ("same_pos", 2), 4: ("same_pos", 2)},
    5: {1: ("same_label", 1), 2: ("same_label", 2), 3: ("same_label", 4), 4: ("same_label", 3)},
}


def answer(
    stage: int, display: int, labels: list[int], pressed: dict[int, tuple[int, int]]
) -> tuple[int, int]:
    """The manual's (position, label), 1-based; ``pressed[s]`` = (position, label) of stage s."""
    kind, arg = RULES[stage][display]
    if kind == "pos":
        pos = arg
    elif kind == "label":
        pos = labels.index(arg) + 1
    elif kind == "same_pos":
        pos = pressed[arg][0]
    else:
        pos = labels.index(pressed[arg][1]) + 1
    return pos, labels[pos - 1]


class MemoryPuzzle(Puzzle):
    name: ClassVar[str] = "memory"
    title: ClassVar[str] = "Memory module"
    manual: ClassVar[str] = MANUAL
    multi_step: ClassVar[bool] = True
    controls: ClassVar[str] = "press_N presses the button labelled N, wherever it is."
    shown_otherwise: ClassVar[dict[str, str]] = {
        "lights": "stages passed; the text shows the stage indicator"
    }

    @classmethod
    def generate(cls, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        # All five stages are drawn here; after a reset the module shows them again.
        rng = seeded(seed, "comma.memory")
        stages = []
        for stage in range(STAGES):
            labels = [1, 2, 3, 4]
            rng.shuffle(labels)
            if rules_of(settings) == "comma":
                labels = list(FIXED_LABELS[stage])
            stages.append({"display": rng.randint(1, 4), "labels": labels})
        return {"seed": seed, "stages": stages}

    def reset(self, instance: dict[str, Any]) -> None:
        self.instance = instance
        self.stages: list[dict[str, Any]] = [
            {"display": s["display"], "labels": list(s["labels"])} for s in instance["stages"]
        ]
        self.stage = 1
        self.pressed: dict[int, tuple[int, int]] = {}
        self.best = 0
        self.solved = False
        self.progress = 0.0

    def legal_actions(self, role: str = "solver") -> list[str]:
        return [f"press_{n}" for n in (1, 2, 3, 4)]

    def _shown(self) -> dict[str, Any]:
        return self.stages[min(self.stage, STAGES) - 1]

    def apply(self, action: str) -> StepResult:
        label_ = int(action.removeprefix("press_"))
        shown = self._shown()
        pos, want = answer(self.stage, shown["display"], shown["labels"], self.pressed)
        if label_ != want:
            self.stage = 1
            self.pressed = {}
            return StepResult("mistake (back to stage 1)", mistake=True, progress=self.progress)
        self.pressed[self.stage] = (pos, want)
        self.best = max(self.best, self.stage)
        # COMMA: the stages done at this (the last correct) press; parley: the best ever.
        self.progress = (self.stage if self.rules == "comma" else self.best) / STAGES
        if self.stage == STAGES:
            self.solved = True
        else:
            self.stage += 1
        return StepResult("performed successfully", progress=self.progress)

    def visible(self) -> dict[str, Any]:
        shown = self._shown()
        return {
            "stage": min(self.stage, STAGES),
            "display": shown["display"],
            "labels": list(shown["labels"]),
            "lights": STAGES if self.solved else self.stage - 1,
        }

    def describe(self) -> str:
        shown = self._shown()
        return (
            f"Stage indicator: {min(self.stage, STAGES)} of {STAGES}\n"
            f"Display: {shown['display']}\n"
            "Buttons, left to right: " + ", ".join(str(n) for n in shown["labels"])
        )

    def render(self) -> bytes:
        image, draw = canvas(460, 360)
        draw.rectangle((16, 16, 444, 344), fill=(92, 96, 104), outline=(150, 150, 150), width=3)
        shown = self._shown()
        draw.rectangle((120, 40, 300, 150), fill=(20, 50, 30))
        label(draw, (210, 95), str(shown["display"]), 72, fill=(120, 255, 140), anchor="mm")
        for i in range(STAGES):
            y = 280 - i * 48
            done = i < (STAGES if self.solved else self.stage - 1)
            draw.rectangle((380, y, 420, y + 30), fill=(40, 200, 60) if done else (40, 40, 40))
        label(draw, (400, 40), f"STAGE {min(self.stage, STAGES)}", 14, anchor="ma")
        for i, n in enumerate(shown["labels"]):
            x = 40 + i * 82
            draw.rounded_rectangle((x, 190, x + 70, 320), 8, fill=(225, 215, 180))
            label(draw, (x + 35, 255), str(n), 44, fill=(20, 20, 20), anchor="mm")
        return png(image)


# Players -------------------------------------------------------------------------------------


_PRESS = re.compile(r"\bpress the button labell?ed\s+(\d)", re.IGNORECASE)


def scripted_solver(view: View, rng: random.Random) -> str:
    """Reads out stage, display and labels; presses the label the expert names."""
    said = latest_instruction(view)
    if said:
        match = _PRESS.search(said)
        if match and f"press_{match.group(1)}" in view.legal_actions:
            return f"press_{match.group(1)}"
    data = view.data or {}
    labels = ", ".join(str(n) for n in data.get("labels", []))
    return (
        f"Stage {data.get('stage', '?')}. The display shows {data.get('display', '?')}. "
        f"The button labels from left to right are {labels}. Which one?"
    )


_DESCRIPTION = re.compile(
    r"Stage (\d)\. The display shows (\d)\. The button labels from left to right are "
    r"(\d), (\d), (\d), (\d)\.",
    re.IGNORECASE,
)
_TOLD = re.compile(r"labelled (\d) \(it is in position (\d)\)")


def scripted_expert(view: View, rng: random.Random) -> str:
    """Applies the stage rules, taking earlier stages from the conversation it remembers: each
    of its own answers (position and label) after the latest stage-1 description."""
    said = view.last_from("solver") or ""
    if looks_like_actions(said):
        return ACKNOWLEDGE
    match = _DESCRIPTION.search(said)
    if not match:
        return "Tell me the stage, the number on the display, and the button labels from left to right."
    stage, display = int(match.group(1)), int(match.group(2))
    labels = [int(match.group(i)) for i in range(3, 7)]
    if sorted(labels) != [1, 2, 3, 4] or not 1 <= stage <= STAGES or not 1 <= display <= 4:
        return (
            "That does not look right: the labels are 1 to 4 and the display 1 to 4. Again, please."
        )
    pressed: dict[int, tuple[int, int]] = {}
    current: int | None = None
    for speaker, text in view.history:
        if speaker == "solver":
            described = _DESCRIPTION.search(text)
            if described:
                current = int(described.group(1))
                if current == 1:
                    pressed = {}
        elif speaker == view.role and current is not None:
            told = _TOLD.search(text)
            if told:
                pressed[current] = (int(told.group(2)), int(told.group(1)))
    if any(s not in pressed for s in range(1, stage)):
        return "I have lost track of the earlier stages. Please start again from stage 1."
    pos, lab = answer(stage, display, labels, pressed)
    return f"Press the button labelled {lab} (it is in position {pos})."
