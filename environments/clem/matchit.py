"""MatchIt (seed 000, §4.2): two players, one picture each, find out whether they are the same.

The game master scaffolds every reply and each must open with the flag it asks for
(``DESCRIPTION:``, ``QUESTION:``, ``ANSWER:``, ``DECISION:``; the first word, exactly as
written) or the episode is aborted, as in clembench. With ``decision_turn`` = 2 (the paper's
transcripts, four questions in all) the replies are::

    A DESCRIPTION, B DESCRIPTION, B QUESTION,
    A ANSWER, A QUESTION, B ANSWER, B QUESTION,        (once per round before the decision)
    A ANSWER, A QUESTION, B ANSWER, B DECISION, A DECISION

Each player hears the other's description only after giving its own, and never the other's
decision. A decision is exactly "DECISION: same image" or "DECISION: different images"
(explanations abort). Success only when both decide correctly.

Experiments: ``set`` = ``grids`` (text and image; ``pair`` = same, similar_transform (mirrored or
rotated), similar_edit (two cells flipped), different), ``pentomino`` (same, similar: one
change, different) and ``photos`` (same, similar, different; Visual Genome pairs from
``pairs_file``, or synthetic outdoor scenes when it is empty).
"""

from __future__ import annotations

import random
import re
from typing import Any, Literal

from pydantic import Field, model_validator

from parley.environments.base import Observation, Scores, VariantSettings, View
from parley.environments.clem import grids, images, pentomino, photos, scenes
from parley.environments.clem.common import ClemGameMaster, episode_scores, seeded

DESCRIPTION, QUESTION, ANSWER, DECISION = "DESCRIPTION:", "QUESTION:", "ANSWER:", "DECISION:"
SAME, DIFFERENT = "same image", "different images"
PAIRS = {
    "grids": ("same", "similar_transform", "similar_edit", "different"),
    "pentomino": ("same", "similar", "different"),
    "photos": ("same", "similar", "different"),
}


class MatchItSettings(VariantSettings):
    """``set`` and ``pair`` (the pair kinds a set has: ``PAIRS``); ``pairs_file``: Visual
    Genome pairs for the photo set (empty: synthetic scenes); ``decision_turn``: the turn at
    which the players decide."""

    set: Literal[tuple(PAIRS)] = "grids"  # type: ignore[valid-type]
    pair: str = "same"
    pairs_file: str = ""
    decision_turn: int = Field(2, ge=1)

    @model_validator(mode="after")
    def _pair_of_set(self) -> MatchItSettings:
        if self.pair not in PAIRS[self.set]:
            raise ValueError(f"set {self.set!r} has pairs {', '.join(PAIRS[self.set])}")
        if self.variant == "text" and self.set != "grids":
            raise ValueError("the text variant of MatchIt uses grids (set: grids)")
        return self


DECISION_RE = re.compile(r"^DECISION:\s*(same images?|different images?)\.?$", re.IGNORECASE)


def _grid_pair(rng: random.Random, pair: str) -> tuple[grids.Grid, grids.Grid]:
    # clembench's text MatchIt draws its base grids from the diagonal, letter and shape sets.
    base_sets = grids.SETS["diagonals"] + grids.SETS["letters"] + grids.SETS["shapes"]
    a = rng.choice(base_sets)
    if pair == "same":
        return a, a
    if pair == "different":
        return a, rng.choice([g for g in base_sets if g != a])
    if pair == "similar_transform":
        options = [t(a) for t in grids.TRANSFORMS.values() if t(a) != a]
        while not options:  # a grid symmetric under every transform cannot give a pair
            a = rng.choice(base_sets)
            options = [t(a) for t in grids.TRANSFORMS.values() if t(a) != a]
        return a, rng.choice(options)
    cells = rng.sample([(r, c) for r in range(grids.SIZE) for c in range(grids.SIZE)], 2)
    return a, grids.flip_cells(a, cells)


def _scene_pair(rng: random.Random, pair: str) -> tuple[dict[str, Any], dict[str, Any]]:
    a = scenes.random_outdoor(rng)
    if pair == "same":
        return a, a
    if pair == "different":
        while True:
            b = scenes.random_outdoor(rng)
            if not set(scenes.outdoor_concepts(a)) & set(scenes.outdoor_concepts(b)):
                return a, b
    b = {**a, "items": [dict(i) for i in a["items"]]}
    item = rng.choice(b["items"])
    coloured = [i for i in b["items"] if i["color"]]
    if coloured and rng.random() < 0.5:
        item = rng.choice(coloured)
        item["color"] = rng.choice([c for c in scenes.OUTDOOR_COLORS if c != item["color"]])
    else:
        names = {i["name"] for i in b["items"]}
        group = (
            scenes.SKY_ITEMS
            if item["name"] in scenes.SKY_ITEMS
            else set(scenes.OUTDOOR_DRAW) - scenes.SKY_ITEMS
        )
        item["name"] = rng.choice(sorted(group - names))
        item["color"] = rng.choice(scenes.OUTDOOR_COLORS) if item["name"] in scenes.COLORED else ""
    return a, b


