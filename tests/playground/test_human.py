"""A person plays at the terminal (``{player: human}``) against the search opponent, and play
is a function of the seed."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from parley.environments import registry
from parley.runtime.config import load_config
from parley.runtime.scheduler import run_experiment


@pytest.mark.anyio
async def test_human_player_on_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # O takes the centre, then types nonsense three times: the game ends as a loss.
    typed = "Observation: empty\nStrategy: centre\nMovement: B2\n\nhello\n\nB2 please\n\nMovement: B2\n\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    monkeypatch.setenv("PARLEY_HUMAN_IMAGES", str(tmp_path / "seen"))
    config = load_config(
        {
            "name": "human",
            "concurrency": 1,
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": "playground.tictactoe.e2e",
                    "seeds": [0],
                    "pairings": [{"player": "human", "opponent": "scripted"}],
                    "settings": {"variant": "text"},
                }
            ],
        }
    )
    outcome = await run_experiment(config, tmp_path / "run")
    (record,) = outcome.records
    assert record["outcome"] == "lost" and record["reason"] == "3 invalid replies"
    assert record["scores"]["moves"] == 1.0 and record["scores"]["e2e_score"] == 10.0
    shown = capsys.readouterr().out
    assert "You play O; your opponent plays X, and you move first." in shown
    assert "   A  B  C" in shown and "Your opponent (X) played" in shown
    assert "Invalid replies so far: 1 of 3" in shown


def test_instances_and_play_are_functions_of_the_seed() -> None:
    import random

    from parley.environments.base import View
    from parley.environments.playground.players import players_for

    for name, info in registry.all_games().items():
        if not name.startswith("playground."):
            continue
        settings = info.default_settings
        assert info.instance(3, settings) == info.instance(3, settings), name
        if name.endswith(".e2e"):
            continue
        assert info.instance(3, settings) != info.instance(4, settings), name
    # Two E2E games from the same seeds are move for move the same.
    info = registry.get("playground.reversi.e2e")

    def game() -> list[str]:
        gm = info.game_master(info.instance(0, info.default_settings), info.default_settings)
        players = players_for(gm.kit, "e2e")
        rngs = {"player": random.Random("p"), "opponent": random.Random("o")}
        kinds = {"player": "random", "opponent": "scripted"}
        moves = []
        while (turn := gm.next_turn()) is not None:
            view = View(turn.role, "", "", turn.observation.data, None, [], [], 0)
            reply = players[turn.role][kinds[turn.role]](view, rngs[turn.role])
            moves.append(reply.splitlines()[-1])
            gm.on_reply(turn.role, reply)
        return moves

    first = game()
    assert len(first) >= 30 and first == game()
