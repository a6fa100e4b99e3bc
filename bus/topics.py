"""The topic scheme ``parley/{run}/{episode}/...`` and MQTT topic-filter matching."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

ROOT = "parley"
_ID = re.compile(r"^[A-Za-z0-9_.:@=-]{1,128}$")
CHANNELS = ("agent", "gm", "events", "state", "control", "private")
# Second levels that are the run's own (parley/<run>/<level>...), where an episode's id stands
# in an episode's topics: no episode may be named one of them (the run's ids never are).
RUN_LEVELS = frozenset({"results", "jobs", "control", "workers", "status"})


class TopicError(ValueError):
    """A topic, filter or id that breaks the scheme."""


def check_id(value: str, what: str = "id") -> str:
    """An id that is safe as one topic level: letters, digits and ``_ . : @ = -``, 1–128 long."""
    if not isinstance(value, str) or not _ID.match(value):
        raise TopicError(
            f"{what} {value!r} cannot be a topic level: use 1-128 of letters, digits and _.:@=-"
        )
    return value


# Topics already found good: an episode publishes to the same few topics every turn. Kept
# small (emptied when full): the topics are per episode, and a long run must not hold them all.
_GOOD: set[str] = set()
_GOOD_MAX = 1024


def check_topic(topic: str) -> str:
    """A topic one may publish to: no wildcards, no empty levels, no leading ``$``."""
    if topic in _GOOD:
        return topic
    _check_topic(topic)
    if len(_GOOD) >= _GOOD_MAX:
        _GOOD.clear()
    _GOOD.add(topic)
    return topic


def _check_topic(topic: str) -> None:
    if not topic:
        raise TopicError("empty topic")
    if "+" in topic or "#" in topic:
        raise TopicError(f"topic {topic!r} has a wildcard; only subscriptions may use + and #")
    if "" in topic.split("/"):
        raise TopicError(f"topic {topic!r} has an empty level")
    if topic.startswith("$"):
        raise TopicError(f"topic {topic!r} starts with $, which brokers reserve")
    if "\x00" in topic or len(topic.encode()) > 65535:
        raise TopicError("topic has a NUL character or is longer than 65535 bytes")


SHARE_PREFIX = "$share/"


def check_filter(topic_filter: str) -> str:
    """A well-formed MQTT filter: ``+`` fills a whole level, ``#`` only as the last level.

    ``$share/<group>/<filter>`` is an MQTT 5 shared subscription: the group name is one
    non-empty level without ``+`` or ``#``, and ``<filter>`` must itself be well-formed.
    """
    if not topic_filter:
        raise TopicError("empty topic filter")
    if topic_filter == "$share":
        raise TopicError("'$share' needs a group name and a filter ($share/<group>/<filter>)")
    if is_shared(topic_filter):
        split_shared(topic_filter)
        return topic_filter
    _check_levels(topic_filter)
    return topic_filter


def _check_levels(topic_filter: str) -> None:
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise TopicError(f"filter {topic_filter!r}: # must be a whole, last level")
        if "+" in level and level != "+":
            raise TopicError(f"filter {topic_filter!r}: + must fill a whole level")


def is_shared(topic_filter: str) -> bool:
    """Whether ``topic_filter`` is a shared subscription (``$share/<group>/<filter>``)."""
    return topic_filter.startswith(SHARE_PREFIX)


def split_shared(topic_filter: str) -> tuple[str, str]:
    """``(group, filter)`` of a shared subscription ``$share/<group>/<filter>``, checked; raises
    :class:`TopicError` for a bad group name or filter, or for a filter that is not shared."""
    if not is_shared(topic_filter):
        raise TopicError(f"{topic_filter!r} is not a shared subscription ($share/<group>/<filter>)")
    group, slash, inner = topic_filter[len(SHARE_PREFIX) :].partition("/")
    if not group:
        raise TopicError(f"shared subscription {topic_filter!r} has an empty group name")
    if "+" in group or "#" in group:
        raise TopicError(
            f"shared subscription {topic_filter!r}: the group name {group!r} may not hold + or #"
        )
    if not slash or not inner:
        raise TopicError(
            f"shared subscription {topic_filter!r} has no filter after its group "
            "($share/<group>/<filter>)"
        )
    if inner.startswith(SHARE_PREFIX):
        raise TopicError(f"shared subscription {topic_filter!r} shares a shared subscription")
    _check_levels(inner)
    return group, inner


def is_wildcard(topic_filter: str) -> bool:
    return "+" in topic_filter or "#" in topic_filter


@lru_cache(maxsize=4096)
def _filter_levels(topic_filter: str) -> tuple[str, ...]:
    return tuple(topic_filter.split("/"))


def matches(topic_filter: str, topic: str) -> bool:
    """MQTT matching: ``+`` one level, ``#`` this level and all below (including none); a
    shared subscription matches what its filter matches."""
    if topic_filter.startswith(SHARE_PREFIX):
        topic_filter = split_shared(topic_filter)[1]
    if not is_wildcard(topic_filter):
        return topic_filter == topic
    pattern = _filter_levels(topic_filter)
    levels = topic.split("/")
    # Wildcards at the first level do not match topics beginning with $ (MQTT 4.7.2).
    if topic.startswith("$") and pattern[0] in ("+", "#"):
        return False
    for i, want in enumerate(pattern):
        if want == "#":
            return True
        if i >= len(levels):
            return False
        if want != "+" and want != levels[i]:
            return False
    return len(levels) == len(pattern)


def agent_inbox(run: str, episode: str, role: str) -> str:
    return f"{ROOT}/{run}/{episode}/agent/{role}"


def gm_inbox(run: str, episode: str) -> str:
    return f"{ROOT}/{run}/{episode}/gm"


def seat_replies(run: str, episode: str, role: str) -> str:
    """Where a dashboard seat answers its role's turns: under the game master's inbox, one
    topic a role, so that a broker's ACL lets each seat speak for its own role only."""
    return f"{ROOT}/{run}/{episode}/gm/{role}"


