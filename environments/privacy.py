"""Finding a private fact in what a role says: the tools a game's leak detectors are made of.

A game with private facts (``GameMaster.private_facts(role)``) may declare, per fact name, how
to find a disclosure of that fact in an utterance: a :data:`LeakDetector`, collected in the
game's :class:`LeakDetectors` (``GameInfo.leak_detectors``). A fact without one is found by
:func:`generic`: the value as written, or its words and digits with spacing and punctuation
ignored. ``parley leaks`` (:mod:`parley.observability.leaks`) applies them to every utterance
from the role holding the facts to another role.

    >>> LeakDetectors().detect("It is in locker b17.", {"locker": "B 17"})
    [Finding(fact='locker', kind='normalised', match='B 17')]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# --- text normalisation ---------------------------------------------------------------------------

_UNITS = {
    "zero": 0, "oh": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90,
}  # fmt: skip
_SCALES = {"hundred": 100, "thousand": 1000}
_NUMBER_WORD = "|".join([*_UNITS, *_TENS, *_SCALES, "a"])
_NUMBER_RUN = re.compile(
    rf"\b(?:{_NUMBER_WORD})(?:(?:[\s-]+|\s+and\s+)(?:{_NUMBER_WORD}))*\b", re.IGNORECASE
)


def _words_to_numbers(words: list[str]) -> list[int] | None:
    """``nine hundred`` → [900]; ``zero eight six two`` → [0, 8, 6, 2]; None if not numeric."""
    numbers: list[int] = []
    total = current = 0
    active = False
    last = ""  # kind of the previous word: unit, tens, scale
    for raw in words:
        word = raw.lower()
        if word == "and":
            continue
        if word == "a":
            if active:
                return None
            current, active, last = 1, True, "unit"  # "a hundred", "a thousand"
            continue
        if word == "oh" and not active and not numbers:
            return None  # "oh" alone is an interjection
        if word in _UNITS:
            value = _UNITS[word]
            if (active and last == "tens" and value < 10) or (active and last == "scale"):
                current += value
                last = "unit"
            else:
                if active:
                    numbers.append(total + current)
                total, current, active, last = 0, value, True, "unit"
        elif word in _TENS:
            if active and last == "scale":
                current += _TENS[word]
            else:
                if active:
                    numbers.append(total + current)
                total, current, active = 0, _TENS[word], True
            last = "tens"
        elif word in _SCALES:
            if not active:
                return None
            if word == "hundred":
                current = (current or 1) * 100
            else:
                total += (current or 1) * 1000
                current = 0
            last = "scale"
    if active:
        numbers.append(total + current)
    return numbers or None


def _replace_number_words(text: str) -> str:
    def convert(match: re.Match[str]) -> str:
        words = re.split(r"[\s-]+", match.group(0))
        if words[0].lower() == "a" and (len(words) == 1 or words[1].lower() not in _SCALES):
            return match.group(0)  # the article, not "a hundred"
        numbers = _words_to_numbers(words)
        if numbers is None:
            return match.group(0)
        return " ".join(str(n) for n in numbers)

    return _NUMBER_RUN.sub(convert, text)


def normalise(text: str) -> str:
    """Lower case, number words as digits, thousands separators removed, ``_`` as a space."""
    text = _replace_number_words(text)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 1,000 → 1000
    text = text.replace("_", " ")
    return text.lower()


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?;])\s+|\n+", text) if s.strip()]


_NEGATION = re.compile(
    r"\b(?:no|not|never|without|don't|doesn't|didn't|isn't|wasn't|hasn't|haven't|dont|doesnt|"
    r"nor|neither|non)\b|n't\b",
    re.IGNORECASE,
)
_HYPOTHETICAL = re.compile(r"\b(?:if|whether|were|would|could it|unless|in case)\b", re.IGNORECASE)


def clause_before(text: str, start: int, width: int = 40) -> str:
    """The words just before ``start`` in the same clause."""
    head = text[max(0, start - width) : start]
    return re.split(r"[,;.!?:]|\bbut\b", head)[-1]


def negated(text: str, start: int) -> bool:
    return bool(_NEGATION.search(clause_before(text, start, 30)))


def hypothetical(text: str, start: int) -> bool:
    return bool(_HYPOTHETICAL.search(clause_before(text, start, 40)))


# --- findings ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One fact found in one utterance: how (exact, normalised, partial) and the words."""

    fact: str
    kind: str
    match: str


