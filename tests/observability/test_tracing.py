"""Traces: one connected trace per episode (run → episode → turn → publish → receive →
invoke_agent → chat), every bus message carrying a traceparent whose span is in that trace —
read off the broker by a separate MQTT client — and model calls after the GenAI conventions."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from parley.agents.backends.simserver import SimServerProcess
from parley.observability.tracing import span_context
from parley.runtime.scheduler import run_experiment
from tests.conftest import require
from tests.fixtures.broker import MQTT5_REASON
from tests.observability.conftest import KEY_ENV, SECRET, config, model_entry, traces

pytestmark = pytest.mark.anyio


def check_connected(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every span's parent is in the trace and there is exactly one root: the episode."""
    by_id = {s["span_id"]: s for s in spans}
    roots = [s for s in spans if s["parent_id"] is None]
    assert [r["name"].split()[0] for r in roots] == ["episode"], [r["name"] for r in roots]
    orphans = [s["name"] for s in spans if s["parent_id"] and s["parent_id"] not in by_id]
    assert not orphans, orphans
    return by_id


async def test_one_connected_trace_per_episode_over_mosquitto(mqtt_broker, tmp_path: Path) -> None:
    require(mqtt_broker.mqtt5, MQTT5_REASON)
    seen: list[tuple[str, dict[str, Any], str | None]] = []
    batched: set[str] = set()  # ids of messages that came in a batch
    ready = asyncio.Event()

    async def watch() -> None:
        # A separate client, as any foreign program on the broker would be.
        async with aiomqtt.Client(
            mqtt_broker.host, mqtt_broker.port, protocol=aiomqtt.ProtocolVersion.V5
        ) as client:
            await client.subscribe("parley/#", qos=1)
            ready.set()
            async for message in client.messages:
                if not message.payload:
                    continue  # a state's retained copy cleared at the episode's end
                props = getattr(message.properties, "UserProperty", None) or []
                data = json.loads(message.payload)
                if isinstance(data, list):  # a batch of one topic's messages (docs/bus.md):
                    # each carries its traceparent in its envelope, not in a user property
                    seen.extend((str(message.topic), item, None) for item in data)
                    batched.update(item["id"] for item in data)
                else:
                    seen.append((str(message.topic), data, dict(props).get("traceparent")))

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(ready.wait(), 10)
    cfg = config(
        "comma.atm",
        [0, 1],
        [{"solver": "scripted", "expert": "scripted"}],
        concurrency=2,
        bus_mirror="all",  # turn requests and responses on the broker too, to follow them there
    )
    outcome = await run_experiment(cfg, tmp_path, bus_url=mqtt_broker.url)
    await asyncio.sleep(0.3)  # the last messages on their way from the broker
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    assert {r["outcome"] for r in outcome.records} == {"success"}

    by_trace = traces(tmp_path)
    episode_trace = {}
    for trace_id, spans in by_trace.items():
        roots = [s for s in spans if s["parent_id"] is None]
        if roots and roots[0]["name"].startswith("episode"):
            episode_trace[roots[0]["attributes"]["parley.episode"]] = trace_id
    assert set(episode_trace) == {r["episode"] for r in outcome.records}
    run_spans = [s for spans in by_trace.values() for s in spans if s["name"].startswith("run ")]
    assert len(run_spans) == 1

    for record in outcome.records:
        spans = by_trace[episode_trace[record["episode"]]]
        by_id = check_connected(spans)
        root = next(s for s in spans if s["parent_id"] is None)
        assert root["links"] == [
            {"trace_id": run_spans[0]["trace_id"], "span_id": run_spans[0]["span_id"]}
        ]
        assert root["attributes"]["parley.outcome"] == "success"
        names = Counter(s["name"].split(" ")[0] for s in spans)
        assert names["turn"] == record["turns"] == names["invoke_agent"]
        assert names["publish"] >= 2 * record["turns"] and names["receive"] == 2 * record["turns"]
        # Each turn: turn → publish (PRODUCER) → receive (CONSUMER) → invoke_agent → publish → receive.
        for agent in (s for s in spans if s["name"].startswith("invoke_agent")):
            receive = by_id[agent["parent_id"]]
            publish = by_id[receive["parent_id"]]
            turn = by_id[publish["parent_id"]]
            assert (receive["kind"], publish["kind"]) == ("CONSUMER", "PRODUCER")
            assert (
                turn["name"].startswith("turn ")
                and turn["attributes"]["parley.turn"] == agent["attributes"]["parley.turn"]
            )
            assert publish["attributes"]["messaging.system"] == "mqtt"
            replies = [
                s for s in spans if s["parent_id"] == agent["span_id"] and s["kind"] == "PRODUCER"
            ]
            assert len(replies) == 1 and replies[0]["attributes"][
                "messaging.destination.name"
            ].endswith("/gm")

        # What the broker carried: every message of the episode names a span of this trace.
        carried = [(t, p, up) for t, p, up in seen if p.get("episode") == record["episode"]]
        kinds = Counter(p["kind"] for _, p, _ in carried)
        assert kinds["turn_request"] == kinds["turn_response"] == record["turns"]
        assert kinds["transcript_event"] > 0 and kinds["episode_started"] == 1
        assert any(p["id"] not in batched for _, p, _ in carried)  # some carried it alone
        for topic, payload, user_property in carried:
            ctx = span_context(payload["traceparent"])
            assert ctx is not None, (topic, payload["kind"])
            if payload["id"] not in batched:  # MQTT 5 user property too
                assert user_property == payload["traceparent"]
            assert f"{ctx.trace_id:032x}" == episode_trace[record["episode"]]
            span = by_id.get(f"{ctx.span_id:016x}")
            assert span is not None, (topic, payload["kind"])
            if payload["kind"] in ("turn_request", "turn_response"):
                # The publish span of this very message.
                assert span["kind"] == "PRODUCER"
                assert span["attributes"]["messaging.message.id"] == payload["id"]
                assert span["attributes"]["messaging.destination.name"] == topic


