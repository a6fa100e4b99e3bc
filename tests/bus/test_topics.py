"""The topic scheme: builders, the parser, validation, and MQTT filter matching."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paho.mqtt.client import topic_matches_sub

from parley.bus import topics
from parley.bus.topics import TopicError

RUN, EP = "run-1", "ep_7"


def test_builders_follow_the_scheme() -> None:
    assert topics.agent_inbox(RUN, EP, "solver") == "parley/run-1/ep_7/agent/solver"
    assert topics.gm_inbox(RUN, EP) == "parley/run-1/ep_7/gm"
    seat = topics.seat_replies(RUN, EP, "solver")
    assert seat == "parley/run-1/ep_7/gm/solver"
    assert topics.seat_of(seat) == "solver" and topics.seat_of(topics.gm_inbox(RUN, EP)) is None
    assert topics.parse(seat).role == "solver" and topics.parse(seat).channel == "gm"
    gm_filter = topics.gm_inbox_filter(RUN, EP)
    assert topics.matches(gm_filter, seat) and topics.matches(gm_filter, topics.gm_inbox(RUN, EP))
    assert topics.events(RUN, EP) == "parley/run-1/ep_7/events"
    assert topics.state(RUN, EP) == "parley/run-1/ep_7/state"
    assert topics.results(RUN) == "parley/run-1/results"
    assert topics.jobs(RUN) == "parley/run-1/jobs"
    assert topics.all_events(RUN) == "parley/run-1/+/events"


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("parley/r/e/agent/solver", topics.Topic("r", "e", "agent", "solver")),
        ("parley/r/e/gm", topics.Topic("r", "e", "gm")),
        ("parley/r/e/events", topics.Topic("r", "e", "events")),
        ("parley/r/e/state", topics.Topic("r", "e", "state")),
        ("parley/r/results", topics.Topic("r", None, "results")),
        ("parley/r/jobs", topics.Topic("r", None, "jobs")),
    ],
)
def test_parse(topic: str, expected: topics.Topic) -> None:
    assert topics.parse(topic) == expected


@pytest.mark.parametrize(
    "topic",
    [
        "other/r/e/gm",
        "parley/r",
        "parley/r/e/unknown",
        "parley/r/e/agent",
        "parley/r/e/agent/solver/extra",
        "parley/r/e/gm/solver/extra",
        "parley/r/results/extra",
    ],
)
def test_parse_rejects_foreign_topics(topic: str) -> None:
    with pytest.raises(TopicError):
        topics.parse(topic)


ident = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789_.:@=-", min_size=1, max_size=20)
episodes = ident.filter(lambda name: name not in topics.RUN_LEVELS)


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("parley/r/workers/events", topics.Topic("r", None, "workers", "events")),
        ("parley/r/status/gm", topics.Topic("r", None, "status", "gm")),
    ],
)
def test_a_run_level_is_never_read_as_an_episode(topic: str, expected: topics.Topic) -> None:
    assert topics.parse(topic) == expected


@given(run=ident, episode=episodes, role=ident)
def test_builders_and_parser_round_trip(run: str, episode: str, role: str) -> None:
    assert topics.parse(topics.agent_inbox(run, episode, role)) == topics.Topic(
        run, episode, "agent", role
    )
    assert topics.parse(topics.events(run, episode)).channel == "events"
    assert topics.parse(topics.results(run)) == topics.Topic(run, None, "results")
    for topic in (topics.agent_inbox(run, episode, role), topics.jobs(run)):
        assert topics.check_topic(topic) == topic


@pytest.mark.parametrize("value", ["", "a/b", "a+b", "a#", "x" * 129, "sp ace", "é"])
def test_check_id_rejects(value: str) -> None:
    with pytest.raises(TopicError):
        topics.check_id(value, "run")


def test_check_id_accepts_and_names_the_field() -> None:
    assert topics.check_id("gpt-4o:2024@v1=x_y.z", "model") == "gpt-4o:2024@v1=x_y.z"
    with pytest.raises(TopicError, match="episode"):
        topics.check_id("a/b", "episode")


@pytest.mark.parametrize(
    "topic", ["", "a/+/b", "a/#", "a//b", "/a", "a/", "$SYS/x", "a\x00b", "x" * 70000]
)
def test_check_topic_rejects(topic: str) -> None:
    with pytest.raises(TopicError):
        topics.check_topic(topic)


@pytest.mark.parametrize("topic_filter", ["", "a/#/b", "a#", "a/b+", "+a/b", "##", "a/#/#"])
def test_check_filter_rejects(topic_filter: str) -> None:
    with pytest.raises(TopicError):
        topics.check_filter(topic_filter)


@pytest.mark.parametrize(
    "topic_filter", ["#", "+", "a/+/c", "a/#", "+/+/#", "a/b", "parley/+/+/agent/+"]
)
def test_check_filter_accepts(topic_filter: str) -> None:
    assert topics.check_filter(topic_filter) == topic_filter


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("a/#", "a", True),  # '#' also matches the parent level
        ("a/#", "a/b/c", True),
        ("a/+", "a", False),
        ("a/+", "a/b/c", False),
        ("+/+", "a/b", True),
        ("#", "$SYS/x", False),  # wildcards at the first level never match $ topics
        ("+/x", "$SYS/x", False),
        ("$SYS/#", "$SYS/x", True),
        ("parley/+/events", "parley/r/e/events", False),
        ("parley/r/+/events", "parley/r/e/events", True),
    ],
)
def test_matches_examples(topic_filter: str, topic: str, expected: bool) -> None:
    assert topics.matches(topic_filter, topic) is expected


def reference_matches(topic_filter: str, topic: str) -> bool:
    """MQTT matching written as a regular expression, independently of parley.bus.topics."""
    levels = topic_filter.split("/")
    if topic.startswith("$") and levels[0] in ("+", "#"):
        return False
    if levels[-1] == "#":
        head = "/".join("[^/]*" if lvl == "+" else re.escape(lvl) for lvl in levels[:-1])
        pattern = ".*" if not head else head + "(/.*)?"
    else:
        pattern = "/".join("[^/]*" if lvl == "+" else re.escape(lvl) for lvl in levels)
    return re.fullmatch(pattern, topic, flags=re.DOTALL) is not None


level = st.sampled_from(["a", "b", "c", "$s", "ab", "x.y"])
topic_strategy = st.lists(level, min_size=1, max_size=5).map("/".join)
filter_level = st.sampled_from(["a", "b", "c", "$s", "+"])


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(filter_level, min_size=0, max_size=5))
    if draw(st.booleans()) or not levels:
        levels.append("#")
    return "/".join(levels)


@settings(max_examples=500)
@given(topic_filter=filters(), topic=topic_strategy)
def test_matches_agrees_with_references(topic_filter: str, topic: str) -> None:
    expected = reference_matches(topic_filter, topic)
    assert topics.matches(topic_filter, topic) is expected
    assert topic_matches_sub(topic_filter, topic) is expected  # paho's implementation agrees


@given(topic=topic_strategy)
def test_a_topic_used_as_a_filter_matches_only_itself(topic: str) -> None:
    assert topics.matches(topic, topic)
    assert not topics.matches(topic, topic + "/a")
