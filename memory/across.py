"""Memory across episodes: what an agent keeps of each episode it played, for later ones.

An episode's memory of one role is a list of :class:`Recollection` s (what the role was shown,
what it replied, and with the ``notes`` policy the note it wrote itself at the end), filed
under a *key*: the player, role, game, pairing and an optional group (see
``parley.runtime.experiment.memory_key``). Later episodes of the same key read the earlier
ones back, in the experiment's order: by seed, then repetition, then episode id.

Each episode's memory is written once, whole, in one transaction, keyed by (key, episode):
writing it again (a run killed after the memory was written but before its result, then
resumed, plays the episode again) replaces it. An episode reads only episodes *before* it in
the order, never its own or later ones, so a resumed run sees exactly the memory an
uninterrupted one would have seen.

Two stores: :class:`InProcessEpisodeStore` (gone with the process) and
:class:`SQLiteEpisodeStore` (a file; WAL mode, so worker processes read while one writes).
The SQLite schema is versioned by ``PRAGMA user_version`` (:data:`SCHEMA_VERSION`)::

    episodes(key TEXT, episode TEXT, seed INTEGER, repetition INTEGER,
             outcome TEXT, main_score REAL, written_at REAL, PRIMARY KEY (key, episode))
    entries(key TEXT, episode TEXT, idx INTEGER, kind TEXT, speaker TEXT, text TEXT,
            PRIMARY KEY (key, episode, idx))

``kind`` is ``seen`` (what the role was shown: messages to it, its observation, feedback),
``said`` (its reply) or ``note`` (its note to itself).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from parley.records import EpisodeRecord

SCHEMA_VERSION = 1
Kind = Literal["seen", "said", "note"]


@dataclass(frozen=True)
class Recollection:
    """One thing an agent remembers of an earlier episode."""

    kind: Kind
    speaker: str
    text: str


@dataclass(frozen=True)
class EpisodeMemory:
    """What one role kept of one episode, and where the episode sits in the order."""

    key: str
    episode: str
    seed: int
    repetition: int
    entries: tuple[Recollection, ...]
    outcome: str = ""
    main_score: float | None = None

    @property
    def position(self) -> tuple[int, int, str]:
        return (self.seed, self.repetition, self.episode)


def memory_key(
    game: str,
    role: str,
    pairing: dict[str, str],
    policy: str,
    group: str | None,
    across_pairings: bool,
) -> str:
    """Which earlier episodes ``role`` remembers: those of the same game, role, player,
    pairing (``pairing``: role -> player label; left out with ``across_pairings``), policy
    and group. For example ``comma.wire|solver|gpt|solver=gpt,expert=gpt|notes|``."""
    together = "*" if across_pairings else ",".join(f"{r}={p}" for r, p in pairing.items())
    return "|".join([game, role, pairing[role], together, policy, group or ""])


def record_memory_keys(record: EpisodeRecord) -> dict[str, str]:
    """:func:`memory_key` of each role with memory across episodes, from an episode's record
    (its ``spec`` and ``pairing``)."""
    memory = record.spec.get("memory") or {}
    out = {}
    for role, spec in memory.items():
        across = spec.get("across") if isinstance(spec, dict) else None
        if not across or across.get("policy", "none") == "none":
            continue
        out[role] = memory_key(
            record.game,
            role,
            record.pairing,
            across["policy"],
            across.get("group"),
            bool(across.get("across_pairings")),
        )
    return out


class EpisodeStore(Protocol):
    """Episodes' memories by key, each written whole and read back in order."""

    def put(self, memory: EpisodeMemory) -> None: ...
    def before(
        self, key: str, position: tuple[int, int, str], limit: int | None = None
    ) -> list[EpisodeMemory]: ...
    def close(self) -> None: ...