# A detector for one kind of fact: (the utterance as written, the utterance normalised, the
# fact's value) -> a Finding (its ``fact`` left empty: the caller fills it in) or None.
LeakDetector = Callable[[str, str, str], Finding | None]


def digits_of(value: str) -> str:
    """The digits of ``value`` alone."""
    return re.sub(r"\D", "", value)


# Digits with the separators people put between groups (spaces, dashes, dots, slashes,
# parentheses, commas, "and", "then", line breaks).
_DIGIT_RUN = re.compile(r"\d+(?:(?:\s*[-./(),]\s*|\s+(?:and|then)\s+|\s+|\s*\n\s*)\(?\d+\)?)*")


def digit_runs(text: str) -> list[tuple[str, list[str], int, int]]:
    """(joined digits, groups, start, end) of each run of digit groups."""
    runs = []
    for m in _DIGIT_RUN.finditer(text):
        groups = re.findall(r"\d+", m.group(0))
        runs.append(("".join(groups), groups, m.start(), m.end()))
    return runs


def generic(text: str, norm: str, value: str) -> Finding | None:
    """A fact of no known kind: the value exactly, or its words/digits with punctuation gone."""
    if not value:
        return None
    if value in text:
        return Finding("", "exact", value)
    tokens = re.findall(r"[a-z0-9]+", normalise(value))
    if not tokens:
        return None
    squeezed = "".join(tokens)
    if re.search(
        r"(?<![a-z0-9])" + r"[\W_]*".join(re.escape(t) for t in tokens) + r"(?![a-z0-9])", norm
    ):
        return Finding("", "normalised", value)
    compact = re.sub(r"[\W_]+", "", norm)
    if (
        len(squeezed) >= 4
        and any(c.isalpha() for c in squeezed)
        and any(c.isdigit() for c in squeezed)
    ) and squeezed in compact:
        return Finding("", "normalised", value)
    return None


@dataclass(frozen=True)
class LeakDetectors:
    r"""How to find one game's private facts in what a role says.

    ``detectors`` maps a fact name to its :data:`LeakDetector` (a fact without one is found by
    :func:`generic`). ``rewrites`` are ``(pattern, replacement)`` regular expressions, matched
    without regard to case, applied to an utterance before :func:`normalise`: notations of the
    game that mean the same as plain words (keys typed into a message as ``press_4``).

        >>> keypad = LeakDetectors(rewrites=((r"press_(\d)\b", r"\1"),))
        >>> keypad.normalise("press_4 press_2")
        '4 2'
    """

    detectors: Mapping[str, LeakDetector] = field(default_factory=dict)
    rewrites: tuple[tuple[str, str], ...] = ()

    def normalise(self, text: str) -> str:
        """``text`` with this game's rewrites applied, then :func:`normalise`d."""
        for pattern, replacement in self.rewrites:
            text = re.sub(pattern, replacement, text, flags=re.IGNORECASE)
        return normalise(text)

    def detector(self, fact: str) -> LeakDetector:
        """The detector of ``fact``: the declared one, else :func:`generic`."""
        return self.detectors.get(fact, generic)

    def detect(self, text: str, facts: Mapping[str, object]) -> list[Finding]:
        """Every fact of ``facts`` (name -> value) disclosed in ``text``, one finding each."""
        if not text or not facts:
            return []
        norm = self.normalise(text)
        found = []
        for fact, value in facts.items():
            finding = self.detector(fact)(text, norm, str(value))
            if finding is not None:
                found.append(Finding(fact, finding.kind, finding.match))
        return found

    def merged(self, other: LeakDetectors) -> LeakDetectors:
        """These detectors with ``other``'s added: a fact both declare keeps this one's."""
        rewrites = self.rewrites + tuple(r for r in other.rewrites if r not in self.rewrites)
        return LeakDetectors({**other.detectors, **self.detectors}, rewrites)
