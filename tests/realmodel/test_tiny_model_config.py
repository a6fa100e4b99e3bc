"""configs/tiny-model.yaml, one seed a game: the run starts llama.cpp's server itself, the real
model plays a game of every family against the scripted players, every episode is recorded with
an outcome and the server's token counts, and the server is gone when the run ends."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from parley.runtime.config import load_config
from parley.runtime.results import RunFolder
from parley.runtime.scheduler import run_experiment
from tests.realmodel.conftest import model_responses, require_llama_server, turn_responses

pytestmark = pytest.mark.real_model

ROOT = Path(__file__).resolve().parents[2]
TINY_YAML = ROOT / "configs" / "tiny-model.yaml"
FAMILIES = {"comma", "clem", "mango", "playground"}
GAME_OUTCOMES = {"success", "lost", "aborted"}  # what a game decides; "error" is the runtime's


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The config played once, one seed of each game, into a fresh run folder."""
    require_llama_server()
    blocks = len(load_config(TINY_YAML).games)
    config = load_config(TINY_YAML, [f"games.{i}.seeds.count=1" for i in range(blocks)])
    out = tmp_path_factory.mktemp("tiny-run")
    asyncio.run(run_experiment(config, out))
    return out, RunFolder(out).records()


def test_the_tiny_model_plays_every_family_and_its_server_is_stopped(
    tiny_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    out, records = tiny_run
    assert {r["game"].split(".")[0] for r in records} == FAMILIES
    assert len(records) == len(load_config(TINY_YAML).games)
    for r in records:
        assert r["outcome"] in GAME_OUTCOMES, (r["game"], r["reason"], r["error"])
        assert r["error"] is None
        (role,) = [role for role, name in r["pairing"].items() if name == "tiny"]
        assert r["token_source"][role] == "backend"
        assert r["model_calls"][role]["requests"] >= 1
        # Every reply came from the real server: no retries, no failed attempt.
        for response in turn_responses(out, r["episode"]):
            if response["role"] == role:
                assert [c["outcome"] for c in response["calls"]] == ["ok"]
    # The launched server was recorded as the model's endpoint, logged, and stopped.
    (endpoint,) = json.loads((out / "run.json").read_text())["endpoints"]["tiny"]
    assert endpoint["models"] == ["smollm2"]
    assert (out / "logs" / "tiny.log").stat().st_size > 0
    root = endpoint["url"].removesuffix("/v1")
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(root + "/health", timeout=5)


def test_the_recorded_usage_is_the_servers_call_by_call(
    tiny_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    out, records = tiny_run
    responses = model_responses(out, records)
    assert responses
    for response in responses:
        (call,) = response["calls"]
        raw = response["raw"]["usage"]
        cached = raw.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        # The server's prompt tokens hold its prompt-cache hits; the record keeps them apart.
        assert call["usage"]["input"] + call["usage"].get("cache_read", 0) == raw["prompt_tokens"]
        assert call["usage"].get("cache_read", 0) == cached
        assert call["usage"]["output"] == raw["completion_tokens"]
        assert response["raw"]["choices"][0]["message"]["content"] == response["text"]
    # An episode's totals are the sums of its calls.
    for r in records:
        (role,) = [role for role, name in r["pairing"].items() if name == "tiny"]
        mine = [m for m in turn_responses(out, r["episode"]) if m["role"] == role]
        raw_in = sum(m["raw"]["usage"]["prompt_tokens"] for m in mine)
        raw_out = sum(m["raw"]["usage"]["completion_tokens"] for m in mine)
        tokens = r["tokens"][role]
        assert tokens["input"] + tokens.get("cache_read", 0) == raw_in
        assert tokens["output"] == raw_out
