"""Run metrics through the OpenTelemetry metrics API: episodes, turns, tokens and latencies.

Recorded once per finished episode from its transcript (nothing is added to the turn loop),
exported to ``metrics.jsonl`` in the run folder (one OTLP-JSON ``MetricsData`` object per
export: every minute and at the end of the run, cumulative, so the last line holds the totals)
and to an OTLP collector when ``OTEL_EXPORTER_OTLP[_METRICS]_ENDPOINT`` is set.

Instruments (attributes in brackets):

- ``parley.episodes`` counter [parley.game, parley.pairing, parley.outcome]
- ``parley.turns`` counter [parley.game, parley.role, parley.model]
- ``parley.tokens`` counter, every token a role used, backend-reported or counted
  [parley.game, parley.role, parley.model, gen_ai.token.type, parley.token_source]
- ``gen_ai.client.token.usage`` histogram per model call (GenAI conventions)
  [gen_ai.operation.name, gen_ai.request.model, gen_ai.token.type]
- ``gen_ai.client.operation.duration`` histogram (s) per model call attempt
  [gen_ai.operation.name, gen_ai.request.model, error.type]
- ``parley.turn.duration`` histogram (s): one turn, request sent to next request sent
- ``parley.agent.duration`` histogram (s): the policy's part of it (model calls for models);
  both for model and human players only (scripted play's time is next to nothing)
- ``parley.episode.duration`` histogram (s) [parley.game, parley.outcome]
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import functools
import logging
import math
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    NumberDataPoint,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from parley.observability.tracing import METRICS_FILE, otlp_settings

log = logging.getLogger("parley.observability.metrics")
_bisect = bisect.bisect_left
SECONDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]
TOKENS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576]
EXPORT_INTERVAL_MS = 60_000
# An attribute set as the instruments keep it: its items, in order.
Key = tuple[tuple[str, Any], ...]


class JsonlMetricExporter(MetricExporter):
    """Appends each export as one line of OTLP JSON (``MetricsData.to_json``)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._failed = False

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        line = metrics_data.to_json(indent=None) + "\n"
        with self._lock:
            if self._file.closed or self._failed:
                return MetricExportResult.FAILURE
            try:
                self._file.write(line)
                self._file.flush()
            except OSError as exc:  # a full disk costs the metrics, never the run
                self._failed = True
                log.warning(
                    "cannot write metrics to %s (%s): this process's later exports are "
                    "dropped (the run's records are not affected)",
                    self.path,
                    exc.strerror or exc,
                )
                return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        with self._lock, contextlib.suppress(OSError):  # what a failed write left buffered
            self._file.close()


# Older SDKs' data points have no exemplars.
_EXEMPLARS = "exemplars" in {f.name for f in dataclasses.fields(HistogramDataPoint)}
assert ("exemplars" in {f.name for f in dataclasses.fields(NumberDataPoint)}) == _EXEMPLARS