def generate(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    """A MatchIt instance: the two players' stimuli and whether they are the same."""
    name = str(settings.get("set", "grids"))
    pair = str(settings.get("pair", "same"))
    variant = str(settings.get("variant", "image"))
    if name not in PAIRS:
        raise ValueError(f"unknown matchit set {name!r}; sets: {', '.join(PAIRS)}")
    if pair not in PAIRS[name]:
        raise ValueError(f"set {name!r} has pairs {', '.join(PAIRS[name])}, not {pair!r}")
    if variant == "text" and name != "grids":
        raise ValueError("the text variant of MatchIt uses grids (set: grids)")
    rng = seeded(seed, f"clem.matchit:{name}:{pair}")
    source = "generated"
    if name == "grids":
        ga, gb = _grid_pair(rng, pair)
        a, b = images.grid_stimulus(ga), images.grid_stimulus(gb)
    elif name == "pentomino":
        a = pentomino.random_board(rng)
        if pair == "same":
            b = a
        elif pair == "similar":
            b = pentomino.vary(a, rng)[0]
        else:
            b = pentomino.random_board(rng)
            while images.units(b) == images.units(a):
                b = pentomino.random_board(rng)
    else:
        file = str(settings.get("pairs_file", "") or "")
        if file:
            candidates = [p for p in photos.load_vg_pairs(file) if p["kind"] == pair]
            if not candidates:
                raise ValueError(f"{file}: no pairs of kind {pair!r}")
            chosen = rng.choice(candidates)
            a, b, source = chosen["image_a"], chosen["image_b"], "disk"
        else:
            a, b = _scene_pair(rng, pair)
            source = "synthetic"
    return {
        "seed": seed,
        "set": name,
        "pair": pair,
        "source": source,
        "image_a": a,
        "image_b": b,
        "same": pair == "same",
    }


SYSTEM = """\
You are playing a cooperative game with a partner. Each of you sees one {noun}; the two {noun}s \
may be the same or they may differ. Neither of you can see the other's {noun}: you can only \
talk. Together, find out whether your {noun}s are the same.

The game goes in steps and I tell you each time what to do: describe your {noun}, ask your \
partner a question, answer your partner's question, or decide. Start every reply with the word \
I ask for, written exactly so, in capitals and with the colon: DESCRIPTION:, QUESTION:, ANSWER: \
or DECISION:. A reply that starts with anything else ends the game. When you decide, write \
exactly "DECISION: same image" or "DECISION: different images" and nothing else."""

ASK = {
    DESCRIPTION: 'Describe your {noun}. Start your reply with "DESCRIPTION:" followed by the description, and add nothing else.',
    QUESTION: 'Now ask your partner one question that helps to find out whether their {noun} differs from yours. Start with "QUESTION:" and add nothing else.',
    ANSWER: 'Answer your partner\'s question about your {noun}. Start with "ANSWER:" and add nothing else.',
    DECISION: 'Now decide: is your partner\'s {noun} the same as yours? Write exactly "DECISION: same image" or "DECISION: different images".',
}


def schedule(decision_turn: int) -> list[tuple[str, str]]:
    """Who replies with which flag, in order (clembench's turn structure)."""
    a, b = "player_a", "player_b"
    steps = [(a, DESCRIPTION), (b, DESCRIPTION), (b, QUESTION)]
    for _ in range(1, decision_turn):
        steps += [(a, ANSWER), (a, QUESTION), (b, ANSWER), (b, QUESTION)]
    steps += [(a, ANSWER), (a, QUESTION), (b, ANSWER), (b, DECISION), (a, DECISION)]
    return steps


class MatchItGame(ClemGameMaster):
    """Settings: ``variant``, ``set``, ``pair``, ``pairs_file``, ``decision_turn`` (2)."""

    roles = ("player_a", "player_b")

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.decision_turn = max(1, int(self.settings.get("decision_turn", 2)))
        self.steps = schedule(self.decision_turn)
        self.index = 0
        self.stims = {"player_a": instance["image_a"], "player_b": instance["image_b"]}
        self.noun = images.noun(instance["image_a"])
        if self.variant == "text" and instance["image_a"]["kind"] != "grid":
            raise ValueError("the text variant needs grids")
        self.held: dict[str, list[str]] = {"player_a": [], "player_b": []}
        self.decisions: dict[str, bool] = {}
        # For readers of the transcript only (notes never reach a player; a private one
        # does not reach a seat's events topic either: it names the answer).
        self.note(
            "instance",
            private=True,
            set=instance.get("set"),
            pair=instance.get("pair"),
            source=instance.get("source"),
            same=instance["same"],
        )

    def system_prompt(self, role: str) -> str:
        return SYSTEM.format(noun=self.noun)

    def whose_turn(self) -> str | None:
        return self.steps[self.index][0] if self.index < len(self.steps) else None

    def expected(self) -> str:
        return self.steps[self.index][1]

    def observe(self, role: str) -> Observation:
        # After the last step nothing is asked: the observer's final view shows the pictures.
        flag = self.expected() if self.index < len(self.steps) else None
        stim = self.stims[role]
        ask = "" if flag is None else ASK[flag].format(noun=self.noun)
        data = {"expect": flag, "noun": self.noun, "units": images.units(stim)}
        if self.variant == "text":
            text = f"Your {self.noun}:\n{images.as_text(stim)}"
            return Observation(text=f"{text}\n\n{ask}" if ask else text, data=data)
        return Observation(
            text=f"Your {self.noun} is in the picture.\n{ask}".rstrip(),
            images=[images.render(stim)],
            data=data,
        )

    def handle_reply(self, role: str, text: str) -> None:
        flag = self.expected()
        lines = [line for line in text.strip().splitlines() if line.strip()]
        first_word = lines[0].split()[0] if lines else ""
        if first_word != flag:
            self.abort(
                role,
                f"expected the reply to start with {flag!r}, it starts with {first_word!r}"
                if lines
                else "empty reply",
            )
            return
        said = text.strip()
        if flag == DECISION:
            match = DECISION_RE.match(said)
            if match is None:
                self.abort(
                    role,
                    'a decision is exactly "DECISION: same image" or "DECISION: different images"',
                )
                return
            same = match.group(1).lower().startswith("same")
            self.decisions[role] = same == bool(self.instance["same"])
            self.note(f"decision {role}", private=True, correct=self.decisions[role])
        else:
            self.held[role].append(said)
        self.index += 1
        # Relay what a player said when its partner is about to use it, and not before: B hears
        # A's description only after describing its own picture; decisions are never relayed.
        nxt = self.whose_turn()
        if nxt is not None and self.expected() != DESCRIPTION:
            speaker = "player_b" if nxt == "player_a" else "player_a"
            for message in self.held[speaker]:
                self.say(speaker, nxt, message)
            self.held[speaker] = []
        if nxt is None:
            both = all(self.decisions.get(r, False) for r in self.roles)
            self.end(
                "success" if both else "lost",
                "both decided correctly" if both else "a wrong decision",
            )

    def episode_scores(self) -> Scores:
        a, b = self.decisions.get("player_a", False), self.decisions.get("player_b", False)
        both = 100.0 if a and b else 0.0
        return episode_scores(self.outcome, both, player_score=50.0 * (a + b))


# --- players -----------------------------------------------------------------------------------


def _partner_units(view: View) -> list[str] | None:
    for who, text in view.history:
        if who != view.role and text.startswith(DESCRIPTION):
            return [u.strip() for u in text[len(DESCRIPTION) :].split(";") if u.strip()]
    return None


def _partner_said_no(view: View) -> bool:
    return any(
        who != view.role
        and text.startswith(ANSWER)
        and text[len(ANSWER) :].strip().lower().startswith("no")
        for who, text in view.history
    )


def _last_question(view: View) -> str:
    text = view.last_from("player_b" if view.role == "player_a" else "player_a") or ""
    for line in text.splitlines():
        if line.startswith(QUESTION):
            return line
    return ""


QUESTION_RE = re.compile(r"Does your \w+ show this: (.+)\?$")


def scripted_player(view: View, rng: random.Random) -> str:
    """Describes its picture completely, asks about a detail the descriptions disagree on (or
    any detail), answers from its own picture, and decides from all it heard."""
    data = view.data or {}
    flag = data.get("expect", DESCRIPTION)
    mine: list[str] = list(data.get("units", []))
    noun = data.get("noun", "picture")
    theirs = _partner_units(view)
    if flag == DESCRIPTION:
        return f"{DESCRIPTION} {'; '.join(mine)}"
    if flag == QUESTION:
        asked = view.own_replies()
        differing = [u for u in mine if theirs is not None and u not in theirs]
        topic = differing[0] if differing else (mine[asked % len(mine)] if mine else "anything")
        return f"{QUESTION} Does your {noun} show this: {topic}?"
    if flag == ANSWER:
        match = QUESTION_RE.search(_last_question(view))
        if match is None:
            return f"{ANSWER} I cannot tell."
        return f"{ANSWER} {'yes' if match.group(1) in mine else 'no'}"
    same = theirs is not None and sorted(theirs) == sorted(mine) and not _partner_said_no(view)
    return f"{DECISION} {SAME if same else DIFFERENT}"


def random_player(view: View, rng: random.Random) -> str:
    """Always the right flag, content at random: a detail of its own picture, yes or no, and a
    coin-flip decision."""
    data = view.data or {}
    flag = data.get("expect", DESCRIPTION)
    mine: list[str] = list(data.get("units", [])) or ["something"]
    if flag == DESCRIPTION:
        return f"{DESCRIPTION} {rng.choice(mine)}"
    if flag == QUESTION:
        return f"{QUESTION} Does your {data.get('noun', 'picture')} show this: {rng.choice(mine)}?"
    if flag == ANSWER:
        return f"{ANSWER} {rng.choice(['yes', 'no'])}"
    return f"{DECISION} {rng.choice([SAME, DIFFERENT])}"
