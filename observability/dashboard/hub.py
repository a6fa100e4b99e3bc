"""What the dashboard knows: every run it watches, aggregated from the bus and from run folders.

:class:`Hub` takes bus messages (:meth:`Hub.ingest`: status, episode started/finished,
transcript events, states) and follows run folders (:meth:`Hub.follow`: new lines of
``episodes.jsonl``, read from where it stopped; transcripts read by byte range only for the
episode being viewed and for leak checks). A result from the bus counts only when it carries
the run's signature (parley.bus.signing): the hub trusts the key in the run's folder
(``run.pub``) when it follows one, else the key in the first ``main`` status it gets; a
result that does not verify is dropped and counted as forged. Statuses are checked the same
way once the key is known (a forged "run finished" would show a playing run as over); a
status older than the latest of its process is a replay. What fails is counted by kind (``refused`` in the run view). A
pause, resume or abort the dashboard publishes is signed with the run's key, read from its
folder (:meth:`Hub.control_message`). Ingesting a message is a dictionary lookup and an
append, so watching a busy run costs it little; the views (:meth:`Hub.runs_view`,
:meth:`Hub.run_view`, :meth:`Hub.episodes_view`, :meth:`Hub.episode_view`) are built when a
browser asks, at most a few times a second.

Example::

    hub = Hub()
    hub.follow("runs/quickstart")
    hub.poll_folders()
    print(hub.run_view(hub.runs_view()[0]["run"])["pairings"])
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import statistics
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scipy import stats as scipy_stats

from parley.bus.messages import (
    Control,
    EpisodeFinished,
    EpisodeStarted,
    Message,
    StateUpdate,
    TranscriptEvent,
)
from parley.bus.signing import RunKey, SigningError, read_public_key, verify
from parley.observability.dashboard import episode as shown
from parley.observability.dashboard.index import RUNNING, EpisodeIndex
from parley.observability.leaks import episode_disclosures
from parley.records import EpisodeRecord, parse_message, parse_record

# A run whose processes published their status (every second) and then sent none for this long
# is shown as silent, not live: killed outright (kill -9, a machine gone) it cannot say so.
SILENT_AFTER_S = 15.0
MAX_MESSAGES = 5000  # per live episode
MAX_STATES = 500  # per live episode
KEEP_FINISHED = 200  # live buffers of finished episodes kept (older ones are read from folders)
IMAGE_CACHE_BYTES = 16 * 1024 * 1024  # the pictures of running episodes; recorded ones are on disk
HISTORY = 600  # one sample a second: ten minutes of charts
MAX_LEAKS = 200  # the latest disclosures listed per run (all are counted)
READ_CHUNK = 8 * 1024 * 1024  # of episodes.jsonl per poll, so a huge folder loads in steps
# Results of a run whose key is not known yet wait this long for it (its retained status may
# be taken in after them); then the run counts as unsigned and they are taken unverified.
KEY_GRACE_S = 2.0
MAX_PENDING = 100_000  # results waiting for their run's key, per run
log = logging.getLogger("parley.observability.dashboard")


def pairing_label(pairing: dict[str, str]) -> str:
    """``role=player, …`` as the report writes it."""
    return ", ".join(f"{role}={who}" for role, who in pairing.items())


def _player_label(player: dict[str, Any]) -> str:
    # PlayerSpec.label, from its JSON form.
    if player.get("kind") == "llm" and player.get("model"):
        return str(player["model"])
    return str(player.get("name") or player.get("kind") or "")


def interval95(values: list[float]) -> tuple[float | None, float | None, float | None]:
    """Mean and a 95 % t-interval of ``values`` (no interval below two values)."""
    if not values:
        return None, None, None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None, None
    sd = statistics.stdev(values)
    if sd == 0:
        return mean, mean, mean
    half = float(scipy_stats.t.ppf(0.975, len(values) - 1)) * sd / math.sqrt(len(values))
    return mean, mean - half, mean + half


@dataclass
class PairingStats:
    """A pairing's finished episodes: how many, how many won, their main scores."""

    episodes: int = 0
    success: int = 0
    scores: list[float] = field(default_factory=list)

    def add(self, outcome: str, score: float | None) -> None:
        self.episodes += 1
        self.success += outcome == "success"
        if score is not None and not math.isnan(score):
            self.scores.append(float(score))

    def remove(self, outcome: str, score: float | None) -> None:
        """Take back an episode :meth:`add` counted (its record was superseded)."""
        self.episodes -= 1
        self.success -= outcome == "success"
        if score is not None and not math.isnan(score) and float(score) in self.scores:
            self.scores.remove(float(score))


