"""The run folder: resolved config, durable ``episodes.jsonl``, transcripts, images by hash.

Writing only; reading a run folder (records, transcripts) is :mod:`parley.records`, which
the analyses in ``parley.observability`` use too. Its readers are re-exported here for code
written before they moved.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from parley.bus.codec import encode
from parley.event_loop import Pacer
from parley.observability import tracing
from parley.records import FINISHED, RecordedRun
from parley.records import main_score as main_score
from parley.records import read_records as read_records
from parley.records import upgrade as upgrade
from parley.runtime.config import ConfigError, ExperimentConfig, redacted
from parley.runtime.episode import EpisodeResult


class RunFolder(RecordedRun):
    """One run's folder, as the runtime writes it. ``episodes.jsonl`` gets a line per finished
    episode, written and fsynced before the episode counts; on resume, finished episodes are
    skipped.

    Transcripts are appended to one ``transcripts.jsonl`` (a message a line, each naming its
    episode); an episode's record gives the byte range of its transcript there. One file
    instead of one per episode: creating thousands of small files costs far more than
    appending the same bytes.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._known_images: set[str] = set()

    @classmethod
    def prepare(
        cls, path: str | Path, config: ExperimentConfig, *, resume: bool, planned: int
    ) -> RunFolder:
        """Create a fresh folder, or reopen one to resume; refuses to mix two runs."""
        folder = cls(path)
        meta_file = folder.path / "run.json"
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
            folder._compact()
        else:
            folder.path.mkdir(parents=True, exist_ok=True)
            run_id = f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(2).hex()}"
            meta = {"run": run_id, "created": time.time(), "name": config.name}
            meta_file.write_text(json.dumps(meta, indent=2))
        meta = json.loads(meta_file.read_text())
        meta["planned"] = planned
        meta_file.write_text(json.dumps(meta, indent=2))
        (folder.path / "config.yaml").write_text(
            # Secrets masked: the folder is shared with the results (runtime/config.py).
            yaml.safe_dump(redacted(config), sort_keys=False)
        )
        folder.images.mkdir(exist_ok=True)
        folder._known_images = {p.stem for p in folder.images.glob("*.png")}
        return folder

    def note(self, **fields: Any) -> None:
        """Add ``fields`` to ``run.json`` (e.g. the event-loop lag a run saw)."""
        meta_file = self.path / "run.json"
        meta = json.loads(meta_file.read_text())
        meta.update(fields)
        meta_file.write_text(json.dumps(meta, indent=2))

    def _compact(self) -> None:
        """Rewrite ``episodes.jsonl`` with one line per finished episode: drops torn lines and
        the records of cancelled episodes, which a resumed run plays again."""
        if not self.episodes.exists():
            return
        kept = [r for r in self.records() if r["outcome"] in FINISHED]
        tmp = self.episodes.with_suffix(".jsonl.tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for record in kept:
                f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.episodes)


@dataclass
class EncodedResult:
    """A finished episode as the bytes that go into the run folder: its record (without the
    transcript's place, which the writer decides), its transcript lines, its images by hash."""

    record: dict[str, Any]
    transcript: bytes
    images: dict[str, bytes]
    # For the run's metrics, when the episode was played in a worker process
    # (parley.observability.metrics.episode_summary).
    metrics: dict[str, Any] | None = None

    @classmethod
    def of(cls, result: EpisodeResult, run: str) -> EncodedResult:
        lines = b"".join(encode(m, inline_images=False) + b"\n" for m in result.transcript)
        return cls(result.record(run), lines, result.images)


class ResultWriter:
    """Writes finished episodes; ``await write(result)`` returns once its line is fsynced.

    Transcripts, images and the record line are encoded and written on the event loop by the
    writer's own task, a slice at a time (page-cache writes take microseconds; a writer thread
    would convoy on the GIL); only ``fsync`` runs in a thread, once per batch of whatever
    finished meanwhile. The run's metrics are fed from here too, off the episode's own path.
    """

    def __init__(self, folder: RunFolder, run: str) -> None:
        self.folder = folder
        self.run = run
        self._pending: list[tuple[EpisodeResult | EncodedResult, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._file = folder.episodes.open("a", encoding="utf-8")
        self._transcripts = folder.transcripts.open("ab")

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="result-writer")

    async def write(self, result: EpisodeResult | EncodedResult) -> None:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((result, future))
        self._wake.set()
        await future

    def _write(self, result: EncodedResult) -> None:
        for sha, data in result.images.items():
            if sha not in self.folder._known_images:
                self.folder.image_path(sha).write_bytes(data)
                self.folder._known_images.add(sha)
        offset = self._transcripts.tell()
        self._transcripts.write(result.transcript)
        record = result.record
        record["transcript"] = {"offset": offset, "length": len(result.transcript)}
        self._file.write(json.dumps(record) + "\n")

    async def _loop(self) -> None:
        pacer = Pacer()
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if batch:
                try:
                    for result, _ in batch:
                        if isinstance(result, EpisodeResult):
                            tracing.record_episode(result)  # the run's metrics
                            result = EncodedResult.of(result, self.run)
                        elif result.metrics is not None:
                            tracing.record_summary(result.metrics)
                        self._write(result)
                        await pacer.breathe()
                    self._transcripts.flush()
                    self._file.flush()
                    await asyncio.to_thread(self._sync)
                except BaseException as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    raise
                for _, future in batch:
                    if not future.done():
                        future.set_result(None)
            if self._closing and not self._pending:
                return

    def _sync(self) -> None:
        os.fsync(self._transcripts.fileno())
        os.fsync(self._file.fileno())

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        self._file.close()
        self._transcripts.close()
