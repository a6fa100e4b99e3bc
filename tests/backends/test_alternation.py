"""Requests every chat template accepts: after the system text, user and assistant take turns,
starting and ending with the user, on both APIs, for any prompt and for every prompt the agents
build in every registered game."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from parley.agents.backends.formats import NO_IMAGES, OPENER, TURN_PROMPT, prepare
from parley.agents.backends.spec import GenerationParams, ModelSpec
from parley.agents.backends.transport import BACKENDS
from parley.bus.messages import ImagePart, PromptMessage, TextPart
from parley.environments import registry
from parley.environments.registry import GameInfo
from parley.runtime.checkgame import oracle_name
from parley.runtime.config import load_config
from parley.runtime.scheduler import run_experiment
from tests.conftest import IN_CI

PARAMS = GenerationParams(max_tokens=32)
# A model that takes images and one that takes none: the notes that replace images must not
# change the order of the roles.
SPECS = [
    ModelSpec(model="m", base_url="http://h/v1"),
    ModelSpec(model="m", base_url="http://h/v1", images=False),
]


def roles_of(body: dict[str, Any]) -> list[str]:
    """The chat roles of a request body (the system text first where the API sends it so)."""
    return [m["role"] for m in body["messages"]]


def alternation_error(roles: list[str]) -> str | None:
    """Why ``roles`` is not [system?] user assistant user … user, as strict templates want."""
    turns = roles[1:] if roles[:1] == ["system"] else roles
    if not turns:
        return "no turn after the system text"
    for i, role in enumerate(turns):
        expected = "user" if i % 2 == 0 else "assistant"
        if role != expected:
            return f"turn {i} is {role!r}, expected {expected!r}: {roles}"
    if turns[-1] != "user":
        return f"the last turn is the model's own: {roles}"
    return None


def bodies(messages: list[PromptMessage]) -> list[tuple[str, dict[str, Any]]]:
    """The request bodies both backends build of ``messages``, as the client sends them."""
    return [
        (name, BACKENDS[name].body(messages, spec, PARAMS)[0])
        for name in ("openai", "anthropic")
        for spec in SPECS
    ]


# --- any prompt ------------------------------------------------------------------------------


def _png() -> ImagePart:
    out = io.BytesIO()
    Image.new("RGB", (4, 2), (200, 30, 30)).save(out, format="PNG")
    return ImagePart.from_bytes(out.getvalue())


PART = st.one_of(
    st.sampled_from(["", "hello", "cut wire 2", " "]).map(lambda t: TextPart(text=t)),
    st.just(None).map(lambda _: _png()),
)
MESSAGE = st.builds(
    lambda role, parts: PromptMessage(role=role, content=parts),
    st.sampled_from(["system", "user", "assistant"]),
    st.lists(PART, max_size=3),
)


@given(st.lists(MESSAGE, max_size=8))
def test_any_prompt_becomes_turns_that_alternate_from_the_user_on_both_apis(
    messages: list[PromptMessage],
) -> None:
    for name, body in bodies(messages):
        error = alternation_error(roles_of(body))
        assert error is None, f"{name}: {error}"
        if name == "anthropic":
            assert all(m["role"] != "system" for m in body["messages"])


def _msg(role: str, *texts: str) -> PromptMessage:
    return PromptMessage(role=role, content=[TextPart(text=t) for t in texts])  # type: ignore[arg-type]


def test_a_history_that_opens_with_the_models_reply_gets_the_opener_on_both_apis() -> None:
    prompt = [_msg("system", "sys"), _msg("assistant", "cut_wire_2"), _msg("user", "Feedback: ok")]
    system, turns, _ = prepare(prompt, SPECS[0])
    assert system == "sys"
    assert turns == [
        ("user", [("text", OPENER)]),
        ("assistant", [("text", "cut_wire_2")]),
        ("user", [("text", "Feedback: ok")]),
    ]
    openai = BACKENDS["openai"].body(prompt, SPECS[0], PARAMS)[0]
    assert openai["messages"][:2] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": OPENER},
    ]
    anthropic = BACKENDS["anthropic"].body(prompt, SPECS[0], PARAMS)[0]
    assert anthropic["system"] == "sys"
    assert anthropic["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": OPENER}],
    }


def test_a_prompt_already_alternating_is_sent_as_it_is() -> None:
    prompt = [_msg("system", "sys"), _msg("user", "a"), _msg("assistant", "b"), _msg("user", "c")]
    _, turns, _ = prepare(prompt, SPECS[0])
    assert [(role, [b[1] for b in blocks]) for role, blocks in turns] == [
        ("user", ["a"]),
        ("assistant", ["b"]),
        ("user", ["c"]),
    ]


def test_neighbours_of_one_role_merge_and_our_own_last_reply_gets_the_turn_prompt() -> None:
    prompt = [
        _msg("user", "Expert: one"),
        _msg("user", "Expert: two"),
        _msg("assistant", "a"),
        _msg("assistant", ""),  # empty: nothing to send, and no turn of its own
        _msg("system", "late system text"),
        _msg("assistant", "b"),
    ]
    system, turns, _ = prepare(prompt, SPECS[0])
    assert system == "late system text"
    assert turns == [
        ("user", [("text", "Expert: one"), ("text", "Expert: two")]),
        ("assistant", [("text", "a"), ("text", "b")]),
        ("user", [("text", TURN_PROMPT)]),
    ]


def test_only_a_model_that_takes_images_gets_them() -> None:
    prompt = [_msg("system", "s"), PromptMessage(role="user", content=[TextPart(text="x"), _png()])]
    for name in ("openai", "anthropic"):
        blind = BACKENDS[name].body(prompt, SPECS[1], PARAMS)[0]
        sighted = BACKENDS[name].body(prompt, SPECS[0], PARAMS)[0]
        assert NO_IMAGES in str(blind["messages"]) and "base64" not in str(blind["messages"])
        assert "base64" in str(sighted["messages"]) and NO_IMAGES not in str(sighted["messages"])


# --- every prompt of every game ----------------------------------------------------------------

# Shallow searches and short board games (as in the check-game tests), text variants where the
# game has one: drawing boards costs most of the time, and adds no message of its own.
FAST: dict[str, dict[str, Any]] = {
    "playground.chess.e2e": {"max_moves": 12, "stockfish_depth": 1, "stockfish_time": 0},
    "playground.gomoku.e2e": {"max_moves": 12, "depth": 1, "width": 4},
    "playground.reversi.e2e": {"max_moves": 12, "depth": 1},
}


def _stockfish() -> bool:
    return bool(shutil.which("stockfish") or os.path.exists("/usr/games/stockfish"))


def _player(info: GameInfo, role: str, random: bool) -> str | dict[str, str]:
    if random and "random" in info.players.get(role, {}):
        return "random"
    if oracle_name(info, role) == "oracle":
        return {"kind": "scripted", "name": "oracle"}
    return "scripted"


def _blocks(stockfish: bool) -> list[dict[str, Any]]:
    """Every registered game, played by its oracles and with each role random in turn; once
    with full memory and once with a one-turn window and notes across episodes (which cut and
    add history: the window may open on the model's own reply)."""
    blocks: list[dict[str, Any]] = []
    for name, info in sorted(registry.all_games().items()):
        if info.family == "test":
            continue
        pairings = [{r: _player(info, r, random=False) for r in info.roles}]
        pairings += [
            {r: _player(info, r, random=r == role) for r in info.roles}
            for role in info.roles
            if "random" in info.players.get(role, {})
        ]
        if name == "playground.chess.e2e" and not stockfish:
            pairings = [{r: "random" for r in info.roles}]  # the scripted players need Stockfish
        settings = {**FAST.get(name, {}), **(info.text_settings or {})}
        base = {"game": name, "pairings": pairings, "settings": settings}
        blocks.append({**base, "seeds": [0]})
        window = {"policy": "last_k", "k": 1, "across": {"policy": "notes", "k": 1}}
        blocks.append({**base, "seeds": [1, 2], "memory": {r: window for r in info.roles}})
    return blocks


@pytest.mark.anyio
async def test_every_prompt_of_every_game_alternates_on_both_apis(tmp_path: Path) -> None:
    stockfish = _stockfish()
    if not stockfish and IN_CI:
        pytest.fail("required in CI: Stockfish, for chess played by its scripted players")
    config = load_config({"name": "alternation", "concurrency": 8, "games": _blocks(stockfish)})
    outcome = await run_experiment(config, tmp_path / "run")
    assert [r["episode"] for r in outcome.records if r["outcome"] == "error"] == []
    checked: dict[str, int] = {}
    opened = 0
    for record in outcome.records:
        for m in outcome.folder.iter_transcript(record["episode"]):
            if m["kind"] != "turn_response" or m.get("prompt") is None:
                continue
            messages = [PromptMessage.model_validate(p) for p in m["prompt"]]
            assert messages[0].role == "system"
            for name, body in bodies(messages):
                error = alternation_error(roles_of(body))
                assert error is None, f"{record['episode']} {m['role']} turn {m['turn']}, {name}"
            # The prompt as the agent built it, before the backend made it alternate.
            opened += len(messages) > 1 and messages[1].role == "assistant"
            checked[record["game"]] = checked.get(record["game"], 0) + 1
    games = {name for name, info in registry.all_games().items() if info.family != "test"}
    assert set(checked) == games
    # The case strict templates refuse was met (the windowed history opens with a reply).
    assert opened > 0
