"""The episode index of a run: one small row per episode, filtered, sorted and paged on the server.

A run of 100,000 episodes keeps 100,000 :class:`Row` objects (a few hundred bytes each) and a
page is cut from a sorted order that is rebuilt only when the index changed since the last
query with the same sort, so a browser paging through a large run never receives it whole.

Example::

    index = EpisodeIndex()
    index.upsert("ep-1", game="comma.wire", pairing="solver=a,expert=b", outcome="success")
    page = index.query(game="comma.wire", sort="episode", limit=20)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

SORTS = ("episode", "game", "pairing", "outcome", "main_score", "turns", "started_at", "duration_s")
RUNNING = "running"
MAX_LIMIT = 500


@dataclass(slots=True)
class Row:
    """What the episode list shows of one episode."""

    episode: str
    game: str = ""
    pairing: str = ""
    outcome: str = RUNNING
    main_score: float | None = None
    turns: int = 0
    started_at: float = 0.0
    duration_s: float | None = None
    leaks: int = 0
    # Where its record starts in episodes.jsonl (None: not recorded yet, or no folder known).
    offset: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "episode": self.episode,
            "game": self.game,
            "pairing": self.pairing,
            "outcome": self.outcome,
            "main_score": self.main_score,
            "turns": self.turns,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "leaks": self.leaks,
        }


class QueryError(ValueError):
    """A filter or sort the index does not know (the message names it)."""


def _key(sort: str) -> Any:
    if sort in ("main_score", "duration_s"):
        # None sorts before every number.
        return lambda r: (getattr(r, sort) is not None, getattr(r, sort) or 0.0, r.episode)
    return lambda r: (getattr(r, sort), r.episode)


class EpisodeIndex:
    """Rows by episode id, with outcome counts kept as rows change."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.outcomes: Counter[str] = Counter()
        self.games: Counter[str] = Counter()
        self.pairings: Counter[str] = Counter()
        self.version = 0
        self._orders: dict[str, tuple[int, list[Row]]] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def get(self, episode: str) -> Row | None:
        return self.rows.get(episode)

    def upsert(self, episode: str, **fields: Any) -> Row:
        """Add ``episode`` or update its fields; returns its row."""
        row = self.rows.get(episode)
        if row is None:
            row = self.rows[episode] = Row(episode)
            self.outcomes[row.outcome] += 1
        before = (row.outcome, row.game, row.pairing)
        for name, value in fields.items():
            setattr(row, name, value)
        after = (row.outcome, row.game, row.pairing)
        for counter, old, new in zip(
            (self.outcomes, self.games, self.pairings), before, after, strict=True
        ):
            if old == new:
                continue
            if old:
                counter[old] -= 1
                if counter[old] <= 0:
                    del counter[old]
            if new:
                counter[new] += 1
        self.version += 1
        return row

    def _order(self, sort: str) -> list[Row]:
        cached = self._orders.get(sort)
        if cached is not None and cached[0] == self.version:
            return cached[1]
        order = sorted(self.rows.values(), key=_key(sort))
        self._orders[sort] = (self.version, order)
        return order

    def query(
        self,
        *,
        game: str = "",
        pairing: str = "",
        outcome: str = "",
        sort: str = "started_at",
        desc: bool = False,
        offset: int = 0,
        limit: int = 50,
    ) -> dict[str, Any]:
        """One page of the rows that match every given filter (an empty filter matches all),
        with the total that match and the choices each filter offers."""
        if sort not in SORTS:
            raise QueryError(f"sort {sort!r} is not one of {', '.join(SORTS)}")
        if offset < 0 or not 1 <= limit <= MAX_LIMIT:
            raise QueryError(f"offset must be ≥ 0 and limit 1–{MAX_LIMIT}, got {offset}, {limit}")
        order = self._order(sort)
        if desc:
            order = order[::-1]
        if game or pairing or outcome:
            order = [
                r
                for r in order
                if (not game or r.game == game)
                and (not pairing or r.pairing == pairing)
                and (not outcome or r.outcome == outcome)
            ]
        return {
            "total": len(order),
            "offset": offset,
            "limit": limit,
            "rows": [r.as_dict() for r in order[offset : offset + limit]],
            "games": sorted(self.games),
            "pairings": sorted(self.pairings),
            "outcomes": dict(sorted(self.outcomes.items())),
        }
