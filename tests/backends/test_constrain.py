"""Replies held to the legal actions (``constrain: legal_actions``), against the stand-in
server as its own process: the constraint reaches the server in the form each API takes, the
server honours it, and a constrained run of a board game has no parse violations where the
same model playing free has them."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.agents.backends import constrain
from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.config import load_config
from parley.runtime.reports.pairings import constrained_table
from tests.backends.conftest import model, play, transcript

pytestmark = pytest.mark.anyio

GAME = "playground.tictactoe.e2e"
CHATTER = "Let me think about the board for a while before I decide anything."


def _config(models: dict[str, Any], constrain_block: str | None, seeds: int = 3) -> Any:
    block: dict[str, Any] = {
        "game": GAME,
        "seeds": list(range(seeds)),
        "pairings": [{"player": "chatty", "opponent": "random"}],
        "settings": {"variant": "text", "max_invalid": 2},
    }
    if constrain_block is not None:
        block["constrain"] = constrain_block
    return load_config({"name": "constrain", "games": [block], "models": models})


def _violations(run: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        m
        for r in records
        for m in transcript(run, r["episode"])
        if m["kind"] == "transcript_event" and m["event"] == "violation"
    ]


def _player_replies(run: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        m
        for r in records
        for m in transcript(run, r["episode"])
        if m["kind"] == "turn_response" and m["role"] == "player"
    ]


@pytest.mark.parametrize("via", ["choice", "regex", "guided_choice", "json_schema"])
async def test_constrained_run_has_no_parse_violations(
    sim: SimServerProcess, tmp_path: Path, via: str
) -> None:
    """A model that only chatters breaks the move format every turn when free; held to the
    legal moves (each API's way), the server answers legal moves and no reply is refused."""
    sim.configure(models={"chatty-m": {"text": CHATTER}})
    models = {"chatty": model(sim, "chatty-m", images=False, constrain_via=via)}

    free = await play(_config(models, None), tmp_path / "free")
    refused = _violations(tmp_path / "free", free)
    assert refused, "the free run should break the format"
    assert {v["data"]["code"] for v in refused} == {"parse_error"}
    assert sim.stats().get("constrained", 0) == 0

    sim.reset()
    held = await play(_config(models, "legal_actions"), tmp_path / "held")
    assert len(held) == 3
    assert _violations(tmp_path / "held", held) == []
    stats = sim.stats()
    assert stats["constrained"] == stats["requests"] > 0
    field = {
        "choice": "structured_outputs.choice",
        "regex": "structured_outputs.regex",
        "guided_choice": "guided_choice",
        "json_schema": "response_format.json_schema",
    }[via]
    assert {c["field"] for c in stats["constraints"]} == {field}
    replies = _player_replies(tmp_path / "held", held)
    for reply in replies:
        # The call record says the reply was held, and the game read a bare move.
        assert reply["calls"][0]["constrained"] is True
        assert reply["calls"][0]["constraint"]["via"] == via
        assert re.fullmatch(r"[A-Ca-c][1-3]|[1-9]|\w{1,4}", reply["text"]), reply["text"]
        if via == "json_schema":
            raw = reply["raw"]["choices"][0]["message"]["content"]
            assert json.loads(raw) == {"action": reply["text"]}
    for r in held:
        assert r["model_calls"]["player"]["constrained"] == r["model_calls"]["player"]["requests"]
    # The report sets constrained and free play side by side.
    table = constrained_table([*free, *held])
    assert "| chatty | player | held |" in table and "| chatty | player | free |" in table


async def test_a_game_without_legal_actions_plays_free_and_says_so(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    """COMMA's expert is given no legal actions: asked to constrain it, the run says per call
    why it could not, and its requests reach the server free."""
    sim.configure(models={"talk-m": {"text": "Cut the red wire."}})
    config = load_config(
        {
            "name": "constrain",
            "games": [
                {
                    "game": "comma.wire",
                    "seeds": [0],
                    "pairings": [{"solver": "scripted", "expert": "talk"}],
                    "settings": {"max_turns": 2},
                    "constrain": "legal_actions",
                }
            ],
            "models": {"talk": model(sim, "talk-m")},
        }
    )
    records = await play(config, tmp_path)
    replies = [
        m
        for m in transcript(tmp_path, records[0]["episode"])
        if m["kind"] == "turn_response" and m["role"] == "expert"
    ]
    assert replies
    for reply in replies:
        assert reply["calls"][0]["constrained"] is False
        assert "no legal actions" in reply["calls"][0]["constraint"]
    assert sim.stats().get("constrained", 0) == 0
    assert records[0]["model_calls"]["expert"]["unconstrained"] == len(replies)


def test_the_regex_generator_matches_what_it_generates() -> None:
    """The sim's answer to a regex constraint matches it, for the client's alternations and
    for classes and repeats."""
    rng = random.Random(3)
    held = constrain.Constraint(("a1", "b2", "c.3"), "regex")
    for _ in range(20):
        assert constrain.generate(held.regex(), rng) in held.choices
    for pattern in (r"Movement: [a-h][1-8][a-h][1-8]", r"\d{2,3}(?:x|y)+", r"[A-C]"):
        assert re.fullmatch(pattern, constrain.generate(pattern, rng))
    with pytest.raises(ValueError):
        constrain.generate(r"[^a]", rng)


@settings(max_examples=200)
@given(
    choices=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=6, unique=True),
    seed=st.integers(0, 2**32),
)
def test_the_stand_ins_regex_strings_match_the_choices(choices: list[str], seed: int) -> None:
    """The regex a constraint sends matches exactly its choices: a string generated for it is
    one of them, whatever characters they hold."""
    pattern = constrain.Constraint(tuple(choices), "regex").regex()
    assert constrain.generate(pattern, random.Random(seed)) in choices


@pytest.mark.parametrize(
    "pattern",
    ["cut_wire_[1-6]", r"[a-h][1-8][a-h][1-8][qrbn]?", r"(ab|cd)+e{0,2}", r"^\d{2,4}x?$", "."],
)
def test_generated_strings_match_the_pattern(pattern: str) -> None:
    rng = random.Random(7)
    for _ in range(50):
        assert re.fullmatch(pattern, constrain.generate(pattern, rng))


@pytest.mark.parametrize("pattern", ["[^a]", "(?=x)y", r"\bword", "a)", "(a"])
def test_a_regex_outside_the_subset_is_a_value_error(pattern: str) -> None:
    with pytest.raises(ValueError):
        constrain.generate(pattern, random.Random(0))
