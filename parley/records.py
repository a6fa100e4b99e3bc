"""Reading a run folder: the episode records of ``episodes.jsonl`` and their transcripts.

Read by the runtime (resume, reports) and by the analyses in ``parley.observability`` (leaks,
error categories, transcript pages, the judge), so it lives in the package root and imports
nothing of either: analyses of a finished run need no runtime, and the runtime's hot path never
waits on an analysis (``tests/test_layers.py``). Writing stays with the runtime
(``parley.runtime.results.RunFolder``/``ResultWriter``), which builds on :class:`RecordedRun`.

Example::

    from parley.records import RecordedRun, read_records

    records = read_records("runs/quickstart")
    run = RecordedRun("runs/quickstart")
    for message in run.iter_transcript(records[0]["episode"]):
        print(message["kind"], message.get("role") or message.get("event"))
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

# The shape of what a run folder holds: every ``episodes.jsonl`` record carries it as
# ``schema_version``, and ``run.json`` as ``schema_version`` too. 1 (no version key): the main
# score was ``scores["main"]`` and there was no reason code; 2: ``main_score``, ``reason_code``
# and ``role_results`` beside ``scores``. Readers upgrade older records (:func:`upgrade`) and
# refuse newer ones (:class:`NewerSchema`). Bump it whenever a reader could misread a new
# record; transcript lines are bus messages, versioned by the bus codec's ``v``.
SCHEMA_VERSION = 2
RECORD_SCHEMA = SCHEMA_VERSION  # its name before records carried ``schema_version``

# Outcomes of an episode that is done with: a resumed run skips them.
FINISHED = ("success", "lost", "aborted", "error")


def loads(line: str | bytes) -> Any:
    """One JSON line: orjson (faster on transcripts), or the standard library for
    what orjson refuses (integers beyond 64 bits); a torn line raises ``ValueError``."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


class NewerSchema(Exception):
    """A run folder written by a newer parley than this one: reading it could misread it."""

    def __init__(self, folder: str | Path, version: int) -> None:
        self.folder = str(folder)
        self.version = version
        super().__init__(
            f"run folder {folder} was written by schema {version}; this parley reads up to "
            f"{SCHEMA_VERSION}: upgrade parley"
        )


def schema_of(data: dict[str, Any]) -> int:
    """The schema a record (or ``run.json``) was written in: ``schema_version``, or ``schema``
    as records of parley 0.1 name it, or 1 when neither is there."""
    value = data.get("schema_version", data.get("schema", 1))
    return value if isinstance(value, int) else 1


def check_schema(data: dict[str, Any], folder: str | Path) -> None:
    """Raise :class:`NewerSchema` when ``data`` was written by a newer parley."""
    version = schema_of(data)
    if version > SCHEMA_VERSION:
        raise NewerSchema(folder, version)


