"""Guess the number: the keeper knows a secret number, the guesser finds it from the keeper's
HIGHER/LOWER clues. parley's example game plugin, explained in docs/games.md."""

from __future__ import annotations

import random
import re
from typing import Any

from pydantic import Field

from parley.environments.base import GameMaster, Observation, ReasonCode, Scores, Settings, View
from parley.environments.privacy import Finding, LeakDetectors
from parley.environments.registry import GameInfo, register

CLUES = ("HIGHER", "LOWER")


class GuessSettings(Settings):
    max_number: int = Field(100, ge=2)  # the secret is one of 1..max_number
    max_guesses: int = Field(7, ge=1)  # 7 always suffice for 100 (binary search)


def instance(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    return {"secret": random.Random(seed).randint(1, settings["max_number"])}


class GuessMaster(GameMaster):
    roles = ("guesser", "keeper")

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.secret: int = instance["secret"]
        self.top: int = self.settings["max_number"]
        self.guesses: list[int] = []

    def system_prompt(self, role: str) -> str:
        if role == "guesser":
            return (
                f"Find a secret number between 1 and {self.top}. Reply with one line, "
                "GUESS: <number>; the keeper answers HIGHER or LOWER."
            )
        return (
            "You know a secret number; never say it. Each time the guesser guesses, reply with "
            "one word: HIGHER if the secret is higher than the guess, LOWER if it is lower."
        )

    def whose_turn(self) -> str | None:
        # Turns alternate, the guesser first: a bad reply or a right guess ends the game.
        return "keeper" if self.replies % 2 else "guesser"

    def observe(self, role: str) -> Observation:
        if role == "keeper":
            guess = self.guesses[-1]
            text = f"The secret number is {self.secret}. The guesser guessed {guess}."
            return Observation(text, data={"secret": self.secret, "guess": guess})
        left = self.settings["max_guesses"] - len(self.guesses)
        text = f"Guess the number between 1 and {self.top}. Guesses left: {left}."
        return Observation(text, data={"max_number": self.top, "guesses_left": left})

    def legal_actions(self, role: str) -> list[str]:
        return list(CLUES) if role == "keeper" else []

    def handle_reply(self, role: str, text: str) -> None:
        if role == "guesser":
            found = re.fullmatch(r"\s*GUESS:\s*([0-9]{1,9})\s*", text, re.IGNORECASE)
            if found is None or not 1 <= int(found[1]) <= self.top:
                why = f"expected 'GUESS: <1 to {self.top}>', got {text[:40]!r}"
                self.violation(role, why, code=ReasonCode.PARSE_ERROR)
                return
            self.guesses.append(int(found[1]))
            if self.guesses[-1] == self.secret:
                self.end("success", f"found in {len(self.guesses)} guesses")
            elif len(self.guesses) == self.settings["max_guesses"]:
                self.end("lost", "no guesses left", code=ReasonCode.TURN_LIMIT)
            return
        clue = text.strip().upper()
        if clue not in CLUES:
            self.violation(role, f"expected HIGHER or LOWER, got {text[:40]!r}")
        elif clue != ("HIGHER" if self.secret > self.guesses[-1] else "LOWER"):
            self.violation(role, f"{clue} is not true")
        else:
            self.say(role, "guesser", clue)

    def private_facts(self, role: str) -> dict[str, str]:
        # What leak analysis looks for in what the keeper says.
        return {"secret": str(self.secret)} if role == "keeper" else {}

    def scores(self) -> Scores:
        used, most = len(self.guesses), self.settings["max_guesses"]
        main = {"success": 100.0 * (most - used + 1) / most, "lost": 0.0}.get(self.outcome or "")
        return Scores(main=main, guesses=float(used))


def scripted_guesser(view: View, rng: random.Random) -> str:
    """Binary search over the keeper's clues: the oracle."""
    low, high, guess = 1, (view.data or {})["max_number"], None
    for speaker, said in view.history:
        if speaker == view.role and (number := re.search(r"[0-9]+", said)):
            guess = int(number[0])
        elif guess is not None and said.strip().upper() in CLUES:
            low, high = (guess + 1, high) if said.strip().upper() == "HIGHER" else (low, guess - 1)
    return f"GUESS: {(low + high) // 2}"


def random_guesser(view: View, rng: random.Random) -> str:
    return f"GUESS: {rng.randint(1, (view.data or {})['max_number'])}"


def scripted_keeper(view: View, rng: random.Random) -> str:
    data = view.data or {}
    return "HIGHER" if data["secret"] > data["guess"] else "LOWER"


def secret_told(text: str, norm: str, value: str) -> Finding | None:
    """The secret in what the keeper says: the number ("37", "thirty-seven", not "137"), or
    partly, a range of ten or fewer around it ("between 30 and 40")."""
    if found := re.search(rf"(?<![0-9]){value}(?![0-9])", norm):
        return Finding("", "exact" if value in text else "normalised", found[0])
    for low, high in re.findall(r"between ([0-9]+) and ([0-9]+)", norm):
        if int(high) - int(low) <= 10 and int(low) <= int(value) <= int(high):
            return Finding("", "partial", f"between {low} and {high}")
    return None


register(
    GameInfo(
        name="guess.number",
        family="guess",
        roles=GuessMaster.roles,
        game_master=GuessMaster,
        instance=instance,
        settings=GuessSettings,
        players={
            "guesser": {"scripted": scripted_guesser, "random": random_guesser},
            "keeper": {"scripted": scripted_keeper},
        },
        description="find a secret number from a keeper's HIGHER/LOWER clues",
        text_only=True,
        leak_detectors=LeakDetectors({"secret": secret_told}),
    )
)
