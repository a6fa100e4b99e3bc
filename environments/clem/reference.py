"""The Reference game (seed 000, §4.1): one turn each.

The describer sees three pictures, the first being the target, and writes a referring
expression ("Expression: …", one line). The guesser sees the same three pictures in another
order, reads the expression and names the target ("Answer: first|second|third"; as clembench's
scorer reads it, text after the label is ignored). A reply that breaks its format aborts the
episode; success when the guesser names the target.

Experiments (``set``): ``grids_rows``, ``grids_columns``, ``grids_diagonals``,
``grids_letters``, ``grids_shapes``, ``grids_random`` (text and image variants),
``pentomino``, ``ade``, ``docci``, ``clevr`` and ``ade_static``, ``docci_static``,
``clevr_static`` (one target, varying distractors); the photo sets read ``dataset_dir`` or,
when it is empty, use the synthetic stand-ins of :mod:`parley.environments.clem.scenes`.
"""

from __future__ import annotations

import random
import re
from typing import Any, Literal

from pydantic import SerializerFunctionWrapHandler, model_serializer, model_validator

from parley.environments.base import Observation, Scores, VariantSettings, View
from parley.environments.clem import clembench, grids, images, pentomino, photos
from parley.environments.clem.common import ORDINALS, ClemGameMaster, episode_scores, seeded

GRID_SETS = {
    "grids_rows": "rows",
    "grids_columns": "columns",
    "grids_diagonals": "diagonals",
    "grids_letters": "letters",
    "grids_shapes": "shapes",
    "grids_random": "random",
}
PHOTO_SETS = {
    "ade": ("ade", False),
    "docci": ("docci", False),
    "clevr": ("clevr", False),
    "ade_static": ("ade", True),
    "docci_static": ("docci", True),
    "clevr_static": ("clevr", True),
}
SETS = (*GRID_SETS, "pentomino", *PHOTO_SETS)
TEXT_SETS = tuple(GRID_SETS)


