"""COMMA's password puzzle: five letter wheels of three letters each; set the one word of the
manual's list they can spell and submit it (pass/fail)."""

from __future__ import annotations

import random
import re
import string
from typing import Any, ClassVar

from parley.environments.base import StepResult, View
from parley.environments.comma.base import Puzzle, seeded
from parley.environments.comma.talk import ACKNOWLEDGE, latest_instruction, looks_like_actions
from parley.environments.render import canvas, label, png

WORDS = [
    "about",
    "after",
    "again",
    "below",
    "could",
    "every",
    "first",
    "found",
    "great",
    "house",
    "large",
    "learn",
    "never",
    "other",
    "place",
    "plant",
    "point",
    "right",
    "small",
    "sound",
    "spell",
    "still",
    "study",
    "their",
    "there",
    "these",
    "thing",
    "think",
    "three",
    "water",
    "where",
    "which",
    "world",
    "would",
    "write",
]
WHEELS = 5

MANUAL = f"""\
Password module. The module has five letter wheels side by side, each with an up button \
above it and a down button below it, and a submit button. Each wheel carries three letters; \
its window shows all three, one above the other, and the middle one is the letter currently \
set. The up button brings the letter above into the middle; the down button brings the \
letter below into the middle (the wheel wraps around).

Exactly one word of the list below can be spelled by taking one letter from each wheel, \
left to right. Set that word and press submit. Submitting anything else is a mistake.

Words: {", ".join(WORDS)}"""


def spellable(wheels: list[list[str]]) -> list[str]:
    """The words of the list the wheels can spell."""
    return [w for w in WORDS if all(w[i] in wheels[i] for i in range(WHEELS))]


class PasswordPuzzle(Puzzle):
    name: ClassVar[str] = "password"
    title: ClassVar[str] = "Password module"
    manual: ClassVar[str] = MANUAL
    controls: ClassVar[str] = (
        "up_button_N brings the letter above wheel N's middle letter into the middle; "
        "down_button_N brings the letter below it; submit enters the word in the middle row."
    )

    @classmethod
    def generate(cls, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        rng = seeded(seed, "comma.password")
        while True:
            word = rng.choice(WORDS)
            wheels = []
            for ch in word:
                others = rng.sample([c for c in string.ascii_lowercase if c != ch], 2)
                letters = [ch, *others]
                rng.shuffle(letters)
                wheels.append(letters)
            selected = [rng.randrange(3) for _ in range(WHEELS)]
            shown = "".join(w[i] for w, i in zip(wheels, selected, strict=True))
            if spellable(wheels) == [word] and shown != word:
                return {"seed": seed, "word": word, "wheels": wheels, "selected": selected}

    def reset(self, instance: dict[str, Any]) -> None:
        self.instance = instance
        self.word: str = instance["word"]
        self.wheels: list[list[str]] = [list(w) for w in instance["wheels"]]
        self.selected: list[int] = list(instance["selected"])
        self.solved = False
        self.progress = 0.0

    def legal_actions(self, role: str = "solver") -> list[str]:
        ups = [f"up_button_{i}" for i in range(1, WHEELS + 1)]
        downs = [f"down_button_{i}" for i in range(1, WHEELS + 1)]
        return [*ups, *downs, "submit"]

    def current(self) -> str:
        return "".join(w[i] for w, i in zip(self.wheels, self.selected, strict=True))

    def apply(self, action: str) -> StepResult:
        if action == "submit":
            if self.current() == self.word:
                self.solved = True
                self.progress = 1.0
                return StepResult("performed successfully", progress=1.0)
            return StepResult("mistake", mistake=True, progress=0.0)
        kind, _, n = action.split("_")
        i = int(n) - 1
        self.selected[i] = (self.selected[i] + (-1 if kind == "up" else 1)) % 3
        return StepResult("performed successfully", progress=0.0)

    def _window(self, i: int) -> tuple[str, str, str]:
        w, s = self.wheels[i], self.selected[i]
        return w[(s - 1) % 3], w[s], w[(s + 1) % 3]

    def visible(self) -> dict[str, Any]:
        return {"windows": [list(self._window(i)) for i in range(WHEELS)]}

    def describe(self) -> str:
        lines = ["Five wheels, left to right; each window shows above / middle (set) / below:"]
        for i in range(WHEELS):
            above, middle, below = self._window(i)
            lines.append(f"  wheel {i + 1}: {above} / {middle} / {below}")
        lines.append(f"Word in the middle row: {self.current()}")
        return "\n".join(lines)

    def render(self) -> bytes:
        image, draw = canvas(520, 400)
        draw.rectangle((16, 16, 504, 384), fill=(92, 96, 104), outline=(150, 150, 150), width=3)
        for i in range(WHEELS):
            x = 40 + i * 92
            draw.polygon([(x + 35, 40), (x + 55, 70), (x + 15, 70)], fill=(210, 210, 210))
            draw.rectangle((x, 80, x + 70, 290), fill=(20, 40, 20))
            draw.rectangle((x, 150, x + 70, 220), outline=(240, 240, 120), width=3)
            for j, ch in enumerate(self._window(i)):
                shade = (120, 255, 140) if j == 1 else (70, 140, 80)
                label(
                    draw,
                    (x + 35, 115 + j * 70),
                    ch.upper(),
                    40 if j == 1 else 30,
                    fill=shade,
                    anchor="mm",
                )
            draw.polygon([(x + 15, 300), (x + 55, 300), (x + 35, 330)], fill=(210, 210, 210))
        draw.rounded_rectangle((190, 340, 330, 376), 8, fill=(200, 200, 200))
        label(draw, (260, 358), "SUBMIT", 18, fill=(20, 20, 20), anchor="mm")
        return png(image)


# Players -------------------------------------------------------------------------------------

_SET = re.compile(r"\bset the word ([a-z]{5})\b", re.IGNORECASE)


def scripted_solver(view: View, rng: random.Random) -> str:
    """Reads out the three letters of every wheel; turns the wheels to the word it is told."""
    windows = (view.data or {}).get("windows", [])
    said = latest_instruction(view)
    if said:
        match = _SET.search(said)
        word = match.group(1).lower() if match else ""
        if len(word) == len(windows) and all(word[i] in w for i, w in enumerate(windows)):
            actions = []
            for i, (above, _middle, below) in enumerate(windows):
                if word[i] == above:
                    actions.append(f"up_button_{i + 1}")
                elif word[i] == below:
                    actions.append(f"down_button_{i + 1}")
            return "\n".join([*actions, "submit"])
    wheels = " ".join(f"Wheel {i + 1}: {', '.join(w)}." for i, w in enumerate(windows))
    return f"Each wheel shows three letters (above, middle, below). {wheels} What is the word?"


_WHEEL = re.compile(r"\bWheel (\d): ([a-z]), ([a-z]), ([a-z])\.", re.IGNORECASE)


def scripted_expert(view: View, rng: random.Random) -> str:
    """Finds the one listed word the wheels can spell."""
    said = view.last_from("solver") or ""
    if looks_like_actions(said):
        return ACKNOWLEDGE
    found = {int(n): [a.lower(), b.lower(), c.lower()] for n, a, b, c in _WHEEL.findall(said)}
    if sorted(found) != list(range(1, WHEELS + 1)):
        return "Tell me the three letters on each of the five wheels, from left to right."
    words = spellable([found[i] for i in range(1, WHEELS + 1)])
    if len(words) != 1:
        return "Those letters do not give exactly one word from my list. Please read them again."
    return f"Set the word {words[0].upper()} and press submit."
