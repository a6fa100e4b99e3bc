"""The real model server itself: started on a free port, it reports its per-slot context and
counts the tokens it generates; stopped, it is gone."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from parley.agents.backends.llama_server import LlamaServerProcess, parse_metrics
from tests.realmodel.conftest import MAX_TOKENS, StartServer, post_chat

pytestmark = pytest.mark.real_model


def chat(server: LlamaServerProcess, text: str) -> dict:
    status, body = post_chat(server, [{"role": "user", "content": text}])
    assert status == 200, body
    reply: dict = json.loads(body)
    return reply


def test_the_server_reports_its_slot_context_and_counts_what_it_generates(
    llama_server: LlamaServerProcess,
) -> None:
    models = json.loads(llama_server.get("/v1/models"))
    assert models["data"][0]["meta"]["n_ctx"] == llama_server.n_ctx == 2048
    before = llama_server.metrics()
    reply = chat(llama_server, "Say hello.")
    after = llama_server.metrics()
    usage = reply["usage"]
    assert 0 < usage["completion_tokens"] <= MAX_TOKENS
    predicted = "llamacpp:tokens_predicted_total"
    assert after[predicted] - before.get(predicted, 0.0) == usage["completion_tokens"]


def test_a_started_server_is_stopped_and_its_port_closed(start_llama_server: StartServer) -> None:
    server = start_llama_server(ctx=1024, slots=1)
    assert json.loads(server.get("/v1/models"))["data"][0]["meta"]["n_ctx"] == 1024
    url = server.url
    server.stop()
    assert server.process is None
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/health", timeout=5)


def test_prometheus_text_is_read_as_numbers() -> None:
    text = (
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
        "# TYPE llamacpp:prompt_tokens_total counter\n"
        "llamacpp:prompt_tokens_total 17\n"
        "llamacpp:tokens_predicted_total 3.5e1\n"
        'labelled{slot="0"} 4\n'
        "broken not-a-number\n"
    )
    assert parse_metrics(text) == {
        "llamacpp:prompt_tokens_total": 17.0,
        "llamacpp:tokens_predicted_total": 35.0,
    }