class LocalHistogram:
    """An explicit-bucket histogram aggregated here, cumulatively, per attribute set.

    The SDK's ``Histogram.record`` checks, copies and hashes the attributes of every value;
    an episode of a model-played run records dozens of values, which made the run's metrics a
    large share of what tracing cost per model request. Here an episode's values are
    appended as a list and bucketed in bulk, a few thousand at a time and at every export
    (a bisect and a count each, in C); the readers add the histograms to every export
    (:class:`_Reader`), so files and collectors get them as the SDK's own.
    """

    # Values wait in a list until this many, then go into their buckets in one pass.
    FOLD_AT = 4096

    def __init__(
        self,
        name: str,
        unit: str,
        description: str,
        bounds: Sequence[float],
        lock: threading.Lock | None = None,
    ) -> None:
        self.name, self.unit, self.description = name, unit, description
        self.bounds = list(bounds)
        # attributes (as a tuple of items) -> [bucket counts, sum, count, min, max]
        self.points: dict[Key, list[Any]] = {}
        # (key, value) pairs not yet in points: an episode's values are appended as a list
        # (no call per value), and bucketed in bulk (_fold) by C-level passes.
        self.waiting: list[tuple[Key, float]] = []
        # Shared by the run's instruments: an episode's values are added under one lock.
        self.lock = lock if lock is not None else threading.Lock()
        self.start_ns = time.time_ns()
        self._bucket_of = functools.partial(_bisect, self.bounds)

    def record(self, value: float, attributes: dict[str, Any]) -> None:
        key = tuple(attributes.items())
        with self.lock:
            self.add_locked(value, key)

    def add_locked(self, value: float, key: Key) -> None:
        """Record ``value`` under attributes already made a key; the caller holds the lock."""
        self.extend_locked(((key, value),))

    def extend_locked(self, pairs: Iterable[tuple[Key, float]]) -> None:
        """Record ``(key, value)`` pairs; the caller holds the lock."""
        waiting = self.waiting
        waiting.extend(pairs)
        if len(waiting) >= self.FOLD_AT:
            self._fold()

    def _fold(self) -> None:
        """Put the waiting values into their points' buckets (the lock held)."""
        waiting, self.waiting = self.waiting, []
        groups: collections.defaultdict[Key, list[float]] = collections.defaultdict(list)
        for key, value in waiting:
            groups[key].append(value)
        for key, values in groups.items():  # a run has few keys: each bucketed in C
            point = self.points.get(key)
            if point is None:
                point = self.points[key] = [
                    [0] * (len(self.bounds) + 1),
                    0.0,
                    0,
                    math.inf,
                    -math.inf,
                ]
            counts = point[0]
            # Bucket i holds (bounds[i-1], bounds[i]], as OpenTelemetry's explicit buckets.
            for bucket, n in collections.Counter(map(self._bucket_of, values)).items():
                counts[bucket] += n
            point[1] += sum(values)
            point[2] += len(values)
            point[3] = min(point[3], min(values))
            point[4] = max(point[4], max(values))

    def metric(self, now_ns: int) -> Metric | None:
        """The cumulative state as SDK metric data (None before the first value)."""
        with self.lock:
            if self.waiting:
                self._fold()
            points = [(k, [list(p[0]), *p[1:]]) for k, p in self.points.items()]
        if not points:
            return None
        data_points = []
        for key, (counts, total, count, low, high) in points:
            fields: dict[str, Any] = {
                "attributes": dict(key),
                "start_time_unix_nano": self.start_ns,
                "time_unix_nano": now_ns,
                "count": count,
                "sum": total,
                "bucket_counts": counts,
                "explicit_bounds": self.bounds,
                "min": low,
                "max": high,
            }
            if _EXEMPLARS:
                fields["exemplars"] = []
            data_points.append(HistogramDataPoint(**fields))
        return Metric(
            name=self.name,
            description=self.description,
            unit=self.unit,
            data=Histogram(
                data_points=data_points,
                aggregation_temporality=AggregationTemporality.CUMULATIVE,
            ),
        )


class LocalCounter:
    """A monotonic counter aggregated here, cumulatively, per attribute set (see
    :class:`LocalHistogram`: the same reasons, the same export)."""

    def __init__(
        self, name: str, unit: str, description: str, lock: threading.Lock | None = None
    ) -> None:
        self.name, self.unit, self.description = name, unit, description
        self.points: dict[Key, int | float] = {}
        self.lock = lock if lock is not None else threading.Lock()
        self.start_ns = time.time_ns()

    def add(self, amount: int | float, attributes: dict[str, Any]) -> None:
        key = tuple(attributes.items())
        with self.lock:
            self.add_locked(amount, key)

    def add_locked(self, amount: int | float, key: Key) -> None:
        """Add ``amount`` under attributes already made a key; the caller holds the lock."""
        points = self.points
        points[key] = points.get(key, 0) + amount

    def observe(self) -> list[tuple[Key, int | float]]:
        """The cumulative values by attributes (for an observable instrument's callback)."""
        with self.lock:
            return list(self.points.items())

    def metric(self, now_ns: int) -> Metric | None:
        points = self.observe()
        if not points:
            return None
        data_points = []
        for key, value in points:
            fields: dict[str, Any] = {
                "attributes": dict(key),
                "start_time_unix_nano": self.start_ns,
                "time_unix_nano": now_ns,
                "value": value,
            }
            if _EXEMPLARS:
                fields["exemplars"] = []
            data_points.append(NumberDataPoint(**fields))
        return Metric(
            name=self.name,
            description=self.description,
            unit=self.unit,
            data=Sum(
                data_points=data_points,
                aggregation_temporality=AggregationTemporality.CUMULATIVE,
                is_monotonic=True,
            ),
        )


