"""Reading a run folder: the episode records of ``episodes.jsonl`` and their transcripts.

Read by the runtime (resume, reports) and by the analyses in ``parley.observability`` (leaks,
error categories, transcript pages, the judge), so it lives in the package root and imports
nothing of either: analyses of a finished run need no runtime, and the runtime's hot path never
waits on an analysis (``tests/test_layers.py``). Writing stays with the runtime
(``parley.runtime.results.RunFolder``/``ResultWriter``), which builds on :class:`RecordedRun`.

Example::

    from parley.records import RecordedRun, read_records

    records = read_records("runs/quickstart")  # EpisodeRecord each
    print(records[0].outcome, records[0].main_score)
    run = RecordedRun("runs/quickstart")
    for message in run.iter_transcript(records[0].episode):
        print(message["kind"], message.get("role") or message.get("event"))
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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
    """``record`` (its JSON) in the current shape (:data:`SCHEMA_VERSION`), so that reports read runs
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


def main_score(record: EpisodeRecord | dict[str, Any]) -> float | None:
    """The declared main score of a record, of any schema (an :class:`EpisodeRecord` is
    upgraded already: its ``main_score``)."""
    if isinstance(record, EpisodeRecord):
        return record.main_score
    if schema_of(record) >= 2:
        return record.get("main_score")
    return (record.get("scores") or {}).get("main")


def read_records(path: str | Path, *, unreadable: list[bytes] | None = None) -> list[EpisodeRecord]:
    """The records of ``episodes.jsonl`` (``path``: the run folder or the file), typed and
    upgraded to the current shape; a torn last line (a crash mid-write) is skipped, and of
    several records of one episode the last wins (``--retry-errors`` appends a second one).
    Raises :class:`NewerSchema` for a folder or record written by a newer parley.

    A line before the last that is no episode's record (a damaged disk, an edit gone wrong:
    not JSON, not UTF-8, no episode or outcome) is skipped with a warning, and added to
    ``unreadable`` when given."""
    file = Path(path)
    if file.is_dir():
        file = file / "episodes.jsonl"
    check_folder(file.parent)
    if not file.exists():
        return []
    latest: dict[str, EpisodeRecord] = {}
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
        latest[record.episode] = _current(record, file.parent)
    if torn.strip() and (record := parse_record(torn)) is not None:  # whole, but for its newline
        latest[record.episode] = _current(record, file.parent)
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
    return list(latest.values())


def _current(record: EpisodeRecord, folder: Path) -> EpisodeRecord:
    if record.version > SCHEMA_VERSION:
        raise NewerSchema(folder, record.version)
    return record


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


# An episode's record, typed: what ``episodes.jsonl`` holds a line of, what reports, exports,
# analyses, the dashboard and resume read. Strict (a number where a mapping goes, a string
# where a number goes, a negative byte offset make a line damaged, as a line that is not JSON
# is), frozen (readers share one record), and open to keys it does not name (``extra``): a
# newer minor change or a plugin may add some; they are kept, read back and written again.
# ``protected_namespaces=()``: the record's own ``model_time_s`` and ``model_calls`` are no
# clash with pydantic's ``model_`` methods (pydantic before 2.10 warns of them otherwise).
_STRICT = ConfigDict(
    strict=True, frozen=True, extra="allow", populate_by_name=True, protected_namespaces=()
)

RoleResult = Literal["win", "loss", "draw"]
# A score as the game gave it: an int stays one (its JSON is the same, read back or not).
Score = int | float


class _ByKey:
    """A record's parts read by key too, as when records were dicts (``record["outcome"]``,
    ``record.get("transcript")``): report sections written against the dicts keep working.
    New code reads attributes, which mypy checks."""

    def __getitem__(self, key: str) -> Any:
        name = _FIELD_OF.get(key, key)
        if name in type(self).model_fields:  # type: ignore[attr-defined]
            return getattr(self, name)
        extra = self.__pydantic_extra__ or {}  # type: ignore[attr-defined]
        if key in extra:
            return extra[key]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        # As a dict's: ``default`` for a key the record was made or read without.
        if key not in self:
            return default
        return self[key]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        extra = self.__pydantic_extra__ or {}  # type: ignore[attr-defined]
        return _FIELD_OF.get(key, key) in self.model_fields_set or key in extra  # type: ignore[attr-defined]


_FIELD_OF = {"schema": "schema_"}  # keys whose attribute is named otherwise


class TokenCounts(_ByKey, BaseModel):
    """One role's tokens in an episode. ``input`` is the input not read from a prompt cache;
    ``cache_read`` and ``cache_write`` the input read from and written to it; ``reasoning``
    is part of ``output``. Example: ``record.tokens["solver"].output``."""

    model_config = _STRICT

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0


class BatchCalls(_ByKey, BaseModel):
    """A role's requests served from a provider's batch, and their tokens."""

    model_config = _STRICT

    requests: int = 0
    input: int = 0
    output: int = 0


