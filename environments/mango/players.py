"""The built-in navigators: scripted (reads the walkthrough), oracle (reads the data) and random."""

from __future__ import annotations

import itertools
import json
import random
from functools import lru_cache

import networkx as nx

from parley.environments.base import View
from parley.environments.mango.data import build_graph
from parley.environments.mango.mapper import WalkthroughMap
from parley.environments.mango.prompts import ACTIONS_HEAD, WALKTHROUGH_HEAD, read_lists

_MARK = WALKTHROUGH_HEAD.split("{", 1)[0]


def _answer(steps: list[dict[str, str]]) -> str:
    return json.dumps(steps, ensure_ascii=False)


def _walkthrough(view: View) -> str | None:
    """The walkthrough wherever this navigator was shown it: system text, the current
    observation, or an earlier message (only as far as its memory still holds it)."""
    for text in (view.system, view.text, *(t for _, t in reversed(view.history))):
        if text and _MARK in text:
            return text[text.index(_MARK) :]
    return None


@lru_cache(maxsize=64)
def _map(text: str, places: tuple[str, ...], actions: tuple[str, ...]) -> WalkthroughMap:
    return WalkthroughMap.read(text, list(places), list(actions))


def scripted_navigator(view: View, rng: random.Random) -> str:
    """Builds a map from the walkthrough text it was shown (place names matched in the
    observations, moves from the ACT lines, compass moves assumed reversible) and answers by
    walking it (DF) or searching it (RF)."""
    question = (view.data or {}).get("question") or {}
    text = _walkthrough(view) or ""
    listed_actions, listed_places = read_lists(text)
    actions, places = tuple(listed_actions), tuple(listed_places)
    steps = text.split(ACTIONS_HEAD, 1)[0]  # the walkthrough without the lists after it
    m = _map(steps, places, actions)
    if question.get("kind") == "df":
        return _answer(m.destination(question["src"], list(question["actions"])))
    return _answer(m.route(question.get("src", ""), question.get("dst", "")))


@lru_cache(maxsize=256)
def _known_graph(
    source_json: str, cutoff: int
) -> tuple[nx.MultiDiGraph, dict[tuple[str, str], list[str]]]:
    """The maze as known at ``cutoff``, and its moves: (place, action) → places."""
    from parley.environments.mango.game import source_game

    game = source_game(json.loads(source_json))
    graph = build_graph(game.known_edges(cutoff))
    moves: dict[tuple[str, str], list[str]] = {}
    for u, v, k in sorted(graph.edges(keys=True)):
        moves.setdefault((u, k), []).append(v)
    return graph, moves


def oracle_navigator(view: View, rng: random.Random) -> str:
    """Answers from the maze itself: it reads the game's edges file from the data folder (or
    regenerates the synthetic maze) named by ``source`` in its view, keeping the edges known
    at the cutoff. Not a fair player: the upper bound that checks questions and scoring."""
    data = view.data or {}
    question = data.get("question") or {}
    source = data.get("source") or {}
    graph, moves = _known_graph(json.dumps(source, sort_keys=True), int(data.get("cutoff", 0)))
    src = question.get("src", "")
    if question.get("kind") == "df":
        walk = _follow(moves, src, list(question.get("actions", [])))
        steps = [
            {"location_before": u, "action": a, "location_after": v} for u, a, v in (walk or [])
        ]
        return _answer(steps)
    try:
        nodes = nx.shortest_path(graph, src, question.get("dst", ""))
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        return "[]"
    steps = [
        {"location_before": u, "action": sorted(graph[u][v])[0], "location_after": v}
        for u, v in itertools.pairwise(nodes)
    ]
    return _answer(steps)


def _follow(
    moves: dict[tuple[str, str], list[str]], here: str, actions: list[str]
) -> list[tuple[str, str, str]] | None:
    """A walk that carries out every action from ``here`` (depth first: where one place and
    action lead to two places, a branch may dead-end later)."""
    if not actions:
        return []
    action, rest = actions[0], actions[1:]
    for nxt in moves.get((here, action), []):
        tail = _follow(moves, nxt, rest)
        if tail is not None:
            return [(here, action, nxt), *tail]
    return None


def random_navigator(view: View, rng: random.Random) -> str:
    """Random actions from the allowed list through random places (DF: the given actions)."""
    question = (view.data or {}).get("question") or {}
    listed_actions, listed_places = read_lists(_walkthrough(view) or "")
    places = listed_places or ["nowhere"]
    actions = listed_actions or ["wait"]
    if question.get("kind") == "df":
        moves = list(question.get("actions", []))
    else:
        moves = [rng.choice(actions) for _ in range(rng.randint(1, max(1, min(8, len(places)))))]
    here, steps = question.get("src", ""), []
    for action in moves:
        nxt = rng.choice(places)
        steps.append({"location_before": here, "action": action, "location_after": nxt})
        here = nxt
    return _answer(steps)
