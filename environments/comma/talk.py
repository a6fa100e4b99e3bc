"""Helpers shared by the COMMA puzzles' built-in players: button positions in words, spotting an
action reply, the random baseline, and the expert's stock answers."""

from __future__ import annotations

import random
import re

from parley.environments.base import View

# Four buttons in a 2×2 grid (keypad, LED); six in a 3×2 grid (who).
POSITIONS4 = ("top_left", "top_right", "bottom_left", "bottom_right")
POSITIONS6 = (
    "top_left",
    "top_right",
    "middle_left",
    "middle_right",
    "bottom_left",
    "bottom_right",
)
OPPOSITE = {
    "top_left": "bottom_right",
    "bottom_right": "top_left",
    "top_right": "bottom_left",
    "bottom_left": "top_right",
}

ACKNOWLEDGE = "Okay. Tell me what you see now."
ASK_AGAIN = "I could not follow that. {what}"

_ACTION_LINE = re.compile(r"^[A-Za-z0-9_<>]+$")
_POSITION = re.compile(r"\b(top|middle|bottom)[ _-]+(left|right)\b", re.IGNORECASE)


def words(position: str) -> str:
    """``top_left`` → ``top left``."""
    return position.replace("_", " ")


def positions_in(text: str) -> list[str]:
    """Button positions named in ``text`` (``top left``, ``bottom_right`` …), in order."""
    return [f"{a.lower()}_{b.lower()}" for a, b in _POSITION.findall(text)]


def looks_like_actions(text: str) -> bool:
    """Whether a message the expert heard is the solver acting (only action-name lines)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return bool(lines) and all(_ACTION_LINE.match(line) for line in lines)


def latest_instruction(view: View) -> str | None:
    """The expert's latest message, if it answers the solver's latest reply.

    Turns alternate, so the expert's last message always follows the solver's last reply;
    it is an instruction to act on unless it is the stock request for a new description.
    """
    said = view.last_from("expert")
    if said is None or said.startswith(ACKNOWLEDGE):
        return None
    return said


def random_solver(view: View, rng: random.Random) -> str:
    """The paper's random baseline: one action drawn uniformly from the valid ones each turn;
    it ignores the expert, the puzzle state and its own history."""
    return rng.choice(view.legal_actions)
