"""clembench's aggregate scores over episode records: % played, quality, clemscore.

Per game: ``% played`` = 100 × share of episodes not aborted; ``quality`` = mean main score of the
played episodes (None when none was played). Over games: ``avg %p`` is the mean % played of all
games, ``avg ql`` the mean quality of the games with % played > 0 (a game never played drops
out of the quality average), and **clemscore = avg %p / 100 × avg ql**.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parley.records import EpisodeRecord


@dataclass(frozen=True)
class GameStats:
    episodes: int
    played: float  # % played, 0–100
    quality: float | None  # mean main score over played episodes


def _number(value: Any) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def _main(record: EpisodeRecord | dict[str, Any]) -> Any:
    """A record's main score: ``main_score`` (record schema 2), or ``scores["main"]`` in
    records written before it (docs/runtime.md, Outcomes)."""
    if "schema" in record:
        return record.get("main_score")
    return (record.get("scores") or {}).get("main")


def is_played(record: EpisodeRecord | dict[str, Any]) -> bool:
    """An episode counts as played unless it was aborted (or never finished)."""
    return record.get("outcome") in ("success", "lost")


def game_stats(records: Iterable[EpisodeRecord | dict[str, Any]]) -> GameStats:
    """% played and quality of one game's episodes; episodes that ended in a runtime ``error``
    or were ``cancelled`` say nothing about the players and are left out."""
    records = [r for r in records if r.get("outcome") in ("success", "lost", "aborted")]
    played = [r for r in records if is_played(r)]
    mains = [m for r in played if (m := _number(_main(r))) is not None]
    return GameStats(
        episodes=len(records),
        played=100.0 * len(played) / len(records) if records else 0.0,
        quality=sum(mains) / len(mains) if mains else None,
    )


@dataclass(frozen=True)
class Clemscore:
    clemscore: float
    played: float  # avg % played over games
    quality: float | None  # avg quality over games played at least once


def clemscore(per_game: dict[str, GameStats]) -> Clemscore:
    """The run's clemscore over ``per_game`` (macro averages over games)."""
    if not per_game:
        return Clemscore(0.0, 0.0, None)
    played = sum(s.played for s in per_game.values()) / len(per_game)
    qualities = [s.quality for s in per_game.values() if s.played > 0 and s.quality is not None]
    quality = sum(qualities) / len(qualities) if qualities else None
    return Clemscore(played / 100.0 * quality if quality is not None else 0.0, played, quality)