def check_folder(path: str | Path) -> None:
    """Raise :class:`NewerSchema` when the run folder ``path`` (its ``run.json``) was written
    by a newer parley; an older folder, or one without a readable ``run.json``, passes."""
    try:
        meta = json.loads((Path(path) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(meta, dict):
        check_schema(meta, path)


def upgrade(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` in the current shape (:data:`SCHEMA_VERSION`), so that reports read runs
    recorded before it: a record without a version (1) had its main score as
    ``scores["main"]`` and no reason code or per-role results. Modifies and returns ``record``.
    """
    if schema_of(record) >= SCHEMA_VERSION:
        record.setdefault("schema_version", schema_of(record))
        return record
    scores = dict(record.get("scores") or {})
    record["main_score"] = scores.pop("main", None)
    record["scores"] = scores
    record.setdefault("reason_code", _old_reason_code(record))
    record.setdefault("role_results", {})
    record["schema"] = record["schema_version"] = SCHEMA_VERSION
    return record


def _old_reason_code(record: dict[str, Any]) -> str | None:
    """The reason code of a schema-1 record, where its outcome and reason text tell it (the
    runtime's own endings); None where only the game knew."""
    outcome, reason = record.get("outcome"), record.get("reason") or ""
    if outcome == "cancelled":
        return "cancelled"
    if outcome == "error":
        return "timeout" if reason.startswith("episode timed out") else "exception"
    return None


def main_score(record: dict[str, Any]) -> float | None:
    """The declared main score of a record, of any schema."""
    if schema_of(record) >= 2:
        return record.get("main_score")
    return (record.get("scores") or {}).get("main")


def read_records(
    path: str | Path, *, unreadable: list[bytes] | None = None
) -> list[dict[str, Any]]:
    """The records of ``episodes.jsonl`` (``path``: the run folder or the file), upgraded to
    the current shape; a torn last line (a crash mid-write) is skipped, and of several records
    of one episode the last wins (``--retry-errors`` appends a second one). Raises
    :class:`NewerSchema` for a folder or record written by a newer parley.

    A line before the last that is no episode's record (a damaged disk, an edit gone wrong:
    not JSON, not UTF-8, no episode or outcome) is skipped with a warning, and added to
    ``unreadable`` when given."""
    file = Path(path)
    if file.is_dir():
        file = file / "episodes.jsonl"
    check_folder(file.parent)
    if not file.exists():
        return []
    latest: dict[str, dict[str, Any]] = {}
    lines = file.read_bytes().split(b"\n")
    torn = lines.pop()  # b"" after a whole last line; else what a crash left of one
    damaged: list[bytes] = []
    for line in lines:
        if not line.strip():
            continue
        record = parse_record(line)
        if record is None:
            damaged.append(line)
            continue
        check_schema(record, file.parent)
        latest[record["episode"]] = record
    if torn.strip() and (record := parse_record(torn)) is not None:  # whole, but for its newline
        check_schema(record, file.parent)
        latest[record["episode"]] = record
    if damaged:
        first = parse_message(damaged[0])
        log.warning(
            "%s: skipped %d damaged lines that are no episode's record (the first, %s, begins %r)",
            file,
            len(damaged),
            "not JSON" if first is None else record_problem(first),
            damaged[0][:60],
        )
        if unreadable is not None:
            unreadable.extend(damaged)
    return [upgrade(record) for record in latest.values()]


def _parts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(part, dict) for part in value)


def _text(value: Any) -> bool:
    return isinstance(value, str)


# The fields of a transcript message its readers rely on, and their shapes (None allowed).
_MESSAGE_SHAPES: dict[str, Any] = {
    "kind": _text,
    "episode": _text,
    "turn": lambda v: type(v) is int,
    "content": _parts,
    "role": _text,
    "from_role": _text,
    "to_role": _text,
    "event": _text,
}


def parse_message(line: bytes | str) -> dict[str, Any] | None:
    """The message on a line of a transcript, as JSON, or None for a line that holds none (torn
    by a crash, damaged: not JSON, not UTF-8, not an object, or a field its readers use of the
    wrong type). Readers skip those: the rest of the transcript still reads."""
    try:
        message = loads(line)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    for field, fits in _MESSAGE_SHAPES.items():
        value = message.get(field)
        if value is not None and not fits(value):
            return None
    return message


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _text_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _numbers(value: Any) -> bool:
    return isinstance(value, dict) and all(v is None or _number(v) for v in value.values())


def _counts_by_role(value: Any) -> bool:
    return isinstance(value, dict) and all(_numbers(v) for v in value.values())


def _byte_range(value: Any) -> bool:
    return isinstance(value, dict) and _count(value.get("offset")) and _count(value.get("length"))


def _spec(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("players", {}), dict)


# What the readers of a record rely on (reports, exports, analyses, the dashboard, resume):
# each field a record must have, and the shape of each it may have (None allowed where the
# runtime writes None). A record of another shape is damaged, as a line that is not JSON is.
_REQUIRED = ("episode", "outcome", "game", "seed", "pairing", "turns")
_SHAPES: dict[str, Any] = {
    "episode": _text,
    "outcome": _text,
    "game": _text,
    "seed": lambda v: type(v) is int,
    "pairing": _text_map,
    "turns": _count,
    "repetition": lambda v: type(v) is int,
    "spec": _spec,
    "scores": _numbers,
    "main_score": _number,
    "role_results": lambda v: isinstance(v, dict),
    "reason": _text,
    "reason_code": _text,
    "started_at": _number,
    "finished_at": _number,
    "duration_s": _number,
    "model_time_s": _number,
    "tokens": _counts_by_role,
    "token_source": _text_map,
    "model_calls": lambda v: isinstance(v, dict),
    "private_facts": lambda v: isinstance(v, dict) and all(isinstance(f, dict) for f in v.values()),
    "transcript": _byte_range,
}


def record_problem(record: Any) -> str | None:
    """What makes ``record`` no episode's record, in a few words, or None when it is one."""
    if not isinstance(record, dict):
        return "not a JSON object"
    for field in _REQUIRED:
        if record.get(field) is None:
            return f"no {field}"
    for field, fits in _SHAPES.items():
        value = record.get(field)
        if value is not None and not fits(value):
            return f"{field} of the wrong shape ({type(value).__name__})"
    return None


def parse_record(line: bytes) -> dict[str, Any] | None:
    """The episode record on a line of ``episodes.jsonl`` (not upgraded), or None for a line
    that holds none: not JSON, not UTF-8, or not the shape a record has
    (:func:`record_problem`: a field missing, a number where a mapping goes …)."""
    record = parse_message(line)
    if record is None or record_problem(record) is not None:
        return None
    return record


def transcripts(
    run_dir: str | Path, records: Iterable[dict[str, Any]]
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(record, messages) per episode of ``records`` that has a transcript, reading
    ``transcripts.jsonl`` once by the byte ranges the records give."""
    path = Path(run_dir) / "transcripts.jsonl"
    if not path.exists():
        return
    with path.open("rb") as f:
        for record in records:
            where = record.get("transcript")
            if not where:
                continue
            f.seek(int(where["offset"]))
            lines = f.read(int(where["length"])).splitlines()
            messages = []
            for line in lines:
                message = parse_message(line)
                if message is not None and message.get("episode") == record["episode"]:
                    messages.append(message)
            yield record, messages


class RecordedRun:
    """A run folder, read: its records, each episode's transcript, its images by hash."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.episodes = self.path / "episodes.jsonl"
        self.transcripts = self.path / "transcripts.jsonl"
        self.images = self.path / "images"

    @property
    def run_id(self) -> str:
        return json.loads((self.path / "run.json").read_text())["run"]

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.episodes)

    def finished_ids(self) -> set[str]:
        return {r["episode"] for r in self.records() if r["outcome"] in FINISHED}

    def iter_transcript(self, episode: str) -> Iterator[dict[str, Any]]:
        """Every message of ``episode`` in order, as JSON objects (images by sha256)."""
        where = next((r.get("transcript") for r in self.records() if r["episode"] == episode), None)
        with self.transcripts.open("rb") as f:
            if where:
                f.seek(where["offset"])
                lines = f.read(where["length"]).splitlines()
            else:  # not finished (e.g. cancelled): scan for its messages
                lines = [line for line in f if episode.encode() in line]
        for line in lines:
            message = parse_message(line)
            if message is not None and message.get("episode") == episode:
                yield message

    def image_path(self, sha256: str) -> Path:
        return self.images / f"{sha256}.png"
