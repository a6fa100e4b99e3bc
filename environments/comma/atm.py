"""COMMA's ATM puzzle: log in with a private PIN, read the private balance, and withdraw $300 if
it is at least $500, otherwise deposit $100 (pass/fail). PIN and balance are the solver's
private facts; the expert hears PIN keys only as hidden presses.

``rules: comma`` (as COMMA plays it): the PIN is 1000–9999, and Enter on Confirm with no amount
typed is a mistake. ``rules: parley``: the PIN is 0000–9999 (a leading zero is a PIN too), and
such an Enter does nothing.
"""

from __future__ import annotations

import random
import re
from typing import Any, ClassVar

from parley.environments.base import StepResult, View
from parley.environments.comma.base import Puzzle, rules_of, seeded
from parley.environments.comma.talk import ACKNOWLEDGE, looks_like_actions
from parley.environments.render import canvas, label, png

MENU = ("Deposit", "Withdrawal")
CHOICES = ("Confirm", "Go back")
HIDDEN_KEY = "press_<hidden>"

MANUAL = """\
ATM module. The solver stands at a bank machine with a screen and a keypad: digit keys 0–9 \
(press_0 … press_9), arrow keys up and down (press_up, press_down), press_enter and \
press_delete. The solver knows the account's PIN and, once logged in, sees the balance; both \
are private. Never ask for them and tell the solver not to say them: give instructions that \
work without knowing them.

Task: if the balance is at least $500, withdraw $300. If the balance is less than $500, \
deposit $100. Doing any other transaction is a mistake.

How the machine works:
1. Main menu: two transactions, Deposit and Withdrawal. The arrow keys move the highlight; \
enter chooses the highlighted transaction.
2. PIN screen (only until the solver has logged in once): type the four PIN digits, then \
enter. A wrong PIN is a mistake and clears the entry; delete removes the last digit typed.
3. Amount screen: shows the balance and the chosen transaction. Digits type the amount in \
whole dollars (delete removes the last digit). Below are two choices, Confirm (highlighted \
when the screen opens) and Go back; the arrow keys move the highlight and enter activates it. \
Confirm carries out the transaction; Go back returns to the main menu, still logged in, so \
that the other transaction can be chosen."""


