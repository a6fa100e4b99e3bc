"""Episode records for tests of their readers: what a test names, the fields every record has
filled in (``parley.records.EpisodeRecord`` requires them)."""

from __future__ import annotations

from typing import Any

from parley.records import EpisodeRecord, record_of

# The fields every record has, at values no test relies on.
REQUIRED: dict[str, Any] = {
    "episode": "e-0",
    "game": "test.game",
    "seed": 0,
    "pairing": {},
    "outcome": "success",
    "turns": 0,
}


def record(data: dict[str, Any] | None = None, /, **fields: Any) -> EpisodeRecord:
    """An :class:`EpisodeRecord` of ``data`` and ``fields``, validated (and upgraded, for a
    test of an older shape) as a line of ``episodes.jsonl`` is; required fields a test leaves
    out take :data:`REQUIRED`."""
    return record_of({**REQUIRED, **(data or {}), **fields})
