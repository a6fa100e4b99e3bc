"""Scores on hand-made episodes equal hand-computed values."""

from __future__ import annotations

import math

import networkx as nx
import pytest

from parley.environments.clem.common import episode_scores
from parley.environments.clem.mapworld import (
    exploration_scores,
    g2x_efficiency,
    good_first_steps,
    graph_similarity,
    normalised_distance,
    reported_graph,
)
from parley.environments.clem.scoring import GameStats, clemscore, game_stats
from parley.records import EpisodeRecord
from parley.runtime.reports.clem import table1
from tests.records import record

# A corridor of four rooms A-B-C-D, west to east.
A, B, C, D = (0, 0), (1, 0), (2, 0), (3, 0)
CORRIDOR = nx.Graph([(A, B), (B, C), (C, D)])


def test_good_moves_in_a_corridor() -> None:
    # From B, having visited only B, A and C are seen; B→A→B→C and B→C→B→A are both shortest.
    assert good_first_steps(CORRIDOR, {B}, B) == {A, C}
    # At C with A still unvisited and D newly seen: C→D→C→B→A (4) beats C→B→A→B→C→D (5).
    assert good_first_steps(CORRIDOR, {B, C}, C) == {D}
    assert good_first_steps(CORRIDOR, {A, B, C, D}, D) == set()


def test_exploration_scores_perfect_walk() -> None:
    scores = exploration_scores(CORRIDOR, B, [(B, C), (C, D), (D, C), (C, B), (B, A)])
    assert scores["efficiency"] == 100.0
    assert scores["exploration"] == 100.0
    assert scores["main"] == 100.0
    assert scores["moves"] == 5


def test_exploration_scores_with_bad_and_invalid_moves() -> None:
    # B→A good, A→B good (the way to C), B→A bad (back into a visited dead end),
    # A→A an invalid move (into a wall): bad. Visited A, B of 4 rooms.
    scores = exploration_scores(CORRIDOR, B, [(B, A), (A, B), (B, A), (A, A)])
    assert scores["efficiency"] == pytest.approx(50.0)
    assert scores["exploration"] == 50.0
    assert scores["main"] == pytest.approx(2 * 50 * 50 / 100)
    assert (scores["valid_moves"], scores["invalid_moves"]) == (3, 1)
    # moves made after every room was visited are never good
    late = exploration_scores(CORRIDOR, A, [(A, B), (B, C), (C, D), (D, C)])
    assert late["efficiency"] == pytest.approx(75.0)


def test_exploration_scores_on_a_cycle() -> None:
    # A 2×2 square plus a tail: known doors only; from S both ways round are shortest.
    s, e, ne, n, tail = (0, 0), (1, 0), (1, 1), (0, 1), (2, 0)
    square = nx.Graph([(s, e), (e, ne), (ne, n), (n, s), (e, tail)])
    assert good_first_steps(square, {s}, s) == {e, n}
    # Visited {s, e}: seen but unvisited n, ne, tail. The door ne–n is not known yet (neither
    # room visited), so the shortest covers take 6 steps: e→tail→e→ne→e→s→n and
    # e→ne→e→tail→e→s→n; going to s first takes 7 (e→s→n→s→e→ne→e→tail).
    assert good_first_steps(square, {s, e}, e) == {tail, ne}
    # Once n is visited its door to ne is known: from n, n→ne→e→tail (3) is the only shortest.
    assert good_first_steps(square, {s, e, n}, n) == {ne}


def test_no_moves_scores_zero() -> None:
    scores = exploration_scores(CORRIDOR, B, [])
    assert scores["efficiency"] == 0.0 and scores["exploration"] == 25.0 and scores["main"] == 0.0


def test_g2x_efficiency() -> None:
    assert g2x_efficiency(path_len=4, distance=3) == 100.0  # start + 3 moves: a shortest path
    assert g2x_efficiency(path_len=6, distance=3) == pytest.approx(100 / 3)
    assert g2x_efficiency(path_len=1, distance=0) == 100.0
    assert g2x_efficiency(path_len=3, distance=0) == pytest.approx(
        100 / 3
    )  # two moves away and back


