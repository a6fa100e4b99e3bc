"""Episode records for tests of their readers: what a test names, the fields every record has
filled in (``parley.records.EpisodeRecord`` requires them)."""

from __future__ import annotations

from typing import Any

from parley.records import EpisodeRecord

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
    """An :class:`EpisodeRecord` of ``data`` and ``fields``, validated as a line of
    ``episodes.jsonl`` is; required fields a test leaves out take :data:`REQUIRED`."""
    return EpisodeRecord.model_validate({**REQUIRED, **(data or {}), **fields})
