"""Recording that cannot die silently: a record that cannot be encoded, a full disk, torn files."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData
from opentelemetry.sdk.resources import Resource

from parley.bus.messages import TurnResponse
from parley.observability.light_spans import LightTracer
from parley.observability.metrics import JsonlMetricExporter
from parley.observability.otlp_json import OtlpJsonSpanWriter
from parley.observability.tracing import read_spans
from parley.runtime import results
from parley.runtime.config import load_config
from parley.runtime.episode import EpisodeResult
from parley.runtime.experiment import expand
from parley.runtime.results import ResultWriter, RunFolder
from parley.runtime.scheduler import run_experiment
from tests.conftest import require

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


def wire_config(count: int, name: str = "rec") -> dict:
    return {
        "name": name,
        "tracing": {"enabled": False},
        "games": [
            {
                "game": "comma.wire",
                "seeds": {"start": 0, "count": count},
                "pairings": [{"solver": "scripted", "expert": "scripted"}],
            }
        ],
    }


def every_line_parses(path: Path) -> int:
    lines = path.read_bytes().splitlines()
    for line in lines:
        json.loads(line)
    return len(lines)


async def test_a_record_that_cannot_be_encoded_becomes_an_error_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    config = load_config(wire_config(3))
    specs = expand(config)
    folder = RunFolder.prepare(tmp_path / "run", config, resume=False, planned=3)
    writer = ResultWriter(folder, folder.run_id)
    writer.start()

    def result(spec_index: int, text: str) -> EpisodeResult:
        spec = specs[spec_index]
        reply = TurnResponse(
            run=folder.run_id, episode=spec.id, sender="solver", role="solver", text=text
        )
        return EpisodeResult(spec=spec, outcome="success", turns=1, transcript=[reply])

    # A lone surrogate cannot be encoded as UTF-8: the middle episode's transcript is unwritable.
    for r in [result(0, "cut wire 1"), result(1, "cut wire \ud800 one"), result(2, "cut wire 2")]:
        await writer.write(r)
    await writer.close()

    records = {r["episode"]: r for r in folder.records()}
    assert len(records) == 3
    bad = records[specs[1].id]
    assert bad["outcome"] == "error" and bad["reason_code"] == "exception"
    assert "could not be written" in bad["reason"] and "'success'" in bad["reason"]
    for good in (specs[0].id, specs[2].id):
        assert records[good]["outcome"] == "success"
        (message,) = folder.iter_transcript(good)
        assert message["text"].startswith("cut wire")
    assert every_line_parses(folder.episodes) == 3
    every_line_parses(folder.transcripts)


async def test_each_line_is_its_record_as_json_dumps_writes_it(tmp_path: Path) -> None:
    """The writer adds the transcript's place to the record's JSON that ``safely`` made (it
    does not encode the record twice): the line is what ``json.dumps`` of the record gives."""
    config = load_config(wire_config(2))
    outcome = await run_experiment(config, tmp_path / "run")
    lines = (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 2 and outcome.progress.done == 2
    for line in lines:
        record = json.loads(line)
        assert list(record)[-1] == "transcript"
        assert line == json.dumps(record)


async def test_episodes_that_end_soon_after_a_sync_share_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One episode at a time must not cost a thread hop and an fsync each: what ends within
    ``SYNC_EVERY_S`` of the last sync waits for one batch, and each write still returns only
    once its line is on disk."""
    monkeypatch.setattr(results, "SYNC_EVERY_S", 0.5)
    config = load_config(wire_config(3))
    specs = expand(config)
    folder = RunFolder.prepare(tmp_path / "run", config, resume=False, planned=3)
    writer = ResultWriter(folder, folder.run_id)
    synced: list[int] = []  # lines of episodes.jsonl on disk at each sync
    real_sync = writer._sync

    def sync() -> None:
        real_sync()
        synced.append(every_line_parses(folder.episodes))

    monkeypatch.setattr(writer, "_sync", sync)
    writer.start()

    def result(n: int) -> EpisodeResult:
        return EpisodeResult(spec=specs[n], outcome="success", turns=0, transcript=[])

    await writer.write(result(0))
    assert synced == [1]
    second = asyncio.create_task(writer.write(result(1)))
    for _ in range(5):  # the writer wakes for the second and waits out the interval
        await asyncio.sleep(0)
    third = asyncio.create_task(writer.write(result(2)))
    await asyncio.gather(second, third)
    assert synced == [1, 3]
    await writer.close()
    assert [r["episode"] for r in folder.records()] == [s.id for s in specs]


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
        ).returncode
        == 0
    )
    require(mounted, "mounting a small tmpfs (root) to fill a disk for real")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def parley(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "parley.runtime.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,  # a hang fails here instead of blocking the suite
    )


