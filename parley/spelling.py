"""What a mistyped name was probably meant to be, for error messages."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, words: Iterable[str], most: int = 2) -> str:
    """``did you mean 'seeds'?`` for a mistyped ``word`` among ``words``, or empty when nothing
    is close. Example::

        did_you_mean("seedz", ["seed", "seeds", "games"])  # "did you mean 'seed' or 'seeds'?"
    """
    close = difflib.get_close_matches(word, list(words), n=most, cutoff=0.75)
    return "did you mean " + " or ".join(repr(c) for c in close) + "?" if close else ""
