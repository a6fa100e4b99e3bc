"""The response cache: model replies kept on disk (SQLite), so that a rerun of the same config
and seeds replays them without calling the models.

A reply is keyed by the sha256 of the request as it would be sent, less how it is delivered
(``stream``): the provider, the model, the resolved generation parameters and the prompt's
messages with their images (the encoded image bytes enter the hash, so an image is known by
its content). Anything that changes the request changes the key; a reply is only ever
replayed for the very request that produced it. Only successful replies are stored.

One SQLite file may serve many runs and processes at once: WAL mode (readers never wait for the
writer), a busy timeout for writers of other processes, and within a process one thread that
does all of the cache's work, so the event loop never waits on the disk. Two identical requests
in flight at once may both reach the model; the first reply stored is the one kept.

``parley cache stats [PATH]`` and ``parley cache clear [PATH]`` inspect and empty a cache.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("parley.cache")

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    created REAL NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    value BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
# Request fields that say how a reply is delivered, not what it is.
_DELIVERY = ("stream", "stream_options")


def default_path() -> Path:
    """Where ``cache: true`` keeps replies: ``$PARLEY_CACHE``, else
    ``$XDG_CACHE_HOME/parley/responses.sqlite`` (``~/.cache/parley/responses.sqlite``)."""
    explicit = os.environ.get("PARLEY_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "parley" / "responses.sqlite"


def resolve_path(setting: bool | str | None) -> Path | None:
    """The cache file of a ``cache:`` setting (``true``: :func:`default_path`, a string: that
    file), or None when caching is off."""
    if setting is None or setting is False:
        return None
    if setting is True:
        return default_path()
    return Path(setting).expanduser()


def request_key(provider: str, body: dict[str, Any]) -> str:
    """The cache key of a request body: sha256 over its canonical JSON (sorted keys), less
    the delivery fields."""
    content = {k: v for k, v in body.items() if k not in _DELIVERY}
    try:
        data = orjson.dumps(
            {"provider": provider, "request": content},
            option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
        )
    except TypeError:  # what orjson refuses (integers over 64 bits): the standard library
        import json

        data = json.dumps(
            {"provider": provider, "request": content}, sort_keys=True, default=str
        ).encode()
    return hashlib.sha256(data).hexdigest()


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    # Switching a fresh file to WAL takes a lock that SQLite's busy handler does not wait
    # for: processes opening it at once retry here.
    deadline = time.monotonic() + 30.0
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(_SCHEMA)
    found = conn.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
    if found is None:
        conn.execute(
            "INSERT OR IGNORE INTO meta (name, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
        )
    elif found[0] != str(SCHEMA_VERSION):
        conn.close()
        raise sqlite3.DatabaseError(
            f"{path} is a response cache of schema {found[0]}; this parley reads schema "
            f"{SCHEMA_VERSION} (clear it with `parley cache clear {path}`)"
        )
    return conn


class ResponseCache:
    """One cache file, used from one event loop (any number of models and episodes).

    Every database call runs on the cache's own thread. A cache that fails (a full disk, a
    file that is not a cache) is logged once and then behaves as empty: a run never fails
    because of its cache.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="parley-cache")
        self._conn: sqlite3.Connection | None = None
        self._broken: str | None = None
        self._damaged = 0
        self.hits = 0
        self.misses = 0
        self.stored = 0
        # Replays per key, written to the file when the cache closes (one transaction, rather
        # than a write for every read).
        self._replayed: dict[str, int] = {}

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = _connect(self.path)
        return self._conn

    async def _run(self, fn: Any, *args: Any) -> Any:
        if self._broken is not None:
            return None
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, fn, *args)
        except (sqlite3.Error, OSError) as exc:
            # Calls in flight together all fail: the file is reported once.
            if self._broken is None:
                self._broken = f"{type(exc).__name__}: {exc}"
                log.warning("response cache %s is off for this run: %s", self.path, self._broken)
            return None

    def _get(self, key: str) -> dict[str, Any] | None:
        db = self._db()
        row = db.execute("SELECT value FROM replies WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            value = orjson.loads(row[0])
        except orjson.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            # A damaged entry: a miss, and gone, so the reply asked for again is stored.
            db.execute("DELETE FROM replies WHERE key = ?", (key,))
            self._damaged += 1
            if self._damaged == 1:
                log.warning("response cache %s: dropped a damaged entry (and any more)", self.path)
            return None
        self._replayed[key] = self._replayed.get(key, 0) + 1
        return value

    def _put(self, key: str, model: str, value: bytes) -> None:
        self._db().execute(
            "INSERT OR IGNORE INTO replies (key, model, created, value) VALUES (?, ?, ?, ?)",
            (key, model, time.time(), value),
        )

    async def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry of ``key``, or None."""
        value = await self._run(self._get, key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    async def put(self, key: str, model: str, value: dict[str, Any]) -> None:
        """Store a successful reply (the first one stored for a key is kept)."""
        try:
            data = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
        except TypeError:
            return  # a raw response orjson cannot write is not worth a slower path
        await self._run(self._put, key, model, data)
        self.stored += 1

    async def aclose(self) -> None:
        """Close the database (on the cache's thread) and the thread."""

        def shut() -> None:
            if self._conn is not None:
                replayed, self._replayed = self._replayed, {}
                conn, self._conn = self._conn, None
                try:
                    if replayed:
                        conn.execute("BEGIN IMMEDIATE")  # one transaction for all
                        conn.executemany(
                            "UPDATE replies SET hits = hits + ? WHERE key = ?",
                            [(n, key) for key, n in replayed.items()],
                        )
                        conn.execute("COMMIT")
                finally:
                    conn.close()

        with contextlib.suppress(sqlite3.Error, RuntimeError):
            await asyncio.get_running_loop().run_in_executor(self._pool, shut)
        self._pool.shutdown(wait=False)


# --- parley cache stats|clear ---------------------------------------------------------------


def stats(path: str | Path) -> dict[str, Any]:
    """Entries, replays and size of a cache file, and entries per model."""
    path = Path(path)
    if not path.exists():
        return {"path": str(path), "exists": False, "entries": 0, "hits": 0, "models": {}}
    conn = _connect(path)
    try:
        entries, hits = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(hits), 0) FROM replies"
        ).fetchone()
        models = dict(
            conn.execute("SELECT model, COUNT(*) FROM replies GROUP BY model ORDER BY model")
        )
    finally:
        conn.close()
    size = sum(
        p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()
    )
    return {
        "path": str(path),
        "exists": True,
        "entries": int(entries),
        "hits": int(hits),
        "bytes": size,
        "models": models,
    }