class ReferenceSettings(VariantSettings):
    """``set``: the stimuli (the text variant takes the grid sets); ``dataset_dir``: a folder
    of the photo sets' images (empty: generated stand-ins); ``reference``: a clembench
    checkout whose own instances and prompts to play (:mod:`parley.environments.clem.clembench`;
    ``set`` is then unused)."""

    set: Literal[SETS] = "grids_letters"  # type: ignore[valid-type]
    dataset_dir: str = ""
    reference: str | None = None

    @model_serializer(mode="wrap")
    def _without_unused_reference(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Left out while unset, so that episodes without one keep their settings and keys.
        data = handler(self)
        if isinstance(data, dict) and data.get("reference") is None:
            data.pop("reference", None)
        return data

    @model_validator(mode="after")
    def _text_sets(self) -> ReferenceSettings:
        if self.variant == "text" and self.set not in TEXT_SETS:
            raise ValueError(
                f"set {self.set!r} has pictures only; the text variant takes {', '.join(TEXT_SETS)}"
            )
        return self


EXPRESSION_RE = re.compile(r"^expression:\s*(?P<content>\S.*)$", re.IGNORECASE)
# clembench reads the guesser's answer as its scorer does: the reply must start with "Answer:"
# and a label; whatever follows the label (" grid", a full stop, an explanation on the next
# lines) is ignored. The word boundary keeps "Answer: firstly" from reading as "first".
ANSWER_RE = re.compile(
    r"^answer:\s*(?P<answer>first|second|third|1st|2nd|3rd|1|2|3)\b", re.IGNORECASE
)
ANSWER_INDEX = {
    "first": 0,
    "1st": 0,
    "1": 0,
    "second": 1,
    "2nd": 1,
    "2": 1,
    "third": 2,
    "3rd": 2,
    "3": 2,
}


def _distinct(stims: list[dict[str, Any]]) -> bool:
    keys = [tuple(images.units(s)) for s in stims]
    return len(set(keys)) == len(keys)


def generate(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    """A Reference instance: three stimuli (target first) and the guesser's order; with a
    ``reference``, clembench's own instance for the seed."""
    if settings.get("reference"):
        return clembench.load(settings["reference"]).instance(seed)
    name = str(settings.get("set", "grids_letters"))
    variant = str(settings.get("variant", "image"))
    if name not in SETS:
        raise ValueError(f"unknown reference set {name!r}; sets: {', '.join(SETS)}")
    if variant == "text" and name not in TEXT_SETS:
        raise ValueError(
            f"set {name!r} has pictures only; the text variant takes {', '.join(TEXT_SETS)}"
        )
    rng = seeded(seed, f"clem.reference:{name}")
    source = "generated"
    if name in GRID_SETS:
        if GRID_SETS[name] == "random":
            chosen = [grids.random_grid(rng) for _ in range(3)]
            while len(set(chosen)) < 3:
                chosen = [grids.random_grid(rng) for _ in range(3)]
        else:
            chosen = rng.sample(grids.SETS[GRID_SETS[name]], 3)
        stims = [images.grid_stimulus(g) for g in chosen]
    elif name == "pentomino":
        target = pentomino.random_board(rng)
        while True:
            # Each distractor differs from the target in one small detail the target keeps.
            stims = [target] + [
                pentomino.vary(target, rng, rng.choice(("recolour", "reshape", "move", "remove")))[
                    0
                ]
                for _ in range(2)
            ]
            if _distinct(stims):
                break
    else:
        dataset, static = PHOTO_SETS[name]
        items, source = photos.pool(dataset, str(settings.get("dataset_dir", "") or ""))
        stims = [i["stimulus"] for i in photos.choose(dataset, items, rng, static_target=static)]
    order = [0, 1, 2]
    rng.shuffle(order)
    return {"seed": seed, "set": name, "source": source, "images": stims, "guesser_order": order}


DESCRIBER_SYSTEM = """\
You are playing a reference game with a partner. You see three {noun}s: one is the target and \
the other two are distractors. Your partner sees the same three {noun}s, possibly in a \
different order, and does not know which one is the target. Write a referring expression that \
lets your partner pick out the target and not the distractors.

Reply with exactly one line: "Expression:" followed by your referring expression. Do not add \
anything else. For example:
Expression: the one with ..."""

GUESSER_SYSTEM = """\
You are playing a reference game with a partner. You see three {noun}s. Your partner wrote a \
referring expression that describes exactly one of them. Find the {noun} the expression refers to.

Reply with exactly one line: "Answer:" followed by first, second or third. Do not add anything \
else. For example:
Answer: second"""


class ReferenceGame(ClemGameMaster):
    """Describer, then guesser; settings ``variant`` (image/text), ``set``, ``dataset_dir``."""

    roles = ("describer", "guesser")

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.stims = instance["images"]
        self.order: list[int] = list(instance["guesser_order"])
        self.target = self.order.index(0)  # the target's position for the guesser
        self.noun = images.noun(self.stims[0])
        if self.variant == "text" and self.stims[0]["kind"] != "grid":
            raise ValueError("the text variant needs grids")
        self.expression: str | None = None
        self.answer: int | None = None
        # clembench's own prompts, patterns and target names (a ``reference`` instance).
        self.clembench: dict[str, Any] | None = instance.get("clembench")
        self.reply: str = ""
        # For readers of the transcript only (notes never reach a player; a private one
        # does not reach a seat's events topic either: it names the answer).
        self.note(
            "instance",
            private=True,
            set=instance.get("set"),
            source=instance.get("source"),
            target_for_guesser=ORDINALS[self.target],
        )

    def system_prompt(self, role: str) -> str:
        if self.clembench is not None:
            return ""  # clembench's instructions come in the first message
        template = DESCRIBER_SYSTEM if role == "describer" else GUESSER_SYSTEM
        return template.format(noun=self.noun)

    def whose_turn(self) -> str | None:
        return "describer" if self.expression is None else "guesser"

    def observe(self, role: str) -> Observation:
        noun = self.noun
        if role == "describer":
            stims = self.stims
            labels = [
                f"The first {noun} is the target:",
                f"The second {noun} is a distractor:",
                f"The third {noun} is a distractor:",
            ]
            intro = (
                f"The first {noun} is the target; the second and the third {noun}s are distractors."
            )
            ask = 'Write your referring expression for the target, starting with "Expression:".'
        else:
            stims = [self.stims[i] for i in self.order]
            labels = [f"First {noun}:", f"Second {noun}:", f"Third {noun}:"]
            intro = f"Here are the first, the second and the third {noun}, in this order."
            ask = f'Which {noun} does your partner\'s expression refer to? Answer with "Answer:" and first, second or third.'
        data: dict[str, Any] = {
            "noun": noun,
            "images": [{"features": images.features(s), "units": images.units(s)} for s in stims],
        }
        if role == "describer":
            data["target"] = 0
        if self.clembench is not None:
            if role == "describer":
                return Observation(text=self.clembench["player_1_prompt_header"], data=data)
            # clembench's game master puts the describer's whole reply in the guesser's prompt.
            data["expression"] = self.reply
            prompt = self.clembench["player_2_prompt_header"]
            return Observation(text=prompt.replace("TARGET_EXPRESSION", self.reply), data=data)
        if self.variant == "text":
            blocks = [
                f"{label}\n{images.as_text(s)}" for label, s in zip(labels, stims, strict=True)
            ]
            return Observation(text="\n\n".join([*blocks, ask]), data=data)
        return Observation(
            text=f"{intro}\n{ask}", images=[images.render(s) for s in stims], data=data
        )

    def handle_reply(self, role: str, text: str) -> None:
        if self.clembench is not None:
            self._reply_as_clembench(role, text)
            return
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        if role == "describer":
            match = EXPRESSION_RE.match(lines[0]) if len(lines) == 1 else None
            if match is None:
                self.abort(role, 'the reply must be one line starting with "Expression:"')
                return
            self.expression = match.group("content").strip()
            self.say("describer", "guesser", f"Expression: {self.expression}")
            return
        match = ANSWER_RE.match(lines[0]) if lines else None
        if match is None:
            self.abort(
                role, 'the reply must start "Answer: first", "Answer: second" or "Answer: third"'
            )
            return
        self.answer = ANSWER_INDEX[match.group("answer").lower()]
        if self.answer == self.target:  # the defaults: solved / failed
            self.end("success", "the guesser picked the target")
        else:
            self.end(
                "lost",
                f"the guesser picked the {ORDINALS[self.answer]}, the target was the {ORDINALS[self.target]}",
            )

    def _reply_as_clembench(self, role: str, text: str) -> None:
        """Replies checked against the instance's own patterns and modes, as clembench does."""
        assert self.clembench is not None
        ref = self.clembench
        if role == "describer":
            found = clembench.matches(
                ref["player_1_response_pattern"], ref["p1_mode"], text.strip()
            )
            if found is None:
                self.abort(role, "the reply does not match the instance's expression pattern")
                return
            self.reply = text.strip()
            self.expression = (found.groupdict().get("response") or self.reply).strip()
            return
        found = clembench.matches(ref["player_2_response_pattern"], ref["p2_mode"], text.strip())
        if found is None:
            self.abort(role, "the reply does not match the instance's answer pattern")
            return
        label = found.group("response").lower()
        self.answer = ANSWER_INDEX.get(label)
        if label in ref["target_grid_name"]:
            self.end("success", "the guesser picked the target")
        else:
            self.end(
                "lost", f"the guesser answered {label}, the target was the {ORDINALS[self.target]}"
            )

    def episode_scores(self) -> Scores:
        success = self.outcome == "success"
        expression = self.expression or ""
        return episode_scores(
            self.outcome,
            100.0 * success,
            expression_length=float(len(expression)) if self.expression is not None else None,
            expression_tokens=float(len(expression.split()))
            if self.expression is not None
            else None,
        )


# --- players -----------------------------------------------------------------------------------


def _expression(noun: str, facts: list[str]) -> str:
    return f"Expression: the {noun} with: {'; '.join(facts)}"


def _bare(fact: str) -> str:
    for article in ("a ", "an "):
        if fact.startswith(article):
            return fact[len(article) :]
    return fact


def holds(fact: str, facts: list[str] | set[str]) -> bool:
    """Whether a picture with ``facts`` fits ``fact``; "no X" fits when X is absent."""
    if fact.startswith("no "):
        return all(_bare(f) != fact[3:] for f in facts)
    return fact in facts


def referring_facts(target: list[str], distractors: list[list[str]]) -> list[str]:
    """Dale & Reiter's incremental algorithm: take the target's facts in order of preference
    (then negations: what a distractor shows and the target lacks), keeping each that rules out
    a distractor still in play, until none is left."""
    absent = [f"no {_bare(f)}" for d in distractors for f in d if f not in target]
    candidates = list(dict.fromkeys([*target, *absent]))
    left = [set(d) for d in distractors]
    chosen: list[str] = []
    for fact in candidates:
        if not left:
            break
        if any(not holds(fact, d) for d in left):
            chosen.append(fact)
            left = [d for d in left if holds(fact, d)]
    return chosen or target[:1]


def scripted_describer(view: View, rng: random.Random) -> str:
    """Picks the facts that single out the target (the incremental algorithm)."""
    data = view.data or {}
    pictures = data.get("images", [])
    if not pictures:
        return "Expression: the first one"
    target = pictures[data.get("target", 0)]["features"]
    others = [p["features"] for i, p in enumerate(pictures) if i != data.get("target", 0)]
    return _expression(data.get("noun", "picture"), referring_facts(target, others))


def _mentioned(expression: str) -> list[str]:
    if "with:" not in expression:
        return []
    return [f.strip() for f in expression.split("with:", 1)[1].split(";") if f.strip()]


def scripted_guesser(view: View, rng: random.Random) -> str:
    """Picks the picture that has every fact the expression names (at random among ties)."""
    data = view.data or {}
    pictures = data.get("images", [])
    data_expression = str(data.get("expression", ""))
    facts = _mentioned(view.last_from("describer") or data_expression)
    matches = [
        i for i, p in enumerate(pictures) if facts and all(holds(f, p["features"]) for f in facts)
    ]
    choice = matches[0] if len(matches) == 1 else rng.choice(matches or [0, 1, 2])
    return f"Answer: {ORDINALS[choice]}"


def random_describer(view: View, rng: random.Random) -> str:
    """Names one fact of a picture chosen at random (a well-formed expression, no strategy)."""
    data = view.data or {}
    pictures = data.get("images", [])
    facts = rng.choice(pictures)["features"] if pictures else ["something"]
    return _expression(data.get("noun", "picture"), [rng.choice(facts)])


def random_guesser(view: View, rng: random.Random) -> str:
    """Uniform over first, second and third (the paper's random baseline, 33.3 %)."""
    return f"Answer: {rng.choice(ORDINALS)}"
