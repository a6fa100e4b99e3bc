"""Typed bus messages: one envelope, content parts, and a discriminated union on ``kind``."""

from __future__ import annotations

import base64
import hashlib
import os
import random
import time
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    TypeAdapter,
    field_serializer,
    model_validator,
)

_ids = random.Random(os.urandom(16))
# A forked child must not repeat its parent's ids.
os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(16)))


def new_id() -> str:
    """A fresh random message id (32 hex characters; os.urandom per id is slow on some hosts).

    The 128 random bits as bytes in hex: the same ids as formatting them (``:032x``), for half
    the CPU (every message takes one)."""
    return _ids.getrandbits(128).to_bytes(16).hex()


class Visibility(StrEnum):
    """Who may see a transcript event: one role, the roles of the episode, or anyone watching."""

    PRIVATE = "private"
    SHARED = "shared"
    PUBLIC = "public"


class Outcome(StrEnum):
    """How an episode ended (clembench's three plus the runtime's own two)."""

    SUCCESS = "success"
    LOST = "lost"
    ABORTED = "aborted"
    ERROR = "error"
    CANCELLED = "cancelled"


class TextPart(BaseModel):
    """A piece of text content."""

    model_config = ConfigDict(frozen=True)
    type: Literal["text"] = "text"
    text: str


def image_json(data: bytes | None, inline: bool) -> str | None:
    """An image's ``data`` as a message's JSON carries it: base64 when images go inline, null
    when they go by reference (the sha256 names them) or the part has no bytes. The one rule
    for pydantic's serializer and the codec's fast path (bus/codec.py)."""
    if data is None or not inline:
        return None
    return base64.b64encode(data).decode("ascii")


class ImagePart(BaseModel):
    """An image addressed by the sha256 of its bytes; ``data`` may be absent (sent by reference)."""

    model_config = ConfigDict(frozen=True, val_json_bytes="base64")
    type: Literal["image"] = "image"
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    media_type: str = "image/png"
    size: int = Field(ge=0)
    data: bytes | None = Field(default=None, repr=False)

    @classmethod
    def from_bytes(cls, data: bytes, media_type: str = "image/png") -> ImagePart:
        return cls(
            sha256=hashlib.sha256(data).hexdigest(),
            media_type=media_type,
            size=len(data),
            data=data,
        )

    @field_serializer("data", when_used="json")
    def _data_json(self, data: bytes | None, info: SerializationInfo) -> str | None:
        # ``context={"images": "ref"}`` leaves the bytes out (images sent by reference).
        return image_json(data, not (info.context and info.context.get("images") == "ref"))

    @model_validator(mode="after")
    def _check_data(self) -> ImagePart:
        if self.data is not None:
            if len(self.data) != self.size:
                raise ValueError(f"image size {self.size} does not match {len(self.data)} bytes")
            if hashlib.sha256(self.data).hexdigest() != self.sha256:
                raise ValueError("image bytes do not match their sha256")
        return self

    def by_reference(self) -> ImagePart:
        """The same image without its bytes."""
        return self if self.data is None else self.model_copy(update={"data": None})


Part = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class Usage(BaseModel):
    """Token usage of one model call; ``source`` says whether a backend reported it or it was counted."""

    input_tokens: int = 0
    output_tokens: int = 0
    source: Literal["backend", "counted"] = "backend"


WIRE_VERSION = 1


class Envelope(BaseModel):
    """Fields every message carries; ``v`` is the wire version."""

    model_config = ConfigDict(extra="forbid")
    v: Literal[1] = 1
    id: str = Field(default_factory=new_id)
    run: str
    episode: str = ""
    sender: str
    recipient: str = ""
    turn: int = 0
    sent_at: float = Field(default_factory=time.time)
    traceparent: str | None = None


class Utterance(BaseModel):
    """A message one role addressed to another, as it arrives in the recipient's turn."""

    sender: str
    content: list[Part]


class PromptMessage(BaseModel):
    """One chat message of an assembled prompt, images by reference; recorded to prove who saw what."""

    role: Literal["system", "user", "assistant"]
    content: list[Part]


