"""Replies held to the game master's legal actions (``constrain: legal_actions``).

A turn's legal actions (``TurnRequest.legal_actions``) are replies the game reads as they
stand: a COMMA solver's action name, a board game's bare move. With ``constrain:
legal_actions`` a model is asked to answer with exactly one of them, through what its server
offers:

- ``choice``: vLLM's ``structured_outputs: {"choice": [...]}`` (vLLM 0.10.2 and later, the
  pinned 0.11 included; ``guided_choice`` for older servers — deprecated in 0.10.2, removed
  in 0.12);
- ``regex``: ``structured_outputs: {"regex": "(?:a|b|…)"}`` (older: ``guided_regex``);
- ``json_schema``: OpenAI's ``response_format`` with a JSON schema whose one field is an enum
  of the actions; the reply ``{"action": "e2e4"}`` is turned back into ``e2e4`` before the
  game reads it (the raw reply stays in the transcript).

``constrain_via: auto`` (the default) takes the form the endpoint's dialect honours
(dialect.py): ``choice`` for vLLM, ``json_schema`` for every other server, an unknown one
included — a server ignores fields it does not know, so a form it does not take would leave
the reply free while the record said it was held. A reply outside the legal set under a
constraint that was sent is flagged ``constraint_honoured: false`` in its call record.

A turn without legal actions (a dialogue turn, a question with a free answer) cannot be held:
the request goes out free, its call record says why, and the log says so once per model and
role. Anthropic's messages API offers no such constraint: the same applies.

The stand-in server (:mod:`parley.agents.backends.simserver`) honours all three through
:func:`honour`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from dataclasses import dataclass
from typing import Any, Literal

log = logging.getLogger("parley.agents.constrain")

Via = Literal["choice", "regex", "guided_choice", "guided_regex", "json_schema"]
ViaSetting = Literal["auto", "choice", "regex", "guided_choice", "guided_regex", "json_schema"]
JSON_FIELD = "action"
SCHEMA_NAME = "legal_action"

_warned: set[tuple[str, str, str]] = set()


@dataclass(frozen=True)
class Constraint:
    """What one request's reply is held to: one of ``choices``, sent the ``via`` way
    (``auto`` until the endpoint's dialect says which: :meth:`resolved`)."""

    choices: tuple[str, ...]
    via: ViaSetting

    def resolved(self, form: Via | None) -> Constraint | None:
        """This constraint in the form the server takes (``form``, its dialect's), where
        ``via`` is ``auto``; None when the server takes none."""
        if self.via != "auto":
            return self
        return None if form is None else Constraint(self.choices, form)

    def honoured(self, text: str) -> bool:
        """Whether the reply the game reads (after :meth:`unwrap`) is one of the choices."""
        return text.strip() in self.choices

    def regex(self) -> str:
        """A regular expression that matches exactly the choices."""
        return "(?:" + "|".join(re.escape(c) for c in self.choices) + ")"

    def fields(self) -> dict[str, Any]:
        """The request body's fields that carry the constraint."""
        if self.via == "choice":
            return {"structured_outputs": {"choice": list(self.choices)}}
        if self.via == "regex":
            return {"structured_outputs": {"regex": self.regex()}}
        if self.via == "guided_choice":
            return {"guided_choice": list(self.choices)}
        if self.via == "guided_regex":
            return {"guided_regex": self.regex()}
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": SCHEMA_NAME,
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "properties": {JSON_FIELD: {"type": "string", "enum": list(self.choices)}},
                        "required": [JSON_FIELD],
                        "additionalProperties": False,
                    },
                },
            }
        }

    def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with the constraint's fields added (a new dict; ``body`` is not changed)."""
        return {**body, **self.fields()}

    def unwrap(self, text: str) -> str:
        """The reply as the game should read it: the action of a JSON reply, or ``text``."""
        if self.via != "json_schema":
            return text
        try:
            data = json.loads(text)
        except ValueError:
            return text  # not JSON after all: the game judges the text as it is
        if isinstance(data, dict) and isinstance(data.get(JSON_FIELD), str):
            return str(data[JSON_FIELD])
        return text

    def record(self) -> dict[str, Any]:
        """What the call record keeps of it."""
        return {"constrained": True, "constraint": {"via": self.via, "choices": len(self.choices)}}


