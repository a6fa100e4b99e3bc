"""Episodes against the real model server: a rerun from the response cache asks the server
nothing (counted by the server itself), and replies held to the legal actions are legal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.agents.backends.llama_server import LlamaServerProcess
from parley.runtime.cli import main
from parley.runtime.results import RunFolder
from tests.realmodel.conftest import model_responses, play, real_config, tiny_model

pytestmark = [pytest.mark.real_model, pytest.mark.anyio]

GAME_OUTCOMES = {"success", "lost", "aborted"}
# What the server counts of every chat request it serves.
COUNTERS = ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total")


def parley_run(config: Path, out: Path) -> int:
    """``parley run CONFIG --out OUT`` as a user types it (pre-flight check included)."""
    return main(["run", str(config), "--out", str(out)])


def replies(run: Path) -> list[tuple[str, int, str]]:
    """(game, seed, reply) of every real-model reply of a run, in play order."""
    records = sorted(RunFolder(run).records(), key=lambda r: (r["game"], r["seed"]))
    return [(r["game"], r["seed"], m["text"]) for r in records for m in model_responses(run, [r])]


def counters(server: LlamaServerProcess) -> dict[str, float]:
    metrics = server.metrics()
    return {name: metrics.get(name, 0.0) for name in COUNTERS}


def test_a_rerun_from_the_response_cache_makes_no_chat_request(
    llama_server: LlamaServerProcess, tmp_path: Path
) -> None:
    config: dict[str, Any] = {
        "name": "cache-rerun",
        "cache": str(tmp_path / "responses.sqlite"),
        "models": {"tiny": tiny_model(llama_server)},
        "games": [
            {
                "game": "comma.wire",
                "seeds": [0],
                "pairings": [{"solver": "tiny", "expert": "scripted"}],
                "settings": {"max_turns": 2},
            }
        ],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert parley_run(path, tmp_path / "first") == 0
    before = counters(llama_server)
    assert parley_run(path, tmp_path / "second") == 0
    after = counters(llama_server)
    assert before[COUNTERS[1]] > 0  # the first run was served by this server
    assert after == before
    played = replies(tmp_path / "first")
    assert played and replies(tmp_path / "second") == played
    for r in RunFolder(tmp_path / "second").records():
        assert r["outcome"] in GAME_OUTCOMES, (r["reason"], r["error"])
        assert r["model_calls"]["solver"]["cached"] == r["model_calls"]["solver"]["requests"]


async def test_replies_held_to_the_legal_actions_are_legal(
    llama_server: LlamaServerProcess, tmp_path: Path
) -> None:
    """TicTacToe under ``constrain: legal_actions`` (``constrain_via: auto``): every move the
    model made is one the turn allowed, so none is a parse violation."""
    config = real_config(
        llama_server,
        [
            {
                "game": "playground.tictactoe.e2e",
                "seeds": [0],
                "pairings": [{"player": "tiny", "opponent": "scripted"}],
                "settings": {"variant": "text"},
                "constrain": "legal_actions",
            }
        ],
    )
    (record,) = await play(config, tmp_path)
    assert record["outcome"] in GAME_OUTCOMES, (record["reason"], record["error"])
    messages = list(RunFolder(tmp_path).iter_transcript(record["episode"]))
    legal = {
        m["turn"]: m["legal_actions"]
        for m in messages
        if m["kind"] == "turn_request" and m["role"] == "player"
    }
    mine = [m for m in messages if m["kind"] == "turn_response" and m["role"] == "player"]
    assert mine
    for m in mine:
        assert m["text"] in legal[m["turn"]], (m["turn"], m["text"], legal[m["turn"]])
        assert all(call.get("constrained") for call in m["calls"]), m["calls"]
    violations = [
        m
        for m in messages
        if m["kind"] == "transcript_event"
        and m["event"] == "violation"
        and m["from_role"] == "player"
    ]
    assert violations == []