class _Reader(PeriodicExportingMetricReader):
    """A periodic reader that adds the run's :class:`LocalHistogram` s to each export."""

    def __init__(
        self,
        exporter: MetricExporter,
        instruments: list[LocalHistogram | LocalCounter],
        resource: Resource,
    ) -> None:
        super().__init__(exporter, export_interval_millis=EXPORT_INTERVAL_MS)
        self._instruments = instruments
        self._resource = resource

    def _receive_metrics(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> None:
        data = merged(metrics_data, self._instruments, self._resource)
        if data.resource_metrics:
            super()._receive_metrics(data, timeout_millis, **kwargs)


def merged(
    data: MetricsData | None,
    instruments: list[LocalHistogram | LocalCounter],
    resource: Resource,
) -> MetricsData:
    """``data`` with the ``instruments`` added to the ``parley`` scope of its first resource
    (a resource of their own when the SDK has nothing to export)."""
    now = time.time_ns()
    extra = [m for h in instruments if (m := h.metric(now)) is not None]
    if data is None or not data.resource_metrics:
        if not extra:
            return MetricsData([])
        return MetricsData(
            [
                ResourceMetrics(
                    resource, [ScopeMetrics(InstrumentationScope("parley"), extra, "")], ""
                )
            ]
        )
    if not extra:
        return data
    first, *rest = data.resource_metrics
    scopes = list(first.scope_metrics)
    for i, scope in enumerate(scopes):
        if scope.scope.name == "parley":
            scopes[i] = ScopeMetrics(scope.scope, [*scope.metrics, *extra], scope.schema_url)
            break
    else:
        scopes.append(ScopeMetrics(InstrumentationScope("parley"), extra, ""))
    return MetricsData([ResourceMetrics(first.resource, scopes, first.schema_url), *rest])


def _otlp_exporter() -> MetricExporter | None:
    configured, protocol = otlp_settings("metrics")
    if not configured:
        return None
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[assignment]
            OTLPMetricExporter,
        )
    return OTLPMetricExporter()


# The messages turn_timings reads (the rest of a transcript, events mostly, it skips).
_TIMED_KINDS = frozenset(("turn_request", "turn_response", "episode_finished"))