def gm_inbox_filter(run: str, episode: str) -> str:
    """What the game master subscribes to: its inbox and every seat's replies."""
    return f"{ROOT}/{run}/{episode}/gm/#"


def seat_of(topic: str) -> str | None:
    """The role whose seat replies on ``topic`` (:func:`seat_replies`), else None."""
    head, _, role = topic.rpartition("/")
    return role if head.endswith("/gm") else None


def events(run: str, episode: str) -> str:
    return f"{ROOT}/{run}/{episode}/events"


def state(run: str, episode: str) -> str:
    return f"{ROOT}/{run}/{episode}/state"


def results(run: str) -> str:
    return f"{ROOT}/{run}/results"


def control(run: str) -> str:
    """Run-level :class:`~parley.bus.messages.Control` (``pause``, ``resume``)."""
    return f"{ROOT}/{run}/control"


def episode_control(run: str, episode: str) -> str:
    """Episode-level :class:`~parley.bus.messages.Control` (``abort``)."""
    return f"{ROOT}/{run}/{episode}/control"


def all_episode_control(run: str) -> str:
    """Filter for the control topics of every episode of a run."""
    return f"{ROOT}/{run}/+/control"


def status(run: str, process: str) -> str:
    """The retained :class:`RunStatus` of one process of a run (``main``, ``w0`` …)."""
    return f"{ROOT}/{run}/status/{process}"


def all_states(run: str) -> str:
    """Filter for the state of every episode of a run."""
    return f"{ROOT}/{run}/+/state"


def jobs(run: str) -> str:
    """Coordinator → workers: :class:`~parley.bus.messages.Job` (workers read it through the
    shared subscription :func:`shared_jobs`)."""
    return f"{ROOT}/{run}/jobs"


JOB_GROUP = "parley-workers"


