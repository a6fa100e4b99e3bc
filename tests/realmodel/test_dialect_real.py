"""Server dialects against the real llama.cpp server: the probe names it and reads its
context and its lack of vision; a prompt over that context is never sent; one the server
itself refuses as too long is classified the same and not retried; an image it cannot take
is refused once, not retried."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.agents.backends import dialect
from parley.agents.backends.llama_server import LlamaServerProcess
from tests.realmodel.conftest import StartServer, play, real_config, tiny_model, turn_responses

pytestmark = [pytest.mark.real_model, pytest.mark.anyio]

PREDICTED = "llamacpp:tokens_predicted_total"
PROMPTED = "llamacpp:prompt_tokens_total"


def _wire(**settings: Any) -> list[dict[str, Any]]:
    return [
        {
            "game": "comma.wire",
            "seeds": [0],
            "pairings": [{"solver": "tiny", "expert": "scripted"}],
            "settings": {"max_turns": 2, **settings},
        }
    ]


async def test_the_probe_names_llama_cpp_and_reads_its_slot_context(
    llama_server: LlamaServerProcess,
) -> None:
    info, answers = await dialect.probe("openai", llama_server.openai_url, llama_server.model)
    assert info.dialect == "llamacpp"
    assert info.context_size == llama_server.n_ctx
    assert info.images is False  # a text-only model: no mmproj
    assert info.constraint == "json_schema"
    assert answers["/props"] is not None


async def test_a_prompt_over_the_served_context_is_never_sent(
    start_llama_server: StartServer, tmp_path: Path
) -> None:
    """The entry declares no context: the size the server reports is used, and the prompt
    that does not fit it goes nowhere; the server generates and reads nothing."""
    server = start_llama_server(ctx=256, slots=1)
    entry = tiny_model(server)
    del entry["context_size"]
    before = server.metrics()
    records = await play(real_config(server, _wire(variant="text"), model=entry), tmp_path / "run")
    (record,) = records
    assert (record["outcome"], record["reason_code"]) == ("error", "context_exceeded")
    assert f"context of {server.n_ctx} tokens" in record["reason"]
    after = server.metrics()
    assert after.get(PREDICTED, 0) == before.get(PREDICTED, 0)
    assert after.get(PROMPTED, 0) == before.get(PROMPTED, 0)
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["endpoints"]["tiny"][0]["server"]["dialect"] == "llamacpp"


async def test_the_servers_own_context_refusal_is_context_exceeded_and_not_retried(
    start_llama_server: StartServer, tmp_path: Path
) -> None:
    """An entry that claims more context than the server has: the request goes out, the
    server answers 400, and that is the same ending, after one attempt."""
    server = start_llama_server(ctx=256, slots=1)
    entry = tiny_model(server, context_size=4096)
    records = await play(real_config(server, _wire(variant="text"), model=entry), tmp_path / "run")
    (record,) = records
    assert (record["outcome"], record["reason_code"]) == ("error", "context_exceeded")
    assert record["model_calls"]["solver"]["attempts"] == 1


async def test_an_image_to_a_text_only_model_is_refused_once(
    llama_server: LlamaServerProcess, tmp_path: Path
) -> None:
    """Told the model takes images and that the server is of no known kind (no probe to
    learn otherwise), the image goes out: llama.cpp's 500 is not retried."""
    entry = tiny_model(llama_server, images=True, dialect="unknown")
    records = await play(
        real_config(llama_server, _wire(variant="image"), model=entry), tmp_path / "run"
    )
    (record,) = records
    assert record["outcome"] == "error"
    assert record["model_calls"]["solver"]["attempts"] == 1
    assert "image input is not supported" in record["reason"]


async def test_images_go_only_to_a_server_that_takes_them(
    llama_server: LlamaServerProcess, tmp_path: Path
) -> None:
    """The same entry left to the probe: the server says it has no vision, so the picture
    is replaced by a note and the episode plays."""
    entry = tiny_model(llama_server, images=True)
    records = await play(
        real_config(llama_server, _wire(variant="image"), model=entry), tmp_path / "run"
    )
    (record,) = records
    assert record["outcome"] != "error", record["reason"]
    calls = [c for m in turn_responses(tmp_path / "run", record["episode"]) for c in m["calls"]]
    assert calls and all(c["outcome"] == "ok" for c in calls)
    assert any(c.get("images", {}).get("dropped") for c in calls)


def test_parley_check_warns_of_a_prompt_over_the_served_context(
    start_llama_server: StartServer, tmp_path: Path
) -> None:
    """The entry declares no context: ``parley check`` asks the server, and names the game,
    the role and the fix for a prompt that will not fit."""
    server = start_llama_server(ctx=256, slots=1)
    entry = tiny_model(server)
    del entry["context_size"]
    config = {"name": "ctx", "games": _wire(variant="text"), "models": {"tiny": entry}}
    path = tmp_path / "ctx.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-m", "parley.runtime.cli", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = " ".join((done.stdout + done.stderr).split())
    assert "context:" in said and "comma.wire" in said and "solver" in said, said
    assert str(server.n_ctx) in said