def turn_timings(messages: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Per answered turn: role, model, wall time, the policy's time, usage and call records.

    ``turn_s`` runs from the turn request being sent to the next request (or the episode's end);
    ``agent_s`` is what the policy reported (for model players: the model calls, retries
    included); the rest is the runtime's (bus, game master, recording). Works on message objects
    and on their JSON (a transcript read back).
    """
    pending: dict[str, Any] | None = None
    for m in messages:
        if isinstance(m, dict):  # a transcript read back: its JSON, fields as attributes
            if m.get("kind") not in _TIMED_KINDS:
                continue
            m = SimpleNamespace(**m)
        # Fields read as attributes, with defaults: most of a transcript is events, skipped
        # after one read (this runs once per finished episode of a traced run).
        kind = getattr(m, "kind", None)
        if kind == "turn_request":
            sent = float(getattr(m, "sent_at", None) or 0.0)
            if pending is not None and pending.get("answered"):
                pending["turn_s"] = max(0.0, sent - pending["sent_at"])
                yield pending
            pending = {
                "role": getattr(m, "role", None),
                "turn": getattr(m, "turn", None),
                "sent_at": sent,
            }
        elif kind == "turn_response" and pending is not None:
            usage = getattr(m, "usage", None)
            pending["answered"] = True
            pending["model"] = getattr(m, "model", None) or ""
            pending["agent_s"] = float(getattr(m, "latency_s", None) or 0.0)
            if usage is None:
                pending["usage"] = None
            elif isinstance(usage, dict):  # read back from JSON
                pending["usage"] = {
                    "input": usage.get("input_tokens", 0),
                    "output": usage.get("output_tokens", 0),
                    "source": usage.get("source", "backend"),
                }
            else:  # a Usage: its fields as they are
                pending["usage"] = {
                    "input": usage.input_tokens,
                    "output": usage.output_tokens,
                    "source": usage.source,
                }
            pending["calls"] = list(getattr(m, "calls", None) or [])
            pending["replied_at"] = float(getattr(m, "sent_at", None) or 0.0)
        elif kind == "episode_finished" and pending is not None and pending.get("answered"):
            sent = float(getattr(m, "sent_at", None) or 0.0)
            pending["turn_s"] = max(0.0, sent - pending["sent_at"])
            yield pending
            pending = None
    if pending is not None and pending.get("answered"):
        pending["turn_s"] = max(pending["agent_s"], pending["replied_at"] - pending["sent_at"])
        yield pending


class RunMetrics:
    """The run's meter provider and instruments; :meth:`record_episode` feeds them."""

    def __init__(self, run_dir: str | Path | None, resource: Resource) -> None:
        # Every instrument aggregated here, under one lock (an episode's values are added in
        # one go); every reader exports them as the SDK's own (_Reader, merged).
        self.lock = threading.Lock()
        lock = self.lock
        self.token_usage = LocalHistogram(
            "gen_ai.client.token.usage", "{token}", "Tokens per model call", TOKENS, lock
        )
        self.call_duration = LocalHistogram(
            "gen_ai.client.operation.duration", "s", "Model call attempts", SECONDS, lock
        )
        self.turn_duration = LocalHistogram("parley.turn.duration", "s", "One turn", SECONDS, lock)
        self.agent_duration = LocalHistogram(
            "parley.agent.duration", "s", "The policy's part of a turn", SECONDS, lock
        )
        self.episode_duration = LocalHistogram(
            "parley.episode.duration", "s", "One episode", SECONDS, lock
        )
        self.turns = LocalCounter("parley.turns", "{turn}", "Answered turns", lock)
        self.tokens = LocalCounter("parley.tokens", "{token}", "Tokens used per role", lock)
        self.episodes = LocalCounter("parley.episodes", "{episode}", "Finished episodes", lock)
        instruments: list[LocalHistogram | LocalCounter] = [
            self.turns,
            self.tokens,
            self.token_usage,
            self.call_duration,
            self.turn_duration,
            self.agent_duration,
            self.episode_duration,
        ]
        # Attribute keys made once per distinct set (a few per run, thousands of values).
        self._keys: dict[tuple[Any, ...], Key] = {}
        readers: list[MetricReader] = []
        if run_dir is not None:
            exporter = JsonlMetricExporter(Path(run_dir) / METRICS_FILE)
            readers.append(_Reader(exporter, instruments, resource))
        otlp = _otlp_exporter()
        if otlp is not None:
            readers.append(_Reader(otlp, instruments, resource))
        # The SDK's provider runs the readers (periodic export, flush and shutdown). The
        # episodes reach it as an observable counter, read at export: the SDK exports nothing
        # (and skips the readers) while it has no data of its own, and its synchronous
        # counter's add cost more per episode than the rest of the metrics together.
        self.provider = MeterProvider(resource=resource, metric_readers=readers)
        meter = self.provider.get_meter("parley")
        meter.create_observable_counter(
            "parley.episodes", [self._observe_episodes], "{episode}", "Finished episodes"
        )

    def _observe_episodes(self, options: CallbackOptions) -> Iterator[Observation]:
        for key, value in self.episodes.observe():
            yield Observation(value, dict(key))

    def record_episode(self, result: Any) -> None:
        self.record(episode_summary(result))

    def _key(self, *parts: Any) -> Key:
        """The attribute key of ``parts``: (game, role, model) for a role's turns, (model,
        token type) for token usage, (model, error type) for a call's duration."""
        key = self._keys.get(parts)
        if key is None:
            if len(self._keys) >= 10_000:  # unbounded labels: keep memory bounded
                self._keys.clear()
            kind = parts[0]
            if kind == "role":
                _, game, role, model = parts
                attrs = {"parley.game": game, "parley.role": role, "parley.model": model}
            elif kind == "usage":
                _, model, token_type = parts
                attrs = {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": model,
                    "gen_ai.token.type": token_type,
                }
            else:  # "call"
                _, model, error = parts
                attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
                if error != "ok":
                    attrs["error.type"] = error
            key = self._keys[parts] = tuple(attrs.items())
        return key

    def record(self, summary: dict[str, Any]) -> None:
        """Feed the instruments from an :func:`episode_summary` (made where the episode ran,
        recorded where the metrics live: the parent of a run with worker processes)."""
        game, outcome, labels = summary["game"], summary["outcome"], summary["labels"]
        key = self._key
        token_keys = []
        for role, tokens in summary["tokens"].items():
            source = summary["token_source"].get(role, "counted")
            for kind in ("input", "output"):
                if tokens.get(kind):
                    attrs = {
                        "parley.game": game,
                        "parley.role": role,
                        "parley.model": labels.get(role, ""),
                        "gen_ai.token.type": kind,
                        "parley.token_source": source,
                    }
                    token_keys.append((tokens[kind], tuple(attrs.items())))
        role_keys = {
            role: key("role", game, role, labels.get(role, "")) for role in summary["turns"]
        }
        with self.lock:
            self.episodes.add_locked(
                1,
                (
                    ("parley.game", game),
                    ("parley.pairing", summary["pairing"]),
                    ("parley.outcome", outcome),
                ),
            )
            self.episode_duration.add_locked(
                summary["duration_s"], (("parley.game", game), ("parley.outcome", outcome))
            )
            for amount, token_key in token_keys:
                self.tokens.add_locked(amount, token_key)
            # Each histogram takes the episode's values as one list (no call per value).
            timed = summary["timed"]
            self.turn_duration.extend_locked([(role_keys[t["role"]], t["turn_s"]) for t in timed])
            self.agent_duration.extend_locked([(role_keys[t["role"]], t["agent_s"]) for t in timed])
            usage_values: list[tuple[Key, float]] = []
            call_values: list[tuple[Key, float]] = []
            # An episode's turns share a model or two: their keys looked up once each.
            usage_keys: dict[str, tuple[Key, Key]] = {}
            call_keys: dict[tuple[str, str], Key] = {}
            for t in timed:
                model = t["model"] or labels.get(t["role"], "")
                usage = t["usage"]
                if usage is not None and usage["source"] == "backend":
                    pair = usage_keys.get(model)
                    if pair is None:
                        pair = usage_keys[model] = (
                            key("usage", model, "input"),
                            key("usage", model, "output"),
                        )
                    usage_values.append((pair[0], usage["input"]))
                    usage_values.append((pair[1], usage["output"]))
                for call in t["calls"]:
                    latency = call.get("latency_s")
                    if latency is not None:
                        outcome = call.get("outcome", "ok")
                        call_key = call_keys.get((model, outcome))
                        if call_key is None:
                            call_key = call_keys[model, outcome] = key("call", model, outcome)
                        call_values.append((call_key, float(latency)))
            self.token_usage.extend_locked(usage_values)
            self.call_duration.extend_locked(call_values)
            for role, count in summary["turns"].items():
                self.turns.add_locked(count, role_keys[role])

    def close(self) -> None:
        # Shutting down exports once more (each reader's last collection) and flushes: a
        # force_flush first wrote the same totals twice (an export is not free).
        self.provider.shutdown()


def episode_summary(result: Any) -> dict[str, Any]:
    """What the run's metrics take from a finished episode, as plain JSON-able values."""
    spec = result.spec
    # Per-turn latencies only for players whose latency says something (models, people):
    # a scripted player's near-instant turns would cost more to record than they are worth.
    timed_roles = {r for r, p in spec.players.items() if p.kind not in ("scripted", "random")}
    turns: dict[str, int] = {}
    timed = []
    for t in turn_timings(result.transcript):
        turns[t["role"]] = turns.get(t["role"], 0) + 1
        if t["role"] in timed_roles:
            timed.append(
                {
                    "role": t["role"],
                    "turn_s": t["turn_s"],
                    "agent_s": t["agent_s"],
                    "model": t["model"],
                    "usage": t["usage"],
                    "calls": t["calls"],
                }
            )
    return {
        "game": spec.game,
        "pairing": spec.pairing_label,
        "labels": {role: player.label for role, player in spec.players.items()},
        "outcome": result.outcome,
        "duration_s": max(0.0, result.finished_at - result.started_at),
        "tokens": result.tokens,
        "token_source": result.token_source,
        "turns": turns,
        "timed": timed,
    }
