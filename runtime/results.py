"""The run folder: resolved config, durable ``episodes.jsonl``, transcripts, images by hash.

Writing only; reading a run folder (records, transcripts) is :mod:`parley.records`, which
the analyses in ``parley.observability`` use too. Its readers are re-exported here for code
written before they moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

import yaml

from parley.bus.codec import encode_transcript
from parley.bus.signing import KEY_FILE, RunKey, SigningError
from parley.event_loop import Pacer
from parley.observability import tracing
from parley.observability.otlp_json import TRACES_FILE
from parley.observability.tracing import METRICS_FILE
from parley.records import FINISHED, EpisodeRecord, RecordedRun, check_folder
from parley.records import main_score as main_score
from parley.records import read_records as read_records
from parley.records import upgrade as upgrade
from parley.runtime import provenance
from parley.runtime.config import ConfigError, ExperimentConfig, redacted
from parley.runtime.episode import EpisodeResult
from parley.user_files import YamlFileError, read_mapping

log = logging.getLogger("parley.runtime.results")
# An image part in a transcript line names its image by hash.
_IMAGE_REF = re.compile(rb'"sha256":\s*"([0-9a-f]{64})"')


# The advisory lock a run holds on its folder while it plays (flock: the kernel lets go of it
# when the process ends, however it ends, so a killed run leaves no stale lock behind).
LOCK_FILE = "run.lock"
# The writer fsyncs at most this often; what ends meanwhile waits for the next batch. Each
# sync costs a thread hop and two fsyncs (CPU, the kernel's included): synced much more often,
# a scripted run playing one episode at a time spends a noticeable share of its turns on them.
# A record counts (progress, on_result) at most this long after its episode ended; a run
# killed meanwhile plays those episodes again on --resume.
SYNC_EVERY_S = 0.05


class RunFolderError(RuntimeError):
    """The run folder cannot be used for this run: another process writes it, or it was made
    by another config (``parley run`` exits 1 with the message)."""


class RecordingFailed(RuntimeError):
    """The run folder could not be written (a full disk, an I/O error). The run stops at once;
    what was recorded before stays, and ``--resume`` goes on once the folder can be written."""

    @classmethod
    def of(cls, folder: Path, exc: BaseException) -> RecordingFailed:
        """The failure to write ``folder``, saying why (``exc``, kept as its cause)."""
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        name = getattr(exc, "filename", None)
        where = f" ({name})" if name and Path(name) != Path(folder) else ""
        failure = cls(f"cannot write the run folder {folder}: {cause}{where}")
        failure.__cause__ = exc
        return failure


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` whole or not at all: a temporary file, fsynced, renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, indent=2).encode()


class RunFolder(RecordedRun):
    """One run's folder, as the runtime writes it. ``episodes.jsonl`` gets a line per finished
    episode, written and fsynced before the episode counts; on resume, finished episodes are
    skipped.

    Transcripts are appended to one ``transcripts.jsonl`` (a message a line, each naming its
    episode); an episode's record gives the byte range of its transcript there. One file
    instead of one per episode: creating thousands of small files costs far more than
    appending the same bytes.

    The folder keeps the run's signing key (``run.key``, mode 0600, and ``run.pub``;
    parley.bus.signing): a resumed run signs its results with the key its observers already
    trust.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._known_images: set[str] = set()
        # The run's key (set by prepare): what the run's processes sign their results with.
        self.key: RunKey | None = None
        self._lock: IO[str] | None = None
        # Set by prepare for a new run (not a resume): the names the folder held before, and
        # whether prepare made the folder. What discard_if_unplayed leaves alone.
        self._before: set[str] | None = None
        self._made_folder = False

    @classmethod
    def prepare(
        cls,
        path: str | Path,
        config: ExperimentConfig,
        *,
        resume: bool,
        planned: int,
        lock: bool = False,
        same_config: bool = True,
    ) -> RunFolder:
        """Create a fresh folder, or reopen one to resume; refuses to mix two runs.

        ``lock``: hold the folder's lock (:data:`LOCK_FILE`) until :meth:`unlock`; a folder
        another process holds raises :class:`RunFolderError`. ``same_config``: on resume,
        refuse (:class:`RunFolderError`) a config whose name or games differ from the one the
        folder was made by (its ``config.yaml``)."""
        folder = cls(path)
        meta_file = folder.path / "run.json"
        existed = folder.path.is_dir()
        try:
            before: set[str] | None = {p.name for p in folder.path.iterdir()} if existed else set()
        except OSError:  # unreadable: said below, where the folder is written
            before = None
        if lock:
            try:
                folder.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(
                    [("--out", str(folder.path), f"a folder that can be created ({exc.strerror})")]
                ) from None
        try:
            if lock:
                folder.lock()
            new = not meta_file.exists()
            folder._prepare(config, meta_file, resume, planned, same_config)
            if new and before is not None:
                folder._before, folder._made_folder = before, not existed
            return folder
        except OSError as exc:  # a full disk before the first record: said as a later one is
            folder.unlock()
            raise RecordingFailed.of(folder.path, exc) from exc
        except BaseException:
            folder.unlock()
            raise

    def discard_if_unplayed(self) -> bool:
        """Remove what this run put into a new folder when it ended before any episode was
        recorded (a memory store, the broker or a model pool that could not be opened), so that
        the same command can simply be run again. A resumed folder, one with a record or a
        transcript line, and whatever the folder held before stay. True when they are gone."""
        if self._before is None:
            return False
        try:
            if any(f.exists() and f.stat().st_size for f in (self.episodes, self.transcripts)):
                return False
            for path in self.path.iterdir():
                if path.name in self._before:
                    continue
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            if self._made_folder:
                self.path.rmdir()  # only when nothing else is left in it
        except OSError:
            return False
        finally:
            self._before = None
        return True

    def lock(self) -> None:
        """Take the folder's lock, or raise :class:`RunFolderError` naming the process that
        holds it. The lock file keeps the holder's pid, for that message only."""
        try:
            handle = (self.path / LOCK_FILE).open("a+", encoding="utf-8")
        except OSError as exc:
            raise RunFolderError(
                f"cannot lock the run folder {self.path}: {exc.strerror or exc}"
            ) from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            raise RunFolderError(
                f"run folder {self.path} is in use by pid {holder}: wait for that run to end, "
                "or use another --out"
            ) from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
        except OSError:  # a full disk: let the lock go with the file, and say why (prepare)
            with contextlib.suppress(OSError):
                handle.close()
            raise
        self._lock = handle

    def unlock(self) -> None:
        """Let go of the folder's lock (closing the file releases it)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _prepare(
        self,
        config: ExperimentConfig,
        meta_file: Path,
        resume: bool,
        planned: int,
        same_config: bool,
    ) -> RunFolder:
        folder = self
        if meta_file.exists():
            if not resume:
                raise ConfigError(
                    [
                        (
                            "--out",
                            str(folder.path),
                            "a new folder, or add --resume to continue this run",
                        )
                    ]
                )
            check_folder(folder.path)  # a newer parley's folder: refused first, not rewritten
            if same_config:
                folder.check_config(config)
            meta = folder._read_meta(config)
            folder.images.mkdir(exist_ok=True)
            folder._compact(torn_images=folder._check_images())
            folder._end_on_whole_lines(TORN_TAIL_FILES)
        else:
            folder.path.mkdir(parents=True, exist_ok=True)
            run_id = f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(2).hex()}"
            meta = {"run": run_id, "created": time.time(), "name": config.name}
        meta["planned"] = planned
        provenance.stamp(meta, config)  # schema version; which parley, packages, parameters
        # The reference checkouts read now; a resumed run whose files changed keeps the old.
        references = reference_provenance(config)
        earlier = meta.pop("references", None)
        if earlier and earlier != references:
            meta.setdefault("references_history", []).append(earlier)
        if references:
            meta["references"] = references
        atomic_write(meta_file, _json_bytes(meta))
        atomic_write(
            folder.path / "config.yaml",
            # Secrets masked: the folder is shared with the results (runtime/config.py).
            yaml.safe_dump(redacted(config), sort_keys=False).encode(),
        )
        folder.images.mkdir(exist_ok=True)
        folder._known_images = {p.stem for p in folder.images.glob("*.png")}
        try:
            folder.key = RunKey.load_or_create(folder.path)
        except SigningError as exc:
            raise ConfigError(
                [("--out", str(folder.path / KEY_FILE), f"a readable run key ({exc})")]
            ) from None
        return folder

    def check_config(self, config: ExperimentConfig) -> None:
        """Raise :class:`RunFolderError` when ``config`` asks for other episodes than the
        config that made this folder (its ``config.yaml``): another name, other games,
        pairings, seeds, repetitions, settings or memory. Models, concurrency and the like may
        change between a run and its resumption. A folder without a readable ``config.yaml``
        passes (nothing to compare)."""
        try:
            saved = read_mapping(self.path / "config.yaml")
        except YamlFileError:
            return
        differences = config_differences(saved, redacted(config))
        if differences:
            shown = "; ".join(differences[:4])
            more = f" (and {len(differences) - 4} more)" if len(differences) > 4 else ""
            raise RunFolderError(
                f"run folder {self.path} was made by another config: {shown}{more}. Resume "
                "with the config and --set overrides it was made with (see its config.yaml), "
                "use a new --out, or add --force-resume to add these episodes to it anyway"
            )

    def _read_meta(self, config: ExperimentConfig) -> dict[str, Any]:
        """``run.json``; one left torn by an older version on a full disk is rebuilt from the
        records (their run id), so the folder still resumes."""
        meta_file = self.path / "run.json"
        try:
            meta = json.loads(meta_file.read_text())
            if isinstance(meta, dict) and isinstance(meta.get("run"), str):
                return meta
        except (OSError, ValueError):
            pass
        records = self.records()
        recovered = f"{config.name}-recovered-{os.urandom(2).hex()}"
        run_id = (records[0].run if records else None) or recovered
        log.warning("run.json in %s was unreadable; rebuilt it for run %s", self.path, run_id)
        return {"run": run_id, "created": time.time(), "name": config.name, "recovered": True}

    def _check_images(self) -> set[str]:
        """Remove images whose bytes do not match their hash (torn by a crash mid-write in an
        older version) and leftover temporary files; the hashes of the removed images."""
        torn: set[str] = set()
        for tmp in self.images.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
        for image in self.images.glob("*.png"):
            if not image.is_file():  # not one the run wrote: left as it is
                continue
            if hashlib.sha256(image.read_bytes()).hexdigest() != image.stem:
                torn.add(image.stem)
                image.unlink()
        if torn:
            log.warning(
                "%d torn images in %s: their episodes are played again", len(torn), self.path
            )
        return torn

    def note(self, **fields: Any) -> None:
        """Add ``fields`` to ``run.json`` (e.g. the event-loop lag a run saw)."""
        meta_file = self.path / "run.json"
        meta = json.loads(meta_file.read_text())
        meta.update(fields)
        atomic_write(meta_file, _json_bytes(meta))

    def _compact(self, torn_images: set[str] | None = None) -> None:
        """Rewrite ``episodes.jsonl`` with one line per finished episode, dropping torn lines,
        the records of cancelled episodes and those whose images were torn (a resumed run plays
        them again); then cut ``transcripts.jsonl`` after the last byte a kept record uses, so a
        line torn by a crash is not continued."""
        if not self.episodes.exists():
            return
        damaged: list[bytes] = []
        kept = [r for r in read_records(self.episodes, unreadable=damaged) if r.outcome in FINISHED]
        if damaged:
            # Out of the records file, but not lost: the lines go to a file of their own.
            aside = self.path / DAMAGED_FILE
            with aside.open("ab") as f:
                f.write(b"".join(line + b"\n" for line in damaged))
                f.flush()
                os.fsync(f.fileno())
            log.warning(
                "moved %d damaged lines of %s to %s; an episode they held is played again",
                len(damaged),
                self.episodes,
                aside,
            )
        if torn_images:
            kept = [r for r in kept if not self._uses_images(r, torn_images)]
        whole = self._with_whole_transcripts(kept)
        if len(whole) < len(kept):
            log.warning(
                "%d records in %s name transcript lines that are missing or torn: their "
                "episodes are played again",
                len(kept) - len(whole),
                self.path,
            )
        kept = whole
        # Each record as it was read (its keys, those it does not name included): a folder of
        # an older parley keeps its lines, upgraded.
        atomic_write(self.episodes, b"".join(r.json_line().encode() + b"\n" for r in kept))
        if self.transcripts.exists():
            ranges = [r.transcript for r in kept if r.transcript]
            end = max((w.offset + w.length for w in ranges), default=0)
            if self.transcripts.stat().st_size > end:
                with self.transcripts.open("r+b") as f:
                    f.truncate(end)
                    os.fsync(f.fileno())

    def _end_on_whole_lines(self, names: tuple[str, ...]) -> None:
        """Cut each of these files after its last whole line: the tail a failed write left (a
        full disk) would otherwise swallow the first line the resumed run appends."""
        for name in names:
            path = self.path / name
            try:
                with path.open("r+b") as f:
                    end = _after_last_line(f)
                    if end == f.seek(0, os.SEEK_END):
                        continue
                    f.truncate(end)
            except FileNotFoundError:
                continue
            log.warning("cut a torn last line off %s", path)

    def _with_whole_transcripts(self, records: list[EpisodeRecord]) -> list[EpisodeRecord]:
        """The records whose transcript lines are all in ``transcripts.jsonl``: inside the
        file, starting a line and ending one. An older version could record an episode whose
        transcript a full disk had cut, and a crash may lose a tail the records file kept."""
        if not self.transcripts.exists():
            return [r for r in records if not (r.transcript and r.transcript.length)]
        with self.transcripts.open("rb") as f:
            size = os.fstat(f.fileno()).st_size

            def byte_at(position: int) -> bytes:
                f.seek(position)
                return f.read(1)

            def whole(record: EpisodeRecord) -> bool:
                where = record.transcript
                if not where or not where.length:
                    return True
                offset, end = where.offset, where.offset + where.length
                return (
                    end <= size
                    and (offset == 0 or byte_at(offset - 1) == b"\n")
                    and byte_at(offset) == b"{"
                    and byte_at(end - 1) == b"\n"
                )

            return [r for r in records if whole(r)]

    def _uses_images(self, record: EpisodeRecord, shas: set[str]) -> bool:
        where = record.transcript
        if not where:
            return False
        with self.transcripts.open("rb") as f:
            f.seek(where.offset)
            chunk = f.read(where.length)
        return any(m.group(1).decode() in shas for m in _IMAGE_REF.finditer(chunk))


def _after_last_line(f: BinaryIO, block: int = 1 << 16) -> int:
    """The offset just after the last newline of ``f`` (0 for none), read back from its end a
    block at a time: a span file can be gigabytes, and its torn tail is a line at most."""
    end = f.seek(0, os.SEEK_END)
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        found = f.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


# Where a resumed run keeps the lines of episodes.jsonl that were no episode's record.
DAMAGED_FILE = "episodes.damaged.jsonl"

# The run folder's append-only logs besides the records (observability writes them), whose
# last line a full disk may have cut.
TORN_TAIL_FILES = (TRACES_FILE, METRICS_FILE)

# What names a run's episodes, per game block: a resumed run must ask for the same ones.
_BLOCK_FIELDS = ("game", "seeds", "instances_file", "pairings", "repetitions", "settings", "memory")


def reference_provenance(config: ExperimentConfig) -> list[dict[str, Any]]:
    """The reference checkouts the run's games read their prompts and instances from (a game's
    ``reference`` setting, read by its ``GameInfo.reference_provenance``), each once: path, git
    commit and the sha256 of each file read."""
    from parley.environments import registry
    from parley.environments.reference import ReferenceError

    found: dict[tuple[str, str], dict[str, Any]] = {}
    for i, block in enumerate(config.games):
        path = block.settings.get("reference")
        if not isinstance(path, str) or not path:
            continue
        info = registry.find(block.game)
        if info is None or info.reference_provenance is None:
            continue
        try:
            entry = info.reference_provenance(path)
        except ReferenceError as exc:
            raise ConfigError([(f"games.{i}.settings.reference", path, str(exc))]) from None
        found.setdefault((entry["family"], entry["path"]), entry)
    return list(found.values())


def _seeds(value: Any) -> Any:
    """A block's seeds as a list (``{start, count}`` expanded), to compare either form."""
    if isinstance(value, dict) and "count" in value:
        start = int(value.get("start", 0))
        return list(range(start, start + int(value["count"])))
    return value