class InProcessEpisodeStore:
    """Memories in a dict: shared by the episodes of one process, gone with it."""

    def __init__(self) -> None:
        self._data: dict[str, dict[str, EpisodeMemory]] = {}

    def put(self, memory: EpisodeMemory) -> None:
        self._data.setdefault(memory.key, {})[memory.episode] = memory

    def before(
        self, key: str, position: tuple[int, int, str], limit: int | None = None
    ) -> list[EpisodeMemory]:
        """The memories of ``key`` before ``position``, oldest first (the latest ``limit``)."""
        found = sorted(
            (m for m in self._data.get(key, {}).values() if m.position < position),
            key=lambda m: m.position,
        )
        return found[-limit:] if limit else found

    def close(self) -> None:
        self._data.clear()


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS episodes (key TEXT NOT NULL, episode TEXT NOT NULL,"
    " seed INTEGER NOT NULL, repetition INTEGER NOT NULL, outcome TEXT, main_score REAL,"
    " written_at REAL NOT NULL, PRIMARY KEY (key, episode))",
    "CREATE TABLE IF NOT EXISTS entries (key TEXT NOT NULL, episode TEXT NOT NULL,"
    " idx INTEGER NOT NULL, kind TEXT NOT NULL, speaker TEXT NOT NULL, text TEXT NOT NULL,"
    " PRIMARY KEY (key, episode, idx))",
    "CREATE INDEX IF NOT EXISTS episodes_order ON episodes (key, seed, repetition, episode)",
)


class MemoryStoreError(RuntimeError):
    """A memory store that cannot be used: a damaged file, a folder, no access (one line for
    the user)."""


class SchemaError(MemoryStoreError):
    """A memory file written by a newer (or unknown) schema."""


