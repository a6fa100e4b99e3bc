"""Shared pieces of the clem games: seeding, clembench's episode scores, the game-master base."""

from __future__ import annotations

import random
from typing import Any

from parley.environments.base import GameMaster, Outcome, ReasonCode, Scores

ORDINALS = ("first", "second", "third")

# clembench's episode metrics (clemcore ``metrics``): aborted / lose / success and the main score.
# ``main`` is None (clembench: NaN) for an aborted episode, and success/lose are not set then.


def an(phrase: str) -> str:
    """The phrase with its indefinite article: "a red cube", "an orange cube"."""
    return ("an " if phrase[:1].lower() in "aeiou" else "a ") + phrase


def seeded(seed: int, salt: str) -> random.Random:
    """A random generator for ``seed`` that differs per purpose (``salt``), stable everywhere."""
    return random.Random(f"{salt}:{seed}")


def episode_scores(outcome: Outcome | None, main: float | None, **extra: float | None) -> Scores:
    """clembench's episode scores: ``main``, and ``aborted``, ``played``, ``success``, ``lose``.

    An aborted (or unfinished) episode gets ``main = None`` and no success/lose, so the quality
    average counts played episodes only; game-specific ``extra`` scores are set to None as well.
    """
    if outcome in (None, "aborted"):
        aborted = Scores(None, aborted=1.0, played=0.0, success=None, lose=None)
        aborted.update(dict.fromkeys(extra))
        return aborted
    scores = Scores(
        None if main is None else float(main),
        aborted=0.0,
        played=1.0,
        success=1.0 if outcome == "success" else 0.0,
        lose=0.0 if outcome == "success" else 1.0,
    )
    scores.update({k: None if v is None else float(v) for k, v in extra.items()})
    return scores


class ClemGameMaster(GameMaster):
    """A clembench-style game master: counts requests (parsed/violated) for clembench's request
    metrics and caches its episode scores (some, like graph edit distance, cost time)."""

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.variant = str(self.settings.get("variant", "image"))
        if self.variant not in ("image", "text"):
            raise ValueError(f"variant must be 'image' or 'text', not {self.variant!r}")
        self.requests = 0
        self.violated = 0
        self._scores: Scores | None = None

    def on_reply(self, role: str, text: str) -> None:
        self.requests += 1
        super().on_reply(role, text)

    def abort(self, role: str, reason: str) -> None:
        """A reply broke the format: clembench aborts the episode."""
        self.violated += 1
        self.violation(role, reason, abort=True, code=ReasonCode.PARSE_ERROR)

    def request_scores(self) -> dict[str, float]:
        return {
            "request_count": float(self.requests),
            "parsed_request_count": float(self.requests - self.violated),
            "violated_request_count": float(self.violated),
        }

    def episode_scores(self) -> Scores:
        """The game's scores (called once the episode is over)."""
        raise NotImplementedError

    def scores(self) -> Scores:
        if self._scores is None or self.outcome is None:
            episode = self.episode_scores()
            scores = Scores(episode.main, **episode, **self.request_scores())
            if self.outcome is None:
                return scores
            self._scores = scores
        return Scores(self._scores.main, **self._scores)
