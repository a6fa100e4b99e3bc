"""One span hierarchy on every transport: episode → turn → invoke_agent → chat.

The same model-played episode runs on the local bus and over a real Mosquitto. Without message
spans, every ``invoke_agent`` hangs directly under its own turn's span (it once hung under the
episode on the local bus, where the actor's task had the episode span current); with them,
the bus's publish and receive spans sit between the two. Either way, the tree is the same on
both transports, and every ``chat`` span is a child of its ``invoke_agent``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.scheduler import run_experiment
from tests.conftest import require
from tests.fixtures.broker import MQTT5_REASON
from tests.observability.conftest import KEY_ENV, SECRET, config, model_entry, traces

pytestmark = pytest.mark.anyio

MESSAGING = ("publish ", "receive ")


async def episode_spans(
    sim: SimServerProcess,
    run: Path,
    messages: bool | str,
    bus_url: str | None = None,
    transport: str = "sdk",
) -> list[dict[str, Any]]:
    cfg = config(
        "comma.atm",
        [3],
        [{"solver": "leaky", "expert": "scripted"}],
        models={"leaky": model_entry(sim, "leaky-solver", transport=transport)},
        settings={"variant": "text", "max_turns": 2},
        tracing={"messages": messages},
    )
    outcome = await run_experiment(cfg, run, bus_url=bus_url)
    assert outcome.records[0]["turns"] >= 2
    (spans,) = [s for s in traces(run).values() if any(x["name"].startswith("episode ") for x in s)]
    return spans


def logical_parent(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The nearest ancestor that is not a bus span (publish/receive)."""
    parent = by_id[span["parent_id"]]
    while parent["name"].startswith(MESSAGING):
        parent = by_id[parent["parent_id"]]
    return parent


def check_hierarchy(spans: list[dict[str, Any]], strict: bool) -> None:
    by_id = {s["span_id"]: s for s in spans}
    agents = [s for s in spans if s["name"].startswith("invoke_agent ")]
    chats = [s for s in spans if s["name"].startswith("chat ")]
    turns = [s for s in spans if s["name"].startswith("turn ")]
    assert agents and chats and len(turns) == len(agents)
    episode = next(s for s in spans if s["name"].startswith("episode "))
    for turn in turns:
        assert turn["parent_id"] == episode["span_id"]
    for agent in agents:
        turn = by_id[agent["parent_id"]] if strict else logical_parent(agent, by_id)
        assert turn["name"].startswith("turn "), (agent["name"], turn["name"])
        assert turn["attributes"]["parley.turn"] == agent["attributes"]["parley.turn"]
        assert turn["attributes"]["parley.role"] == agent["name"].split()[-1]
    for chat in chats:
        assert by_id[chat["parent_id"]]["name"] == "invoke_agent solver"


def shape(spans: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Every span as the chain of names from the root down to it (the tree, without ids)."""
    by_id = {s["span_id"]: s for s in spans}
    chains = []
    for span in spans:
        chain = [span["name"]]
        while span["parent_id"]:
            span = by_id[span["parent_id"]]
            chain.append(span["name"])
        chains.append(tuple(reversed(chain)))
    return sorted(chains)


@pytest.mark.parametrize("messages", [False, True])
async def test_the_same_hierarchy_on_the_local_bus_and_over_mqtt(
    sim: SimServerProcess,
    mqtt_broker: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    messages: bool,
) -> None:
    require(mqtt_broker.mqtt5, MQTT5_REASON)
    monkeypatch.setenv(KEY_ENV, SECRET)
    local = await episode_spans(sim, tmp_path / "local", messages)
    mqtt = await episode_spans(sim, tmp_path / "mqtt", messages, mqtt_broker.url)
    for spans in (local, mqtt):
        check_hierarchy(spans, strict=not messages)
    assert shape(local) == shape(mqtt)


async def test_default_tracing_keeps_turns_above_agents_on_both_transports(
    sim: SimServerProcess, mqtt_broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Defaults: no bus spans on the local bus, bus spans over MQTT.
    monkeypatch.setenv(KEY_ENV, SECRET)
    local = await episode_spans(sim, tmp_path / "local", "auto")
    check_hierarchy(local, strict=True)
    mqtt = await episode_spans(sim, tmp_path / "mqtt", "auto", mqtt_broker.url)
    check_hierarchy(mqtt, strict=False)
    assert any(s["name"].startswith("receive ") for s in mqtt)


async def test_the_same_hierarchy_through_the_sdk_and_direct(
    sim: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The direct transport's chat span is not made current (nothing in parley's own HTTP
    client reads it), yet it sits where the SDK's does: under its invoke_agent, with the
    episode as its conversation, ended once its reply is in."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    through_sdk = await episode_spans(sim, tmp_path / "sdk", False)
    direct = await episode_spans(sim, tmp_path / "direct", False, transport="direct")
    for spans in (through_sdk, direct):
        check_hierarchy(spans, strict=True)
        episode = next(s for s in spans if s["name"].startswith("episode "))
        chats = [s for s in spans if s["name"].startswith("chat ")]
        for chat in chats:
            assert (
                chat["attributes"]["gen_ai.conversation.id"]
                == episode["attributes"]["parley.episode"]
            )
            assert chat["end_ns"] >= chat["start_ns"] > 0
            assert chat["attributes"]["gen_ai.usage.output_tokens"] > 0
    assert shape(through_sdk) == shape(direct)