def _shown(value: Any) -> str:
    consecutive = (
        isinstance(value, list)
        and len(value) > 3
        and all(isinstance(v, int) for v in value)
        and value == list(range(value[0], value[0] + len(value)))
    )
    if consecutive:
        return f"{value[0]}..{value[-1]} ({len(value)} seeds)"
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def config_differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """How the config ``now`` differs from ``saved`` (both as ``config.yaml`` holds them) in
    what names the run's episodes: its name and each game block's game, seeds, pairings,
    repetitions, settings and memory. A field the saved config lacks (written by an older
    parley) is not compared. Each difference reads ``path: X in the folder, Y now``."""
    out: list[str] = []
    if saved.get("name") != now.get("name"):
        out.append(f"name: {saved.get('name')!r} in the folder, {now.get('name')!r} now")
    before, after = saved.get("games") or [], now.get("games") or []
    if len(before) != len(after):
        out.append(f"games: {len(before)} game blocks in the folder, {len(after)} now")
    for i, (old, new) in enumerate(zip(before, after, strict=False)):
        if not isinstance(old, dict) or not isinstance(new, dict):
            continue
        for key in _BLOCK_FIELDS:
            if key not in old:
                continue
            a, b = old.get(key), new.get(key)
            if key == "seeds":
                a, b = _seeds(a), _seeds(b)
            # Pairings and memory are dumps of parley's own models, which may gain fields
            # (at their defaults); settings are the user's own words, compared as they are.
            if not (_same(a, b) if key in ("pairings", "memory") else a == b):
                out.append(f"games.{i}.{key}: {_shown(a)} in the folder, {_shown(b)} now")
    return out