def shared_jobs(run: str = "+", group: str = JOB_GROUP) -> str:
    """The MQTT 5 shared subscription workers take jobs from (one worker gets each job);
    ``run="+"`` takes the jobs of every run on the broker."""
    return f"$share/{group}/{jobs(run)}"


def job_results(run: str) -> str:
    """Workers → coordinator: :class:`~parley.bus.messages.JobResult` (records, transcripts and
    images: private, only the run's own processes read it)."""
    return f"{ROOT}/{run}/jobs/done"


def worker(run: str, worker_id: str) -> str:
    """A worker's :class:`~parley.bus.messages.WorkerHeartbeat` for one run (its leases)."""
    return f"{ROOT}/{run}/workers/{worker_id}"


def all_workers(run: str) -> str:
    """Filter for the heartbeats of every worker of a run."""
    return f"{ROOT}/{run}/workers/+"


def private(run: str, episode: str, role: str) -> str:
    """What only ``role`` (and the run's own processes) may read: its private transcript events
    (``visibility: private``, e.g. the solver's own actions and their feedback)."""
    return f"{ROOT}/{run}/{episode}/private/{role}"


def all_private(run: str) -> str:
    """Filter for every role's private events of every episode of a run."""
    return f"{ROOT}/{run}/+/private/+"


def private_state(run: str, episode: str) -> str:
    """A state whose picture shows what a role keeps from others (``visibility: private``):
    only the run's own processes and operators read it, never a spectator's dashboard."""
    return f"{ROOT}/{run}/{episode}/state/private"


def all_private_states(run: str) -> str:
    """Filter for the private states of every episode of a run."""
    return f"{ROOT}/{run}/+/state/private"


def all_events(run: str) -> str:
    """Filter for the events of every episode of a run."""
    return f"{ROOT}/{run}/+/events"


@dataclass(frozen=True, slots=True)
class Topic:
    """A parsed parley topic."""

    run: str
    episode: str | None
    channel: str
    role: str | None = None


def parse(topic: str) -> Topic:
    """Split a parley topic into its parts, or raise :class:`TopicError`. A second level in
    :data:`RUN_LEVELS` is read as the run's own topic, never as an episode's."""
    levels = topic.split("/")
    if len(levels) < 3 or levels[0] != ROOT:
        raise TopicError(f"{topic!r} is not a parley topic (parley/<run>/...)")
    run = levels[1]
    if levels[2] in RUN_LEVELS:
        if len(levels) == 3 and levels[2] in ("results", "jobs", "control"):
            return Topic(run=run, episode=None, channel=levels[2])
        if len(levels) == 4 and levels[2] == "jobs" and levels[3] == "done":
            return Topic(run=run, episode=None, channel="job_results")
        if len(levels) == 4 and levels[2] == "workers":
            # A worker's heartbeat; ``role`` holds the worker's id.
            return Topic(run=run, episode=None, channel="workers", role=levels[3])
        if len(levels) == 4 and levels[2] == "status":
            # A process's status; ``role`` holds the process name (main, w0 …).
            return Topic(run=run, episode=None, channel="status", role=levels[3])
        raise TopicError(f"{topic!r} is not one of the run's own topics")
    if len(levels) == 5 and levels[3] == "state" and levels[4] == "private":
        return Topic(run=run, episode=levels[2], channel="private_state")
    if len(levels) == 5 and levels[3] == "private":
        return Topic(run=run, episode=levels[2], channel="private", role=levels[4])
    if len(levels) == 4 and levels[3] in ("gm", "events", "state", "control"):
        return Topic(run=run, episode=levels[2], channel=levels[3])
    if len(levels) == 5 and levels[3] == "gm":  # a seat's replies; ``role`` is its role
        return Topic(run=run, episode=levels[2], channel="gm", role=levels[4])
    if len(levels) == 5 and levels[3] == "agent":
        return Topic(run=run, episode=levels[2], channel="agent", role=levels[4])
    raise TopicError(f"{topic!r} does not follow parley/<run>/<episode>/<channel>")
