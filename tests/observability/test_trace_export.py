"""Standard trace files: ``traces.jsonl`` in OTLP JSON (the collector's file exporter shape),
replayed by ``parley traces export`` to an OTLP/HTTP receiver the test starts as a process,
older run folders still read; ``parley leaks`` / ``parley errors`` on an exported trace set."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends.simserver import SimServerProcess
from parley.observability.tracing import read_spans
from parley.runtime.cli import main
from parley.runtime.scheduler import run_experiment
from tests.observability.conftest import KEY_ENV, SECRET, config, model_entry

RECEIVER = Path(__file__).with_name("otlp_receiver.py")


class Receiver:
    def __init__(self, process: subprocess.Popen[str], url: str, out: Path) -> None:
        self.process, self.url, self.out = process, url, out

    def spans(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line]


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    out = tmp_path / "received.jsonl"
    process = subprocess.Popen(
        [sys.executable, str(RECEIVER), str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening "), line
        yield Receiver(process, f"http://127.0.0.1:{line.split()[1]}", out)
    finally:
        process.terminate()
        process.wait(10)


def scripted_run(run: Path, content: bool = False) -> None:
    cfg = config(
        "comma.wire",
        [0, 1],
        [{"solver": "scripted", "expert": "scripted"}],
        tracing={"content": content},
    )
    outcome = asyncio.run(run_experiment(cfg, run))
    assert {r["outcome"] for r in outcome.records} == {"success"}


def test_traces_jsonl_is_otlp_json(tmp_path: Path) -> None:
    scripted_run(tmp_path)
    lines = (tmp_path / "traces.jsonl").read_text().splitlines()
    assert lines
    names = set()
    for line in lines:
        request = json.loads(line)
        assert set(request) == {"resourceSpans"}
        for rs in request["resourceSpans"]:
            resource = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
            assert resource["service.name"] == {"stringValue": "parley"}
            for ss in rs["scopeSpans"]:
                assert ss["scope"]["name"]
                for span in ss["spans"]:
                    names.add(span["name"].split()[0])
                    assert len(span["traceId"]) == 32 and int(span["traceId"], 16)
                    assert len(span["spanId"]) == 16 and int(span["spanId"], 16)
                    assert span["kind"] in (1, 2, 3, 4, 5)
                    start, end = span["startTimeUnixNano"], span["endTimeUnixNano"]
                    assert isinstance(start, str) and int(end) >= int(start) > 0
                    for attribute in span.get("attributes", []):
                        (kind,) = attribute["value"]
                        assert kind in ("stringValue", "intValue", "boolValue", "doubleValue",
                                        "arrayValue")  # fmt: skip
                        if attribute["key"] == "parley.turn":
                            assert kind == "intValue" and isinstance(attribute["value"][kind], str)
    assert {"run", "episode", "turn", "invoke_agent"} <= names
    # Read back flat, as every analysis reads spans.
    spans = read_spans(tmp_path)
    turn = next(s for s in spans if s["name"].startswith("turn "))
    assert isinstance(turn["attributes"]["parley.turn"], int) and turn["parent_id"]
    assert turn["resource"]["service.name"] == "parley"


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
def test_a_finished_run_replays_to_an_otlp_receiver(
    tmp_path: Path, receiver: Receiver, protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    scripted_run(run)
    written = read_spans(run)
    export = ["traces", "export", str(run), "--otlp", receiver.url, "--protocol", protocol]
    code = main([*export, "--header", "Authorization=Bearer k=v"])
    assert code == 0, capsys.readouterr()
    got = receiver.spans()
    assert {g["content_type"].split(";")[0] for g in got} == {
        "application/x-protobuf" if protocol == "http/protobuf" else "application/json"
    }
    assert {g["authorization"] for g in got} == {"Bearer k=v"}  # split at the first '=' only
    key = ("trace_id", "span_id", "parent_id", "name")
    assert sorted(tuple(g[k] for k in key) for g in got) == sorted(
        tuple(s[k] for k in key) for s in written
    )
    by_id = {g["span_id"]: g for g in got}
    for span in written:
        assert by_id[span["span_id"]]["attributes"] == span["attributes"]
    assert f"sent {len(written)} spans" in capsys.readouterr().err


def test_an_older_run_folder_is_read_and_replayed(
    tmp_path: Path, receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    # traces.jsonl as parley wrote it before OTLP JSON: one flat span per line.
    old = [
        {"name": "episode comma.wire", "trace_id": "ab" * 16, "span_id": "01" * 8,
         "parent_id": None, "kind": "INTERNAL", "start_ns": 10, "end_ns": 50, "status": "OK",
         "status_message": None, "attributes": {"parley.episode": "e1", "parley.seed": 3},
         "events": [], "links": [], "resource": {"service.name": "parley"}},
        {"name": "turn 1 solver", "trace_id": "ab" * 16, "span_id": "02" * 8,
         "parent_id": "01" * 8, "kind": "INTERNAL", "start_ns": 20, "end_ns": 30,
         "status": "UNSET", "status_message": None, "attributes": {"parley.turn": 1},
         "events": [], "links": [], "resource": {"service.name": "parley"}},
    ]  # fmt: skip
    (tmp_path / "traces.jsonl").write_text("".join(json.dumps(s) + "\n" for s in old) + '{"na')
    assert read_spans(tmp_path) == old  # the torn last line skipped
    assert main(["traces", "export", str(tmp_path), "--otlp", receiver.url]) == 0
    got = {g["span_id"]: g for g in receiver.spans()}
    assert got["01" * 8]["attributes"] == {"parley.episode": "e1", "parley.seed": 3}
    assert got["02" * 8]["parent_id"] == "01" * 8 and got["02" * 8]["name"] == "turn 1 solver"


# Documents a trace set may hold that have the shape of spans where readers look, but not
# their types (a damaged file, a foreign exporter's): each is skipped, the rest still reads.
DAMAGED_DOCUMENTS: list[Any] = [
    {"resourceSpans": 5},
    {"resourceSpans": [{"resource": 5, "scopeSpans": 7}]},
    {"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5, "endTimeUnixNano": "x"}]}]}]},
    {"name": 5, "trace_id": "ab" * 16, "span_id": "03" * 8},
    {"name": "episode x", "trace_id": "ab" * 16, "span_id": "04" * 8, "end_ns": "abc"},
    {"name": "episode x", "trace_id": "ab" * 16, "span_id": "05" * 8, "attributes": "x"},
]


def test_damaged_documents_of_a_trace_set_are_skipped_by_every_reader(
    tmp_path: Path,
    receiver: Receiver,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = tmp_path / "run"
    scripted_run(run, content=True)
    written = read_spans(run)
    traces = run / "traces.jsonl"
    with traces.open("a") as f:
        f.write("".join(json.dumps(doc) + "\n" for doc in DAMAGED_DOCUMENTS))
    skipped = f"skipped {len(DAMAGED_DOCUMENTS)} damaged documents"
    for command in (["leaks", str(traces)], ["errors", str(traces)]):
        caplog.clear()
        with caplog.at_level("WARNING"):
            assert main(command) == 0, capsys.readouterr()
        assert skipped in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert main(["traces", "export", str(run), "--otlp", receiver.url]) == 0
    assert skipped in caplog.text
    assert f"sent {len(written)} spans" in " ".join(capsys.readouterr().err.split())
    assert sorted(g["span_id"] for g in receiver.spans()) == sorted(s["span_id"] for s in written)


def test_export_to_nowhere_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scripted_run(tmp_path / "run")
    code = main(["traces", "export", str(tmp_path / "run"), "--otlp", "http://127.0.0.1:9"])
    out = capsys.readouterr().err
    assert code == 1 and "Traceback" not in out and "could not send" in out
    assert main(["traces", "export", str(tmp_path / "run"), "--otlp", "collector:4318"]) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert "collector:4318 is not an OTLP/HTTP endpoint: give http(s)://host:port" in said
    assert main(["traces", "export", str(tmp_path / "nothing"), "--otlp", "http://x"]) == 2
    with pytest.raises(SystemExit) as refused:  # a header without its '=': the parser's error
        main(["traces", "export", str(tmp_path / "run"), "--otlp", "http://x", "--header", "k"])
    assert refused.value.code == 2
    assert "--header: expected NAME=VALUE, got 'k'" in capsys.readouterr().err


def test_leaks_and_errors_read_an_exported_trace_set(
    sim: SimServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    run = tmp_path / "run"
    cfg = config(
        "comma.atm",
        [3, 4],
        [{"solver": "leaky", "expert": "scripted"}],
        models={"leaky": model_entry(sim, "leaky-solver")},
        settings={"variant": "text", "max_turns": 2},
        tracing={"content": True},
    )
    asyncio.run(run_experiment(cfg, run))
    # An exported set: the collector's file exporter output, in a folder of its own.
    exported = tmp_path / "exported"
    exported.mkdir()
    shutil.copy(run / "traces.jsonl", exported / "otel-traces.json")
    for command in ("leaks", "errors"):
        assert main([command, str(run)]) == 0
        from_run = capsys.readouterr().out
        assert main([command, str(exported)]) == 0
        captured = capsys.readouterr()
        assert "read the episodes of trace set" in captured.err
        # The same findings, read off the spans alone.
        body = captured.out
        assert "No episode of this run" not in from_run  # something to find in both
        if command == "leaks":
            assert "PIN" in from_run and "solver→expert" in from_run
        strip = str(run), str(exported / "parley.run")
        assert body.replace(strip[1], "RUN") == from_run.replace(strip[0], "RUN")


def test_a_trace_set_without_content_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scripted_run(tmp_path / "run", content=False)
    traces = tmp_path / "run" / "traces.jsonl"
    assert main(["leaks", str(traces)]) == 2
    out = capsys.readouterr().err
    assert "tracing: {content: true}" in out and "Traceback" not in out


def test_lean_spans_behave_as_the_apis(tmp_path: Path) -> None:
    from opentelemetry import trace

    from parley.observability.tracing import EpisodeSampler, Tracing, inject

    tracing = Tracing(tmp_path, metrics=False)
    tracer = tracing.tracer
    with pytest.raises(ValueError), tracer.start_as_current_span("outer") as outer:
        assert trace.get_current_span() is outer
        with tracer.start_as_current_span("inner", attributes={"a": 1, "b": None}) as inner:
            inner.set_attributes({"c": "x", "d": None})
            found = inner.get_span_context()
            assert found.trace_flags.sampled  # (some SDK releases add the random-id flag)
            assert inject(inner) == (
                f"00-{found.trace_id:032x}-{found.span_id:016x}-{found.trace_flags:02x}"
            )
        raise ValueError("boom")
    assert not trace.get_current_span().get_span_context().is_valid
    # An unsampled parent: children record nothing; a sampler decides for roots only.
    unsampled = trace.NonRecordingSpan(
        trace.SpanContext(5, 6, is_remote=True, trace_flags=trace.TraceFlags(0))
    )
    child = tracer.start_span("child", context=trace.set_span_in_context(unsampled))
    assert not child.is_recording() and child.get_span_context().trace_id == 5
    tracing.close()
    spans = {s["name"]: s for s in read_spans(tmp_path)}
    assert set(spans) == {"outer", "inner"}
    assert spans["inner"]["parent_id"] == spans["outer"]["span_id"]
    assert spans["inner"]["attributes"] == {"a": 1, "c": "x"}
    assert spans["outer"]["status"] == "ERROR" and "boom" in spans["outer"]["status_message"]
    (event,) = spans["outer"]["events"]
    assert event["name"] == "exception" and event["attributes"]["exception.type"] == "ValueError"
    sampled = Tracing(tmp_path / "sampled", metrics=False, sample=0.5)
    kept = [
        sampled.tracer.start_span("episode", attributes={"parley.episode": f"e{i}"}).is_recording()
        for i in range(200)
    ]
    sampled.close()
    assert 40 < sum(kept) < 160  # about half, by episode id
    assert EpisodeSampler(0.5).get_description() == "EpisodeSampler(0.5)"
