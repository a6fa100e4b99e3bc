"""The OpenTelemetry accelerator (observability/light_spans.py) against the SDK's own tracer:
the same scenario, once in a process with the accelerator and once with it forced off
(``PARLEY_OTEL_FAST=0``), exports the same spans — names, kinds, attributes, parents, links,
events, statuses, resource and scope — in the SDK's OTLP encoding and in the run folder's
file; and a release outside the tested range is one warning and the public path."""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from parley.observability import light_spans

ROOT = Path(__file__).resolve().parents[2]


def _scenario(fast: bool) -> tuple[dict[str, Any], str]:
    env = {**os.environ, light_spans.FORCE_PUBLIC_VARIABLE: "1" if fast else "0"}
    env["PYTHONPATH"] = str(ROOT)
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.observability.otel_scenario"],
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=True,
        text=True,
    )
    return json.loads(done.stdout), done.stderr


def test_the_lean_tracer_exports_what_the_sdk_exports() -> None:
    fast, fast_log = _scenario(True)
    public, public_log = _scenario(False)
    assert fast["accelerated"] is True and public["accelerated"] is False
    assert "fast tracing" not in fast_log + public_log  # (OpenTelemetry releases tested)
    assert fast["spans"] == public["spans"]
    spans = {s["name"]: s for s in public["spans"]["file"]}
    assert set(spans) == {
        "run",
        "episode g",
        "turn 1 guesser",
        "publish parley/{run}/{episode}/agent/guesser",
        "receive parley/{run}/{episode}/agent/guesser",
        "invoke_agent guesser",
        "chat model",
    }
    # The hierarchy of a turn, and what each span carries.
    chain = ["episode g", "turn 1 guesser", "publish parley/{run}/{episode}/agent/guesser"]
    chain += ["receive parley/{run}/{episode}/agent/guesser", "invoke_agent guesser", "chat model"]
    for parent, child in itertools.pairwise(chain):
        assert spans[child]["parent_id"] == spans[parent]["span_id"], child
    assert spans["episode g"]["links"][0]["span_id"] == spans["run"]["span_id"]
    assert spans["run"]["attributes"] == {"parley.run": "r1"}  # None values left out
    assert spans["turn 1 guesser"]["status"] == "OK"
    assert spans["invoke_agent guesser"]["status"] == "ERROR"
    (event,) = spans["invoke_agent guesser"]["events"]
    assert event["attributes"]["exception.type"] == "ValueError"
    assert spans["receive parley/{run}/{episode}/agent/guesser"]["status"] == "ERROR"
    assert not spans["receive parley/{run}/{episode}/agent/guesser"].get("events")
    otlp_names = {
        span["name"]
        for group in public["spans"]["otlp"]["resourceSpans"]
        for scope in group["scopeSpans"]
        for span in scope["spans"]
    }
    assert otlp_names == set(spans)


def test_a_release_outside_the_tested_range_is_the_public_path_said_at_debug_level(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A supported release the accelerator was not tested on is an ordinary install: one debug
    # record, no warning on every command.
    monkeypatch.delenv(light_spans.FORCE_PUBLIC_VARIABLE, raising=False)
    assert light_spans.check() == (True, "")  # the installed releases are tested ones
    with caplog.at_level(logging.DEBUG, logger="parley.observability.tracing"):
        assert light_spans._start(((0, 1), (0, 2)))[0] is False
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert "outside the range" in caplog.records[0].getMessage()
    caplog.clear()
    # Asked for by name, the same is one warning.
    monkeypatch.setenv(light_spans.FORCE_PUBLIC_VARIABLE, "1")
    with caplog.at_level(logging.DEBUG, logger="parley.observability.tracing"):
        assert light_spans._start(((0, 1), (0, 2)))[0] is False
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "outside the range" in caplog.records[0].getMessage()
    caplog.clear()
    monkeypatch.setenv(light_spans.FORCE_PUBLIC_VARIABLE, "0")
    with caplog.at_level(logging.DEBUG, logger="parley.observability.tracing"):
        assert light_spans._start()[0] is False
    assert caplog.records == []  # turned off: nothing to say
