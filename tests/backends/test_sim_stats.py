"""The stand-in server's counters for a benchmark that polls them (``GET /sim/stats?brief=1``),
and its replies' ids and usage as the real API shapes them."""

from __future__ import annotations

import json
import re
import urllib.request

from parley.agents.backends.simserver import SimServerProcess
from parley.tokens import count_tokens


def _post(sim: SimServerProcess, body: dict) -> dict:  # type: ignore[type-arg]
    request = urllib.request.Request(
        sim.openai_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("application/json")
        return json.loads(response.read())


def test_brief_stats_are_the_counters_alone(sim: SimServerProcess) -> None:
    ask = {"model": "m", "messages": [{"role": "user", "content": "Hello?"}]}
    first, second = _post(sim, ask), _post(sim, ask)
    with urllib.request.urlopen(sim.url + "/sim/stats?brief=1", timeout=10) as response:
        brief = json.loads(response.read())
    full = sim.stats()
    assert brief["requests"] == full["requests"] == 2
    assert brief["in_flight"] == 0
    assert not {"loop_lag", "traceparents", "constraints"} & set(brief)
    assert {"loop_lag", "traceparents", "constraints"} <= set(full)
    # Ids: the prefix and 24 hex digits, a new one each reply; usage counted as ever.
    assert all(re.fullmatch("chatcmpl-[0-9a-f]{24}", r["id"]) for r in (first, second))
    assert first["id"] != second["id"]
    text = first["choices"][0]["message"]["content"]
    assert first["usage"]["completion_tokens"] == count_tokens(text)
