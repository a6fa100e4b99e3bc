"""Scoring crafted answers on a hand-made maze; every expected value is worked out by hand."""

from __future__ import annotations

import json

import pytest

from parley.environments.mango.data import Question
from parley.environments.mango.scoring import (
    Maze,
    ParseError,
    edit_distance,
    parse_answer,
    score,
    similarity,
    snap,
)
from tests.mango.conftest import TOY_ACTIONS

DF = Question("q-df", "df", "west of house", "attic", 1, 1, actions=("north", "east"))
DF_BRANCHY = Question("q-df2", "df", "kitchen", "kitchen", 2, 2, actions=("east", "west"))
RF = Question("q-rf", "rf", "west of house", "cellar", 3, 3)


def answer(*steps: tuple[str, str, str]) -> str:
    return json.dumps(
        [{"location_before": b, "action": a, "location_after": c} for b, a, c in steps]
    )


def test_edit_distance_and_similarity() -> None:
    assert edit_distance("kitten", "sitting") == 3
    assert similarity("Kitchen ", "kitchen") == 1.0  # case and spacing do not count
    assert similarity("kitchens", "kitchen") == pytest.approx(1 - 1 / 8)
    assert similarity("abc", "xyz") == 0.0
    assert snap("walk north", TOY_ACTIONS) == "north"  # 5 edits; "south" needs 7
    assert snap("climb up", TOY_ACTIONS) == "up"
    assert snap("north", TOY_ACTIONS) == "north"


def test_df_right_answer(toy: Maze) -> None:
    s = score(DF, answer(("west of house", "north", "kitchen"), ("kitchen", "east", "attic")), toy)
    assert (s.parsed, s.success_loose, s.success_strict, s.reasoning, s.weighted) == (
        True, 1.0, 1.0, 1.0, 1.0,
    )  # fmt: skip
    assert (s.route_length, s.answer_length, s.final) == (2, 2, "attic")


def test_df_wrong_and_almost_right_names(toy: Maze) -> None:
    wrong = score(
        DF, answer(("west of house", "north", "kitchen"), ("kitchen", "east", "attic room")), toy
    )
    # "attic room" vs "attic": 5 insertions over 10 characters.
    assert wrong.success_loose == pytest.approx(0.5)
    assert (wrong.success_strict, wrong.reasoning, wrong.weighted) == (0.0, 0.0, 0.0)
    the = score(
        DF, answer(("west of house", "north", "kitchen"), ("kitchen", "east", "the attic")), toy
    )
    assert the.success_loose == pytest.approx(5 / 9)  # 4 insertions over 9 characters
    assert the.success_strict == 0.0
    dotted = score(
        DF, answer(("West of House", "north", "Kitchen"), ("kitchen", "east", "Attic.")), toy
    )
    # Case and a final full stop are not differences: strict success, and the steps are edges.
    assert (dotted.success_loose, dotted.success_strict, dotted.reasoning) == (1.0, 1.0, 1.0)


def test_df_hallucinated_edge_and_paraphrased_action(toy: Maze) -> None:
    # Right destination through a move the maze does not have: success yes, reasoning no.
    fake = score(
        DF, answer(("west of house", "east", "kitchen"), ("kitchen", "east", "attic")), toy
    )
    assert (fake.success_strict, fake.success_loose, fake.reasoning) == (1.0, 1.0, 0.0)
    # "go north" snaps to "north": the reasoning holds.
    said = score(
        DF, answer(("west of house", "go north", "kitchen"), ("kitchen", "east", "attic")), toy
    )
    assert said.reasoning == 1.0
    # Three steps for two actions: right place, wrong actions, weighted by 2/3.
    long = score(
        DF,
        answer(
            ("west of house", "north", "kitchen"),
            ("kitchen", "south", "west of house"),
            ("kitchen", "east", "attic"),
        ),
        toy,
    )
    assert (long.success_strict, long.reasoning) == (1.0, 0.0)
    assert long.weighted == pytest.approx(2 / 3)