class SQLiteEpisodeStore:
    """Memories in a SQLite file that outlives the run's processes.

    WAL mode: readers (other worker processes) never wait on the writer, and a write is one
    short transaction; ``busy_timeout`` covers two processes writing at once. One connection
    per process, used from the event loop's thread (a lock guards it should another thread
    write). Writes are synchronous: an episode's memory is small, a commit short,
    and the next episode of the key must not start before it is there.
    """

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                str(self.path), timeout=busy_timeout_ms / 1000, isolation_level=None
            )
        except (OSError, sqlite3.Error) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise MemoryStoreError(
                f"the memory store {self.path} cannot be opened ({reason}): name a SQLite "
                "file in a folder this process may write (memory_store.path)"
            ) from None
        try:
            self._open(busy_timeout_ms)
        except sqlite3.Error as exc:
            self._db.close()
            why = (
                f"another process held it locked for {busy_timeout_ms / 1000:g} s"
                if "locked" in str(exc)
                else "it is not a memory file of parley's, or it is damaged; move it away, or "
                "name another file (memory_store.path)"
            )
            raise MemoryStoreError(
                f"the memory store {self.path} cannot be used ({exc}): {why}"
            ) from None
        except BaseException:
            self._db.close()
            raise

    def _open(self, busy_timeout_ms: int) -> None:
        """Set the connection up and the schema in place (a new file gets it)."""
        self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        self._wal(busy_timeout_ms / 1000)
        # NORMAL under WAL: a commit survives the process being killed (SIGKILL); only a power
        # loss may lose the last transactions, never corrupt the file.
        self._db.execute("PRAGMA synchronous = NORMAL")
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                version = self._db.execute("PRAGMA user_version").fetchone()[0]
                if version not in (0, SCHEMA_VERSION):
                    raise SchemaError(
                        f"{self.path}: memory schema version {version}; this parley reads "
                        f"version {SCHEMA_VERSION}"
                    )
                for statement in _SCHEMA:
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _wal(self, patience_s: float) -> None:
        """Switch the file to WAL (once; it stays so). Switching takes the file alone, and
        SQLite's busy handler does not wait for that: worker processes opening the file at
        once would fail with "database is locked", so this waits and tries again."""
        deadline = time.monotonic() + patience_s
        while True:
            try:
                mode = self._db.execute("PRAGMA journal_mode").fetchone()[0]
                if mode != "wal":
                    self._db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def put(self, memory: EpisodeMemory) -> None:
        """Write one episode's memory whole, replacing any earlier write of it."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                where = (memory.key, memory.episode)
                self._db.execute("DELETE FROM entries WHERE key = ? AND episode = ?", where)
                self._db.execute(
                    "INSERT OR REPLACE INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        *where,
                        memory.seed,
                        memory.repetition,
                        memory.outcome,
                        memory.main_score,
                        time.time(),
                    ),
                )
                self._db.executemany(
                    "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)",
                    [(*where, i, e.kind, e.speaker, e.text) for i, e in enumerate(memory.entries)],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def before(
        self, key: str, position: tuple[int, int, str], limit: int | None = None
    ) -> list[EpisodeMemory]:
        """The memories of ``key`` before ``position``, oldest first (the latest ``limit``)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT episode, seed, repetition, outcome, main_score FROM episodes"
                " WHERE key = ? AND (seed, repetition, episode) < (?, ?, ?)"
                " ORDER BY seed DESC, repetition DESC, episode DESC"
                + (" LIMIT ?" if limit else ""),
                (key, *position, *([limit] if limit else [])),
            ).fetchall()
            out = []
            for episode, seed, repetition, outcome, score in reversed(rows):
                entries = self._db.execute(
                    "SELECT kind, speaker, text FROM entries WHERE key = ? AND episode = ?"
                    " ORDER BY idx",
                    (key, episode),
                ).fetchall()
                out.append(
                    EpisodeMemory(
                        key,
                        episode,
                        seed,
                        repetition,
                        tuple(Recollection(k, s, t) for k, s, t in entries),
                        outcome or "",
                        score,
                    )
                )
        return out

    def counts(self) -> tuple[int, int]:
        """(episodes, entries) in the file."""
        with self._lock:
            episodes = self._db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
            entries = self._db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
        return int(episodes), int(entries)

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _cut_to(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """The end of ``text`` within ``max_tokens`` (the latest part matters most)."""
    if count(text) <= max_tokens:
        return text
    low, high = 0, len(text)  # the smallest start that fits
    while low < high:
        mid = (low + high) // 2
        if count("…" + text[mid:]) <= max_tokens:
            high = mid
        else:
            low = mid + 1
    return "…" + text[low:]


def _block(memory: EpisodeMemory, n: int, policy: str) -> str:
    score = "" if memory.main_score is None else f", score {memory.main_score:g}"
    head = f"Earlier episode {n} ({memory.outcome or 'unfinished'}{score})"
    if policy == "notes":
        notes = [e.text for e in memory.entries if e.kind == "note"]
        return f"{head}, your note: " + (" ".join(notes) or "(none)")
    lines = [head + ":"]
    for entry in memory.entries:
        if entry.kind == "seen":
            lines.append(entry.text)
        elif entry.kind == "said":
            lines.append(f"You: {entry.text}")
    return "\n".join(lines)


def render(
    memories: list[EpisodeMemory],
    policy: str,
    max_tokens: int,
    count: Callable[[str], int] | None = None,
) -> str:
    """Earlier episodes as one text for the prompt, oldest first, within ``max_tokens``
    (``count``: a token counter, :func:`parley.tokens.count_tokens` by default): the oldest
    episodes are dropped first, and the newest alone is cut to its end. Empty when there is
    nothing to remember."""
    if not memories:
        return ""
    if count is None:
        from parley.tokens import count_tokens

        count = count_tokens
    intro = (
        "Your notes from earlier episodes of this game, oldest first:"
        if policy == "notes"
        else "What you were shown and said in earlier episodes of this game, oldest first:"
    )
    budget = max_tokens - count(intro)
    blocks = [_block(m, n, policy) for n, m in enumerate(memories, 1)]
    kept: list[str] = []
    for block in reversed(blocks):
        cost = count(block) + 1
        if cost > budget:
            if not kept and budget > 0:
                kept.append(_cut_to(block, budget, count))
            break
        kept.append(block)
        budget -= cost
    if not kept:
        return ""
    out = "\n\n".join([intro, *reversed(kept)])
    # Separators may cost a token here and there: the budget is a promise.
    return out if count(out) <= max_tokens else _cut_to(out, max_tokens, count)