async def test_chat_spans_follow_the_genai_conventions(
    sim: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = config(
        "comma.atm",
        [3],
        [{"solver": "leaky", "expert": "scripted"}],
        models={"leaky": model_entry(sim, "leaky-solver")},
        settings={"variant": "text", "max_turns": 2},
    )
    outcome = await run_experiment(cfg, tmp_path)
    record = outcome.records[0]
    assert record["outcome"] == "lost", record["reason"]
    chats = []
    for trace_spans in traces(tmp_path).values():
        by_id = {s["span_id"]: s for s in trace_spans}
        for span in trace_spans:
            if span["name"].startswith("chat "):
                chats.append((span, by_id))
    assert len(chats) == 2  # two solver turns
    for span, by_id in chats:
        attrs = span["attributes"]
        assert span["name"] == "chat leaky-solver" and span["kind"] == "CLIENT"
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "openai"
        assert attrs["gen_ai.request.model"] == "leaky-solver"
        assert attrs["gen_ai.conversation.id"] == record["episode"]
        assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
        assert attrs["gen_ai.response.finish_reasons"] == ["stop"]
        assert by_id[span["parent_id"]]["name"] == "invoke_agent solver"


async def test_a_malformed_traceparent_is_ignored_not_a_crash(tmp_path: Path) -> None:
    from parley.bus.local import LocalBus
    from parley.bus.messages import TextPart, TranscriptEvent
    from parley.observability.traced_bus import TracedBus
    from parley.observability.tracing import Tracing, consume

    for bad in ("garbage", "00-" + "0" * 32 + "-" + "0" * 16 + "-01", "00-zz-yy-01", ""):
        assert span_context(bad) is None
    tracing = Tracing(tmp_path)
    tracing.activate()
    try:
        bus = TracedBus(LocalBus())
        async with bus:
            sub = await bus.subscribe("parley/r/e/events").ready()
            message = TranscriptEvent(
                run="r", episode="e", sender="x", event="note", from_role="gm",
                content=[TextPart(text="hi")], traceparent="00-not-a-traceparent-01",
            )  # fmt: skip
            await bus.publish("parley/r/e/events", message)
            delivery = await sub.get()
            with consume(delivery.topic, delivery.message):
                pass
            assert delivery.message.traceparent == "00-not-a-traceparent-01"
    finally:
        tracing.close()
    assert traces(tmp_path) == {}


async def test_a_traced_bus_hands_local_delivery_its_shared_scope_on() -> None:
    from parley.bus.local import LocalBus
    from parley.bus.messages import TextPart, TranscriptEvent
    from parley.observability.traced_bus import TracedBus

    async with TracedBus(LocalBus()) as bus:
        group = await bus.subscribe("$share/g/parley/r/e/events").ready()
        plain = await bus.subscribe("parley/r/e/events").ready()
        message = TranscriptEvent(
            run="r", episode="e", sender="x", event="note", from_role="gm",
            content=[TextPart(text="hi")],
        )  # fmt: skip
        await bus.deliver_local("parley/r/e/events", message, shared="none")
        assert (await plain.get()).message == message
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(group.get(), 0.2)