def resolve_via(setting: str, backend: str) -> ViaSetting | None:
    """How a model takes the constraint: ``setting`` (``auto``: the form its endpoint's
    dialect honours, settled when the request is sent); None for Anthropic."""
    if backend != "openai":
        return None
    return setting  # type: ignore[return-value]


def for_turn(
    mode: str | None,
    legal_actions: list[str],
    *,
    backend: str,
    via: str = "auto",
    model: str = "",
    role: str = "",
) -> tuple[Constraint | None, dict[str, Any]]:
    """The constraint of one turn, and what its call record says of it.

    ``mode`` is the effective ``constrain`` setting (``legal_actions``, ``off`` or None). The
    record is empty when nothing was asked; ``{"constrained": False, "constraint": why}`` when
    it was asked and cannot be held this turn (logged once per model and role).
    """
    if mode != "legal_actions":
        return None, {}
    how = resolve_via(via, backend)
    if how is None:
        why = f"the {backend} API takes no constraint on the reply"
    elif not legal_actions:
        why = "the game gave no legal actions for this turn"
    else:
        # The same action twice would be one choice; order kept for the seeded pick.
        constraint = Constraint(tuple(dict.fromkeys(legal_actions)), how)
        return constraint, constraint.record()
    key = (model, role, why)
    if key not in _warned:
        _warned.add(key)
        log.warning("constrain: legal_actions: model %s as %s replies free: %s", model, role, why)
    return None, {"constrained": False, "constraint": why}


def not_honoured(model: str, role: str, sent: Constraint) -> None:
    """Say once per model and role that the server answered outside a constraint it was sent
    (it ignored the field, or does not support the form)."""
    key = (model, role, f"not honoured: {sent.via}")
    if key not in _warned:
        _warned.add(key)
        log.warning(
            "constrain: legal_actions: model %s as %s answered outside the legal actions "
            "although the constraint was sent (%s): the server does not honour it; set "
            "constrain_via or dialect for this model",
            model,
            role,
            sent.via,
        )


# --- the stand-in server's side ---------------------------------------------------------------


def requested(body: dict[str, Any]) -> dict[str, Any] | None:
    """The constraint a request body carries, in a short form (for the sim's stats)."""
    outputs = body.get("structured_outputs")
    if isinstance(outputs, dict):
        for key in ("choice", "regex", "json"):
            if key in outputs:
                return {"field": f"structured_outputs.{key}", "value": outputs[key]}
    for key in ("guided_choice", "guided_regex", "guided_json"):
        if key in body:
            return {"field": key, "value": body[key]}
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return {"field": "response_format.json_schema", "value": fmt.get("json_schema")}
    return None


def _rng(body: dict[str, Any], seed: int) -> random.Random:
    """A pick that depends only on the request (its messages) and the server's seed: the same
    request gets the same answer, whatever else the server is doing."""
    digest = hashlib.sha256(
        json.dumps(body.get("messages"), sort_keys=True, default=str).encode()
    ).digest()
    return random.Random(seed ^ int.from_bytes(digest[:8], "big"))


def honour(body: dict[str, Any], reply: str, seed: int = 0) -> str:
    """The reply a constrained server would give: ``reply`` when it already obeys the
    request's constraint, else a seeded pick among the choices, a string that matches the
    regex, or JSON valid under the schema's enum."""
    asked = requested(body)
    if asked is None:
        return reply
    field, value = asked["field"], asked["value"]
    rng = _rng(body, seed)
    if field.endswith("choice") and isinstance(value, list) and value:
        return reply if reply in value else str(rng.choice(value))
    if field.endswith("regex") and isinstance(value, str):
        if re.fullmatch(value, reply):
            return reply
        return generate(value, rng)
    if field == "response_format.json_schema" and isinstance(value, dict):
        return _schema_reply(value.get("schema") or {}, reply, rng)
    return reply


def _schema_reply(schema: dict[str, Any], reply: str, rng: random.Random) -> str:
    props = schema.get("properties") or {}
    try:
        given = json.loads(reply)
    except ValueError:
        given = None
    out: dict[str, Any] = {}
    for name, prop in props.items():
        enum = prop.get("enum") if isinstance(prop, dict) else None
        value = given.get(name) if isinstance(given, dict) else None
        if enum:
            out[name] = value if value in enum else rng.choice(enum)
        else:
            out[name] = value if isinstance(value, str) else reply
    return json.dumps(out)