class ModelCalls(_ByKey, BaseModel):
    """One role's model requests in an episode: attempts, retries by cause, time in calls,
    and the counts that are there only when something happened (replies repaired or cut,
    served from the response cache, held to the legal actions …).
    Example: ``sum(record.model_calls["solver"].retries.values())``."""

    model_config = _STRICT

    requests: int = 0
    attempts: int = 0
    retries: dict[str, int] = Field(default_factory=dict)
    call_s: float = 0.0
    not_sent: int = 0  # prompts over the context, never sent
    repaired: int = 0  # characters repaired in replies
    cut: int = 0  # replies cut at their length limit
    cached: int = 0  # replies replayed from the response cache
    constrained: int = 0  # replies held to the legal actions
    unconstrained: int = 0  # asked to be, and not expressible
    not_honoured: int = 0  # a constraint sent and a reply outside the legal set
    batch_fallback: int = 0
    batch: BatchCalls | None = None


class TranscriptRange(_ByKey, BaseModel):
    """Where an episode's transcript lines are in ``transcripts.jsonl``: a byte range."""

    model_config = _STRICT

    offset: Annotated[int, Field(ge=0)]
    length: Annotated[int, Field(ge=0)]


# Containers a hand-edited or older record may hold as null: read as empty.
_EMPTY_WHEN_NULL = (
    "spec",
    "scores",
    "role_results",
    "tokens",
    "token_source",
    "model_calls",
    "private_facts",
)


