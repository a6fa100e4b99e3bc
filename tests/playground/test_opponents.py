"""The search opponents: Stockfish over UCI from a reused pool, a clear error without it, the
Gomoku search within its budget (counted in positions searched; benchmarks/playground_search.py
times it), and searches that run off the event loop while it keeps going."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import chess
import pytest

from parley.environments.base import View
from parley.environments.playground import KITS, stockfish
from parley.environments.playground.chessgame import ChessPosition
from parley.environments.playground.common import cell_name
from parley.environments.playground.gomoku import SIDE_VALUE, GomokuPosition, N, Searcher
from parley.environments.playground.players import players_for
from parley.runtime.config import load_config
from parley.runtime.scheduler import run_experiment
from tests.conftest import require


def need_stockfish() -> None:
    require(
        bool(shutil.which("stockfish")) or os.path.exists("/usr/games/stockfish"),
        "Stockfish is not installed (apt-get install stockfish)",
    )


def opponent_view(position: ChessPosition, search: dict) -> View:
    data = {"task": "e2e", "game": "chess", "you": "Black", **position.view(), "search": search}
    return View("opponent", "", "", data, None, [], [], 0)


def test_stockfish_plays_legal_moves_from_a_reused_pool() -> None:
    need_stockfish()
    kit = KITS["chess"]
    play = players_for(kit, "e2e")["opponent"]["scripted"]
    rng = random.Random(0)
    board = chess.Board()
    board.push_san("e4")
    for _ in range(6):
        position = ChessPosition(board.copy())
        reply = play(opponent_view(position, kit.opponent_params({"stockfish_time": 0.01})), rng)
        move = position.parse(reply.removeprefix("Movement: "))
        assert move is not None and position.illegal(move) is None
        board.push(chess.Move.from_uci(move))
        if board.is_game_over():
            break
        board.push(rng.choice(list(board.legal_moves)))
    # Mate in one is found.
    mate = ChessPosition(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1").mirror())
    reply = play(opponent_view(mate, {"time": 0.05, "skill": 20, "depth": None, "path": ""}), rng)
    mate.play(mate.parse(reply.removeprefix("Movement: ")) or "")
    assert mate.board.is_checkmate()
    pool = stockfish.pool()
    assert 1 <= pool.started <= stockfish.POOL_SIZE  # engines reused, not one per move


def test_stockfish_pool_serves_threads_and_shuts_down() -> None:
    need_stockfish()
    stockfish.shutdown()
    moves: list[str] = []

    def ask() -> None:
        for _ in range(3):
            moves.append(stockfish.best_move(chess.Board(), time_s=None, depth=2).uci())

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool = stockfish.pool()
    assert len(moves) == 12 and all(
        chess.Move.from_uci(m) in chess.Board().legal_moves for m in moves
    )
    assert pool.started <= stockfish.POOL_SIZE and pool.alive <= stockfish.POOL_SIZE
    stockfish.shutdown()
    assert pool.alive == 0 and pool.closed


def test_a_missing_stockfish_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(stockfish.StockfishMissing, match="apt-get install stockfish"):
        stockfish.find_stockfish(str(tmp_path / "no-stockfish"))
    # Through the bus: the episode ends in an error that says so, and nothing hangs.
    config = {
        "name": "pg-nosf",
        "tracing": {"enabled": False},
        "games": [
            {
                "game": "playground.chess.e2e",
                "seeds": {"count": 1},
                "pairings": [{"player": "random", "opponent": "scripted"}],
                "settings": {"stockfish_path": str(tmp_path / "no-stockfish"), "variant": "text"},
            }
        ],
    }
    outcome = asyncio.run(run_experiment(load_config(config), tmp_path / "run"))
    (record,) = outcome.records
    assert record["outcome"] == "error" and "apt-get install stockfish" in record["reason"]


def _midgame_positions() -> list[GomokuPosition]:
    kit = KITS["gomoku"]
    rng = random.Random(7)
    positions = []
    position = GomokuPosition([0] * 225)
    while position.result() is None and len(positions) < 24:
        positions.append(GomokuPosition(list(position.board), position.to_move()))
        position.play(kit.search_move(position, rng, {"depth": 1}))
    return positions


# What a Gomoku move may cost, in positions searched: at the ~0.5 ms a position measured by
# benchmarks/playground_search.py (which times moves against the 0.5 s budget), 600 positions
# leave room to spare. Counted, not timed, so a loaded machine cannot fail it.
GOMOKU_NODE_BUDGET = 600


def _searched(position: GomokuPosition, params: dict) -> tuple[str, int]:
    """The move Gomoku's search picks and how many positions it searched for it."""
    searcher = Searcher(position.board, params["width"])
    square = searcher.best(SIDE_VALUE[position.side], params["depth"], random.Random(0))
    return cell_name(*divmod(square, N)), searcher.nodes