@dataclass
class LiveEpisode:
    """A running (or lately finished) episode's messages as they arrived on the bus."""

    episode: str
    game: str = ""
    roles: list[str] = field(default_factory=list)
    messages: deque[Message] = field(default_factory=lambda: deque(maxlen=MAX_MESSAGES))
    states: deque[StateUpdate] = field(default_factory=lambda: deque(maxlen=MAX_STATES))
    finished: EpisodeFinished | None = None
    version: int = 0


@dataclass
class Followed:
    """A run folder being read: where ``episodes.jsonl`` was read up to."""

    path: Path
    offset: int = 0
    run: str = ""


class RunState:
    """Everything the dashboard shows about one run."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.name = run
        self.folder: Path | None = None
        self.live = False
        self.statuses: dict[str, dict[str, Any]] = {}
        self.index = EpisodeIndex()
        self.pairings: dict[tuple[str, str], PairingStats] = {}
        # Episode → what its pairing row counted (game, pairing, outcome, score).
        self.scored: dict[str, tuple[str, str, str, float | None]] = {}
        self.leaks = 0
        self.leak_list: deque[dict[str, Any]] = deque(maxlen=MAX_LEAKS)
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self.live_episodes: dict[str, LiveEpisode] = {}
        self.finished_live: OrderedDict[str, None] = OrderedDict()
        self.version = 0
        self.updated_at = 0.0
        self.local_status: Callable[[], dict[str, Any]] | None = None
        self._last_sample: tuple[float, int] | None = None
        # When its last status came (monotonic), and whether it has been silent since.
        self.heard_at: float | None = None
        self.silent_since: float | None = None  # wall time of the last status, when silent
        # Whose results count (parley.bus.signing): the run's public key and where it came
        # from ("folder" or "status"); ``unsigned`` when the run's main status has none (or
        # none came): its results are taken unverified. Results wait in ``pending`` for a key.
        self.key: str | None = None
        self.key_from: str | None = None
        self.unsigned = False
        self.forged = 0
        self.unverified = 0
        self.pending: deque[EpisodeFinished] = deque(maxlen=MAX_PENDING)
        self.pending_since: float | None = None
        self.forged_logged = False
        self.key_conflict_logged = False
        # Statuses dropped as not the run's own (forged, or replayed), by kind.
        self.refused: dict[str, int] = {}
        self.refused_logged = False

    def touch(self) -> None:
        self.version += 1
        self.updated_at = time.time()

    def score(
        self, episode: str, game: str, pairing: str, outcome: str, score: float | None
    ) -> None:
        """Count a finished episode into its pairing's row, once; a later record of it with
        another outcome (``--retry-errors`` played an ``error`` again) replaces the count."""
        if outcome in (RUNNING, "cancelled"):
            return
        before = self.scored.get(episode)
        if before is not None:
            if before[2] == outcome:
                return
            self.pairings[(before[0], before[1])].remove(before[2], before[3])
        self.scored[episode] = (game, pairing, outcome, score)
        self.pairings.setdefault((game, pairing), PairingStats()).add(outcome, score)

    def status(self) -> dict[str, Any]:
        """The run's figures: its main process's status (or the sum of its processes'), with
        the outcome counts the dashboard saw itself."""
        statuses = list(self.statuses.values())
        if not statuses and self.local_status is not None:
            statuses = [self.local_status()]
        main = next((s for s in statuses if s.get("process") == "main"), None)
        combined: dict[str, Any] = {
            "planned": (main or {}).get("planned") or sum(s.get("planned", 0) for s in statuses),
            "running": sum(s.get("running", 0) for s in statuses),
            "failed": sum(s.get("failed", 0) for s in statuses),
            "skipped": (main or {}).get("skipped", 0),
            "paused": any(s.get("paused") for s in statuses),
            "turns_per_s": sum(s.get("turns_per_s") or 0.0 for s in statuses),
            "requests_per_s": sum(s.get("requests_per_s") or 0.0 for s in statuses),
            "eta_s": (main or {}).get("eta_s"),
            "cost_usd": (main or {}).get("cost_usd"),
            "tokens": (main or {}).get("tokens") or {},
            "final": bool(main and main.get("final")),
            "forged": self.forged,
            "refused": dict(self.refused),
        }
        counts = dict(self.index.outcomes)
        combined["done"] = {k: v for k, v in counts.items() if k != RUNNING}
        combined["finished"] = sum(combined["done"].values())
        if not statuses:
            combined["running"] = counts.get(RUNNING, 0)
        return combined

    def sample(self) -> None:
        """One point of the charts: episodes/s from finished counts, turns/s and loop lag from
        the processes' statuses."""
        now = time.monotonic()
        status = self.status()
        done = status["finished"]
        rate = 0.0
        if self._last_sample is not None:
            then, before = self._last_sample
            rate = (done - before) / max(now - then, 1e-6)
        self._last_sample = (now, done)
        lags = [
            (s.get("loop_lag_ms") or {}).get("p99") or 0.0
            for s in (
                self.statuses.values() or ([self.local_status()] if self.local_status else [])
            )
        ]
        self.history.append(
            {
                "t": time.time(),
                "episodes_per_s": round(rate, 2),
                "turns_per_s": round(status["turns_per_s"], 2),
                "requests_per_s": round(status["requests_per_s"], 2),
                "lag_p99_ms": round(max(lags, default=0.0), 2),
            }
        )


class ImageCache:
    """PNG bytes by sha256, the most recently used kept up to a byte budget."""

    def __init__(self, budget: int = IMAGE_CACHE_BYTES) -> None:
        self.budget = budget
        self.size = 0
        self._images: OrderedDict[str, bytes] = OrderedDict()

    def put(self, sha: str, data: bytes) -> None:
        if sha in self._images:
            self._images.move_to_end(sha)
            return
        self._images[sha] = data
        self.size += len(data)
        while self.size > self.budget and self._images:
            _, dropped = self._images.popitem(last=False)
            self.size -= len(dropped)

    def __contains__(self, sha: str) -> bool:
        return sha in self._images

    def get(self, sha: str) -> bytes | None:
        data = self._images.get(sha)
        if data is not None:
            self._images.move_to_end(sha)
        return data


class Hub:
    """Every run the dashboard watches, by run id."""

    def __init__(self) -> None:
        self.runs: dict[str, RunState] = {}
        self.images = ImageCache()
        self.folders: dict[Path, Followed] = {}
        self.roots: list[Path] = []  # folders of run folders, looked through again now and then
        self.ticks = 0
        self.version = 0
        self._views: OrderedDict[tuple[str, str, int], dict[str, Any]] = OrderedDict()

    def run(self, run: str) -> RunState:
        state = self.runs.get(run)
        if state is None:
            state = self.runs[run] = RunState(run)
            self.version += 1
        return state

    # --- from the bus -------------------------------------------------------------------------

    def ingest(self, message: Message) -> None:
        """Take one bus message in; cheap, since it runs for every message of every episode."""
        kind = message.kind
        if kind == "transcript_event" or kind == "episode_started":
            state = self.run(message.run)
            live = self._live(state, message.episode)
            live.messages.append(message)
            live.version += 1
            if isinstance(message, EpisodeStarted):
                self._started(state, live, message)
            elif isinstance(message, TranscriptEvent):
                self._keep_images(message.content)
        elif isinstance(message, StateUpdate):
            state = self.run(message.run)
            live = self._live(state, message.episode)
            live.states.append(message)
            live.version += 1
            self._keep_images(message.content)
        elif kind == "turn_response":
            # A role's reply, as the game master receives it (the embedded dashboard sees these).
            known = self.runs.get(message.run)
            replied = known.live_episodes.get(message.episode) if known else None
            if replied is None or replied.finished is not None:
                return
            replied.messages.append(message)
            replied.version += 1
        elif isinstance(message, EpisodeFinished):
            self._result(message)
        elif kind == "run_status":
            state = self.run(message.run)
            if not self._status_ok(state, message):
                return
            data = message.model_dump(mode="json")
            process = str(data.get("process") or message.sender)
            if process == "main":
                self._status_key(state, data.get("run_key"))
            state.statuses[process] = data
            state.live = not data.get("final", False) or any(
                not s.get("final") for s in state.statuses.values()
            )
            state.heard_at, state.silent_since = time.monotonic(), None
            if data.get("name"):
                state.name = str(data["name"])
            folder = data.get("folder")
            if folder and state.folder is None and (Path(folder) / "episodes.jsonl").exists():
                self.follow(folder, run=message.run)
            state.touch()
        else:
            return
        self.version += 1

    def _live(self, state: RunState, episode: str) -> LiveEpisode:
        live = state.live_episodes.get(episode)
        if live is None:
            live = state.live_episodes[episode] = LiveEpisode(episode)
        return live

    def _keep_images(self, parts: Iterable[Any]) -> None:
        for part in parts:
            if part.type == "image" and part.data is not None:
                self.images.put(part.sha256, part.data)

    def _started(self, state: RunState, live: LiveEpisode, message: EpisodeStarted) -> None:
        players = message.spec.get("players") or {}
        live.game = message.game
        live.roles = list(players)
        pairing = pairing_label({role: _player_label(p) for role, p in players.items()})
        state.live = True
        row = state.index.get(message.episode)
        if row is not None and row.outcome != RUNNING:
            # Its result came first (results and events are separate topics): keep the ending,
            # and count it into its pairing now that the pairing is known.
            row = state.index.upsert(message.episode, game=message.game, pairing=pairing)
            state.score(row.episode, row.game, pairing, row.outcome, row.main_score)
        else:
            state.index.upsert(
                message.episode,
                game=message.game,
                pairing=pairing,
                outcome=RUNNING,
                started_at=message.sent_at,
            )
        state.touch()

    # --- whose results count ------------------------------------------------------------------

    def _result(self, message: EpisodeFinished) -> None:
        """A result from the bus: taken when it verifies against the run's key; held while the
        key is not known yet; taken unverified from a run that signs nothing."""
        state = self.run(message.run)
        if state.key is not None:
            if verify(message, state.key):
                self._finished(message)
            else:
                self._forged(state, message)
        elif state.unsigned:
            state.unverified += 1
            self._finished(message)
        else:
            if state.pending_since is None:
                state.pending_since = time.monotonic()
            state.pending.append(message)

    def _status_ok(self, state: RunState, message: Any) -> bool:
        """Whether a status is the run's own: signed with the trusted key once one is known
        (until then a ``main`` status names it, see :meth:`_status_key`), and not older than
        the latest of its process. The rest is counted and dropped."""
        process = str(message.process or message.sender)
        if state.key is not None and not verify(message, state.key):
            return self._refuse(state, message, "the run's key does not sign it")
        before = state.statuses.get(process)
        if before is not None and message.sent_at < float(before.get("sent_at") or 0.0):
            return self._refuse(state, message, "it is older than the latest one (a replay)")
        return True

    def _refuse(self, state: RunState, message: Any, why: str) -> bool:
        state.refused[message.kind] = state.refused.get(message.kind, 0) + 1
        state.touch()
        if not state.refused_logged:  # once per run: a flood must not flood the log
            state.refused_logged = True
            log.warning(
                "run %s: dropped a %s from %r: %s; later ones are only counted",
                state.run,
                message.kind,
                message.sender,
                why,
            )
        return False

    def control_message(
        self, run: str, command: str, episode: str = "", reason: str = ""
    ) -> Control:
        """A :class:`Control` for ``run``, signed with the run's key from its folder; unsigned
        for a run that signs nothing. Raises :class:`SigningError` when the run has a key
        this dashboard cannot read (the run's processes would refuse what it sent)."""
        message = Control(
            run=run,
            episode=episode,
            sender="dashboard",
            command=command,  # type: ignore[arg-type]
            reason=reason,
        )
        state = self.runs.get(run)
        if state is None or state.key is None:
            return message
        # Its folder, or the one its main status names (before its first record is written);
        # either way the key read there must be the one the run is trusted to sign with.
        folder = state.folder or (state.statuses.get("main") or {}).get("folder")
        if not folder:
            raise SigningError(
                f"run {run} signs its controls, and this dashboard does not have its folder "
                "(its run.key): run the dashboard where the run's folder is"
            )
        key = RunKey.load(folder)  # a SigningError says why it cannot be read
        if key.public_b64 != state.key:
            raise SigningError(f"the key in {folder} is not the one run {run} signs with")
        return key.signed(message)

    def _forged(self, state: RunState, message: EpisodeFinished) -> None:
        state.forged += 1
        state.touch()
        if not state.forged_logged:  # once per run: a flood must not flood the log
            state.forged_logged = True
            log.warning(
                "run %s: dropped a result for episode %s that the run's key does not sign "
                "(forged, or from another run); later ones are only counted",
                state.run,
                message.episode,
            )

    def trust(self, run: str, key: str, source: str) -> None:
        """Take ``key`` as ``run``'s public key (``source``: ``folder`` or ``status``); the
        results waiting for it are checked now."""
        state = self.run(run)
        if state.key == key:
            if source == "folder":
                state.key_from = source  # the folder vouches for the key its status named
            return
        if state.key is not None:
            if state.key_from == "folder" or source != "folder":
                return  # the first key stays, and a folder's beats a status's
            log.warning("run %s: its folder's key replaces the one its status named", run)
        state.key, state.key_from, state.unsigned = key, source, False
        waiting, state.pending_since = list(state.pending), None
        state.pending.clear()
        for message in waiting:
            self._result(message)
        state.touch()
        self.version += 1

    def _status_key(self, state: RunState, key: Any) -> None:
        """A main status: the first that names a key makes it the run's (unless its folder
        gave one); one without a key says the run signs nothing."""
        if isinstance(key, str) and key:
            if state.key is None:
                self.trust(state.run, key, "status")
            elif key != state.key and not state.key_conflict_logged:
                state.key_conflict_logged = True  # statuses come every second: log once
                log.warning(
                    "run %s: a main status names another key than the one trusted (from its "
                    "%s); kept the trusted one",
                    state.run,
                    state.key_from,
                )
        elif state.key is None and not state.unsigned:
            self._take_unverified(state)

    def _take_unverified(self, state: RunState) -> None:
        """No key for this run: its results (those waiting, and later ones until a key is
        known) are taken unverified."""
        state.unsigned = True
        waiting, state.pending_since = list(state.pending), None
        state.pending.clear()
        for message in waiting:
            self._result(message)
        state.touch()

    def _finished(self, message: EpisodeFinished) -> None:
        state = self.run(message.run)
        live = state.live_episodes.get(message.episode)
        if live is not None:
            live.finished = message
            live.messages.append(message)
            live.version += 1
            state.finished_live[message.episode] = None
            while len(state.finished_live) > KEEP_FINISHED:
                old, _ = state.finished_live.popitem(last=False)
                state.live_episodes.pop(old, None)
        row = state.index.get(message.episode)
        started = row.started_at if row is not None else message.sent_at
        row = state.index.upsert(
            message.episode,
            game=message.game,
            outcome=str(message.outcome),
            main_score=message.main_score,
            turns=message.turns,
            duration_s=round(message.sent_at - started, 3) if started else None,
        )
        if row.pairing:  # else once its start (and so its pairing) arrives
            state.score(message.episode, row.game, row.pairing, row.outcome, message.main_score)
        state.touch()

    # --- from run folders ---------------------------------------------------------------------

    def follow(self, path: str | Path, run: str = "") -> RunState | None:
        """Read the run folder at ``path`` (now and on every :meth:`poll_folders`); None if it is
        not one."""
        folder = Path(path).resolve()
        if not (folder / "episodes.jsonl").exists():
            return None
        if folder in self.folders:
            return self.runs.get(self.folders[folder].run)
        meta: Any = {}
        with contextlib.suppress(OSError, ValueError):
            meta = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        if not isinstance(meta, dict):  # damaged: the folder's name stands in for the run's
            meta = {}
        run = base = run or str(meta.get("run") or folder.name)
        copy = 1
        while (taken := self.runs.get(run)) is not None and taken.folder not in (None, folder):
            # A copy of a folder already followed (a backup, a run copied elsewhere): a run of
            # its own, not merged into the first, whose records it would hide or overwrite.
            copy += 1
            run = f"{base}~{copy}"
        state = self.run(run)
        state.folder = folder
        key = read_public_key(folder)
        if key is not None:
            self.trust(run, key, "folder")
        if state.name == run:
            state.name = str(meta.get("name") or folder.name)
        self.folders[folder] = Followed(folder, run=run)
        self.poll_folder(self.folders[folder])
        return state

    def follow_all(self, root: str | Path) -> int:
        """Follow every run folder directly under ``root`` (and ``root`` itself if it is one)."""
        base = Path(root)
        if base not in self.roots:
            self.roots.append(base)
        found = 0
        for candidate in [base, *sorted(p for p in base.iterdir() if p.is_dir())]:
            if candidate.resolve() in self.folders or self.follow(candidate) is not None:
                found += 1
        return found

    def poll_folders(self) -> None:
        """Read what was appended to the followed folders' ``episodes.jsonl`` since last time."""
        for followed in list(self.folders.values()):
            self.poll_folder(followed)

    def poll_folder(self, followed: Followed) -> int:
        """New complete records of one folder, at most :data:`READ_CHUNK` bytes of them."""
        path = followed.path / "episodes.jsonl"
        try:
            with path.open("rb") as f:
                f.seek(followed.offset)
                chunk = f.read(READ_CHUNK)
        except OSError:
            return 0
        end = chunk.rfind(b"\n")
        if end < 0:
            return 0
        state = self.run(followed.run)
        start = followed.offset
        count = 0
        for line in chunk[: end + 1].splitlines(keepends=True):
            offset, start = start, start + len(line)
            if not line.strip():
                continue
            record = parse_record(line)
            if record is None:  # a damaged line (parley.records warns of it when read whole)
                continue
            self._recorded(state, record, offset)
            count += 1
        followed.offset += end + 1
        if count:
            state.touch()
            self.version += 1
        return count

    def _recorded(self, state: RunState, record: EpisodeRecord, offset: int) -> None:
        episode = record.episode
        if not episode:
            return
        pairing = pairing_label(record.pairing)
        score = record.main_score
        row = state.index.upsert(
            episode,
            game=record.game,
            pairing=pairing,
            outcome=record.outcome,
            main_score=score,
            turns=record.turns,
            started_at=record.started_at or 0.0,
            duration_s=record.duration_s,
            offset=offset,
        )
        state.score(episode, row.game, pairing, row.outcome, score)
        if record.private_facts and record.transcript and state.folder is not None:
            found = episode_disclosures(record, self._transcript(state.folder, record))
            row.leaks = len(found)
            state.leaks += len(found)
            for d in found:
                state.leak_list.append(
                    {
                        "episode": d.episode,
                        "from_role": d.from_role,
                        "to_role": d.to_role,
                        "fact": d.fact,
                        "kind": d.kind,
                        "match": d.match,
                        "turn": d.turn,
                    }
                )

    @staticmethod
    def _transcript(folder: Path, record: EpisodeRecord) -> list[dict[str, Any]]:
        """An episode's messages, read by the byte range its record gives."""
        where = record.transcript
        if not where:
            return []
        try:
            with (folder / "transcripts.jsonl").open("rb") as f:
                f.seek(where.offset)
                lines = f.read(where.length).splitlines()
        except OSError:  # gone, or not a file: the episode shows without its messages
            return []
        messages = []
        for line in lines:
            message = parse_message(line)
            if message is not None and message.get("episode") == record.episode:
                messages.append(message)
        return messages

    def record(self, run: str, episode: str) -> EpisodeRecord | None:
        """An episode's record from its run folder (one line read, upgraded), if it has one."""
        state = self.runs.get(run)
        row = state.index.get(episode) if state else None
        if state is None or row is None or row.offset is None or state.folder is None:
            return None
        try:
            with (state.folder / "episodes.jsonl").open("rb") as f:
                f.seek(row.offset)
                return parse_record(f.readline())
        except OSError:
            return None

    def has_image(self, sha: str) -> bool:
        """Whether :meth:`image` can serve ``sha`` now."""
        return sha in self.images or any(
            (f.path / "images" / f"{sha}.png").is_file() for f in self.folders.values()
        )

    def image(self, sha: str) -> bytes | None:
        """An image by sha256: from the bus's cache, else from a followed run folder."""
        data = self.images.get(sha)
        if data is not None:
            return data
        for followed in self.folders.values():
            path = followed.path / "images" / f"{sha}.png"
            if path.is_file():
                with contextlib.suppress(OSError):
                    return path.read_bytes()
        return None

    # --- views ------------------------------------------------------------------------------

    def runs_view(self) -> list[dict[str, Any]]:
        out = []
        for state in self.runs.values():
            status = state.status()
            out.append(
                {
                    "run": state.run,
                    "name": state.name,
                    "live": state.live and not status["final"],
                    "silent_since": state.silent_since,
                    "folder": str(state.folder) if state.folder else None,
                    "episodes": len(state.index),
                    "planned": status["planned"],
                    "finished": status["finished"],
                    "running": status["running"],
                    "paused": status["paused"],
                    "done": status["done"],
                    "updated_at": state.updated_at,
                }
            )
        return sorted(out, key=lambda r: (not r["live"], -r["updated_at"], r["run"]))

    def run_view(self, run: str) -> dict[str, Any] | None:
        state = self.runs.get(run)
        if state is None:
            return None
        pairings = []
        for (game, pairing), stats in sorted(state.pairings.items()):
            mean, low, high = interval95(stats.scores)
            pairings.append(
                {
                    "game": game,
                    "pairing": pairing,
                    "episodes": stats.episodes,
                    "success_pct": 100.0 * stats.success / stats.episodes
                    if stats.episodes
                    else None,
                    "main": mean,
                    "low": low,
                    "high": high,
                    "scored": len(stats.scores),
                }
            )
        statuses = list(state.statuses.values())
        if not statuses and state.local_status is not None:
            statuses = [state.local_status()]
        endpoints = [
            {**e, "process": s.get("process", "")}
            for s in statuses
            for e in s.get("endpoints") or []
        ]
        processes = [
            {
                "process": s.get("process", ""),
                "pid": s.get("pid"),
                "running": s.get("running", 0),
                "turns_per_s": s.get("turns_per_s"),
                "loop_lag_ms": s.get("loop_lag_ms") or {},
                "paused": s.get("paused", False),
                "updated_at": s.get("updated_at"),
            }
            for s in statuses
        ]
        return {
            "run": state.run,
            "name": state.name,
            "live": state.live,
            "silent_since": state.silent_since,
            "folder": str(state.folder) if state.folder else None,
            "status": state.status(),
            "outcomes": dict(state.index.outcomes),
            "pairings": pairings,
            "endpoints": endpoints,
            "processes": processes,
            "leaks": {"count": state.leaks, "latest": list(state.leak_list)[-20:]},
            "results": {
                # Whether results are checked against the run's key, and what was dropped.
                "verified": state.key is not None,
                "key": state.key,
                "key_from": state.key_from,
                "forged": state.forged,
                "unverified": state.unverified,
                "waiting": len(state.pending),
            },
            # Statuses dropped as not the run's own (forged or replayed), by kind.
            "refused": dict(state.refused),
            "history": list(state.history),
        }

    def episodes_view(self, run: str, **query: Any) -> dict[str, Any] | None:
        state = self.runs.get(run)
        return None if state is None else state.index.query(**query)

    def episode_view(self, run: str, episode: str) -> dict[str, Any] | None:
        """The episode page's content: its live messages while it runs, its recorded transcript
        once its record is on disk (cached per version)."""
        state = self.runs.get(run)
        if state is None:
            return None
        row = state.index.get(episode)
        live = state.live_episodes.get(episode)
        recorded = row is not None and row.offset is not None and state.folder is not None
        source = "folder" if recorded else "live"
        version = 0 if recorded else (live.version if live else -1)
        key = (run, episode, version)
        cached = self._views.get(key)
        if cached is not None and cached["source"] == source:
            self._views.move_to_end(key)
            return cached
        if recorded:
            view = self._recorded_view(state, episode)
        elif live is not None:
            view = self._live_view(state, live)
        else:
            return None
        view["source"] = source
        view["row"] = row.as_dict() if row else None
        if not view.get("pairing") and row is not None:
            view["pairing"] = row.pairing
        self._views[key] = view
        while len(self._views) > 32:
            self._views.popitem(last=False)
        return view

    def _live_view(self, state: RunState, live: LiveEpisode) -> dict[str, Any]:
        dumped = [m.model_dump(mode="json", context={"images": "ref"}) for m in live.messages]
        states = [
            shown.state(s.model_dump(mode="json", context={"images": "ref"})) for s in live.states
        ]
        finished = live.finished
        return {
            "run": state.run,
            "episode": live.episode,
            "game": live.game,
            "roles": live.roles,
            "live": finished is None,
            "items": shown.items(dumped),
            "states": states,
            "outcome": str(finished.outcome) if finished else RUNNING,
            "reason": finished.reason if finished else "",
            "scores": finished.scores if finished else (states[-1]["scores"] if states else {}),
            "main_score": finished.main_score if finished else None,
        }

    def _recorded_view(self, state: RunState, episode: str) -> dict[str, Any]:
        record = self.record(state.run, episode)
        assert state.folder is not None
        messages = self._transcript(state.folder, record) if record else []
        found = shown.disclosures(record, messages) if record else {}
        items = shown.mark(shown.items(messages), found)
        live = state.live_episodes.get(episode)
        states = shown.states(messages)
        if not any(m.get("kind") == "state_update" for m in messages) and live and live.states:
            # States cross the bus but are not recorded: keep the live ones while their
            # pictures are still at hand.
            seen = [
                shown.state(s.model_dump(mode="json", context={"images": "ref"}))
                for s in live.states
            ]
            if all(self.has_image(sha) for s in seen for sha in s["images"]):
                states = seen
        return {
            "run": state.run,
            "episode": episode,
            "game": record.game if record else "",
            "roles": list(record.pairing) if record else [],
            "live": False,
            "items": items,
            "states": states,
            "outcome": record.outcome if record else "",
            "reason": record.reason if record else "",
            "scores": record.scores if record else {},
            "main_score": record.main_score if record else None,
            "pairing": pairing_label(record.pairing) if record else "",
            "seed": record.seed if record else None,
        }

    def tick(self) -> None:
        """Once a second: read the folders' new records and take a chart sample of live runs;
        every ten, look for new run folders."""
        self.ticks += 1
        now = time.monotonic()
        for state in self.runs.values():
            since = state.pending_since
            if since is not None and state.key is None and now - since >= KEY_GRACE_S:
                log.info("run %s: no run key came; its results are taken unverified", state.run)
                self._take_unverified(state)
        if self.ticks % 10 == 0:
            for root in self.roots:
                with contextlib.suppress(OSError):
                    self.follow_all(root)
        self.poll_folders()
        for state in self.runs.values():
            heard = state.heard_at
            if state.live and heard is not None and now - heard > SILENT_AFTER_S:
                log.warning("run %s: no status for %.0f s: shown as silent", state.run, now - heard)
                state.live = False
                state.silent_since = time.time() - (now - heard)
                state.touch()
            if state.live or state.local_status is not None:
                state.sample()
                state.touch()
        self.version += 1
