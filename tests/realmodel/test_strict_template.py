"""A real server whose chat template insists on strict alternation (the same check as Gemma 3's,
in ChatML as SmolLM2 writes it) refuses no request of a game: the model plays every role of
COMMA's wire puzzle, TicTacToe and the reference game against scripted partners."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends.llama_server import LlamaServerProcess
from parley.runtime.results import RunFolder
from tests.realmodel.conftest import (
    StartServer,
    model_responses,
    play,
    post_chat,
    real_config,
)

pytestmark = [pytest.mark.real_model, pytest.mark.anyio]

TEMPLATE = Path(__file__).with_name("strict_alternation.jinja")
REFUSAL = "roles must alternate"
GAME_OUTCOMES = {"success", "lost", "aborted"}
# The model in each role of each game, the other role scripted; a few turns each.
GAMES: list[dict[str, Any]] = [
    {
        "game": "comma.wire",
        "seeds": [0],
        "pairings": [
            {"solver": "tiny", "expert": "scripted"},
            {"solver": "scripted", "expert": "tiny"},
        ],
        "settings": {"variant": "text", "max_turns": 3},
    },
    {
        "game": "playground.tictactoe.e2e",
        "seeds": [0],
        "pairings": [{"player": "tiny", "opponent": "scripted"}],
        "settings": {"variant": "text", "max_invalid": 2},
    },
    {
        "game": "clem.reference",
        "seeds": [0],
        "pairings": [
            {"describer": "tiny", "guesser": "scripted"},
            {"describer": "scripted", "guesser": "tiny"},
        ],
        "settings": {"variant": "text"},
    },
]


@pytest.fixture(scope="module")
def strict_server(start_llama_server: StartServer) -> LlamaServerProcess:
    return start_llama_server(ctx=4096, slots=2, chat_template_file=TEMPLATE)


def chat(server: LlamaServerProcess, roles: list[str]) -> tuple[int, str]:
    """The status and body of a chat request whose messages have ``roles``."""
    return post_chat(server, [{"role": role, "content": f"a {role} message"} for role in roles])


def test_the_strict_server_refuses_a_history_that_opens_with_the_models_reply(
    strict_server: LlamaServerProcess,
) -> None:
    status, text = chat(strict_server, ["system", "assistant", "user"])
    assert status == 400 and REFUSAL in text
    status, text = chat(strict_server, ["system", "user", "user"])
    assert status == 400 and REFUSAL in text
    status, _ = chat(strict_server, ["system", "user", "assistant", "user"])
    assert status == 200


async def test_no_request_of_any_game_is_refused(
    strict_server: LlamaServerProcess, tmp_path: Path
) -> None:
    records = await play(real_config(strict_server, GAMES, concurrency=2), tmp_path)
    assert len(records) == 5
    for r in records:
        assert r["outcome"] in GAME_OUTCOMES, (r["game"], r["reason"], r["error"])
        assert REFUSAL not in r.json_line(), r.episode
    responses = model_responses(tmp_path, records)
    assert {m["role"] for m in responses} == {"solver", "expert", "player", "describer", "guesser"}
    for m in responses:
        for call in m["calls"]:
            assert call["outcome"] == "ok", call
    # The history strict templates refuse was sent: the model's own reply first after the
    # system text, which the request must open with a user turn.
    opening = [m["prompt"][1]["role"] for m in responses if len(m["prompt"]) > 1]
    assert "assistant" in opening
    refused = [
        m
        for r in records
        for m in RunFolder(tmp_path).iter_transcript(r["episode"])
        if REFUSAL in json.dumps(m)
    ]
    assert refused == []