def test_gomoku_search_at_default_settings_stays_within_its_node_budget() -> None:
    kit = KITS["gomoku"]
    params = kit.opponent_params({})
    assert params == {"depth": 3, "width": 10}
    nodes = []
    for position in _midgame_positions():
        move, searched = _searched(position, params)
        assert kit.search_move(position, random.Random(0), params) == move  # what the kit plays
        assert position.illegal(move) is None
        nodes.append(searched)
    assert sum(n > 0 for n in nodes) >= 5, nodes  # real searches, not only forced moves
    # Alpha-beta over the 10 best moves keeps every move within budget, far below the whole
    # tree of 10 + 10² + 10³ positions.
    assert max(nodes) <= GOMOKU_NODE_BUDGET, nodes
    # The width bounds the tree: 3 moves a level, at most 3 + 3² + 3³ positions.
    narrow = {"depth": 3, "width": 3}
    assert all(_searched(p, narrow)[1] <= 3 + 9 + 27 for p in _midgame_positions())


@pytest.mark.anyio
async def test_searches_and_pictures_run_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Search players and rendering run in worker threads: every search and every picture of
    whole Reversi and Gomoku games is made off the loop's thread, and the loop keeps turning
    while they work (counted in turns of a task on the loop, not timed: a search on the loop
    would see it turn not once)."""
    config = {
        "name": "pg-loop",
        "concurrency": 8,
        "tracing": {"enabled": False},
        "games": [
            {
                "game": f"playground.{game}.e2e",
                "seeds": {"count": 2},
                "pairings": [{"player": "scripted", "opponent": "scripted"}],
                "settings": {"depth": 3, "max_moves": 12},
            }
            for game in ("reversi", "gomoku")
        ],
    }
    loop_thread = threading.get_ident()
    turns = [0]  # how often the ticker has run on the loop
    calls: list[tuple[str, int, int]] = []  # (what, thread, loop turns while it ran)

    def watched(what: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            before = turns[0]
            try:
                return fn(*args, **kwargs)
            finally:
                calls.append((what, threading.get_ident(), turns[0] - before))

        return call

    for game in ("reversi", "gomoku"):
        kit = KITS[game]
        monkeypatch.setattr(kit, "search_move", watched("search", kit.search_move))
        monkeypatch.setattr(kit, "render", watched("picture", kit.render))
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            await asyncio.sleep(0.001)
            turns[0] += 1

    task = asyncio.create_task(ticker())
    outcome = await run_experiment(load_config(config), tmp_path / "run")
    done.set()
    await task
    assert all(r["outcome"] in ("success", "lost") for r in outcome.records)
    kinds = Counter(what for what, _, _ in calls)
    assert kinds["search"] >= 20 and kinds["picture"] >= 20, kinds
    assert [c for c in calls if c[1] == loop_thread] == []
    # The loop went on meanwhile: the longer searches saw the ticker turn (a short one can be
    # over before its thread gives up the GIL; on the loop's thread none would see a turn).
    searches = [loop_turns for what, _, loop_turns in calls if what == "search"]
    assert sum(n > 0 for n in searches) >= 5, searches
