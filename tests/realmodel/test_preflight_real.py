"""The pre-flight's verdicts against llama.cpp's real server, and a model named on the command
line playing it: an image sent to a text-only model, a name the server does not list (llama.cpp
answers any name), a server whose slots are all busy (a warning, not a refusal), and
``parley run comma.wire --model openai/smollm2 …`` run as a process, then rerun from the
response cache without a single request reaching the server."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from parley import event_loop
from parley.agents.backends.llama_server import LlamaServerProcess
from parley.runtime.preflight import ModelCheck, check_config
from tests.realmodel.conftest import MAX_TOKENS, real_config, tiny_model

pytestmark = pytest.mark.real_model

PARLEY = str(Path(sys.executable).parent / "parley")


def wire(variant: str | None = None) -> list[dict[str, Any]]:
    """One episode of the wire puzzle, the model the solver (the image variant by default)."""
    return [
        {
            "game": "comma.wire",
            "seeds": {"count": 1},
            "settings": {"variant": variant} if variant else {},
            "pairings": [{"solver": "tiny", "expert": "scripted"}],
        }
    ]


def check(server: LlamaServerProcess, model: dict[str, Any], variant: str | None) -> ModelCheck:
    config = real_config(server, wire(variant), model=model)
    [result] = event_loop.run(check_config(config, timeout_s=60, environ={}))
    return result


def test_an_image_to_a_text_only_model_names_the_cause_and_the_fix(
    llama_server: LlamaServerProcess,
) -> None:
    result = check(llama_server, tiny_model(llama_server, images=True), None)
    assert (result.status, result.step, result.images) == ("failed", "request", True)
    # llama.cpp says so itself (its /props), and the image would be left out of every request.
    assert "the server takes no images" in result.detail
    assert "models.tiny.images: false" in result.fix and "text variants" in result.fix
    # Declared text-only, the text variant is played and the same server passes.
    assert check(llama_server, tiny_model(llama_server), None).status == "ok"


def test_a_name_the_server_does_not_list_is_refused_though_llama_cpp_would_answer(
    llama_server: LlamaServerProcess,
) -> None:
    result = check(llama_server, tiny_model(llama_server, model="gpt-4o-mini"), "text")
    assert (result.status, result.step) == ("failed", "models")
    assert "'gpt-4o-mini'" in result.detail and llama_server.model in result.detail
    assert "models.tiny.model" in result.fix


def _processing(server: LlamaServerProcess) -> float:
    return server.metrics().get("llamacpp:requests_processing", 0.0)


@contextlib.contextmanager
def busy(server: LlamaServerProcess) -> Iterator[None]:
    """Every slot of ``server`` generating a long reply, until the block ends (the streams
    are closed, which llama.cpp takes as a cancel)."""
    address = urlsplit(server.url)
    body = {
        "model": server.model,
        "messages": [{"role": "user", "content": "Count from one to a thousand in words."}],
        "max_tokens": 1500,
        "ignore_eos": True,  # llama.cpp: generate all of max_tokens
        "stream": True,
    }
    streams = []
    try:
        for _ in range(server.slots):
            conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=120)
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})  # fmt: skip
            response = conn.getresponse()
            assert response.status == 200
            response.readline()  # the first chunk: this slot is generating
            streams.append(conn)
        assert _processing(server) == server.slots
        yield
    finally:
        for conn in streams:
            conn.close()
        # Back to idle before the next test (the cancels take a moment to be seen).
        deadline = time.monotonic() + 60
        while _processing(server) and time.monotonic() < deadline:
            time.sleep(0.2)


def test_a_server_whose_slots_are_busy_is_a_warning_not_a_refusal(
    llama_server: LlamaServerProcess,
) -> None:
    config = real_config(llama_server, wire("text"), check_timeout_s=2)
    with busy(llama_server):
        [result] = event_loop.run(check_config(config, environ={}))
    assert (result.status, result.step) == ("warning", "request") and result.ok
    assert "got no reply in" in result.detail and "the check waits 2 s" in result.detail
    assert "the run goes on" in result.fix and "--check-timeout" in result.fix


def parley_run(*words: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    return subprocess.run(
        [PARLEY, "run", *words], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_a_model_on_the_command_line_plays_then_reruns_from_the_cache(
    llama_server: LlamaServerProcess, tmp_path: Path
) -> None:
    words = ["comma.wire", "--model", f"openai/{llama_server.model}"]
    words += ["--base-url", llama_server.openai_url, "--seeds", "3", "--pair", "solver=model"]
    short = [f"--set=models.{llama_server.model}.params.max_tokens={MAX_TOKENS}"]
    short += ["--set=games.0.settings.max_turns=2", "--quiet"]
    # The server says it takes no images: the text variant is played without --text-only.
    cache = tmp_path / "cache.sqlite"
    words += [f"--set=cache={cache}", *short]
    first = parley_run(*words, "--out", "first", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "takes no images" in first.stderr
    records = [json.loads(x) for x in (tmp_path / "first/episodes.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r["outcome"] in ("success", "lost") for r in records)
    assert {r["spec"]["settings"]["variant"] for r in records} == {"text"}
    saved = yaml.safe_load((tmp_path / "first/config.yaml").read_text())
    entry = saved["models"][llama_server.model]
    assert (entry["base_urls"], entry["images"]) == ([llama_server.openai_url], False)

    # Declared text-only, the rerun does not even ask the server what it is.
    before = llama_server.metrics()
    second = parley_run(*words, "--text-only", "--out", "second", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    after = llama_server.metrics()
    for counter in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"):
        assert after.get(counter) == before.get(counter), counter  # nothing reached the server
    again = [json.loads(x) for x in (tmp_path / "second/episodes.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in again] == [r["outcome"] for r in records]
    assert all(c["cached"] == c["requests"] for r in again for c in r["model_calls"].values())
