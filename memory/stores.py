"""Where episodic memory lives: in the process (default) or in SQLite (persistent)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from parley.memory.episodic import MemoryEntry


class MemoryStore(Protocol):
    """Append-only lists of entries by key."""

    def append(self, key: str, entry: MemoryEntry) -> None: ...
    def load(self, key: str) -> list[MemoryEntry]: ...
    def drop(self, key: str) -> None: ...


class InMemoryStore:
    """Entries in a dict; gone with the process (and dropped when an episode ends)."""

    def __init__(self) -> None:
        self._data: dict[str, list[MemoryEntry]] = {}

    def append(self, key: str, entry: MemoryEntry) -> None:
        self._data.setdefault(key, []).append(entry)

    def load(self, key: str) -> list[MemoryEntry]:
        return self._data.get(key, [])

    def drop(self, key: str) -> None:
        self._data.pop(key, None)


class SQLiteStore:
    """Entries in a SQLite file, for memory that outlives an episode or a process.

    Parts are stored as JSON through ``dump_part``/``load_part`` (identity for JSON values).
    """

    def __init__(
        self,
        path: str | Path,
        dump_part: Callable[[Any], Any] = lambda p: p,
        load_part: Callable[[Any], Any] = lambda p: p,
    ) -> None:
        self._db = sqlite3.connect(str(path))
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS memory (key TEXT, seq INTEGER PRIMARY KEY AUTOINCREMENT,"
            " speaker TEXT, own INTEGER, parts TEXT)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS memory_key ON memory (key, seq)")
        self._dump, self._load = dump_part, load_part

    def append(self, key: str, entry: MemoryEntry) -> None:
        parts = json.dumps([self._dump(p) for p in entry.parts])
        with self._db:
            self._db.execute(
                "INSERT INTO memory (key, speaker, own, parts) VALUES (?, ?, ?, ?)",
                (key, entry.speaker, int(entry.own), parts),
            )

    def load(self, key: str) -> list[MemoryEntry]:
        from parley.memory.episodic import MemoryEntry

        rows = self._db.execute(
            "SELECT speaker, own, parts FROM memory WHERE key = ? ORDER BY seq", (key,)
        )
        return [
            MemoryEntry(speaker, bool(own), tuple(self._load(p) for p in json.loads(parts)))
            for speaker, own, parts in rows
        ]

    def drop(self, key: str) -> None:
        with self._db:
            self._db.execute("DELETE FROM memory WHERE key = ?", (key,))

    def close(self) -> None:
        self._db.close()
