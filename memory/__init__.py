"""Working memory (replaced each turn) and episodic memory (append-only), behind stores."""

from parley.memory.episodic import EpisodicMemory, HistoryPolicy, MemoryEntry
from parley.memory.stores import InMemoryStore, MemoryStore, SQLiteStore
from parley.memory.working import WorkingMemory

__all__ = [
    "EpisodicMemory",
    "HistoryPolicy",
    "InMemoryStore",
    "MemoryEntry",
    "MemoryStore",
    "SQLiteStore",
    "WorkingMemory",
]