class TurnRequest(Envelope):
    """Game master → agent: it is this role's turn.

    ``system`` comes with the first request of an episode; ``observation`` replaces the agent's
    working memory; ``incoming`` is what other roles said to it since its last turn (episodic
    memory); ``view`` is a machine-readable copy of what the role may see, for scripted players.
    """

    kind: Literal["turn_request"] = "turn_request"
    role: str
    system: str | None = None
    observation: list[Part] = Field(default_factory=list)
    feedback: str | None = None
    incoming: list[Utterance] = Field(default_factory=list)
    legal_actions: list[str] = Field(default_factory=list)
    view: dict[str, Any] | None = None
    deadline: float | None = None


class TurnResponse(Envelope):
    """Agent → game master: the reply text, with what it cost and the prompt that produced it."""

    kind: Literal["turn_response"] = "turn_response"
    role: str
    text: str
    model: str = ""
    usage: Usage | None = None
    latency_s: float = 0.0
    raw: dict[str, Any] | None = None
    prompt: list[PromptMessage] | None = None
    calls: list[dict[str, Any]] = Field(default_factory=list)


class TranscriptEvent(Envelope):
    """Game master → observers: who said or did what, to whom, and who may see it."""

    kind: Literal["transcript_event"] = "transcript_event"
    event: Literal["utterance", "action", "violation", "feedback", "note", "prompt"]
    from_role: str
    to_role: str = ""
    visibility: Visibility = Visibility.SHARED
    content: list[Part] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)


class StateUpdate(Envelope):
    """Game master → dashboards: the game as an observer sees it, after a step.

    ``content``: the text rendering, then any images (each image's bytes cross a broker once
    per process: later states name it by sha256 only). ``step`` counts the states of the
    episode from 0; ``final`` marks the last, published when the episode ends, with its
    scores. ``visibility`` is ``private`` when the state shows what a role keeps from others.
    """

    kind: Literal["state_update"] = "state_update"
    game: str = ""
    step: int = 0
    final: bool = False
    content: list[Part] = Field(default_factory=list)
    visibility: Visibility = Visibility.PUBLIC
    progress: float | None = None
    scores: dict[str, float | None] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)


class EpisodeStarted(Envelope):
    """An episode began."""

    kind: Literal["episode_started"] = "episode_started"
    game: str
    spec: dict[str, Any] = Field(default_factory=dict)


class EpisodeFinished(Envelope):
    """An episode ended, with its outcome and scores."""

    kind: Literal["episode_finished"] = "episode_finished"
    game: str
    outcome: Outcome
    scores: dict[str, float | None] = Field(default_factory=dict)
    turns: int = 0
    reason: str = ""
    # A ReasonCode value, the declared main score and per-role results (docs/runtime.md).
    reason_code: str | None = None
    main_score: float | None = None
    role_results: dict[str, str] = Field(default_factory=dict)
    # The run key's signature (parley.bus.signing): observers drop results that lack a valid one.
    signature: str | None = None


class Control(Envelope):
    """Pause, resume or abort an episode or a run."""

    kind: Literal["control"] = "control"
    command: Literal["pause", "resume", "abort"]
    reason: str = ""
    # The run key's signature (parley.bus.signing): a run's processes obey only signed controls.
    signature: str | None = None


class EndpointStatus(BaseModel):
    """One model endpoint as a :class:`RunStatus` shows it: its adaptive limit, load, recent
    latency and what went wrong (counts since the process started)."""

    model: str  # the registry names served by this endpoint, comma-separated
    url: str  # credentials masked
    limit: int = 0
    in_flight: int = 0
    latency_p50_s: float | None = None  # over the latest successful requests
    latency_p99_s: float | None = None
    requests: int = 0  # attempts sent
    rate_limited: int = 0  # attempts answered 429
    retries: int = 0  # failed attempts that were tried again
    errors: int = 0  # requests given up (the episode ended as ``error``)


