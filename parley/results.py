"""A run's results as pandas DataFrames: one row per episode, or one row per turn.

Example::

    from parley.results import episodes, turns

    df = episodes("runs/quickstart")
    df.groupby(["game", "pairing"], observed=True)["success"].mean()

Both read the run folder only (``episodes.jsonl``, ``transcripts.jsonl``), so they work on a
finished run, a run still going, and one copied from another machine. Of several records of
one episode (``--retry-errors`` appends a second) the latest wins. A folder written by a newer
parley raises :class:`parley.records.NewerSchema`, whose message says so.

Columns of :func:`episodes` (``<role>``: each role of the run's games; ``<name>``: each score):

========================  =====================================================================
``run``, ``episode``      the run's and the episode's id (string)
``game``                  the game (categorical)
``seed``, ``repetition``  the instance seed and repetition (int)
``pairing``               the pairing as one label, ``role=player,…`` (categorical)
``role_<role>``           who played ``<role>``: scripted, random, human or a model's name
                          (categorical; missing where a game has no such role)
``outcome``               success, lost, aborted, error or cancelled (categorical)
``success``, ``played``   outcome is success; outcome is success or lost (bool)
``reason``, ``reason_code``  why it ended, in words and as a code (string, categorical)
``main_score``            the game's declared main score (float; NaN where none)
``score_<name>``          every other score (float)
``result_<role>``         win, loss or draw, for games that give one (categorical)
``turns``                 turns played (int)
``started_at``, ``finished_at``  when (datetime, UTC)
``duration_s``, ``model_time_s``  wall time of the episode and time spent waiting on models
``input_tokens``, ``output_tokens``  tokens over all roles (int); ``input_tokens`` is the
                          input not read from a prompt cache
``cache_read_tokens``, ``cache_write_tokens``  input read from and written to the server's
                          prompt cache, over all roles (int)
``setting_<name>``        the game's settings that are plain values (variant, limits, …)
``error``                 the error of an ``error`` episode (string)
========================  =====================================================================

Columns of :func:`turns`: ``episode``, ``game``, ``pairing``, ``role_<role>``, then per reply
``turn``, ``role``, ``player`` (who answered: a model's name, scripted, …), ``text``,
``latency_s``, ``input_tokens``, ``output_tokens``, ``cache_read_tokens``,
``cache_write_tokens`` (nullable ints: unknown for players without usage; the cached input
apart from the rest, as in :func:`episodes`), ``token_source``, ``model_calls`` (attempts,
retries included), ``event`` (what the game made of the reply: utterance, action or
violation), ``actions``, ``mistakes`` (int), ``feedback`` (what the game told the role about
it) and ``sent_at`` (datetime, UTC).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from parley.records import EpisodeRecord, read_records, transcripts

OUTCOMES = ("success", "lost", "aborted", "error", "cancelled")
RunLike = Any  # a path, a RecordedRun/RunFolder, a RunOutcome or a parley.api.RunResult


def run_path(run: RunLike) -> Path:
    """The folder of ``run``: a path, or an object that has one (``.path`` of a run folder,
    ``.folder`` of a run's outcome)."""
    if isinstance(run, str | Path):
        return Path(run)
    folder = getattr(run, "folder", None)
    if folder is not None and not isinstance(folder, str | Path):
        folder = getattr(folder, "path", None)
    path = folder if folder is not None else getattr(run, "path", None)
    if path is None:
        raise TypeError(f"expected a run folder (a path or a run), got {type(run).__name__}")
    return Path(path)


def _records(run: RunLike) -> tuple[Path, list[EpisodeRecord]]:
    path = run_path(run)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a run folder")
    return path, read_records(path)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _settings(record: EpisodeRecord) -> dict[str, Any]:
    settings = record.spec.get("settings") or {}
    return {f"setting_{k}": v for k, v in settings.items() if _plain(v)}


def _pairing_label(pairing: dict[str, str]) -> str:
    return ",".join(f"{role}={label}" for role, label in pairing.items())


def episode_row(record: EpisodeRecord) -> dict[str, Any]:
    """One record of ``episodes.jsonl`` (upgraded) as a flat row."""
    pairing = record.pairing
    tokens = record.tokens.values()
    outcome = record.outcome
    row: dict[str, Any] = {
        "run": record.run,
        "episode": record.episode,
        "game": record.game,
        "seed": record.seed,
        "repetition": record.repetition,
        "pairing": _pairing_label(pairing),
        **{f"role_{role}": label for role, label in pairing.items()},
        "outcome": outcome,
        "success": outcome == "success",
        "played": outcome in ("success", "lost"),
        "reason": record.reason,
        "reason_code": record.reason_code,
        "main_score": record.main_score,
        **{f"score_{k}": v for k, v in record.scores.items()},
        **{f"result_{k}": v for k, v in record.role_results.items()},
        "turns": record.turns,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "duration_s": record.duration_s,
        "model_time_s": record.model_time_s,
        "input_tokens": sum(t.input for t in tokens),
        "output_tokens": sum(t.output for t in tokens),
        "cache_read_tokens": sum(t.cache_read for t in tokens),
        "cache_write_tokens": sum(t.cache_write for t in tokens),
        **_settings(record),
        "error": record.error,
    }
    return row


def _typed_episodes(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=_columns(rows, _EPISODE_COLUMNS))
    for name in ("game", "pairing", "reason_code"):
        frame[name] = _category(frame[name])
    frame["outcome"] = pd.Categorical(frame["outcome"], categories=OUTCOMES)
    for name in ("run", "episode", "reason", "error"):
        frame[name] = frame[name].astype("string")
    for name in ("seed", "repetition", "turns", *_TOKENS):
        frame[name] = frame[name].astype("int64")
    for name in ("success", "played"):
        frame[name] = frame[name].astype("bool")
    for name in ("started_at", "finished_at"):
        frame[name] = pd.to_datetime(frame[name], unit="s", utc=True)
    floats = ["main_score", "duration_s", "model_time_s"]
    floats += [c for c in frame.columns if c.startswith("score_")]
    for name in floats:
        frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
    for name in frame.columns:
        if name.startswith(("role_", "result_")):
            frame[name] = _category(frame[name])
        elif name.startswith("setting_"):
            frame[name] = _setting_column(frame[name])
    return frame


def _category(column: pd.Series) -> pd.Series:
    """A categorical column; one with no value at all is a string column instead, since a
    categorical without categories does not survive a round trip through parquet."""
    if column.notna().any():
        return column.astype("category")
    return column.astype("string")


def _setting_column(column: pd.Series) -> pd.Series:
    """A settings column in the narrowest dtype its values share (strings otherwise)."""
    values = column.dropna()
    kinds = {type(v) for v in values}
    if kinds <= {bool} and len(values):
        return column.astype("boolean")
    if kinds <= {int} and len(values):
        return column.astype("Int64")
    if kinds <= {int, float} and len(values):
        return column.astype("float64")
    return column.map(lambda v: None if v is None else str(v)).astype("string")


_EPISODE_COLUMNS = (
    "run",
    "episode",
    "game",
    "seed",
    "repetition",
    "pairing",
    "outcome",
    "success",
    "played",
    "reason",
    "reason_code",
    "main_score",
    "turns",
    "started_at",
    "finished_at",
    "duration_s",
    "model_time_s",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "error",
)
_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _columns(rows: list[dict[str, Any]], fixed: tuple[str, ...]) -> list[str]:
    """``fixed`` in order, with the flattened columns (``role_``, ``score_``, …) after the
    column they belong beside, each group sorted."""
    extra: dict[str, set[str]] = {}
    for row in rows:
        for key in row:
            if key not in fixed:
                extra.setdefault(key.split("_", 1)[0], set()).add(key)
    after = {
        "pairing": "role",
        "main_score": "score",
        "turns": "result",
        "cache_write_tokens": "setting",
    }
    columns: list[str] = []
    for name in fixed:
        columns.append(name)
        group = after.get(name)
        if group:
            columns.extend(sorted(extra.pop(group, set())))
    for rest in extra.values():  # anything else a newer record adds, at the end
        columns.extend(sorted(rest))
    return columns


def episodes(run: RunLike) -> pd.DataFrame:
    """One row per episode of ``run`` (a run folder's path, or a run), typed columns: see the
    module's docstring. The latest record of an episode wins."""
    _, records = _records(run)
    return _typed_episodes([episode_row(r) for r in records])


def _text(parts: list[dict[str, Any]]) -> str:
    return "\n".join(p.get("text", "") for p in parts if p.get("type") == "text")


def _cached_input(
    usage: dict[str, Any] | None, calls: list[dict[str, Any]], key: str
) -> int | None:
    """A reply's input tokens read from (``cache_read``) or written to (``cache_write``) the
    server's prompt cache, from its call records (the reply's usage has the rest of the input);
    None where the reply has no usage."""
    if not usage:
        return None
    return sum(int((call.get("usage") or {}).get(key, 0)) for call in calls)


def turn_rows(record: EpisodeRecord, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns of one episode: a row per reply (``turn_response``), with what the game made
    of it (the transcript events of that turn from that role)."""
    pairing = record.pairing
    base = {
        "episode": record.episode,
        "game": record.game,
        "pairing": _pairing_label(pairing),
        **{f"role_{role}": label for role, label in pairing.items()},
    }
    events: dict[tuple[int, str], list[dict[str, Any]]] = {}
    feedback: dict[tuple[int, str], list[str]] = {}
    for m in messages:
        if m.get("kind") != "transcript_event":
            continue
        if m.get("event") == "feedback":
            feedback.setdefault((m.get("turn", 0), m.get("to_role", "")), []).append(
                _text(m.get("content") or [])
            )
        else:
            events.setdefault((m.get("turn", 0), m.get("from_role", "")), []).append(m)
    rows = []
    for m in messages:
        if m.get("kind") != "turn_response":
            continue
        key = (m.get("turn", 0), m.get("role", ""))
        mine = events.get(key, [])
        kinds = [e.get("event") for e in mine]
        usage = m.get("usage") or None
        calls = m.get("calls") or []
        rows.append(
            {
                **base,
                "turn": m.get("turn", 0),
                "role": m.get("role"),
                "player": m.get("model") or None,
                "text": m.get("text", ""),
                "latency_s": m.get("latency_s"),
                "input_tokens": usage.get("input_tokens") if usage else None,
                "output_tokens": usage.get("output_tokens") if usage else None,
                "cache_read_tokens": _cached_input(usage, calls, "cache_read"),
                "cache_write_tokens": _cached_input(usage, calls, "cache_write"),
                "token_source": usage.get("source") if usage else None,
                "model_calls": len(calls),
                "event": next(
                    (k for k in ("violation", "action", "utterance") if k in kinds), None
                ),
                "actions": kinds.count("action"),
                "mistakes": sum(
                    1
                    for e in mine
                    if e.get("event") == "action" and (e.get("data") or {}).get("mistake")
                ),
                "feedback": "\n".join(feedback.get(key, [])) or None,
                "sent_at": m.get("sent_at"),
            }
        )
    return rows


_TURN_COLUMNS = (
    "episode",
    "game",
    "pairing",
    "turn",
    "role",
    "player",
    "text",
    "latency_s",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "token_source",
    "model_calls",
    "event",
    "actions",
    "mistakes",
    "feedback",
    "sent_at",
)


def turns(run: RunLike) -> pd.DataFrame:
    """One row per turn (an agent's reply) of every recorded episode of ``run``, in order
    within each episode; columns: see the module's docstring."""
    path, records = _records(run)
    rows: list[dict[str, Any]] = []
    for record, messages in transcripts(path, records):
        rows.extend(turn_rows(record, messages))
    frame = pd.DataFrame(rows, columns=_columns(rows, _TURN_COLUMNS))
    for name in ("game", "pairing", "role", "player", "token_source", "event"):
        frame[name] = _category(frame[name])
    for name in ("episode", "text", "feedback"):
        frame[name] = frame[name].astype("string")
    for name in ("turn", "model_calls", "actions", "mistakes"):
        frame[name] = frame[name].astype("int64")
    for name in _TOKENS:
        frame[name] = frame[name].astype("Int64")
    frame["latency_s"] = frame["latency_s"].astype("float64")
    frame["sent_at"] = pd.to_datetime(frame["sent_at"], unit="s", utc=True)
    for name in frame.columns:
        if name.startswith("role_"):
            frame[name] = _category(frame[name])
    return frame


def _jsonable(value: Any) -> Any:
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if isinstance(value, float) and value != value:  # NaN
        return None
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def write_jsonl(frame: pd.DataFrame, path: str | Path) -> Path:
    """``frame`` as JSON Lines, a row a line (timestamps ISO 8601, missing values null)."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for row in frame.itertuples(index=False, name=None):
            values = {c: _jsonable(v) for c, v in zip(frame.columns, row, strict=True)}
            f.write(json.dumps(values, ensure_ascii=False) + "\n")
    return path


def read_jsonl(path: str | Path, like: pd.DataFrame) -> pd.DataFrame:
    """A table written by :func:`write_jsonl` read back with the dtypes of ``like``."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
    frame = pd.DataFrame(rows, columns=list(like.columns))
    for name, dtype in like.dtypes.items():
        if isinstance(dtype, pd.DatetimeTZDtype):
            frame[name] = pd.to_datetime(frame[name], utc=True).astype(dtype)
        elif isinstance(dtype, pd.CategoricalDtype):
            frame[name] = pd.Categorical(frame[name], categories=dtype.categories)
        else:
            frame[name] = frame[name].astype(dtype)
    return frame


class ExportError(Exception):
    """An export that cannot be written (e.g. parquet without pyarrow); the message says why."""


def export(run: RunLike, fmt: str = "parquet", out: str | Path | None = None) -> list[Path]:
    """Write :func:`episodes` and :func:`turns` of ``run`` as ``episodes.<ext>`` and
    ``turns.<ext>`` into ``out`` (default: the run folder's ``export/``); the paths written.
    ``fmt``: ``parquet`` (needs pyarrow: ``pip install 'parley[parquet]'``) or ``jsonl``."""
    if fmt not in ("parquet", "jsonl"):
        raise ExportError(f"unknown format {fmt!r}: parquet or jsonl")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ExportError(
                "parquet needs pyarrow: pip install 'parley[parquet]' (or use --format jsonl)"
            ) from None
    path = run_path(run)
    target = Path(out) if out is not None else path / "export"
    tables = (("episodes", episodes(path)), ("turns", turns(path)))  # read (and checked) first
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot write {target}: {exc.strerror or exc}") from None
    written = []
    for name, frame in tables:
        file = target / f"{name}.{fmt}"
        try:
            if fmt == "parquet":
                frame.to_parquet(file, index=False)
            else:
                write_jsonl(frame, file)
        except OSError as exc:
            raise ExportError(f"cannot write {file}: {exc.strerror or exc}") from None
        written.append(file)
    return written