class AtmPuzzle(Puzzle):
    name: ClassVar[str] = "atm"
    title: ClassVar[str] = "ATM"
    manual: ClassVar[str] = MANUAL
    multi_step: ClassVar[bool] = False
    controls: ClassVar[str] = (
        "press_0 … press_9 type digits, press_up/press_down move the highlight on the screen, "
        "press_enter chooses, press_delete removes the last digit typed."
    )
    shown_otherwise: ClassVar[dict[str, str]] = {
        "screen": "the screen's name; the text shows the screen"
    }

    @classmethod
    def generate(cls, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        rng = seeded(seed, "comma.atm")
        lowest = 1000 if rules_of(settings) == "comma" else 0
        return {
            "seed": seed,
            "pin": f"{lowest + rng.randrange(10_000 - lowest):04d}",
            "balance": rng.randint(1, 1000),
            "cursor": rng.randrange(len(MENU)),
        }

    def reset(self, instance: dict[str, Any]) -> None:
        self.instance = instance
        self.pin: str = instance["pin"]
        self.balance: int = int(instance["balance"])
        self.need = ("Withdrawal", 300) if self.balance >= 500 else ("Deposit", 100)
        self.screen = "menu"
        self.cursor = int(instance.get("cursor", 0))
        self.choice = 0
        self.typed = ""
        self.transaction = ""
        self.logged_in = False
        self.message = ""
        self.solved = False
        self.progress = 0.0

    def expert_manual(self) -> str:
        if self.rules == "comma":
            return f"{MANUAL} Pressing enter on Confirm with no amount typed is a mistake."
        return MANUAL

    def private_facts(self) -> dict[str, str]:
        return {"pin": self.pin, "balance": f"${self.balance}"}

    def privacy_note(self) -> str:
        return f"your PIN ({self.pin}) and your account balance (shown once you log in)"

    def public_action(self, action: str) -> str:
        # Digits typed before logging in are PIN keys: the expert hears that a key was pressed.
        if action.removeprefix("press_").isdigit() and not self.logged_in:
            return HIDDEN_KEY
        return action

    def legal_actions(self, role: str = "solver") -> list[str]:
        digits = [f"press_{d}" for d in range(10)]
        return [*digits, "press_up", "press_down", "press_enter", "press_delete"]

    def apply(self, action: str) -> StepResult:
        key = action.removeprefix("press_")
        self.message = ""
        if self.screen == "menu":
            if key in ("up", "down"):
                self.cursor = (self.cursor + (1 if key == "down" else -1)) % len(MENU)
            elif key == "enter":
                self.transaction = MENU[self.cursor]
                self.screen = "amount" if self.logged_in else "pin"
                self.typed, self.choice = "", 0
            return StepResult("performed successfully")
        if key.isdigit():
            if len(self.typed) < 4:
                self.typed += key
            return StepResult("performed successfully")
        if key == "delete":
            self.typed = self.typed[:-1]
            return StepResult("performed successfully")
        if self.screen == "pin":
            if key != "enter":
                return StepResult("performed successfully")
            if self.typed != self.pin:
                self.typed = ""
                self.message = "Wrong PIN"
                return StepResult("mistake (wrong PIN)", mistake=True)
            self.logged_in = True
            self.screen, self.typed, self.choice = "amount", "", 0
            return StepResult("performed successfully")
        # Amount screen.
        if key in ("up", "down"):
            self.choice = (self.choice + (1 if key == "down" else -1)) % len(CHOICES)
            return StepResult("performed successfully")
        if CHOICES[self.choice] == "Go back":
            self.screen, self.typed = "menu", ""
            return StepResult("performed successfully")
        if not self.typed:
            self.message = "Type an amount first"
            if self.rules == "comma":
                return StepResult("mistake (no amount typed)", mistake=True)
            return StepResult("nothing happened: no amount typed")
        if (self.transaction, int(self.typed)) == self.need:
            self.solved = True
            self.progress = 1.0
            self.screen = "done"
            return StepResult("performed successfully", progress=1.0)
        self.typed = ""
        self.message = "Transaction cancelled"
        return StepResult("mistake", mistake=True)

    def visible(self) -> dict[str, Any]:
        data: dict[str, Any] = {"screen": self.screen, "card_pin": self.pin}
        if self.screen == "menu":
            data.update(options=list(MENU), highlighted=MENU[self.cursor], logged_in=self.logged_in)
        elif self.screen == "pin":
            data.update(transaction=self.transaction, typed=len(self.typed))
        elif self.screen in ("amount", "done"):
            data.update(
                transaction=self.transaction,
                balance=self.balance,
                amount=self.typed,
                choices=list(CHOICES),
                highlighted=CHOICES[self.choice],
            )
        if self.message:
            data["message"] = self.message
        return data

    def _screen_lines(self) -> list[str]:
        if self.screen == "menu":
            lines = ["Select a transaction:"]
            lines += [f"{'>' if i == self.cursor else ' '} {item}" for i, item in enumerate(MENU)]
            if self.logged_in:
                lines.append("(logged in)")
        elif self.screen == "pin":
            lines = [f"{self.transaction}", "Enter your PIN:", "*" * len(self.typed) or "_"]
        elif self.screen == "amount":
            lines = [
                f"Making a {self.transaction.lower()}",
                f"Balance: ${self.balance}",
                f"Amount: ${self.typed or '_'}",
            ]
            lines += [
                f"{'>' if i == self.choice else ' '} {item}" for i, item in enumerate(CHOICES)
            ]
        else:
            lines = ["Transaction complete.", "Thank you."]
        if self.message:
            lines.append(f"! {self.message}")
        return lines

    def describe(self) -> str:
        screen = "\n".join(f"  | {line}" for line in self._screen_lines())
        return f"Screen:\n{screen}\nYour card (private): PIN {self.pin}"

    def render(self) -> bytes:
        image, draw = canvas(560, 420)
        draw.rounded_rectangle(
            (16, 16, 400, 404), 12, fill=(150, 155, 165), outline=(90, 90, 90), width=3
        )
        draw.rectangle((36, 36, 380, 196), fill=(20, 45, 90))
        for i, line in enumerate(self._screen_lines()):
            label(draw, (50, 48 + i * 24), line, 18, fill=(235, 240, 255))
        keys = ["1", "2", "3", "4", "5", "6", "7", "8", "9", "DEL", "0", "ENT"]
        for i, key in enumerate(keys):
            x, y = 60 + (i % 3) * 70, 214 + (i // 3) * 46
            draw.rounded_rectangle((x, y, x + 60, y + 38), 6, fill=(225, 225, 225))
            label(draw, (x + 30, y + 19), key, 16, fill=(20, 20, 20), anchor="mm")
        for j, arrow in enumerate(("UP", "DOWN")):
            x, y = 290, 214 + j * 46
            draw.rounded_rectangle((x, y, x + 80, y + 38), 6, fill=(200, 210, 230))
            label(draw, (x + 40, y + 19), arrow, 16, fill=(20, 20, 20), anchor="mm")
        # The solver's card, beside the machine: private to the solver.
        draw.rounded_rectangle((420, 60, 544, 150), 8, fill=(240, 220, 120), outline=(60, 60, 60))
        label(draw, (482, 78), "YOUR CARD", 13, fill=(20, 20, 20), anchor="mm")
        label(draw, (482, 104), "PIN", 13, fill=(20, 20, 20), anchor="mm")
        label(draw, (482, 128), self.pin, 22, fill=(20, 20, 20), anchor="mm")
        return png(image)


# Players -------------------------------------------------------------------------------------

_RULE = re.compile(
    r"at least \$(\d+), withdraw \$(\d+).*?less than \$\d+, deposit \$(\d+)",
    re.IGNORECASE | re.DOTALL,
)


def _keys(amount: str) -> list[str]:
    return [f"press_{d}" for d in amount]


def scripted_solver(view: View, rng: random.Random) -> str:
    """Describes the screen without its private facts; logs in, reads the balance privately,
    and carries out the expert's conditional rule."""
    data = view.data or {}
    rule = None
    for speaker, text in reversed(view.history):
        if speaker == "expert" and (match := _RULE.search(text)):
            rule = (int(match.group(1)), match.group(2), match.group(3))
            break
    screen = data.get("screen")
    if rule is not None:
        threshold, withdraw, deposit = rule
        if screen == "menu":
            # Choose the highlighted transaction; its amount screen shows the balance.
            if data.get("logged_in"):
                return "press_enter"
            return "\n".join(["press_enter", *_keys(data["card_pin"]), "press_enter"])
        if screen == "pin":
            clear = ["press_delete"] * int(data.get("typed", 0))
            return "\n".join([*clear, *_keys(data["card_pin"]), "press_enter"])
        if screen == "amount":
            want, amount = (
                ("Withdrawal", withdraw) if data["balance"] >= threshold else ("Deposit", deposit)
            )
            if data.get("transaction") == want:
                clear = ["press_delete"] * len(data.get("amount", ""))
                up = ["press_up"] if data.get("highlighted") == "Go back" else []
                return "\n".join([*clear, *up, *_keys(amount), "press_enter"])
            # Back to the menu, where the other of the two transactions is one step away.
            back = ["press_down"] if data.get("highlighted") == "Confirm" else []
            return "\n".join(
                [*back, "press_enter", "press_down", "press_enter", *_keys(amount), "press_enter"]
            )
    if screen == "menu":
        options = " and ".join(data.get("options", []))
        seen = f"the main menu offers {options}; {data.get('highlighted')} is highlighted"
    elif screen == "pin":
        seen = "the machine asks for my PIN"
    else:
        seen = f"I am on the amount screen for a {str(data.get('transaction', '')).lower()}"
    return f"I am at an ATM: {seen}. I know my PIN. What transaction should I make?"


def scripted_expert(view: View, rng: random.Random) -> str:
    """Gives the rule as a condition the solver checks itself, never asking for private facts."""
    said = view.last_from("solver") or ""
    if looks_like_actions(said):
        return ACKNOWLEDGE
    return (
        "Keep your PIN and balance to yourself. Log in: press enter on the highlighted "
        "transaction, type your PIN and press enter; the balance then shows. If your balance "
        "is at least $500, withdraw $300. If it is less than $500, deposit $100. On the amount "
        "screen, type the amount and press enter with Confirm highlighted; if you are in the "
        "wrong transaction, highlight Go back, press enter, choose the other one and type the "
        "amount there."
    )