class RunStatus(Envelope):
    """A process of a run → observers, about once a second (retained): how far the run is.

    ``process`` is ``main`` (the whole run) or ``w0``, ``w1`` … (one worker process);
    ``planned`` counts every episode of the run for ``main`` (``skipped`` of them were finished
    before a ``--resume``), and the episodes a worker holds for a worker. Rates are over the
    last ~10 s; ``eta_s`` is None until an episode has ended; ``cost_usd`` is None when no
    model of the run has a ``price:`` in USD. ``final`` marks the last status of a process.
    """

    kind: Literal["run_status"] = "run_status"
    process: str
    pid: int
    name: str
    started_at: float
    updated_at: float
    planned: int = 0
    done: dict[str, int] = Field(default_factory=dict)  # by outcome
    running: int = 0
    failed: int = 0
    skipped: int = 0
    paused: bool = False
    turns_per_s: float = 0.0
    requests_per_s: float = 0.0
    tokens: dict[str, int] = Field(default_factory=lambda: {"input": 0, "output": 0})
    cost_usd: float | None = None
    eta_s: float | None = None
    endpoints: list[EndpointStatus] = Field(default_factory=list)
    loop_lag_ms: dict[str, float] = Field(default_factory=dict)  # p50, p99, max
    folder: str | None = None
    final: bool = False
    # Outcome counts of the finished episodes by game and pairing ("game role=p,role=p").
    pairings: dict[str, dict[str, int]] = Field(default_factory=dict)
    # The run's public key (base64 Ed25519, parley.bus.signing): results signed by the run's
    # own processes verify against it (``main`` only).
    run_key: str | None = None
    # Messages this process refused as not the run's own (parley.bus.signing.Gate), by kind.
    refused: dict[str, int] = Field(default_factory=dict)
    # The run key's signature: workers and dashboards drop a status that lacks a valid one.
    signature: str | None = None

    @property
    def finished(self) -> int:
        """Episodes ended in this process, whatever their outcome."""
        return sum(self.done.values())


class Job(Envelope):
    """Coordinator → workers: play this episode (distributed mode, docs/distributed.md).

    ``spec`` is the resolved episode spec; ``setup`` what a worker needs to play it (the run's
    config with its model registry, model URLs the coordinator launched, tracing choices).
    ``version`` and ``plugins`` (game entry point → its distribution's version) are the
    coordinator's: a worker that differs refuses the job rather than play it wrong. The job is
    leased: a worker that took it keeps it only while its heartbeats name it; after
    ``lease_s`` without one, the coordinator issues it again with ``attempt + 1``.
    """

    kind: Literal["job"] = "job"
    spec: dict[str, Any]
    attempt: int = 1
    setup: dict[str, Any] = Field(default_factory=dict)
    version: str = ""
    plugins: dict[str, str] = Field(default_factory=dict)
    lease_s: float = 30.0
    # The run key's signature: a worker plays only jobs signed with the key it trusts for the run.
    signature: str | None = None


class JobResult(Envelope):
    """Worker → coordinator: a finished episode, or a job the worker refused.

    ``record`` is the episode's record (``episodes.jsonl``'s line), ``transcript`` its JSONL
    text and ``images`` its images by sha256 (base64), exactly what the coordinator writes to
    the run folder. A refusal has ``refused`` (why) and no record. ``signature`` is the run
    key's signature (parley.bus.signing), by which observers tell the run's own results from
    forged ones.
    """

    kind: Literal["job_result"] = "job_result"
    record: dict[str, Any] = Field(default_factory=dict)
    transcript: str = ""
    images: dict[str, str] = Field(default_factory=dict)
    metrics: dict[str, Any] | None = None
    attempt: int = 1
    worker: str = ""
    refused: str | None = None
    signature: str | None = None


class WorkerHeartbeat(Envelope):
    """Worker → coordinator, every ``interval_s``: I am alive, and these are the episodes I hold
    (playing or queued), which renews their leases. ``final`` says the worker is leaving."""

    kind: Literal["worker_heartbeat"] = "worker_heartbeat"
    worker: str
    host: str = ""
    version: str = ""
    plugins: dict[str, str] = Field(default_factory=dict)
    slots: int = 1
    held: list[str] = Field(default_factory=list)
    interval_s: float = 1.0
    final: bool = False


Message = Annotated[
    TurnRequest
    | TurnResponse
    | TranscriptEvent
    | StateUpdate
    | EpisodeStarted
    | EpisodeFinished
    | Control
    | RunStatus
    | Job
    | JobResult
    | WorkerHeartbeat,
    Field(discriminator="kind"),
]

MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
KINDS: frozenset[str] = frozenset(
    cls.model_fields["kind"].default
    for cls in (
        TurnRequest,
        TurnResponse,
        TranscriptEvent,
        StateUpdate,
        EpisodeStarted,
        EpisodeFinished,
        Control,
        RunStatus,
        Job,
        JobResult,
        WorkerHeartbeat,
    )
)


def images_in(message: BaseModel) -> list[ImagePart]:
    """Every image part anywhere in a message."""
    found: list[ImagePart] = []

    def walk(value: Any) -> None:
        if isinstance(value, ImagePart):
            found.append(value)
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name))
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(message)
    return found