def test_a_full_disk_stops_the_run_loudly_and_it_resumes_once_there_is_room(
    tmp_path: Path,
) -> None:
    count = 150
    config_file = tmp_path / "full.yaml"
    config_file.write_text(yaml.safe_dump({**wire_config(count, "full"), "concurrency": 16}))
    with small_disk(tmp_path / f"disk-{uuid.uuid4().hex[:6]}", "400k") as disk:
        out = disk / "run"
        full = parley("run", str(config_file), "--out", str(out))
        assert full.returncode == 1, full.stderr[-2000:]
        assert "cannot write the run folder" in full.stderr
        assert "No space left on device" in full.stderr
        assert "--resume" in full.stderr and "Traceback" not in full.stderr
        recorded = RunFolder(out).records()
        assert 0 < len(recorded) < count  # stopped part-way, with what it had kept

        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        resumed = parley("run", str(config_file), "--out", str(out), "--resume")
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        folder = RunFolder(out)
        records = folder.records()
        assert sorted(r["seed"] for r in records) == list(range(count))
        assert {r["outcome"] for r in records} == {"success"}
        assert every_line_parses(folder.episodes) == count  # no torn line, none twice
        every_line_parses(folder.transcripts)
        for record in records:
            assert list(folder.iter_transcript(record["episode"]))
        assert json.loads((out / "run.json").read_text())["run"] == folder.run_id


def test_a_disk_full_before_the_run_begins_is_said_in_one_line(tmp_path: Path) -> None:
    config_file = tmp_path / "first.yaml"
    config_file.write_text(yaml.safe_dump(wire_config(5, "first")))
    with small_disk(tmp_path / f"disk-{uuid.uuid4().hex[:6]}", "64k") as disk:
        with contextlib.suppress(OSError), (disk / "filler").open("wb") as filler:
            while True:
                filler.write(b"\0" * 4096)
                filler.flush()
        out = disk / "run"
        full = parley("run", str(config_file), "--out", str(out))
        assert full.returncode == 1, full.stderr[-2000:]
        assert f"cannot write the run folder {out}: No space left on device" in full.stderr
        assert "Traceback" not in full.stderr, full.stderr[-3000:]

        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        resumed = parley("run", str(config_file), "--out", str(out), "--resume")
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert len(RunFolder(out).records()) == 5