def clear(path: str | Path) -> int:
    """Remove every entry of a cache file; returns how many there were."""
    path = Path(path)
    if not path.exists():
        return 0
    conn = _connect(path)
    try:
        (count,) = conn.execute("SELECT COUNT(*) FROM replies").fetchone()
        conn.execute("DELETE FROM replies")
        conn.execute("VACUUM")
    finally:
        conn.close()
    return int(count)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["stats", "clear"], help="show or empty the cache")
    parser.add_argument(
        "path",
        nargs="?",
        help=f"the cache file (default: $PARLEY_CACHE or {default_path()})",
    )


def run_from_args(args: argparse.Namespace) -> int:
    path = Path(args.path).expanduser() if args.path else default_path()
    try:
        if args.action == "clear":
            n = clear(path)
            print(f"{path}: removed {n} cached repl{'y' if n == 1 else 'ies'}")
            return 0
        info = stats(path)
    except (sqlite3.Error, OSError) as exc:
        print(f"parley cache: {path}: {exc}", file=sys.stderr)
        return 1
    if not info["exists"]:
        print(f"{path}: no cache yet")
        return 0
    print(
        f"{path}: {info['entries']} cached replies, replayed {info['hits']} times, "
        f"{info['bytes'] / 1e6:.1f} MB"
    )
    for model, n in info["models"].items():
        print(f"  {model}: {n}")
    return 0