def _same(saved: Any, now: Any) -> bool:
    """``now`` says what ``saved`` says; a key of a mapping that ``saved`` lacks (a field a
    newer parley added, at its default) is not compared."""
    if isinstance(saved, dict) and isinstance(now, dict):
        return set(saved) <= set(now) and all(_same(v, now[k]) for k, v in saved.items())
    if isinstance(saved, list) and isinstance(now, list):
        return len(saved) == len(now) and all(_same(a, b) for a, b in zip(saved, now, strict=True))
    return bool(saved == now)


@dataclass
class EncodedResult:
    """A finished episode as the bytes that go into the run folder: its record (without the
    transcript's place, which the writer decides), its transcript lines, its images by hash.

    ``record`` is the JSON of an :class:`~parley.records.EpisodeRecord`
    (:meth:`~parley.records.EpisodeRecord.json_dict`), as it crosses from a worker process to
    the parent; :func:`parley.records.record_of` makes it typed again (and says what is wrong
    with one that is no record)."""

    record: dict[str, Any]
    transcript: bytes
    images: dict[str, bytes]
    # For the run's metrics, when the episode was played in a worker process
    # (parley.observability.metrics.episode_summary).
    metrics: dict[str, Any] | None = None
    # ``record`` as ``json.dumps`` writes it, when that was done already (:meth:`of` does, and
    # a worker's frame brings it): the writer takes it as it is, so whoever changes ``record``
    # afterwards sets this back to None.
    record_json: str | None = None

    @classmethod
    def of(cls, result: EpisodeResult, run: str) -> EncodedResult:
        """``result`` encoded, its record's JSON included (which raises where it cannot be: a
        value of the wrong type, one JSON cannot hold)."""
        record = result.record(run)
        encoded = cls(record.json_dict(), encode_transcript(result.transcript), result.images)
        encoded.record_json = record.json_line()
        return encoded

    @classmethod
    def safely(cls, result: EpisodeResult, run: str) -> EncodedResult:
        """:meth:`of`, or, for an episode whose record cannot be encoded, an ``error`` record
        that says why (what it played to, the cause), so the run records it and goes on."""
        try:
            return cls.of(result, run)
        except Exception as exc:
            log.warning("episode %s could not be recorded as played: %s", result.spec.id, exc)
            return cls.of(unrecordable(result, exc), run)


