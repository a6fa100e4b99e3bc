"""The typed episode record (``parley.records.EpisodeRecord``): what an episode builds, what
``episodes.jsonl`` stores and gives back, how older and damaged lines read, what a worker's
result becomes, and what a report section receives."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import tests.runtime.faulty_game  # noqa: F401  (registers test.counter)
from parley.records import (
    SCHEMA_VERSION,
    EpisodeRecord,
    ModelCalls,
    NewerSchema,
    NotARecord,
    TokenCounts,
    read_records,
    record_of,
)
from parley.runtime.episode import EpisodeResult
from parley.runtime.experiment import EpisodeSpec, PlayerSpec
from parley.runtime.results import EncodedResult
from tests.records import record


def _result() -> EpisodeResult:
    spec = EpisodeSpec(
        id="test.counter-s3-r0-solver=scripted",
        game="test.counter",
        seed=3,
        players={"solver": PlayerSpec(kind="scripted")},
    )
    return EpisodeResult(
        spec=spec,
        outcome="success",
        reason="counted to three",
        reason_code="solved",
        main_score=1,
        scores={"speed": 0.5},
        turns=3,
        started_at=100.0,
        finished_at=101.5,
        tokens={"solver": {"input": 10, "output": 4, "cache_read": 2}},
        token_source={"solver": "usage"},
        model_calls={"solver": {"requests": 3, "attempts": 4, "retries": {"timeout": 1}}},
        private_facts={"solver": {"pin": "1234"}},
    )


def test_the_episode_builds_a_typed_record() -> None:
    built = _result().record("run-1")
    assert isinstance(built, EpisodeRecord)
    assert (built.run, built.episode, built.seed, built.outcome) == (
        "run-1",
        "test.counter-s3-r0-solver=scripted",
        3,
        "success",
    )
    assert built.version == SCHEMA_VERSION
    assert built.duration_s == 1.5
    assert built.tokens["solver"] == TokenCounts(input=10, output=4, cache_read=2)
    assert built.model_calls["solver"].retries == {"timeout": 1}
    assert built.spec["players"]["solver"]["kind"] == "scripted"
    with pytest.raises(ValueError, match="frozen"):
        built.outcome = "lost"  # type: ignore[misc]


def test_a_record_round_trips_through_episodes_jsonl_unchanged(tmp_path: Path) -> None:
    encoded = EncodedResult.of(_result(), "run-1")
    # The worker's wire form: the record's JSON, the same keys in the same order.
    assert encoded.record_json == json.dumps(encoded.record)
    assert list(encoded.record)[:4] == ["schema_version", "schema", "run", "episode"]
    assert "transcript" not in encoded.record and "worker" not in encoded.record
    line = f'{encoded.record_json[:-1]}, "transcript": {{"offset": 0, "length": 12}}}}'
    (tmp_path / "episodes.jsonl").write_text(line + "\n")
    [back] = read_records(tmp_path)
    assert back.transcript is not None and back.transcript.length == 12
    assert back.json_line() == line  # what --resume writes again: the same bytes
    assert back == record_of(encoded.record).with_transcript(0, 12)
    assert back.main_score == 1 and isinstance(back.main_score, int)


def test_refused_replies_are_in_the_line_only_when_there_were_some(tmp_path: Path) -> None:
    quiet = EncodedResult.of(_result(), "run-1")
    assert "refused_replies" not in quiet.record
    troubled = _result()
    troubled.refused_replies = 2
    encoded = EncodedResult.of(troubled, "run-1")
    assert encoded.record["refused_replies"] == 2
    # After the error, as the episode builds it; read back typed, and written again the same.
    keys = list(encoded.record)
    assert keys[keys.index("error") + 1] == "refused_replies"
    lines = [quiet.record_json, encoded.record_json.replace(quiet.record["episode"], "e2")]
    (tmp_path / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    first, second = read_records(tmp_path)
    assert (first.refused_replies, second.refused_replies) == (0, 2)
    assert [first.json_line(), second.json_line()] == lines
    # An older record without the key reads as none refused; a negative count is no record.
    old = record(episode="o1").json_dict()
    assert "refused_replies" not in old and record_of(old).refused_replies == 0
    with pytest.raises(NotARecord, match="refused_replies of the wrong shape"):
        record_of({**old, "refused_replies": -1})


def test_keys_it_does_not_name_are_kept_and_written_again(tmp_path: Path) -> None:
    data = {
        **record(episode="e1", schema_version=SCHEMA_VERSION).json_dict(),
        "plugin_rating": {"elo": 1500},
    }
    data["model_calls"] = {"solver": {"requests": 1, "speculative": 2}}
    (tmp_path / "episodes.jsonl").write_text(json.dumps(data) + "\n")
    [back] = read_records(tmp_path)
    assert back.model_extra == {"plugin_rating": {"elo": 1500}}
    assert back["plugin_rating"]["elo"] == 1500 and back.get("missing", 7) == 7
    assert back.model_calls["solver"].model_extra == {"speculative": 2}
    assert json.loads(back.json_line()) == data


def test_a_schema_1_record_is_upgraded_on_reading(tmp_path: Path) -> None:
    old = {
        "episode": "old-1",
        "game": "test.counter",
        "seed": 1,
        "pairing": {"solver": "scripted"},
        "outcome": "error",
        "reason": "episode timed out after 5 s",
        "scores": {"main": 0.25, "speed": 1.0},
        "turns": 2,
        "tokens": {"solver": {"input": 3, "output": 1}},
    }
    (tmp_path / "episodes.jsonl").write_text(json.dumps(old) + "\n")
    [back] = read_records(tmp_path)
    assert back.version == SCHEMA_VERSION
    assert back.main_score == 0.25 and back.scores == {"speed": 1.0}
    assert back.reason_code == "timeout" and back.role_results == {}
    assert back.tokens["solver"].input == 3


def test_a_newer_record_is_refused(tmp_path: Path) -> None:
    newer = record(episode="n1").json_dict() | {"schema_version": SCHEMA_VERSION + 1}
    (tmp_path / "episodes.jsonl").write_text(json.dumps(newer) + "\n")
    with pytest.raises(NewerSchema, match=f"schema {SCHEMA_VERSION + 1}"):
        read_records(tmp_path)


def test_a_damaged_line_is_skipped_saying_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = record(episode="good", pairing={"solver": "scripted"}).json_dict()
    lines = [
        json.dumps({**good, "episode": "bad", "pairing": "solver=scripted"}),
        json.dumps(good),
        json.dumps({**good, "episode": "no-seed", "seed": True}),
    ]
    (tmp_path / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    kept: list[bytes] = []
    with caplog.at_level(logging.WARNING, logger="parley.records"):
        records = read_records(tmp_path, unreadable=kept)
    assert [r.episode for r in records] == ["good"]
    assert len(kept) == 2
    said = caplog.text
    assert "skipped 2 damaged lines" in said and "pairing of the wrong shape (str)" in said


def test_a_wire_record_becomes_typed_or_says_what_is_wrong() -> None:
    wire = EncodedResult.of(_result(), "run-1").record
    typed = record_of(wire)
    assert typed.model_calls["solver"] == ModelCalls(requests=3, attempts=4, retries={"timeout": 1})
    with pytest.raises(NotARecord, match="no outcome"):
        record_of({k: v for k, v in wire.items() if k != "outcome"})
    with pytest.raises(NotARecord, match=r"turns of the wrong shape \(str\)"):
        record_of({**wire, "turns": "three"})
    with pytest.raises(NotARecord, match="not list"):
        record_of([wire])
    with pytest.raises(NotARecord, match=f"written by schema {SCHEMA_VERSION + 1}"):
        record_of({**wire, "schema_version": SCHEMA_VERSION + 1})


def test_a_record_that_cannot_be_valid_becomes_an_error_record() -> None:
    result = _result()
    result.scores = {"speed": "fast"}  # type: ignore[dict-item]  # a game's bug
    encoded = EncodedResult.safely(result, "run-1")
    assert encoded.record["outcome"] == "error"
    assert "could not be written" in encoded.record["reason"]


SECTION = """
from parley.records import EpisodeRecord


def report(records, run_dir):
    kinds = sorted({type(r).__name__ for r in records})
    out = sum(r.tokens["solver"].output for r in records)
    retries = sum(sum(r.model_calls["solver"].retries.values()) for r in records)
    typed = all(isinstance(r, EpisodeRecord) for r in records)
    return f"## Counted\\n\\n{kinds} typed={typed}: {out} tokens out, {retries} retries"
"""


def test_a_report_section_receives_typed_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from parley.runtime.report import build_report

    # A plugin's section for the family "test" (test.counter's), by its entry point.
    site = tmp_path / "site"
    info = site / "typed_section-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: typed-section\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[parley.reports]\ntest = typed_section:report\n")
    (site / "typed_section.py").write_text(SECTION)
    monkeypatch.syspath_prepend(str(site))
    run = tmp_path / "run"
    run.mkdir()
    line = EncodedResult.of(_result(), "run-1").record_json
    (run / "episodes.jsonl").write_text(f"{line}\n{line}\n".replace("s3-r0", "s4-r0", 1))
    report = build_report(run)
    assert "## Counted" in report
    assert "['EpisodeRecord'] typed=True: 8 tokens out, 2 retries" in report
