"""A small pool of Stockfish processes over UCI (python-chess ``chess.engine``), shared by
every chess episode of the process and shut down at exit.

Starting Stockfish costs a process and its start-up; one per move (or per episode)
would waste both, so engines are checked out for one move at a time and returned. Calls are
blocking: the opponent runs in a worker thread (``GameInfo.offload_players``), never on the
event loop. Each engine serves one caller at a time.
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import chess
import chess.engine

DEFAULT_PATHS = ("/usr/games/stockfish", "/usr/local/bin/stockfish", "/usr/bin/stockfish")
POOL_SIZE = 2  # the project's machines have 2 cores; more engines than cores only queue


class StockfishMissing(RuntimeError):
    """No Stockfish binary where we looked."""


def find_stockfish(path: str = "") -> str:
    """The Stockfish binary: ``path`` if given, else ``stockfish`` on PATH or a Debian path."""
    if path:
        if os.path.exists(path) or shutil.which(path):
            return shutil.which(path) or path
        raise StockfishMissing(
            f"Stockfish not found at {path!r}; install it with `apt-get install stockfish` "
            "or fix the setting stockfish_path"
        )
    found = shutil.which("stockfish") or next((p for p in DEFAULT_PATHS if os.path.exists(p)), None)
    if found is None:
        raise StockfishMissing(
            "Stockfish not found (looked for `stockfish` on PATH and in "
            f"{', '.join(DEFAULT_PATHS)}); install it with `apt-get install stockfish` "
            "(Debian/Ubuntu; `brew install stockfish` on macOS) or set stockfish_path"
        )
    return found


class EnginePool:
    """Up to ``size`` engines for one binary, started on first need."""

    def __init__(self, path: str, size: int = POOL_SIZE) -> None:
        self.path = path
        self.size = size
        self._idle: queue.LifoQueue[chess.engine.SimpleEngine] = queue.LifoQueue()
        self._all: list[chess.engine.SimpleEngine] = []
        self._lock = threading.Lock()
        self.started = 0  # engines ever started (tests check reuse)
        self.closed = False

    @contextmanager
    def engine(self) -> Iterator[chess.engine.SimpleEngine]:
        engine = self._checkout()
        healthy = True
        try:
            yield engine
        except (chess.engine.EngineError, chess.engine.EngineTerminatedError):
            healthy = False
            raise
        finally:
            if healthy and not self.closed:
                self._idle.put(engine)
            else:
                self._discard(engine)

    def _checkout(self) -> chess.engine.SimpleEngine:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self.closed:
                raise RuntimeError("the Stockfish pool is shut down")
            if len(self._all) < self.size:
                engine = chess.engine.SimpleEngine.popen_uci(self.path)
                self._all.append(engine)
                self.started += 1
                return engine
        return self._idle.get()

    def _discard(self, engine: chess.engine.SimpleEngine) -> None:
        with self._lock:
            if engine in self._all:
                self._all.remove(engine)
        try:
            engine.quit()
        except Exception:  # already dead: nothing to clean up
            engine.close()

    def close(self) -> None:
        """Quit every engine (idle ones now; busy ones as they come back)."""
        with self._lock:
            self.closed = True
            engines, self._all = self._all, []
        for engine in engines:
            try:
                engine.quit()
            except Exception:
                engine.close()

    @property
    def alive(self) -> int:
        return len(self._all)


_POOLS: dict[str, EnginePool] = {}
_POOLS_LOCK = threading.Lock()


def pool(path: str = "") -> EnginePool:
    binary = find_stockfish(path)
    with _POOLS_LOCK:
        existing = _POOLS.get(binary)
        if existing is None or existing.closed:
            existing = _POOLS[binary] = EnginePool(binary)
        return existing


def shutdown() -> None:
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for p in pools:
        p.close()


# python-chess runs each engine's I/O on a non-daemon thread, and the interpreter joins those
# before it runs ``atexit`` handlers: quitting the engines there would come too late and the
# process would hang at exit. ``threading._register_atexit`` runs before that join (it is how
# concurrent.futures shuts its workers down); plain atexit is the fallback.
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(shutdown)
else:  # pragma: no cover - other Pythons
    atexit.register(shutdown)


def best_move(
    board: chess.Board,
    *,
    time_s: float | None = 0.1,
    skill: int | None = None,
    depth: int | None = None,
    path: str = "",
) -> chess.Move:
    """Stockfish's move in ``board`` within the given limits."""
    limit = chess.engine.Limit(time=time_s or None, depth=depth or None)
    if limit.time is None and limit.depth is None:
        limit = chess.engine.Limit(time=0.1)
    options = {"Skill Level": int(skill)} if skill is not None else {}
    with pool(path).engine() as engine:
        # A new game for every move: the engine's hash table from earlier searches (another
        # episode's, on a pooled engine) would otherwise change what it finds.
        result = engine.play(board, limit, options=options, game=object())
    if result.move is None:
        raise RuntimeError(f"Stockfish gave no move in {board.fen()}")
    return result.move