def test_graph_similarity() -> None:
    truth = nx.Graph([(A, B), (B, C), (C, D)])
    same = reported_graph(
        {"nodes": ["w", "x", "y", "z"], "edges": {"east": [["w", "x"], ["x", "y"], ["y", "z"]]}}
    )
    sim, ged, bounded = graph_similarity(same, truth)
    assert (sim, ged, bounded) == (100.0, 0.0, False)
    missing = reported_graph(
        {
            "nodes": ["w", "x", "y", "z"],
            "edges": {"east": [["w", "x"], ["x", "y"]], "north": [["bad"]]},
        }
    )
    sim, ged, _ = graph_similarity(missing, truth)
    assert ged == 1.0
    assert sim == pytest.approx(100 * (1 - 2 * (1 / (1 + math.exp(-0.5)) - 0.5)))
    empty = reported_graph({"nodes": [], "edges": {}})
    sim, ged, _ = graph_similarity(empty, truth)
    assert ged == 7.0 and sim == pytest.approx(100 * (1 - normalised_distance(7)))


def test_graph_edit_distance_search_is_bounded_in_steps() -> None:
    g1 = nx.gnm_random_graph(12, 20, seed=1)
    g2 = nx.gnm_random_graph(12, 18, seed=2)
    sim, ged, bounded = graph_similarity(g1, g2, max_steps=50)
    assert bounded, "a 12-node search does not finish in 50 steps"
    assert 0.0 <= sim <= 100.0 and ged >= 2  # at least |ΔE|
    assert graph_similarity(g1, g2, max_steps=50) == (sim, ged, bounded)  # the same every time


def test_episode_scores_follow_clembench() -> None:
    aborted = episode_scores("aborted", 100.0, efficiency=50.0)
    assert aborted.main is None
    assert aborted == {
        "aborted": 1.0,
        "played": 0.0,
        "success": None,
        "lose": None,
        "efficiency": None,
    }
    lost = episode_scores("lost", 0.0)
    assert (lost["aborted"], lost["success"], lost["lose"], lost.main) == (0.0, 0.0, 1.0, 0.0)


def _record(game: str, outcome: str, main: float | None, who: str = "m") -> EpisodeRecord:
    # Schema 1 (the main score in ``scores``), upgraded as a line read from a run folder is.
    return record(
        {
            "game": game,
            "outcome": outcome,
            "scores": {"main": main},
            "pairing": {"r": who},
            "spec": {"settings": {"variant": "image"}},
        }
    )


def test_clemscore_with_a_game_never_played() -> None:
    records = [
        _record("clem.reference", "success", 100.0),
        _record("clem.reference", "lost", 0.0),
        _record("clem.reference", "lost", 50.0),
        _record("clem.reference", "aborted", None),
        _record("clem.matchit", "aborted", None),
        _record("clem.matchit", "aborted", None),
        _record("clem.mapworld_ee", "success", 100.0),
        _record("clem.mapworld_ee", "success", 100.0),
        _record("clem.mapworld_ee", "error", None),  # a runtime failure says nothing of the player
    ]
    per_game = {
        g: game_stats([r for r in records if r.game == g])
        for g in ("clem.reference", "clem.matchit", "clem.mapworld_ee")
    }
    assert per_game["clem.reference"] == GameStats(4, 75.0, 50.0)
    assert per_game["clem.matchit"] == GameStats(2, 0.0, None)
    assert per_game["clem.mapworld_ee"] == GameStats(2, 100.0, 100.0)
    score = clemscore(per_game)
    assert score.played == pytest.approx((75 + 0 + 100) / 3)
    assert score.quality == pytest.approx(75.0)  # MatchIt (0 % played) drops out
    assert score.clemscore == pytest.approx(175 / 3 / 100 * 75)
    assert "43.75" in table1(records)


def test_clemscore_matches_the_papers_table1_row() -> None:
    # Claude-3.5 in Table 1: MatchIt 100/85.0, Reference 100/81.03 and the three map games
    # averaging 92.22 %p / 85.88 ql give 95.33 / 84.73 / 80.77 over the five games.
    maps = [GameStats(10, p, q) for p, q in ((90.0, 85.88), (100.0, 85.88), (86.66, 85.88))]
    stats = {"matchit": GameStats(10, 100.0, 85.0), "reference": GameStats(10, 100.0, 81.03)}
    stats.update({f"map{i}": s for i, s in enumerate(maps)})
    score = clemscore(stats)
    assert score.played == pytest.approx(95.33, abs=0.01)
    assert score.quality == pytest.approx(84.73, abs=0.01)
    assert score.clemscore == pytest.approx(80.77, abs=0.01)
