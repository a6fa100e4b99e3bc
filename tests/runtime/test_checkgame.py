"""parley check-game: every registered game keeps the contract, and a broken game is caught."""

from __future__ import annotations

import os
import random
import shutil
from typing import Any

import pytest

import tests.runtime.faulty_game  # noqa: F401  (registers test.counter)
from parley.environments import registry
from parley.environments.base import GameMaster, Observation, Scores, View
from parley.environments.registry import GameInfo
from parley.runtime.checkgame import check_game, shows
from parley.runtime.cli import main
from tests.conftest import require

# Shallow searches and short games, so that every game is checked in well under a minute on
# one core; what is checked is unchanged.
FAST: dict[str, dict[str, Any]] = {
    # Depth-limited, no time limit: Stockfish's moves repeat, so determinism is checked too.
    "playground.chess.e2e": {"max_moves": 12, "stockfish_depth": 1, "stockfish_time": 0},
    "playground.gomoku.e2e": {"max_moves": 12, "depth": 1, "width": 4},
    "playground.reversi.e2e": {"max_moves": 12, "depth": 1},
}
GAMES = [name for name, info in registry.all_games().items() if info.family != "test"]


@pytest.mark.parametrize("game", GAMES)
def test_every_game_keeps_the_contract(game: str) -> None:
    if game == "playground.chess.e2e":
        found = shutil.which("stockfish") or os.path.exists("/usr/games/stockfish")
        require(bool(found), "Stockfish is not installed (apt-get install stockfish)")
    report = check_game(game, seeds=1, settings=FAST.get(game))
    failed = [f"{r.name}: {r.detail}" for r in report.results if r.status == "FAIL"]
    assert report.passed, "\n".join(failed)
    names = [r.name for r in report.results]
    assert names[:3] == ["deterministic", "oracle wins", "random play"]
    assert "observation data" in names and "garbage: binary" in names


def test_every_exemption_names_a_game_and_a_check() -> None:
    checks = {r.name for r in check_game("clem.reference", seeds=1).results}
    declared = [(name, check) for name in GAMES for check in registry.get(name).check_exemptions]
    assert declared
    for name, check in declared:
        assert check in checks, f"{name}: {check}"


def test_chess_determinism_is_exempt_only_for_a_time_limited_search() -> None:
    chess = registry.get("playground.chess.e2e")
    assert "machine's load" in chess.exemption("deterministic", {"stockfish_time": 0.1})
    assert chess.exemption("deterministic", {"stockfish_time": 0}) == ""


# --- games that break the contract -------------------------------------------------------


class Peek(GameMaster):
    """One reply ends the game: right if it names the secret, which the text never shows."""

    roles = ("player",)

    def system_prompt(self, role: str) -> str:
        return "Name the secret."

    def whose_turn(self) -> str | None:
        return "player"

    def observe(self, role: str) -> Observation:
        return Observation("Guess.", data={"secret": self.instance["secret"]})

    def handle_reply(self, role: str, text: str) -> None:
        if text.strip() == "":
            raise ValueError("no reply")  # a game master that raises on garbage
        self.end("success" if text.strip() == self.instance["secret"] else "lost")

    def scores(self) -> Scores:
        return Scores(main=100.0 if self.outcome == "success" else 150.0)


def peek_scripted(view: View, rng: random.Random) -> str:
    return str((view.data or {})["secret"])


def unseeded(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    return {"secret": f"word{random.randrange(10**9)}"}  # ignores the seed


PEEK = GameInfo(
    name="test.peek",
    family="test",
    roles=("player",),
    game_master=Peek,
    instance=unseeded,
    players={"player": {"scripted": peek_scripted}},
)


def test_a_broken_game_fails_the_checks_that_catch_it() -> None:
    report = check_game(PEEK, seeds=2)
    status = {r.name: r for r in report.results}
    assert not report.passed
    assert status["deterministic"].status == "FAIL"
    assert "two instances differ" in status["deterministic"].detail
    assert status["oracle wins"].status == "pass"  # it peeks, and wins
    assert status["garbage: empty"].status == "FAIL"
    assert "ValueError: no reply" in status["garbage: empty"].detail
    assert status["scores"].status == "FAIL" and "150.0 outside 0–100" in status["scores"].detail
    assert status["observation data"].status == "FAIL"
    assert "player: secret" in status["observation data"].detail


def test_a_game_master_that_raises_fails_oracle_and_random_play() -> None:
    report = check_game("test.counter", seeds=[0, 1], settings={"gm_raises_on": 1})
    status = {r.name: r for r in report.results}
    assert status["oracle wins"].status == "FAIL"
    assert "seed 1: error (ValueError: the game master broke on purpose)" in (
        status["oracle wins"].detail
    )
    assert status["random play"].status == "FAIL"
    # Without the fault only one check fails: test.counter's players read the seed from
    # the data, which its text never shows.
    clean = check_game("test.counter", seeds=[0, 1])
    assert [r.name for r in clean.results if r.status == "FAIL"] == ["observation data"]
    assert "counter: seed" in clean.results[-1].detail


def test_shows_matches_whole_words_and_numbers() -> None:
    text = "Balance: $310. The wire is Red; 2.50 left, row 12."
    assert shows(text, "red") and shows(text, 310) and shows(text, 2.5) and shows(text, 12)
    assert not shows(text, "re") and not shows(text, 31) and not shows(text, 1)
    assert shows(text, True) is None and shows(text, None) is None


def test_the_command_prints_a_table_and_exits_non_zero_on_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check-game", "clem.reference", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "deterministic" in out and "pass" in out and "FAIL" not in out
    assert main(["check-game", "test.counter", "--seeds", "2", "--set", "gm_raises_on=1"]) == 1
    captured = capsys.readouterr()
    assert "FAIL" in captured.out and "failed: test.counter" in captured.err
    assert main(["check-game", "nosuch.game"]) == 2
    assert "no game matches 'nosuch.game'" in capsys.readouterr().err
    assert main(["check-game", "test.counter", "--set", "target=abc"]) == 2
    assert "target" in capsys.readouterr().err