def unrecordable(result: EpisodeResult, exc: BaseException) -> EpisodeResult:
    """An ``error`` result in place of ``result``, whose record or transcript cannot be encoded
    (keeps what is sure to encode: timings, turns, tokens; the transcript is dropped)."""
    detail = f"{type(exc).__name__}: {str(exc)[:300]}".encode("utf-8", "replace").decode()
    return EpisodeResult(
        spec=result.spec,
        outcome="error",
        reason=(
            f"the episode played to {result.outcome!r} but its record could not be written "
            f"({detail}); its transcript is not kept"
        ),
        reason_code="exception",
        turns=result.turns,
        started_at=result.started_at,
        finished_at=result.finished_at,
        model_time_s=result.model_time_s,
        tokens=result.tokens,
        error="".join(traceback.format_exception_only(exc)).encode("utf-8", "replace").decode(),
    )


class ResultWriter:
    """Writes finished episodes; ``await write(result)`` returns once its line is fsynced.

    Transcripts, images and the record line are encoded and written on the event loop by the
    writer's own task, a slice at a time (page-cache writes are quick; a writer thread
    would convoy on the GIL); only ``fsync`` runs in a thread, once per batch of whatever
    finished meanwhile. The run's metrics are fed from here too, off the episode's own path.

    Each episode is encoded on its own: one that cannot be becomes an ``error`` record saying
    why (:meth:`EncodedResult.safely`). A failure to write the folder (a full disk) fails this
    write and every later one with :class:`RecordingFailed`, at once: the run stops, and what
    was fsynced before is whole. Images are written to a temporary file, fsynced and renamed
    before any record that uses them is written.
    """

    def __init__(self, folder: RunFolder, run: str) -> None:
        self.folder = folder
        self.run = run
        self.failure: RecordingFailed | None = None
        self._pending: list[tuple[EpisodeResult | EncodedResult, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._file = folder.episodes.open("a", encoding="utf-8")
        self._transcripts = folder.transcripts.open("ab")

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="result-writer")

    async def write(self, result: EpisodeResult | EncodedResult) -> None:
        if self.failure is not None:
            raise self.failure
        future = asyncio.get_running_loop().create_future()
        self._pending.append((result, future))
        self._wake.set()
        await future

    def _encode(self, result: EpisodeResult | EncodedResult) -> EncodedResult:
        try:
            if isinstance(result, EpisodeResult):
                tracing.record_episode(result)  # the run's metrics
            elif result.metrics is not None:
                tracing.record_summary(result.metrics)
        except Exception:  # metrics are not worth an episode
            log.exception("could not count an episode in the run's metrics")
        if isinstance(result, EpisodeResult):
            return EncodedResult.safely(result, self.run)
        return result

    def _stage_images(self, batch: list[EncodedResult]) -> dict[str, Path]:
        """Write the batch's new images to temporary files (renamed once synced)."""
        staged: dict[str, Path] = {}
        for result in batch:
            for sha, data in result.images.items():
                if sha in self.folder._known_images or sha in staged:
                    continue
                tmp = self.folder.images / f".{sha}.png.tmp"
                tmp.write_bytes(data)
                staged[sha] = tmp
        return staged

    def _publish_images(self, staged: dict[str, Path]) -> None:
        """(In a thread.) Make the staged images durable under their names."""
        for tmp in staged.values():
            with tmp.open("rb") as f:
                os.fsync(f.fileno())
        for sha, tmp in staged.items():
            os.replace(tmp, self.folder.image_path(sha))
        directory = os.open(self.folder.images, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def _write(self, result: EncodedResult) -> str:
        """Write the transcript; the record's line, naming where it went."""
        offset = self._transcripts.tell()
        record = result.record
        length = len(result.transcript)
        record["transcript"] = {"offset": offset, "length": length}
        self._transcripts.write(result.transcript)
        if result.record_json is None:
            return json.dumps(record) + "\n"
        # The same line, from the record's JSON with its last key added.
        where = f'"transcript": {{"offset": {offset}, "length": {length}}}}}'
        return f"{result.record_json[:-1]}, {where}\n"

    async def _loop(self) -> None:
        pacer = Pacer()
        synced = 0.0
        while True:
            await self._wake.wait()
            wait = synced + SYNC_EVERY_S - time.perf_counter()
            if wait > 0 and not self._closing:
                # Group commit across time too: one episode at a time would otherwise cost a
                # thread hop and an fsync each (a hop costs system CPU too).
                await asyncio.sleep(wait)
            self._wake.clear()
            batch, self._pending = self._pending, []
            if batch:
                try:
                    encoded = []
                    for result, _ in batch:
                        encoded.append(self._encode(result))
                        await pacer.breathe()
                    staged = self._stage_images(encoded)
                    if staged:
                        await asyncio.to_thread(self._publish_images, staged)
                        self.folder._known_images.update(staged)
                    lines = [self._write(result) for result in encoded]
                    # Records only after their transcripts are written: on a full disk the
                    # records file may still have room in its last page when the transcripts
                    # have none, and a record must never name bytes that are not there.
                    self._transcripts.flush()
                    self._file.write("".join(lines))
                    self._file.flush()
                    await asyncio.to_thread(self._sync)
                    synced = time.perf_counter()
                except Exception as exc:
                    self._fail(exc, batch)
                    return
                except BaseException as exc:
                    self._fail(exc, batch)
                    raise
                for _, future in batch:
                    if not future.done():
                        future.set_result(None)
            if self._closing and not self._pending:
                return

    def _fail(
        self,
        exc: BaseException,
        batch: list[tuple[EpisodeResult | EncodedResult, asyncio.Future[None]]],
    ) -> None:
        """Stop writing: this batch, what waits and what comes later all fail loudly."""
        self.failure = RecordingFailed.of(self.folder.path, exc)
        waiting, self._pending = self._pending, []
        for _, future in [*batch, *waiting]:
            if not future.done():
                future.set_exception(self.failure)

    def _sync(self) -> None:
        os.fsync(self._transcripts.fileno())
        os.fsync(self._file.fileno())

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        # After a failed write the buffers may still hold bytes that cannot be written.
        for file in (self._file, self._transcripts):
            with contextlib.suppress(OSError):
                file.close()