class EpisodeRecord(_ByKey, BaseModel):
    """A finished episode: one line of ``episodes.jsonl``, as :func:`read_records` gives it.

    Built by the episode (``EpisodeResult.record``), stored as its JSON (:meth:`json_line`),
    read back typed, and what reports, report sections, the results API, exports, the
    dashboard and the analyses receive. Keys it does not name (a plugin's, a newer minor
    version's) are kept in ``model_extra`` and written again; ``record["key"]`` and
    ``record.get("key")`` still read any key, as when records were dicts.

    Example::

        record = read_records("runs/quickstart")[0]
        record.outcome, record.main_score, record.tokens["solver"].output
    """

    model_config = _STRICT

    schema_version: int | None = None
    schema_: int | None = Field(default=None, alias="schema")  # parley 0.1's name for it
    run: str | None = None
    episode: str
    game: str
    seed: int
    repetition: int = 0
    pairing: dict[str, str]  # role -> who played it: a model's name, scripted, random, human
    spec: dict[str, Any] = Field(default_factory=dict)  # the EpisodeSpec, as JSON
    outcome: str  # success, lost, aborted, error or cancelled
    reason: str = ""
    reason_code: str | None = None  # a ReasonCode value; None in old records only the game knew
    main_score: Score | None = None
    scores: dict[str, Score | None] = Field(default_factory=dict)  # the other scores
    role_results: dict[str, RoleResult] = Field(default_factory=dict)  # competitive games
    turns: Annotated[int, Field(ge=0)]
    started_at: float | None = None
    finished_at: float | None = None
    duration_s: float | None = None
    model_time_s: float | None = None
    tokens: dict[str, TokenCounts] = Field(default_factory=dict)  # by role
    token_source: dict[str, str] = Field(default_factory=dict)  # by role: usage, counted, mixed
    model_calls: dict[str, ModelCalls] = Field(default_factory=dict)  # by role
    private_facts: dict[str, dict[str, str]] = Field(default_factory=dict)  # by role
    error: str | None = None  # the traceback of an ``error`` episode
    # Replies the game master refused: sent into its inbox by another than the role's own
    # agent or seat (absent from the line when there were none).
    refused_replies: Annotated[int, Field(ge=0)] = 0
    worker: str | int | None = None  # the remote worker that played it (``parley worker``)
    transcript: TranscriptRange | None = None  # set by the writer

    @field_validator(*_EMPTY_WHEN_NULL, mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("reason", mode="before")
    @classmethod
    def _null_is_no_reason(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("spec")
    @classmethod
    def _players_mapping(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("players", {}), dict):
            raise ValueError("players is not a mapping")
        return value

    @property
    def version(self) -> int:
        """The schema the record was written in (:func:`schema_of`)."""
        return self.schema_version or self.schema_ or 1

    def json_dict(self) -> dict[str, Any]:
        """The record as ``episodes.jsonl`` holds it: the keys it was made or read with, in
        order, and the ones it does not name after them (``EncodedResult.record``)."""
        return self.model_dump(by_alias=True, exclude_unset=True)

    def json_line(self) -> str:
        """The record's line of ``episodes.jsonl``, without the newline (``json.dumps`` of
        :meth:`json_dict`: the bytes parley has always written)."""
        return json.dumps(self.json_dict())

    def with_transcript(self, offset: int, length: int) -> EpisodeRecord:
        """This record, naming where its transcript lines are."""
        return self.model_copy(update={"transcript": TranscriptRange(offset=offset, length=length)})


# The fields every record has, in the order a record lacking several is said to lack them.
_REQUIRED = ("episode", "outcome", "game", "seed", "pairing", "turns")


class NotARecord(ValueError):
    """What was given as an episode's record is none; the message says why in a few words."""


def _problem(exc: ValidationError, data: Any) -> str:
    """A validation failure in the words :func:`record_problem` gives: ``no <field>`` for a
    field missing (or null), ``<field> of the wrong shape (<type>)`` for one of another type."""
    errors = exc.errors()
    if any(not error["loc"] for error in errors):
        return "not a JSON object"
    missing = {
        error["loc"][0]
        for error in errors
        if len(error["loc"]) == 1 and (error["type"] == "missing" or error.get("input") is None)
    }
    for field in _REQUIRED:
        if field in missing:
            return f"no {field}"
    field = str(errors[0]["loc"][0])
    value = data.get(field) if isinstance(data, dict) else None
    return f"{field} of the wrong shape ({type(value).__name__})"


def record_problem(record: Any) -> str | None:
    """What makes ``record`` (a JSON object) no episode's record, in a few words, or None
    when it is one. Example: ``record_problem({"episode": "e1"})`` is ``"no outcome"``."""
    if not isinstance(record, dict):
        return "not a JSON object"
    try:
        EpisodeRecord.model_validate(record)
    except ValidationError as exc:
        return _problem(exc, record)
    return None


def record_of(data: Any) -> EpisodeRecord:
    """The record a worker sends its parent (``EncodedResult.record``: the JSON of an
    :class:`EpisodeRecord`), typed and upgraded; raises :class:`NotARecord` (a ``ValueError``)
    saying what is wrong with it, a record of a newer parley's schema included: the parent
    drops such a result as it drops any other that is not whole.

    Example: ``record_of(encoded.record).outcome``."""
    if isinstance(data, EpisodeRecord):
        return data
    if not isinstance(data, dict):
        raise NotARecord(f"an episode's record is a JSON object, not {type(data).__name__}")
    try:
        record = EpisodeRecord.model_validate(data)
    except ValidationError as exc:
        episode = data.get("episode")
        which = f" of {episode}" if isinstance(episode, str) else ""
        raise NotARecord(
            f"the record{which} is no episode's record: {_problem(exc, data)}"
        ) from None
    if record.version > SCHEMA_VERSION:
        raise NotARecord(
            f"the record of {record.episode} was written by schema {record.version}; this "
            f"parley reads up to {SCHEMA_VERSION}: upgrade parley"
        )
    return _upgraded(record) if record.version < SCHEMA_VERSION else record


def _upgraded(record: EpisodeRecord) -> EpisodeRecord:
    """An older record in the current shape (:func:`upgrade` on its JSON)."""
    return EpisodeRecord.model_validate(upgrade(record.json_dict()))


def parse_record(line: bytes | str) -> EpisodeRecord | None:
    """The episode record on a line of ``episodes.jsonl``, upgraded when older (a newer one
    is given as it is: its :attr:`~EpisodeRecord.version` says so), or None for a line that
    holds none: not JSON, not UTF-8, or not the shape a record has (:func:`record_problem`:
    a field missing, a number where a mapping goes …)."""
    try:
        record = EpisodeRecord.model_validate_json(line)
    except ValidationError:
        return None
    return _upgraded(record) if record.version < SCHEMA_VERSION else record


def transcripts(
    run_dir: str | Path, records: Iterable[EpisodeRecord]
) -> Iterator[tuple[EpisodeRecord, list[dict[str, Any]]]]:
    """(record, messages) per episode of ``records`` that has a transcript, reading
    ``transcripts.jsonl`` once by the byte ranges the records give."""
    path = Path(run_dir) / "transcripts.jsonl"
    if not path.exists():
        return
    with path.open("rb") as f:
        for record in records:
            where = record.transcript
            if not where:
                continue
            f.seek(where.offset)
            lines = f.read(where.length).splitlines()
            messages = []
            for line in lines:
                message = parse_message(line)
                if message is not None and message.get("episode") == record.episode:
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

    def records(self) -> list[EpisodeRecord]:
        return read_records(self.episodes)

    def finished_ids(self) -> set[str]:
        return {r.episode for r in self.records() if r.outcome in FINISHED}

    def iter_transcript(self, episode: str) -> Iterator[dict[str, Any]]:
        """Every message of ``episode`` in order, as JSON objects (images by sha256)."""
        where = next((r.transcript for r in self.records() if r.episode == episode), None)
        with self.transcripts.open("rb") as f:
            if where:
                f.seek(where.offset)
                lines = f.read(where.length).splitlines()
            else:  # not finished (e.g. cancelled): scan for its messages
                lines = [line for line in f if episode.encode() in line]
        for line in lines:
            message = parse_message(line)
            if message is not None and message.get("episode") == episode:
                yield message

    def image_path(self, sha256: str) -> Path:
        return self.images / f"{sha256}.png"
