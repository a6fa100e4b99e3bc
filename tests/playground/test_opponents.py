"""The search opponents: Stockfish over UCI from a reused pool, a clear error without it, the
Gomoku search within its time budget, and searches that leave the event loop free."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import threading
import time
from pathlib import Path

import chess
import pytest

from parley.environments.base import View
from parley.environments.playground import KITS, stockfish
from parley.environments.playground.chessgame import ChessPosition
from parley.environments.playground.gomoku import GomokuPosition
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


def test_gomoku_moves_at_default_depth_take_at_most_half_a_second() -> None:
    kit = KITS["gomoku"]
    params = kit.opponent_params({})
    assert params["depth"] == 3
    rng = random.Random(0)
    slowest = 0.0
    for position in _midgame_positions():
        start = time.perf_counter()
        move = kit.search_move(position, rng, params)
        slowest = max(slowest, time.perf_counter() - start)
        assert position.illegal(move) is None
    assert slowest <= 0.5, f"slowest Gomoku move took {slowest:.3f} s"


@pytest.mark.anyio
async def test_searches_and_pictures_leave_the_event_loop_free(tmp_path: Path) -> None:
    """Search players and rendering run in worker threads: a ticker on the loop keeps
    ticking while Reversi and Gomoku searches play whole games."""
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
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - start - 0.005)

    task = asyncio.create_task(ticker())
    started = time.perf_counter()
    outcome = await run_experiment(load_config(config), tmp_path / "run")
    elapsed = time.perf_counter() - started
    done.set()
    await task
    assert all(r["outcome"] in ("success", "lost") for r in outcome.records)
    searched = sum(r["model_time_s"] for r in outcome.records)
    assert searched > 1.0  # the searches did real work meanwhile
    lags.sort()
    median, p95 = lags[len(lags) // 2], lags[int(len(lags) * 0.95)]
    # A rare long pause remains: a full garbage collection of the process stops every thread
    # (measured: ~0.2 s); it is not the searches, so the bound is on the 95th percentile.
    assert median < 0.01 and p95 < 0.05, (
        f"loop lag median {median:.3f} s, 95th percentile {p95:.3f} s, worst {lags[-1]:.3f} s "
        f"over {elapsed:.1f} s"
    )