def generate(pattern: str, rng: random.Random, *, most: int = 3) -> str:
    """A string that ``pattern`` matches in full, for the subset of regular expressions the
    client sends and a little more: literals and escapes, alternation, groups (``(…)``,
    ``(?:…)``), classes with ranges, ``.``, ``\\d``/``\\w``/``\\s``, anchors, and repeats
    (``?``, ``*``, ``+``, ``{m}``, ``{m,n}``; at most ``most`` times over their minimum).
    Raises ValueError for anything else."""
    text = _Generator(pattern, rng, most).whole()
    if not re.fullmatch(pattern, text):
        raise ValueError(f"generated {text!r}, which {pattern!r} does not match")
    return text


# What a class escape or ``.`` stands for in a generated string.
_ESCAPED = {"d": "7", "w": "a", "s": " "}


class _Generator:
    """A recursive-descent reading of ``pattern`` that writes one match as it goes."""

    def __init__(self, pattern: str, rng: random.Random, most: int) -> None:
        self.pattern, self.rng, self.most, self.at = pattern, rng, most, 0

    def _peek(self) -> str:
        return self.pattern[self.at] if self.at < len(self.pattern) else ""

    def _take(self) -> str:
        char = self._peek()
        if not char:
            raise ValueError(f"regex {self.pattern!r} ends too early")
        self.at += 1
        return char

    def whole(self) -> str:
        text = self._alternation()
        if self.at != len(self.pattern):
            raise ValueError(f"unbalanced ')' in regex {self.pattern!r}")
        return text

    def _alternation(self) -> str:
        branches = [self._sequence()]
        while self._peek() == "|":
            self.at += 1
            branches.append(self._sequence())
        return self.rng.choice(branches)

    def _sequence(self) -> str:
        out: list[str] = []
        while self._peek() not in ("", "|", ")"):
            start = self.at
            self._atom()  # read once to find its repeat, then written once per repeat
            low, high = self._repeat()
            after = self.at
            for _ in range(self.rng.randint(low, high)):
                self.at = start
                out.append(self._atom())
            self.at = after
        return "".join(out)

    def _repeat(self) -> tuple[int, int]:
        char = self._peek()
        if char in ("?", "*", "+"):
            self.at += 1
            low, high = {"?": (0, 1), "*": (0, self.most), "+": (1, 1 + self.most)}[char]
        elif char == "{" and (found := re.match(r"\{(\d+)(,(\d*))?\}", self.pattern[self.at :])):
            self.at += found.end()
            low = int(found.group(1))
            high = (
                low
                if not found.group(2)
                else (int(found.group(3)) if found.group(3) else low + self.most)
            )
        else:
            return 1, 1
        if self._peek() in ("?", "+"):
            self.at += 1  # lazy or possessive: the same strings match
        return low, min(high, low + self.most)

    def _atom(self) -> str:
        char = self._take()
        if char == "(":
            if self.pattern.startswith("?:", self.at):
                self.at += 2
            elif self._peek() == "?":
                raise ValueError(
                    f"cannot generate a string for group {self.pattern[self.at - 1 :]!r}"
                )
            text = self._alternation()
            if self._take() != ")":
                raise ValueError(f"unbalanced '(' in regex {self.pattern!r}")
            return text
        if char == "[":
            return self._class()
        if char == ".":
            return "x"
        if char in ("^", "$"):
            return ""
        if char == "\\":
            escaped = self._take()
            if escaped in _ESCAPED:
                return _ESCAPED[escaped]
            if escaped.isalnum():
                raise ValueError(f"cannot generate a string for escape \\{escaped}")
            return escaped
        if char in ("*", "+", "?", "{", ")"):
            raise ValueError(f"nothing to repeat at {self.at - 1} in regex {self.pattern!r}")
        return char

    def _class(self) -> str:
        if self._peek() == "^":
            raise ValueError("cannot generate a string for a negated class")
        options: list[str] = []
        first = True
        while first or self._peek() != "]":
            first = False
            char = self._take()
            if char == "\\":
                escaped = self._take()
                char = _ESCAPED.get(escaped, escaped)
            if self._peek() == "-" and self.pattern[self.at + 1 : self.at + 2] not in ("]", ""):
                self.at += 1
                end = self._take()
                if end == "\\":
                    end = self._take()
                if ord(end) < ord(char):
                    raise ValueError(f"bad range {char}-{end} in regex {self.pattern!r}")
                options.append(chr(self.rng.randint(ord(char), ord(end))))
            else:
                options.append(char)
        self.at += 1  # the closing ]
        return self.rng.choice(options)
