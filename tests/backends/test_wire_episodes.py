"""COMMA wire episodes played by models through the OpenAI and the Anthropic paths, against the
stand-in server running as its own process."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.agents.backends.simserver import SimServerProcess
from parley.environments.comma.wire import WirePuzzle, wire_to_cut
from tests.backends.conftest import SEEDS, model, play, transcript, wire_config

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("backend", "stream", "transport"),
    [
        ("openai", False, "sdk"),
        ("openai", True, "sdk"),
        ("anthropic", False, "sdk"),
        ("anthropic", True, "sdk"),
        ("openai", False, "direct"),
        ("openai", True, "direct"),
        ("anthropic", True, "direct"),
    ],
)
async def test_models_win_the_wire_puzzle(
    sim: SimServerProcess, tmp_path: Path, backend: str, stream: bool, transport: str
) -> None:
    """A text-only solver model and an expert model, both scripted by the sim, win every seed;
    replies, raw responses, usage and calls are in the transcript."""
    models = {
        "solver": model(sim, "solver-m", backend, images=False, stream=stream, transport=transport),
        "expert": model(sim, "expert-m", backend, stream=stream, transport=transport),
    }
    records = await play(wire_config(models, [{"solver": "solver", "expert": "expert"}]), tmp_path)
    assert len(records) == len(SEEDS)
    assert [r["outcome"] for r in records] == ["success"] * len(SEEDS), [
        (r["reason"], r["error"]) for r in records
    ]
    stats = sim.stats()
    assert stats[f"requests_{backend}"] == sum(r["turns"] for r in records)
    assert stats.get("streamed", 0) == (stats["requests"] if stream else 0)
    for r in records:
        # The text-only solver got the puzzle's text variant.
        assert r["spec"]["settings"]["variant"] == "text"
        assert r["token_source"] == {"solver": "backend", "expert": "backend"}
        assert r["tokens"]["solver"]["input"] > 100
        assert r["model_calls"]["solver"]["attempts"] == r["model_calls"]["solver"]["requests"]
        responses = [m for m in transcript(tmp_path, r["episode"]) if m["kind"] == "turn_response"]
        assert responses
        for response in responses:
            assert response["model"] in ("solver-m", "expert-m")
            assert response["usage"]["source"] == "backend"
            assert response["calls"][-1]["outcome"] == "ok"
            assert response["raw"]["model"] == response["model"]
            text = (
                response["raw"]["choices"][0]["message"]["content"]
                if backend == "openai"
                else response["raw"]["content"][0]["text"]
            )
            assert text == response["text"]
            if stream:
                assert response["calls"][-1]["ttft_s"] >= 0
        # The last solver reply is the action the expert named.
        instance = WirePuzzle.generate(r["seed"], {})
        answer = wire_to_cut(instance["colors"], instance["serial"])
        solver_texts = [m["text"] for m in responses if m["role"] == "solver"]
        assert solver_texts[-1] == f"cut_wire_{answer}"


async def test_replies_that_break_the_format_are_violations_not_errors(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    """A solver that mixes an action into chatter, cuts a wire that is not there or answers
    with junk: the game records what happened; no episode ends in error."""
    sim.configure(
        models={
            "bad-solver": {
                "turns": [
                    "cut_wire_1 because I feel like it",
                    "cut_wire_9",
                    "\x00\x01 ☃ {not json",
                    "",
                ]
            },
            "expert-m": {"text": "Cut wire 2."},
        }
    )
    models = {
        "solver": model(sim, "bad-solver", images=False),
        "expert": model(sim, "expert-m"),
    }
    config = wire_config(
        models, [{"solver": "solver", "expert": "expert"}], settings={"max_turns": 4}
    )
    records = await play(config, tmp_path)
    assert [r["outcome"] for r in records] == ["lost"] * len(records)
    for r in records:
        messages = transcript(tmp_path, r["episode"])
        said = [
            m["text"] for m in messages if m["kind"] == "turn_response" and m["role"] == "solver"
        ]
        assert said == [
            "cut_wire_1 because I feel like it",
            "cut_wire_9",
            "\x00\x01 ☃ {not json",
            "",
        ]
        # None of them was a clean action line: each went to the expert as a message.
        events = [m for m in messages if m["kind"] == "transcript_event"]
        assert not [e for e in events if e["event"] == "action"]
        heard = [
            e["content"][0]["text"] if e["content"] else ""
            for e in events
            if e["event"] == "utterance" and e["from_role"] == "solver"
        ]
        assert heard[:2] == said[:2]


async def test_image_variant_sends_images_to_the_solver_model_only(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    """A vision solver gets the rendered puzzle (resized to its maximum); the expert's requests
    carry no image, and the recorded prompts show the same."""
    seeds = [s for s in range(40) if _answer(s) == 1][:3]
    sim.configure(
        models={
            "vlm": {
                "rules": [{"match": r"Expert: Cut wire (\d)", "reply": r"cut_wire_\1"}],
                "text": "I see wires. Which one?",
            },
            "expert-m": {"text": "Cut wire 1."},
        }
    )
    models = {
        "solver": model(sim, "vlm", max_image_side=128, max_images=1),
        "expert": model(sim, "expert-m"),
    }
    records = await play(
        wire_config(models, [{"solver": "solver", "expert": "expert"}], seeds=seeds), tmp_path
    )
    assert [r["outcome"] for r in records] == ["success"] * len(seeds)
    assert all(r["spec"]["settings"]["variant"] == "image" for r in records)
    stats = sim.stats()
    assert stats["images_vlm"] >= len(seeds)
    assert "images_expert-m" not in stats
    for r in records:
        for m in transcript(tmp_path, r["episode"]):
            if m["kind"] != "turn_response":
                continue
            images = [p for msg in m["prompt"] for p in msg["content"] if p["type"] == "image"]
            if m["role"] == "expert":
                assert images == []
            else:
                assert images and all(p.get("data") is None for p in images)
                first = m["calls"][0]
                assert first["images"]["sent"] == 1
                # 520 px wide renders, scaled down to 128.
                assert first["images"]["resized"] == 1


def _answer(seed: int) -> int:
    instance = WirePuzzle.generate(seed, {})
    return wire_to_cut(instance["colors"], instance["serial"])


@pytest.mark.parametrize("transport", ["sdk", "direct"])
async def test_without_a_run_pool_a_policy_brings_and_closes_its_own_clients(
    sim: SimServerProcess, transport: str
) -> None:
    """Given the bare registry (no run-wide pool, e.g. a process that plays single episodes), a
    model player still works, and its clients close with the episode."""
    from parley.agents.agent import Agent
    from parley.bus.messages import TextPart, TurnRequest
    from parley.environments import registry
    from parley.runtime.config import PlayerSpec
    from parley.runtime.players import make_policy

    # plain dicts, as read back from JSON
    registry_entries = {"m": model(sim, "expert-m", transport=transport)}
    policy = make_policy(
        PlayerSpec(kind="llm", model="m"),
        "expert",
        registry.get("comma.wire"),
        "k",
        registry_entries,
    )
    agent = Agent("expert", policy)
    request = TurnRequest(
        run="r",
        sender="gm",
        role="expert",
        system="You are the expert.",
        observation=[TextPart(text="The serial number is nothing we know.")],
    )
    response = await agent.respond(request)
    assert response.text == "Describe the wires."
    assert response.usage is not None and response.usage.source == "backend"
    (endpoint,) = policy.client.endpoints  # type: ignore[attr-defined]
    await policy.aclose()
    if transport == "sdk":
        assert endpoint.direct is None and endpoint.http.is_closed
    else:
        assert endpoint.direct is not None and endpoint.direct.session.closed