def test_a_report_that_cannot_be_written_leaves_the_run_done(tmp_path: Path) -> None:
    """The report comes after the records are safe: failing to write it (here its path is a
    folder, as a full disk would fail it) says so and how to write it later."""
    config_file = tmp_path / "report.yaml"
    config_file.write_text(yaml.safe_dump(wire_config(3, "report")))
    out = tmp_path / "run"
    (out / "report.md").mkdir(parents=True)
    done = parley("run", str(config_file), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr + done.stdout
    said = " ".join((done.stdout + done.stderr).split())  # the console wraps long lines
    assert "(report: not written (Is a directory); parley report" in said
    assert len(RunFolder(out).records()) == 3
    later = parley("report", str(out))
    assert later.returncode == 1 and "Traceback" not in later.stderr + later.stdout
    said = " ".join((later.stdout + later.stderr).split())
    assert f"cannot make the report of {out}: Is a directory ({out / 'report.md'})" in said


def test_a_full_disk_with_tracing_on_stops_the_run_in_one_line_and_resumes(
    tmp_path: Path,
) -> None:
    """Tracing is on by default: its span and metric files fill the disk too, and their
    failures must cost the traces, never show a traceback or stop the resume."""
    count = 150
    config_file = tmp_path / "traced.yaml"
    config = {**wire_config(count, "traced"), "concurrency": 16, "tracing": {"enabled": True}}
    config_file.write_text(yaml.safe_dump(config))
    with small_disk(tmp_path / f"disk-{uuid.uuid4().hex[:6]}", "400k") as disk:
        out = disk / "run"
        full = parley("run", str(config_file), "--out", str(out))
        assert full.returncode == 1, full.stderr[-2000:]
        assert "cannot write the run folder" in full.stderr
        assert "Traceback" not in full.stderr, full.stderr[-3000:]
        assert len(RunFolder(out).records()) < count

        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        resumed = parley("run", str(config_file), "--out", str(out), "--resume")
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        records = RunFolder(out).records()
        assert sorted(r["seed"] for r in records) == list(range(count))
        assert every_line_parses(out / "traces.jsonl") > 0
        assert {s["name"] for s in read_spans(out)} >= {"episode comma.wire"}


async def test_span_and_metric_files_on_a_full_disk_warn_once_and_drop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with small_disk(tmp_path / f"disk-{uuid.uuid4().hex[:6]}", "1m") as disk:
        spans = OtlpJsonSpanWriter(disk / "traces.jsonl", interval_s=3600)
        metrics = JsonlMetricExporter(disk / "metrics.jsonl")
        tracer = LightTracer(Resource.create({}), [spans])
        tracer.start_span("first").end()
        spans.force_flush()
        assert metrics.export(MetricsData(resource_metrics=[])) == MetricExportResult.SUCCESS
        with contextlib.suppress(OSError), (disk / "filler").open("wb") as filler:
            while True:  # every free page: the files can grow only inside their last one
                filler.write(b"\0" * 4096)
                filler.flush()

        # 100: a line encoded as they end (inline, 64) and spans still waiting, both dropped.
        for n in range(100):
            tracer.start_span(f"span {n}", attributes={"pad": "x" * 2000}).end()
        assert spans.force_flush()  # no exception: the spans are dropped
        exports = [metrics.export(MetricsData(resource_metrics=[])) for _ in range(300)]
        assert MetricExportResult.FAILURE in exports
        assert spans.dropped == 100
        tracer.start_span("later").end()  # dropped at once, not kept in memory
        assert spans.dropped == 101 and not spans._queue and not spans._lines
        spans.shutdown()
        metrics.shutdown()

        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len([w for w in warnings if w.startswith("cannot write spans")]) == 1
        assert len([w for w in warnings if w.startswith("cannot write metrics")]) == 1
        assert all("No space left on device" in w for w in warnings)
        assert [s["name"] for s in read_spans(disk)] == ["first"]  # a cut line is skipped


async def test_a_resumed_run_cuts_the_torn_last_line_of_its_traces(tmp_path: Path) -> None:
    config = load_config({**wire_config(3), "tracing": {"enabled": True}})
    out = tmp_path / "run"
    await run_experiment(config, out)
    with (out / "traces.jsonl").open("ab") as f:
        f.write(b'{"resourceSpans": [{"reso')  # a write a full disk cut short
    await run_experiment(
        load_config({**wire_config(4), "tracing": {"enabled": True}}),
        out,
        resume=True,
        force_resume=True,
    )
    assert every_line_parses(out / "traces.jsonl") > 1
    episodes = [s for s in read_spans(out) if s["name"].startswith("episode")]
    assert len(episodes) == 4  # the resumed run's spans are all there, none swallowed


async def test_on_a_full_disk_no_record_names_a_transcript_that_was_not_written(
    tmp_path: Path,
) -> None:
    """tmpfs gives a file room a page at a time: with the disk full, the records file may
    still take a short line in its last page while the transcripts file gets no new page.
    The record must not be written then (a resumed run would keep it and read torn lines)."""
    config = load_config(wire_config(3))
    specs = expand(config)
    with small_disk(tmp_path / f"disk-{uuid.uuid4().hex[:6]}", "1m") as disk:
        folder = RunFolder.prepare(disk / "run", config, resume=False, planned=3)
        writer = ResultWriter(folder, folder.run_id)
        writer.start()

        def result(n: int, text: str) -> EpisodeResult:
            reply = TurnResponse(
                run=folder.run_id, episode=specs[n].id, sender="solver", role="solver", text=text
            )
            return EpisodeResult(spec=specs[n], outcome="success", turns=1, transcript=[reply])

        await writer.write(result(0, "cut wire 1"))
        with contextlib.suppress(OSError), (disk / "filler").open("wb") as filler:
            while True:  # every free page, so only room left inside the files' last pages
                filler.write(b"\0" * 4096)
                filler.flush()
        # One batch: the first transcript waits in the file's buffer (its record is ready
        # too) until the second's overflows it; then the disk takes only part of the first.
        writes = [writer.write(result(n, f"cut wire {n} " * 500)) for n in (1, 2)]
        failures = await asyncio.gather(*writes, return_exceptions=True)
        await writer.close()
        for failure in failures:
            assert isinstance(failure, results.RecordingFailed)
            assert "No space left on device" in str(failure)

        assert [r["episode"] for r in folder.records()] == [specs[0].id]
        assert list(folder.iter_transcript(specs[0].id))


async def test_records_naming_missing_or_torn_transcript_lines_are_played_again(
    tmp_path: Path,
) -> None:
    config = load_config(wire_config(4))
    out = tmp_path / "run"
    first = await run_experiment(config, out)
    by_offset = sorted(first.records, key=lambda r: r["transcript"]["offset"])
    last, before = by_offset[-1], by_offset[-2]
    transcripts = out / "transcripts.jsonl"
    with transcripts.open("r+b") as f:  # the last transcript cut short, as a full disk did
        f.truncate(last["transcript"]["offset"] + last["transcript"]["length"] // 2)
    # A record whose place points mid-line (its transcript's first byte overwritten).
    with transcripts.open("r+b") as f:
        f.seek(before["transcript"]["offset"])
        f.write(b"x")

    resumed = await run_experiment(config, out, resume=True)

    assert sorted(r["episode"] for r in resumed.records) == sorted(
        r["episode"] for r in first.records
    )
    assert resumed.progress.done == 2  # only those two were played again
    assert every_line_parses(out / "episodes.jsonl") == 4
    folder = RunFolder(out)
    for record in folder.records():
        assert list(folder.iter_transcript(record["episode"]))


async def test_damaged_record_lines_are_read_past_and_kept_aside_on_resume(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load_config(wire_config(4))
    out = tmp_path / "run"
    first = await run_experiment(config, out)
    episodes = out / "episodes.jsonl"
    lines = episodes.read_bytes().splitlines()
    # One record's line overwritten (not UTF-8), and lines that hold no episode's record.
    damaged = [b"\xff\xfe\x00 not a record", b"[1, 2]", b'{"episode": "x"}']
    lost = json.loads(lines[1])["episode"]
    lines[1] = damaged[0]
    episodes.write_bytes(b"\n".join([*lines, *damaged[1:]]) + b"\n")

    with caplog.at_level("WARNING"):
        read = RunFolder(out).records()
    assert sorted(r["episode"] for r in read) == sorted(
        r["episode"] for r in first.records if r["episode"] != lost
    )
    assert "skipped 3 damaged lines" in caplog.text

    resumed = await run_experiment(config, out, resume=True)

    assert resumed.progress.done == 1  # the episode whose record was damaged, played again
    assert sorted(r["episode"] for r in resumed.records) == sorted(
        r["episode"] for r in first.records
    )
    assert every_line_parses(episodes) == 4
    assert (out / results.DAMAGED_FILE).read_bytes().splitlines() == damaged  # nothing lost


async def test_a_damaged_public_key_or_config_copy_does_not_stop_a_resume(tmp_path: Path) -> None:
    config = load_config(wire_config(3))
    out = tmp_path / "run"
    first = await run_experiment(config, out)
    public = (out / "run.pub").read_text()
    (out / "run.pub").write_bytes(b"\xff\xfe not base64")
    (out / "config.yaml").write_bytes(b"\xff\xfe not yaml")

    resumed = await run_experiment(config, out, resume=True)

    assert resumed.progress.done == 0 and resumed.run_id == first.run_id
    assert (out / "run.pub").read_text() == public  # written again from the private key


async def test_torn_images_run_json_and_transcript_are_repaired_on_resume(tmp_path: Path) -> None:
    config = load_config(wire_config(6))
    out = tmp_path / "run"
    first = await run_experiment(config, out)
    run_id = first.run_id

    def images_of(episode: str) -> set[str]:
        text = "".join(json.dumps(m) for m in RunFolder(out).iter_transcript(episode))
        return set(re.findall(r'"sha256": "([0-9a-f]{64})"', text))

    shown = {sha: r["episode"] for r in first.records for sha in images_of(r["episode"])}
    # An image a role was shown (the folder also keeps the observers' state images).
    torn = out / "images" / f"{sorted(shown)[0]}.png"
    users = [r["episode"] for r in first.records if torn.stem in images_of(r["episode"])]
    assert users
    torn.write_bytes(torn.read_bytes()[:100])  # cut short, as a crash mid-write left it
    (out / "run.json").write_text("")  # emptied, as a full disk left it
    with (out / "transcripts.jsonl").open("ab") as f:
        f.write(b'{"kind": "turn_req')  # a torn last line

    resumed = await run_experiment(config, out, resume=True)

    assert resumed.run_id == run_id
    assert resumed.progress.done == len(users)  # only the episodes that showed the torn image
    assert hashlib.sha256(torn.read_bytes()).hexdigest() == torn.stem
    assert sorted(r["seed"] for r in resumed.records) == list(range(6))
    assert every_line_parses(out / "transcripts.jsonl") > 0
    assert not list((out / "images").glob(".*.tmp"))


def test_a_transcript_encodes_shared_prompt_messages_once_and_reads_as_encoded_alone() -> None:
    """Turns whose prompts share message objects (an agent's history) are written as each
    message encoded on its own would be, image bytes left out, whatever the order of keys."""
    import base64

    from parley.bus.codec import decode, encode, encode_transcript
    from parley.bus.messages import ImagePart, PromptMessage, TextPart, TranscriptEvent

    picture = ImagePart.from_bytes(b"\x89PNG not really")
    system = PromptMessage(role="system", content=[TextPart(text="Count on.")])
    seen = PromptMessage(role="user", content=[TextPart(text="Look:"), picture])
    prompts = [
        [system],
        [system, seen],
        [system, seen, PromptMessage(role="assistant", content=[])],
    ]
    transcript = [
        TurnResponse(run="r", episode="e", sender="a", role="a", text=f"NUMBER: {i}", prompt=p)
        for i, p in enumerate(prompts)
    ]
    transcript.insert(
        1, TranscriptEvent(run="r", episode="e", sender="gm", event="note", from_role="gm")
    )
    transcript.append(TurnResponse(run="r", episode="e", sender="b", role="b", text="x", prompt=[]))

    lines = encode_transcript(transcript).split(b"\n")
    assert lines[-1] == b"" and len(lines) == len(transcript) + 1
    for line, message in zip(lines, transcript, strict=False):
        assert json.loads(line) == json.loads(encode(message, inline_images=False))
        assert base64.b64encode(picture.data or b"") not in line  # the bytes stay out
    again = decode(lines[2])
    assert isinstance(again, TurnResponse) and again.prompt is not None
    assert again.prompt[1].content[1] == picture.by_reference()


@pytest.mark.parametrize("block", [1, 3, 64, 1 << 16])
def test_the_last_whole_line_is_found_from_the_end_a_block_at_a_time(
    tmp_path: Path, block: int
) -> None:
    """The torn-tail cut reads a file back from its end: a tail longer than a block (and a file
    with no newline, or an empty one) still ends where its last whole line does."""
    cases = [
        (b"", 0),
        (b"torn", 0),
        (b'{"a": 1}\n', 9),
        (b'{"a": 1}\n{"b": 2}\n{"c"', 18),
        (b'{"a": 1}\n' + b"x" * 500, 9),
    ]
    for data, end in cases:
        path = tmp_path / "f.jsonl"
        path.write_bytes(data)
        with path.open("rb") as f:
            assert results._after_last_line(f, block) == end, (data[:20], block)
