"""Strict reply parsing shared by games: exact action lines, flags, first bracketed block."""

from __future__ import annotations

import re

_DECORATION = re.compile(r"^[\s`*\"']+|[\s`*\"'.]+$")


def action_lines(text: str, legal: list[str]) -> list[str] | None:
    """The actions of a reply in which every non-empty line is exactly one legal action name.

    Surrounding whitespace, backticks, quotes, asterisks and a final full stop are ignored and
    case does not matter; anything else on any line makes the reply an utterance (None), so
    prose that mentions an action never fires it.
    """
    by_name = {a.lower(): a for a in legal}
    found: list[str] = []
    for raw in text.splitlines():
        line = _DECORATION.sub("", raw)
        if not line:
            continue
        action = by_name.get(line.lower())
        if action is None:
            return None
        found.append(action)
    return found or None


def first_bracketed(text: str, open_: str = "[", close: str = "]") -> str | None:
    """The first balanced ``[...]`` block of ``text`` (brackets inside strings respected)."""
    start = text.find(open_)
    while start != -1:
        depth, in_string, escape = 0, False, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_string:
                if escape:
                    escape = False
                elif ch == "\\":
                    escape = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch == open_:
                depth += 1
            elif ch == close:
                depth -= 1
                if depth == 0:
                    return text[start : i + 1]
        start = text.find(open_, start + 1)
    return None