def test_df_nondeterministic_maze_accepts_every_endpoint(toy: Maze) -> None:
    # attic --west--> kitchen or dark room: the question cannot tell them apart.
    for end in ("kitchen", "dark room"):
        s = score(DF_BRANCHY, answer(("kitchen", "east", "attic"), ("attic", "west", end)), toy)
        assert (s.success_strict, s.reasoning) == (1.0, 1.0)
    s = score(DF_BRANCHY, answer(("kitchen", "east", "attic"), ("attic", "west", "cellar")), toy)
    assert s.success_strict == 0.0


def test_rf_routes(toy: Maze) -> None:
    right = score(
        RF,
        answer(
            ("west of house", "north", "kitchen"),
            ("kitchen", "east", "attic"),
            ("attic", "up", "cellar"),
        ),
        toy,
    )
    assert (right.success_strict, right.success_loose, right.reasoning, right.weighted) == (
        1.0,
        1.0,
        1.0,
        1.0,
    )
    assert right.route_length == 3
    detour = score(
        RF,
        answer(
            ("west of house", "north", "kitchen"), ("kitchen", "south", "west of house"),
            ("west of house", "north", "kitchen"), ("kitchen", "east", "attic"), ("attic", "up", "cellar"),
        ),
        toy,
    )  # fmt: skip
    assert (detour.success_strict, detour.reasoning) == (1.0, 1.0)
    assert detour.weighted == pytest.approx(3 / 5)
    # The walk uses the actions only: made-up place names still arrive, but the reasoning fails.
    names = score(
        RF, answer(("a", "go north", "b"), ("b", "east", "c"), ("c", "climb up", "cellar")), toy
    )
    assert (names.success_strict, names.reasoning) == (1.0, 0.0)


def test_rf_hallucinated_edge_and_wrong_end(toy: Maze) -> None:
    fake = score(RF, answer(("west of house", "up", "cellar")), toy)
    # No "up" from west of house: the walk stops, nothing is reached.
    assert (fake.success_strict, fake.success_loose, fake.reasoning, fake.weighted) == (
        0.0,
        0.0,
        0.0,
        0.0,
    )
    near = score(
        RF, answer(("west of house", "north", "kitchen"), ("kitchen", "down", "cellar")), toy
    )
    # The walk ends in "cellars", one letter from "cellar".
    assert near.final == "cellars"
    assert near.success_strict == 0.0
    assert near.success_loose == pytest.approx(1 - 1 / 7)
    assert near.reasoning == 0.0  # "kitchen down cellar" is not an edge


def test_unparsable_and_odd_replies(toy: Maze) -> None:
    bad = score(RF, "Go north, then east, then up.", toy)
    assert (bad.parsed, bad.success_loose, bad.success_strict, bad.reasoning) == (
        False,
        0.0,
        0.0,
        0.0,
    )
    assert "no [...]" in bad.error
    empty = score(RF, "[]", toy)
    assert (empty.parsed, empty.success_strict, empty.reasoning) == (True, 0.0, 0.0)
    wrapped = (
        "Sure!\n```json\n"
        + answer(("west of house", "north", "kitchen"), ("kitchen", "east", "attic"))
        + "\n```"
    )
    assert score(DF, wrapped, toy).success_strict == 1.0
    python = "[{'prev_node': 'west of house', 'action': 'north', 'node': 'kitchen'}, {'prev_node': 'kitchen', 'action': 'east', 'node': 'attic'}]"
    assert score(DF, python, toy).reasoning == 1.0  # Python literal, the paper's key names
    for reply, message in (
        ("I go [north] first: " + answer(("west of house", "north", "kitchen")), "neither JSON"),
        ('[{"location_before": "kitchen", "action": "east"}]', "lacks location_after"),
        ("[1, 2]", "not an object"),
        (
            '[{"location_before": "kitchen", "action": 3, "location_after": "attic"}]',
            "not a string",
        ),
    ):
        with pytest.raises(ParseError, match=message):
            parse_answer(reply)
