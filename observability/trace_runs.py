"""Run folders rebuilt from exported traces, for the analyses (``parley leaks``, ``parley errors``).

A run that records content (``tracing: {content: true}``) puts each episode's record and
transcript on its ``episode`` span (``parley.record``, ``parley.transcript``). A trace set
exported from it — the run folder's ``traces.jsonl``, a collector's file exporter output, or a
folder of OTLP JSON files — then holds everything the analyses read: :func:`materialise` writes
it back as a run folder (``episodes.jsonl``, ``transcripts.jsonl``), which the readers of
:mod:`parley.records` take as they take any other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from parley.observability.otlp_json import read_trace_set, trace_files
from parley.records import SCHEMA_VERSION


class TraceSetError(Exception):
    """A trace set the analyses cannot read (one line for the user)."""


def is_trace_set(path: str | Path) -> bool:
    """Whether ``path`` is a trace set rather than a run folder (it has no ``episodes.jsonl``
    but OTLP JSON files, or is one)."""
    target = Path(path)
    if target.is_dir() and (target / "episodes.jsonl").exists():
        return False
    return bool(trace_files(target))


def episodes_of(spans: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(record, transcript messages) of every episode span that carries them; of several spans
    of one episode (a retried one) the latest wins."""
    latest: dict[str, tuple[int, dict[str, Any], str]] = {}
    for span in spans:
        attributes = span.get("attributes") or {}
        record_json = attributes.get("parley.record")
        if not span.get("name", "").startswith("episode ") or not record_json:
            continue
        try:
            record = json.loads(record_json)
        except (TypeError, ValueError):
            continue
        if not isinstance(record, dict) or "episode" not in record:
            continue
        end = int(span.get("end_ns") or 0)
        episode = str(record["episode"])
        if episode not in latest or end >= latest[episode][0]:
            latest[episode] = (end, record, str(attributes.get("parley.transcript") or ""))
    out = []
    for _, record, transcript in sorted(latest.values(), key=lambda item: item[0]):
        messages = []
        for line in transcript.splitlines():
            try:
                messages.append(json.loads(line))
            except ValueError:
                continue
        out.append((record, messages))
    return out


def materialise(path: str | Path, out: str | Path) -> Path:
    """Write the episodes of trace set ``path`` as a run folder at ``out`` (made if missing,
    its records and transcripts replaced); raises :class:`TraceSetError`."""
    source = Path(path)
    if not source.exists():
        raise TraceSetError(f"{source} does not exist")
    try:
        spans = read_trace_set(source)
    except OSError as exc:
        raise TraceSetError(f"cannot read {source}: {exc.strerror or exc}") from None
    if not spans:
        raise TraceSetError(f"{source} holds no spans (expected OTLP JSON or a run's traces.jsonl)")
    episodes = episodes_of(spans)
    if not episodes:
        raise TraceSetError(
            f"no episode span in {source} carries its record and transcript: record them with "
            "`tracing: {content: true}` in the run's config"
        )
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    transcripts = bytearray()
    lines = []
    for record, messages in episodes:
        chunk = b"".join(
            json.dumps(m, ensure_ascii=False).encode("utf-8") + b"\n" for m in messages
        )
        record = {**record, "transcript": {"offset": len(transcripts), "length": len(chunk)}}
        transcripts += chunk
        lines.append(json.dumps(record, ensure_ascii=False))
    (folder / "transcripts.jsonl").write_bytes(bytes(transcripts))
    (folder / "episodes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = str(episodes[0][0].get("run") or source.stem)
    meta = {"run": run, "schema_version": SCHEMA_VERSION, "from_traces": str(source.resolve())}
    (folder / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    return folder


def default_folder(path: str | Path) -> Path:
    """Where a trace set's rebuilt run folder goes: beside it, ``<name>.run``."""
    source = Path(path).resolve()
    return source.with_name(source.stem + ".run") if source.is_file() else source / "parley.run"
