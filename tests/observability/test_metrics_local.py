"""The run's metrics as parley aggregates them (issue 20, item 4): turn timings read the same
from messages and from their JSON, the episodes counter reaches every export through the
SDK's observable counter, and values fed under attribute keys made once land where the
attribute dicts put them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource

from parley.bus.messages import EpisodeFinished, TranscriptEvent, TurnRequest, TurnResponse, Usage
from parley.observability.metrics import LocalCounter, LocalHistogram, RunMetrics, turn_timings


def transcript() -> list[Any]:
    common = {"run": "r", "episode": "e"}
    return [
        TurnRequest(**common, sender="gm", turn=1, role="solver", sent_at=10.0),
        TranscriptEvent(**common, sender="gm", turn=1, event="note", from_role="gm"),
        TurnResponse(
            **common,
            sender="solver",
            turn=1,
            role="solver",
            text="a",
            model="m-1",
            usage=Usage(input_tokens=7, output_tokens=3),
            latency_s=0.5,
            calls=[{"latency_s": 0.25, "outcome": "timeout"}, {"latency_s": 0.25}],
            sent_at=10.75,
        ),
        TurnRequest(**common, sender="gm", turn=2, role="expert", sent_at=11.0),
        TurnResponse(**common, sender="expert", turn=2, role="expert", text="b", sent_at=11.5),
        EpisodeFinished(**common, sender="gm", game="g", outcome="success", sent_at=12.0),
    ]


def test_turn_timings_read_the_same_from_messages_and_from_their_json() -> None:
    messages = transcript()
    from_objects = list(turn_timings(messages))
    from_json = list(turn_timings(json.loads(m.model_dump_json()) for m in messages))
    assert from_objects == from_json
    first, second = from_objects
    assert first["role"] == "solver" and first["model"] == "m-1" and first["turn_s"] == 1.0
    assert first["agent_s"] == 0.5
    assert first["usage"] == {"input": 7, "output": 3, "source": "backend"}
    assert [c.get("outcome") for c in first["calls"]] == ["timeout", None]
    assert second["role"] == "expert" and second["usage"] is None and second["turn_s"] == 1.0
    # An episode cut short after a reply: the turn runs to the reply.
    assert [t["turn_s"] for t in turn_timings(messages[:3])] == [0.75]


def summary(outcome: str) -> dict[str, Any]:
    return {
        "game": "g",
        "pairing": "p",
        "labels": {"solver": "sol", "expert": "exp"},
        "outcome": outcome,
        "duration_s": 2.0,
        "tokens": {"solver": {"input": 7, "output": 3}, "expert": {"input": 0, "output": 2}},
        "token_source": {"solver": "backend"},
        "turns": {"solver": 1, "expert": 1},
        "timed": [
            {
                "role": "solver",
                "turn_s": 1.0,
                "agent_s": 0.5,
                "model": "m-1",
                "usage": {"input": 7, "output": 3, "source": "backend"},
                "calls": [{"latency_s": 0.25, "outcome": "timeout"}, {"latency_s": 0.25}],
            },
            {
                "role": "expert",
                "turn_s": 1.0,
                "agent_s": 0.0,
                "model": "",
                "usage": None,
                "calls": [{"latency_s": None}],
            },
        ],
    }


def exported(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_name(line: dict[str, Any]) -> dict[str, Any]:
    return {
        m["name"]: m
        for rm in line["resource_metrics"]
        for sm in rm["scope_metrics"]
        for m in sm["metrics"]
    }


def points(metric: dict[str, Any]) -> dict[tuple[tuple[str, Any], ...], Any]:
    data = metric["data"]["data_points"]
    return {tuple(p["attributes"].items()): p.get("value", p.get("count")) for p in data}


def test_run_metrics_export_every_instrument_and_the_episodes_through_the_sdk(
    tmp_path: Path,
) -> None:
    metrics = RunMetrics(tmp_path, Resource.create({"service.name": "t"}))
    metrics.record(summary("success"))
    metrics.record(summary("success"))
    metrics.record(summary("failure"))
    metrics.close()
    line = by_name(exported(tmp_path / "metrics.jsonl")[-1])
    assert list(line) == [
        "parley.episodes",  # the SDK's own first, then parley's
        "parley.turns",
        "parley.tokens",
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "parley.turn.duration",
        "parley.agent.duration",
        "parley.episode.duration",
    ]
    episodes = line["parley.episodes"]
    assert episodes["unit"] == "{episode}" and episodes["data"]["is_monotonic"] is True
    assert episodes["data"]["aggregation_temporality"] == 2  # cumulative
    assert points(episodes) == {
        (("parley.game", "g"), ("parley.pairing", "p"), ("parley.outcome", "success")): 2,
        (("parley.game", "g"), ("parley.pairing", "p"), ("parley.outcome", "failure")): 1,
    }
    role = (("parley.game", "g"), ("parley.role", "solver"), ("parley.model", "sol"))
    assert points(line["parley.turns"])[role] == 3
    assert points(line["parley.turn.duration"])[role] == 3
    tokens = points(line["parley.tokens"])
    assert tokens[(*role, ("gen_ai.token.type", "input"), ("parley.token_source", "backend"))] == 21
    expert = (("parley.game", "g"), ("parley.role", "expert"), ("parley.model", "exp"))
    assert (
        tokens[(*expert, ("gen_ai.token.type", "output"), ("parley.token_source", "counted"))] == 6
    )
    assert len(tokens) == 3  # no zero counts
    calls = points(line["gen_ai.client.operation.duration"])
    chat = (("gen_ai.operation.name", "chat"), ("gen_ai.request.model", "m-1"))
    assert calls == {(*chat, ("error.type", "timeout")): 3, chat: 3}  # the None latency left out
    usage = points(line["gen_ai.client.token.usage"])
    assert usage == {(*chat, ("gen_ai.token.type", "input")): 3, (*chat, ("gen_ai.token.type", "output")): 3}  # fmt: skip


def test_a_run_without_episodes_exports_nothing(tmp_path: Path) -> None:
    metrics = RunMetrics(tmp_path, Resource.create({}))
    metrics.close()
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_values_added_under_a_key_land_where_the_attributes_put_them() -> None:
    histogram = LocalHistogram("h", "s", "", [1.0, 2.0])
    counter = LocalCounter("c", "1", "", histogram.lock)
    attributes = {"a": "x", "b": 1}
    histogram.record(0.5, attributes)
    counter.add(2, attributes)
    with histogram.lock:
        histogram.add_locked(2.0, tuple(attributes.items()))
        counter.add_locked(3, tuple(attributes.items()))
    (point,) = histogram.metric(0).data.data_points  # type: ignore[union-attr]
    assert point.attributes == attributes and list(point.bucket_counts) == [1, 1, 0]
    assert (point.count, point.sum, point.min, point.max) == (2, 2.5, 0.5, 2.0)
    assert counter.observe() == [(tuple(attributes.items()), 5)]


def test_values_folded_in_bulk_give_the_buckets_of_values_added_one_by_one() -> None:
    """Values wait in a list and are bucketed in passes (at FOLD_AT, and at every export):
    whichever pass a value lands in, each point ends with the same buckets, sum, count,
    minimum and maximum as OpenTelemetry's explicit-bucket rules give."""
    histogram = LocalHistogram("h", "s", "", [1.0, 2.0, 5.0])
    histogram.FOLD_AT = 7  # several folds within the values below, and a rest at export
    keys = [(("role", "a"),), (("role", "b"),)]
    values = [0.5, 1.0, 1.5, 2.0, 4.0, 5.0, 9.0, 0.25, 3.0, 7.5, 2.5, 1.0, 6.0]
    expected: dict[Any, list[Any]] = {}
    with histogram.lock:
        for i, value in enumerate(values):
            key = keys[i % 2]
            histogram.extend_locked([(key, value)])
            counts, got = expected.setdefault(key, [[0, 0, 0, 0], []])
            # (bounds[i-1], bounds[i]]: a value equal to a bound goes into that bound's bucket
            counts[sum(value > b for b in (1.0, 2.0, 5.0))] += 1
            got.append(value)
        assert len(histogram.waiting) < len(values)  # some were folded already
    first = histogram.metric(0)
    second = histogram.metric(0)  # nothing added: the same points again
    for metric in (first, second):
        by_key = {tuple(p.attributes.items()): p for p in metric.data.data_points}  # type: ignore[union-attr]
        assert set(by_key) == set(keys)
        for key, (counts, got) in expected.items():
            point = by_key[key]
            assert list(point.bucket_counts) == counts
            assert (point.count, point.min, point.max) == (len(got), min(got), max(got))
            assert point.sum == pytest.approx(sum(got))
