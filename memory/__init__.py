"""Working memory (replaced each turn) and episodic memory (append-only), behind stores."""

from memory.episodic import EpisodicMemory, HistoryPolicy, MemoryEntry
from memory.stores import InMemoryStore, MemoryStore, SQLiteStore
from memory.working import WorkingMemory

__all__ = [
    "EpisodicMemory",
    "HistoryPolicy",
    "InMemoryStore",
    "MemoryEntry",
    "MemoryStore",
    "SQLiteStore",
    "WorkingMemory",
]
