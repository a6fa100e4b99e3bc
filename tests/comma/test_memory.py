"""Episodic-memory policies per role (full, none = the paper's no-memory ablation, last_k)
change what the recorded prompts contain, and the memory puzzle shows that it matters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.comma.conftest import SCRIPTED, Run, play


def _config(memory: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "comma-memory",
        "tracing": {"enabled": False},
        "games": [
            {
                "game": "comma.memory",
                "seeds": {"count": 12},
                "pairings": [SCRIPTED],
                "memory": memory,
            }
        ],
    }


def _prompts(messages: dict[str, list[dict[str, Any]]], role: str) -> list[list[dict[str, Any]]]:
    return [
        m["prompt"]
        for episode in messages.values()
        for m in episode
        if m["kind"] == "turn_response" and m["role"] == role
    ]


def test_memory_policies_shape_the_recorded_prompts(tmp_path: Path, big_run: Run) -> None:
    ablated = play(
        _config({"solver": "none", "expert": {"policy": "last_k", "k": 2}}), tmp_path / "a"
    )
    full_records = [r for r in big_run.of("scripted") if r["game"] == "comma.memory"][:12]
    full = {r["episode"]: big_run.messages[r["episode"]] for r in full_records}

    # none: the solver's prompt holds the system text, at most the latest message it
    # received, and the current observation.
    for prompt in _prompts(ablated.messages, "solver"):
        history = prompt[1:-1]
        assert prompt[0]["role"] == "system" and len(history) <= 1
        assert all(m["role"] == "user" for m in history)
    # last_k (k = 2): at most two of the expert's own earlier replies.
    expert_prompts = _prompts(ablated.messages, "expert")
    assert max(sum(m["role"] == "assistant" for m in p) for p in expert_prompts) == 2
    # The full memory of the same episodes carries the whole conversation.
    assert max(len(p) for p in _prompts(full, "solver")) >= 15
    assert max(sum(m["role"] == "assistant" for m in p) for p in _prompts(full, "expert")) >= 8

    # The memory puzzle needs earlier stages: the expert that forgets them loses the thread.
    psr = sum(r["scores"]["psr"] for r in ablated.records) / len(ablated.records)
    assert psr < 1.0 and all(r["outcome"] == "success" for r in full_records)
    labels = {r["spec"]["memory"]["expert"]["policy"] for r in ablated.records}
    assert labels == {"last_k"}
