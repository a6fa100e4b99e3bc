"""Experiment configs: YAML validated by pydantic, with errors that name field, value and fix."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from parley.agents.backends.spec import ModelSpec
from parley.spelling import did_you_mean
from parley.user_files import YamlFileError, read_mapping

BUILTIN_PLAYERS = ("scripted", "random", "human")
# Short forms of built-in players with a setting: ``human-browser`` is a person at a dashboard seat.
PLAYER_SHORTHANDS: dict[str, dict[str, Any]] = {
    "human-browser": {"kind": "human", "via": "browser"}
}
# A human player's settings, left out of a player's dump while at their defaults: a player's
# dump names its episodes (runtime/experiment.py episode_id), which must not change for
# players that do not use them.
HUMAN_DEFAULTS: dict[str, Any] = {"via": "terminal", "turn_timeout_s": None, "rejoin_s": None}


class ConfigError(ValueError):
    """A config that cannot run; each problem names the field, the value and what is expected."""

    def __init__(self, problems: list[tuple[str, Any, str]], source: str = "") -> None:
        self.problems = problems
        self.source = source
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"invalid config{f' {self.source}' if self.source else ''}:"
        lines = [head]
        for field, value, expected in self.problems:
            shown = "" if value is _MISSING else f" got {value!r};"
            lines.append(f"  {field}:{shown} {expected}")
        return "\n".join(lines)


_MISSING = object()


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # as the model specs'


class SeedRange(Strict):
    """Seeds ``start`` … ``start + count - 1``."""

    start: int = 0
    count: int = Field(gt=0)

    def seeds(self) -> list[int]:
        return list(range(self.start, self.start + self.count))


class AcrossSpec(Strict):
    """Memory of earlier episodes (docs/memory.md): ``none``; ``last_k``, the last ``k`` earlier
    episodes' transcripts of the role (what it was shown and what it said); or ``notes``, the
    notes it wrote itself at the end of each earlier episode (the last ``k``). Either is cut
    to ``max_tokens``, the oldest dropped first.

    Episodes share memory by key: player, role, game, pairing (unless ``across_pairings``)
    and ``group``, a label of the config's own.
    """

    policy: Literal["none", "last_k", "notes"] = "none"
    k: int = Field(default=3, ge=1, le=10_000)
    max_tokens: int = Field(default=2000, ge=1)
    group: str | None = None
    across_pairings: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"policy": value} if isinstance(value, str) else value


class MemorySpec(Strict):
    """An agent's episodic-memory policy: ``full``, ``none`` (last message only) or ``last_k``;
    ``across``: memory of its earlier episodes (:class:`AcrossSpec`)."""

    policy: Literal["full", "none", "last_k"] = "full"
    k: int = Field(default=3, ge=1)
    across: AcrossSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"policy": value} if isinstance(value, str) else value

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out when unset: a spec's dump names its episodes (runtime/experiment.py
        # episode_id), which must not change for configs without memory across episodes.
        data: dict[str, Any] = handler(self)
        if data.get("across") is None or data["across"].get("policy") == "none":
            data.pop("across", None)
        return data

    @property
    def remembers(self) -> bool:
        """Whether the role keeps memory across episodes."""
        return self.across is not None and self.across.policy != "none"


class MemoryStoreConfig(Strict):
    """Where memory across episodes lives: ``sqlite`` (default; ``path``, or ``memory.sqlite``
    in the run folder), which survives a crash and a ``--resume``, or ``process`` (in each
    process's memory: a resumed run starts its keys' memory over)."""

    kind: Literal["sqlite", "process"] = "sqlite"
    path: str | None = None

    @model_validator(mode="after")
    def _path_for_sqlite(self) -> MemoryStoreConfig:
        if self.kind == "process" and self.path:
            raise ValueError("path is a setting of kind: sqlite")
        return self


class PlayerSpec(Strict):
    """Who plays a role: a built-in player (``scripted``, ``random``, ``human``) or a model.

    A bare string that is not a built-in name is a model name from the ``models`` registry.
    A human plays at the terminal (``via: terminal``, the default) or at a dashboard seat
    (``via: browser``, short form ``human-browser``; docs/humans.md): ``turn_timeout_s`` ends
    the episode as ``aborted`` (``turn_timeout``) when a turn goes unanswered that long, and
    ``rejoin_s`` when the seat stays empty that long while the game waits on it
    (``human_left``); unset, the game waits.
    """

    kind: Literal["scripted", "random", "human", "llm"]
    model: str | None = None
    # A game's other named built-in player of this kind (e.g. ``oracle``), instead of the
    # plain ``scripted``/``random`` one; it becomes the player's label.
    name: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    via: Literal["terminal", "browser"] = "terminal"
    turn_timeout_s: float | None = Field(default=None, gt=0)
    rejoin_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value in PLAYER_SHORTHANDS:
                return dict(PLAYER_SHORTHANDS[value])
            return {"kind": value} if value in BUILTIN_PLAYERS else {"kind": "llm", "model": value}
        return value

    @model_validator(mode="after")
    def _model_for_llm(self) -> PlayerSpec:
        if self.kind == "llm" and not self.model:
            raise ValueError("an llm player needs `model:` naming an entry of `models`")
        if self.kind != "human" and any(
            getattr(self, key) != default for key, default in HUMAN_DEFAULTS.items()
        ):
            raise ValueError("via, turn_timeout_s and rejoin_s are settings of a human player")
        if self.via == "terminal" and (self.turn_timeout_s or self.rejoin_s):
            raise ValueError("turn_timeout_s and rejoin_s apply to a browser seat (via: browser)")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key, default in HUMAN_DEFAULTS.items():
            if key in data and data[key] == default:
                del data[key]
        return data

    @property
    def seat(self) -> bool:
        """A person who plays at a dashboard seat (``via: browser``)."""
        return self.kind == "human" and self.via == "browser"

    @property
    def label(self) -> str:
        if self.kind == "llm" and self.model:
            return self.model
        return self.name or self.kind


class PairingMatrix(Strict):
    """Every combination: ``matrix: {solver: [a, b], expert: [a, b]}`` gives four pairings."""

    # Each role at least one player (an empty list would pair nobody and play nothing).
    matrix: dict[str, Annotated[list[PlayerSpec], Field(min_length=1)]] = Field(min_length=1)


def _pairing_kind(value: Any) -> str:
    matrix = isinstance(value, PairingMatrix) or (isinstance(value, dict) and "matrix" in value)
    return "Matrix" if matrix else "Roles"


# A pairing: role → player, or a matrix of them. Told apart by the ``matrix`` key, so that a
# problem inside a matrix is said of the matrix (not as roles named "matrix"); the tags are
# capitalised as union branches are, which problems_of leaves out of a location.
Pairing = Annotated[
    Annotated[dict[str, PlayerSpec], Tag("Roles")] | Annotated[PairingMatrix, Tag("Matrix")],
    Discriminator(_pairing_kind),
]


class GameBlock(Strict):
    """One game of an experiment: which instances, which pairings, how often."""

    game: str
    seeds: list[int] | SeedRange = Field(default_factory=lambda: SeedRange(count=10))
    instances_file: str | None = None
    pairings: list[Pairing] = Field(min_length=1)
    repetitions: int = Field(default=1, ge=1)
    settings: dict[str, Any] = Field(default_factory=dict)
    memory: dict[str, MemorySpec] = Field(default_factory=dict)
    # Model players of this game reply with one of the turn's legal actions
    # (agents/backends/constrain.py); ``off`` plays free whatever the models say.
    constrain: Literal["legal_actions", "off"] | None = None

    def seed_list(self) -> list[int]:
        return self.seeds.seeds() if isinstance(self.seeds, SeedRange) else list(self.seeds)


class TracingConfig(Strict):
    """Spans to ``traces.jsonl`` (and OTLP through OTEL_*); message text only with ``content``.

    ``messages``: publish and receive spans for the turn's bus messages (docs/observability.md).
    ``auto`` (default): on when messages cross processes (an MQTT bus), off on the local bus,
    where a publish is a function call and traceparents already connect the turn; off, a turn
    costs ~4 spans less and messages still carry traceparents.

    ``sample``: the share of episodes whose spans are recorded, each episode whole and the
    same ones every run (metrics still count every episode). Spans cost CPU: with thousands of
    model-played episodes at once, 0.1 keeps traces for a tenth of them for a fraction of that.
    """

    enabled: bool = True
    content: bool = False
    messages: bool | Literal["auto"] = "auto"
    sample: float = Field(default=1.0, gt=0.0, le=1.0)


class StateConfig(Strict):
    """What the run publishes of each game's state for dashboards (``parley/{run}/{ep}/state``).

    ``publish``: ``every_step`` (after every step, and the final state), ``end`` (only the
    final state) or ``off``. ``images``: with the state, the game's picture of it (where the
    game draws one); each image crosses the broker once.
    """

    publish: Literal["every_step", "end", "off"] = "every_step"
    images: bool = True


class DashboardConfig(Strict):
    """Where ``parley run --dashboard`` serves the live dashboard (docs/dashboard.md); any host
    but loopback needs the token it prints."""

    port: int = Field(default=8765, ge=1, le=65535)
    host: str = "127.0.0.1"
    # Print a join link for each browser seat (human players, via: browser) when the run starts.
    seat_links: bool = True


class RemoteConfig(Strict):
    """How a run with ``workers: remote`` hands its episodes to ``parley worker`` processes
    (docs/distributed.md).

    ``window``: jobs out at once, taken or not (default: the run's ``concurrency``).
    ``lease_s``: a job that no worker's heartbeat has named for this long (after it was issued,
    or after its worker's last heartbeat that named it) is issued again. ``no_worker_s``: how
    long without any worker before the run says it is waiting for one.
    """

    window: int | None = Field(default=None, ge=1, le=1_000_000)
    lease_s: float = Field(default=15.0, gt=0)
    no_worker_s: float = Field(default=3.0, gt=0)


class ExperimentConfig(Strict):
    """A whole run: games × instances × pairings × repetitions, and how to run them."""

    name: str = "run"  # names the run folder, runs/<name>: see run_name
    games: list[GameBlock] = Field(min_length=1)
    concurrency: int = Field(default=64, ge=1, le=100_000)
    # Processes that play the episodes: 1 plays them in this process; N (or "auto", one per
    # core) splits them among N worker processes, each with its own event loop; "remote" hands
    # them to `parley worker` processes on other machines, over an MQTT bus (see RemoteConfig).
    workers: int | str = 1
    remote: RemoteConfig = Field(default_factory=RemoteConfig)
    bus: str = "local"
    record_prompts: bool = True
    # What reaches an MQTT broker: "events" (episode events, state, results: what dashboards and
    # recorders need) or "all" (also every turn request and response, prompts and images).
    bus_mirror: Literal["events", "all"] = "events"
    episode_timeout_s: float | None = Field(default=None, gt=0)
    # Stop the run once more than this share of its ended episodes are errors (judged from
    # 10 ended episodes on; runtime/scheduler.py error_watch). None: never stop for errors.
    fail_on_error: float | None = Field(default=None, gt=0, le=1)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    # The game's state for dashboards, after every step (see StateConfig).
    state: StateConfig = Field(default_factory=StateConfig)
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)
    # The model registry: name -> how to reach and ask the model (agents/backends/spec.py).
    models: dict[str, ModelSpec] = Field(default_factory=dict)
    # Where memory across episodes lives (games.*.memory.*.across; docs/memory.md).
    memory_store: MemoryStoreConfig = Field(default_factory=MemoryStoreConfig)
    # Replay identical model requests from a response cache (agents/backends/cache.py): true
    # (the default file), a path, or false; a model's own ``cache:`` wins.
    cache: bool | str = False
    # Seconds the pre-flight gives each model's checks (runtime/preflight.py); a model that
    # answers its list but not the tiny request in time is a warning, not a refusal.
    check_timeout_s: float = Field(default=10.0, gt=0, le=600)
    # Play only the first N episodes of each game, in the run's order (`parley run --limit`):
    # a fair sample, and a resumed run with a larger limit (or none) plays the rest.
    limit: int | None = Field(default=None, ge=1)

    @field_validator("name")
    @classmethod
    def _run_name(cls, value: str) -> str:
        return run_name(value)

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> int | str:
        if value in ("auto", "remote") or (
            isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 256
        ):
            return value
        raise ValueError(
            "expected a number of processes from 1 to 256, 'auto' (one per core) or 'remote' "
            "(parley worker processes over an MQTT bus)"
        )

    @model_validator(mode="after")
    def _model_caches(self) -> ExperimentConfig:
        if self.cache is not False:
            for spec in self.models.values():
                if spec.cache is None:
                    spec.cache = self.cache
        return self

    @model_validator(mode="after")
    def _model_names(self) -> ExperimentConfig:
        for name in self.models:
            if name in BUILTIN_PLAYERS or name in PLAYER_SHORTHANDS:
                raise ValueError(f"models.{name}: {name!r} is a built-in player; pick another name")
        return self


_RUN_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def run_name(value: str) -> str:
    """A run's name, which names its folder ``runs/<name>``: one folder name, never a path
    out of ``runs/`` (no ``/``, not ``.`` or ``..``)."""
    if not _RUN_NAME.match(value) or value.strip(".") == "":
        raise ValueError(
            "a run name is one folder name under runs/: 1 to 64 letters, digits, _ . or -, "
            "not only dots (no /, not . or ..)"
        )
    return value


MASK = "***"


def masked_url(url: str) -> str:
    """``url`` with its password (``scheme://user:password@host``) masked, for files and logs.

    >>> masked_url("mqtt://bob:s3cret@broker:1883")
    'mqtt://bob:***@broker:1883'
    """
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:  # not a URL at all: nothing to mask, and a bad port
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


def redacted(config: ExperimentConfig) -> dict[str, Any]:
    """The config as written to a run folder's ``config.yaml``: header values (an
    ``Authorization`` header is a key) and passwords in URLs masked. API keys are never in a
    config (``api_key_env`` names a variable)."""
    data = config.model_dump(mode="json")
    data["bus"] = masked_url(data["bus"])
    for spec in data.get("models", {}).values():
        spec["headers"] = {name: MASK for name in spec.get("headers") or {}}
        spec["base_urls"] = [masked_url(u) for u in spec.get("base_urls") or []]
    return data


@functools.cache
def _config_words() -> tuple[str, ...]:
    """Every field name of the config's models, nested ones included: what a mistyped key is
    matched against."""
    words: set[str] = set()
    todo: list[Any] = [ExperimentConfig]
    seen: set[Any] = set()
    while todo:
        item = todo.pop()
        if item in seen:
            continue
        seen.add(item)
        if isinstance(item, type) and issubclass(item, BaseModel):
            for name, info in item.model_fields.items():
                words.add(name)
                todo.append(info.annotation)
        else:
            todo.extend(get_args(item))
    return tuple(sorted(words))


def _describe(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        key = str(error["loc"][-1]) if error["loc"] else ""
        guess = did_you_mean(key, _config_words())
        return "unknown field; remove it or check its spelling" + (f"; {guess}" if guess else "")
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        return error["msg"].replace("Input should be", "expected")
    return error["msg"].replace("Input should be", "expected").replace("Value error, ", "")


def problems_of(exc: ValidationError) -> list[tuple[str, Any, str]]:
    out: list[tuple[str, Any, str]] = []
    seen: set[str] = set()
    for error in exc.errors():
        # Drop union-branch names (e.g. "list[int]", "SeedRange") from the location.
        loc = [str(p) for p in error["loc"] if not str(p)[:1].isupper() and "[" not in str(p)]
        field = ".".join(loc) or "config"
        if field in seen:
            continue
        seen.add(field)
        value = _MISSING if error["type"] == "missing" else error.get("input", _MISSING)
        out.append((field, value, _describe(error)))
    return out


def _type_words(annotation: Any) -> str:
    """A field's type as a config author reads it: ``int``, ``Literal['image', 'text']``."""
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("NoneType", "None")


def settings_problems(
    game: str, model: type[BaseModel], values: dict[str, Any], where: str
) -> list[tuple[str, Any, str]]:
    """What is wrong with a game block's ``settings`` under the game's settings model: each
    problem names the setting (``games.0.settings.max_turns``), the value, and what the game
    expects (the setting's type and default, or the settings it has)."""
    try:
        model.model_validate(values)
        return []
    except ValidationError as exc:
        errors = exc.errors()
    fields = model.model_fields
    problems: list[tuple[str, Any, str]] = []
    seen: set[str] = set()
    for error in errors:
        key = str(error["loc"][0]) if error["loc"] else ""
        if key in seen:
            continue
        seen.add(key)
        field = f"{where}.{key}" if key else where
        value = values.get(key, _MISSING) if key else values
        if error["type"] == "extra_forbidden":
            known = ", ".join(fields) or "none"
            guess = did_you_mean(key, fields)
            guess = f"; {guess}" if guess else ""
            problems.append(
                (field, value, f"not a setting of {game}{guess}; its settings: {known}")
            )
            continue
        info = fields.get(key)
        takes = ""
        if info is not None:
            default = "" if info.is_required() else f", default {info.get_default()!r}"
            takes = f" ({game} takes {key}: {_type_words(info.annotation)}{default})"
        problems.append((field, value, _describe(error) + takes))
    return problems


def override_value(item: str, raw: str) -> Any:
    """The value of the override ``item`` (``key=raw``), read as YAML; a :class:`ConfigError`
    saying so when ``raw`` is not YAML (``@x``, an unclosed ``[``), to quote in the shell."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        why = str(getattr(exc, "problem", None) or "not YAML").strip()
        key = item.partition("=")[0]
        expected = f"a YAML value ({why}); to give it as text, quote it: {key}='\"{raw}\"'"
        raise ConfigError([(item, _MISSING, expected)], "--set") from None


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides (values parsed as YAML; list items by index)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError([(item, _MISSING, "an override is key.path=value")], "--set")
        path, raw = item.split("=", 1)
        keys = path.strip().split(".")
        target: Any = data
        for i, key in enumerate(keys[:-1]):
            if isinstance(target, list):
                nxt: Any = target[_list_index(target, keys, i)]
            elif isinstance(target, dict):
                nxt = target.get(key)
            else:
                raise _not_a_container(target, keys, i)
            if nxt is None:
                nxt = {}
                target[key] = nxt
            target = nxt
        last = keys[-1]
        value = override_value(item, raw)
        if isinstance(target, list):
            target[_list_index(target, keys, len(keys) - 1)] = value
        elif isinstance(target, dict):
            target[last] = value
        else:
            raise _not_a_container(target, keys, len(keys) - 1)
    return data


def _list_index(items: list[Any], keys: list[str], i: int) -> int:
    """``keys[i]`` as an index of ``items``, or a :class:`ConfigError` naming the path."""
    path = ".".join(keys[: i + 1])
    n = len(items)
    span = "the list is empty" if n == 0 else f"the list has {n} item{'s' if n > 1 else ''}"
    span += "" if n == 0 else " (index 0)" if n == 1 else f" (indexes 0–{n - 1})"
    try:
        index = int(keys[i])
    except ValueError:
        raise ConfigError([(path, _MISSING, f"a list index: {span}")], "--set") from None
    if not 0 <= index < n:
        raise ConfigError([(path, _MISSING, f"no such list item: {span}")], "--set")
    return index


def _not_a_container(value: Any, keys: list[str], i: int) -> ConfigError:
    """An override that goes inside a plain value (``name.x=1`` where ``name`` is text)."""
    parent = ".".join(keys[:i])
    return ConfigError(
        [(".".join(keys[: i + 1]), _MISSING, f"{parent} is {value!r}, which has no fields")],
        "--set",
    )


def load_config(
    source: str | Path | dict[str, Any], overrides: list[str] | None = None
) -> ExperimentConfig:
    """Read, override and validate a config; raises :class:`ConfigError` explaining every problem."""
    label = ""
    if isinstance(source, dict):
        data = source
    else:
        label = str(source)
        try:
            data = read_mapping(source)
        except YamlFileError as exc:
            raise ConfigError([("config", label, str(exc))]) from None
    data = apply_overrides(data, overrides or [])
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(problems_of(exc), label) from None
