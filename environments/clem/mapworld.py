"""MapWorld (seed 000, after Ilinykh et al.): explore a map of rooms by moving north/south/east/west.

Maps come from a random walk on a 4×4 grid until it has 4, 6 or 8 rooms (clembench's
``AbstractMap``); a walk that steps back onto a room it knows may add a door that closes a cycle,
and experiments ask for maps with or without one. Every room has a category and a picture drawn
for it (:mod:`parley.environments.clem.rooms`); the image variant shows the picture and never names the
room, the text variant names it.

Variants: **EE** (visit every room, then say DONE), **G2X** (find the room of a given category and
say DONE there; start at distance zero, close (1–2) or far (3–4) from it), **EE-gr** (EE, and every reply also
reports the explored map as a graph). Replies are JSON: ``{"description": …, "action": "GO:
<direction>" | "DONE"}`` (EE-gr adds ``"graph"``). A malformed reply aborts the episode; a move
into a wall is an invalid move (recorded, not an abort); reaching 20 replies without DONE aborts.

Scores are clembench's: EE's efficiency (share of good moves: first steps of a shortest walk
that covers the rooms seen but not yet visited), exploration, and their harmonic mean as the main
score; G2X's finding score and efficiency ``100 / max(1, path_len − distance)``; EE-gr's graph
similarity ``100·(1 − 2·(sigmoid(0.5·GED) − 0.5))`` with a bounded graph-edit-distance search.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import networkx as nx
from PIL import Image, ImageDraw
from pydantic import Field

from parley.environments.base import Observation, ReasonCode, Scores, VariantSettings, View
from parley.environments.clem import rooms
from parley.environments.clem.common import ClemGameMaster, episode_scores, seeded
from parley.environments.clem.images import render
from parley.environments.render import label, png

Pos = tuple[int, int]
DELTAS: dict[str, Pos] = {"north": (0, 1), "east": (1, 0), "south": (0, -1), "west": (-1, 0)}
DIRECTIONS = tuple(DELTAS)
GRID = 4
MAX_TURNS = 20
# The graph edit distance search's budget, in node assignments tried (not seconds, so a score
# never depends on the machine or its load). Against maps of up to 8 rooms (the paper's), a
# right, an edge-off or another map's graph needs a small part of it, and random graphs and maps
# of up to 12 nodes stay within it (benchmarks/fidelity.py counts the steps). Only larger maps
# (a setting, not the paper's) can run out, and ``ged_bounded`` records it.
GED_MAX_STEPS = 1_000_000


# G2X distances from start to target: the paper's zero (clembench: "on"), close and far.
DISTANCES = {"zero": (0,), "on": (0,), "close": (1, 2), "far": (3, 4)}


class ExploreSettings(VariantSettings):
    """EE: a map of ``rooms`` rooms (with a ``cycle``, without, or either when null), at most
    ``max_turns`` moves."""

    rooms: int = Field(6, ge=2, le=GRID * GRID)
    cycle: bool | None = False
    max_turns: int = Field(MAX_TURNS, ge=1)


class ExploreGraphSettings(ExploreSettings):
    """EE-gr: as EE, and ``ged_max_steps``, the budget of the graph edit distance search of
    the reported map (counted in steps, so the score never depends on the machine's load)."""

    ged_max_steps: int = Field(GED_MAX_STEPS, ge=1)


class GoToSettings(VariantSettings):
    """G2X: a map of ``rooms`` rooms, the target at a ``distance`` from the start."""

    distance: Literal[tuple(DISTANCES)] = "close"  # type: ignore[valid-type]
    rooms: int = Field(8, ge=2, le=GRID * GRID)
    max_turns: int = Field(MAX_TURNS, ge=1)


GM = "game master"


def step(pos: Pos, direction: str) -> Pos:
    dx, dy = DELTAS[direction]
    return (pos[0] + dx, pos[1] + dy)


def direction_of(a: Pos, b: Pos) -> str:
    delta = (b[0] - a[0], b[1] - a[1])
    return next(d for d, v in DELTAS.items() if v == delta)


# --- maps -------------------------------------------------------------------------------------


def random_walk(rng: random.Random, n_rooms: int, grid: int = GRID) -> nx.Graph:
    """clembench's map: walk at random on a grid, adding each room and door stepped through."""
    if n_rooms > grid * grid:
        raise ValueError(f"{n_rooms} rooms do not fit a {grid}×{grid} grid")
    pos = (rng.randrange(grid), rng.randrange(grid))
    graph = nx.Graph()
    graph.add_node(pos)
    while graph.number_of_nodes() < n_rooms:
        new = step(pos, rng.choice(DIRECTIONS))
        if not (0 <= new[0] < grid and 0 <= new[1] < grid):
            continue
        graph.add_edge(pos, new)
        pos = new
    return graph


def has_cycle(graph: nx.Graph) -> bool:
    return bool(nx.cycle_basis(graph))


def make_map(rng: random.Random, n_rooms: int, cycle: bool | None) -> nx.Graph:
    """A random-walk map; ``cycle`` True/False keeps drawing until the map has/lacks one."""
    for _ in range(10_000):
        graph = random_walk(rng, n_rooms)
        if cycle is None or has_cycle(graph) == cycle:
            return graph
    raise ValueError(f"no {n_rooms}-room map {'with' if cycle else 'without'} a cycle found")


def _map_instance(
    rng: random.Random, graph: nx.Graph, start: Pos, categories: dict[Pos, str]
) -> dict[str, Any]:
    nodes = sorted(graph.nodes)
    return {
        "rooms": [
            {
                "pos": list(p),
                "category": categories[p],
                "picture": rooms.random_room(rng, categories[p]),
            }
            for p in nodes
        ],
        "edges": sorted([sorted([list(a), list(b)]) for a, b in graph.edges]),
        "start": list(start),
        "cycle": has_cycle(graph),
    }


def explore_instance(seed: int, settings: dict[str, Any], salt: str) -> dict[str, Any]:
    """An EE / EE-gr instance: a map of ``rooms`` rooms, with or without a ``cycle``."""
    rng = seeded(seed, salt)
    n_rooms = int(settings.get("rooms", 6))
    cycle = settings.get("cycle")
    graph = make_map(rng, n_rooms, None if cycle is None else bool(cycle))
    cats = sorted(rooms.CATEGORIES)
    # Categories are drawn with replacement, as in clembench: a map may have two kitchens.
    categories = {p: rng.choice(cats) for p in sorted(graph.nodes)}
    start = rng.choice(sorted(graph.nodes))
    return {"seed": seed, **_map_instance(rng, graph, start, categories)}


def g2x_instance(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    """A G2X instance: start and target at a distance from ``DISTANCES[distance]``; the target's
    category occurs once on the map."""
    rng = seeded(seed, "clem.mapworld_g2x")
    distance = str(settings.get("distance", "close"))
    if distance not in DISTANCES:
        raise ValueError(f"distance must be one of {', '.join(DISTANCES)}, not {distance!r}")
    want = rng.choice(DISTANCES[distance])
    n_rooms = int(settings.get("rooms", 8))
    while True:
        graph = make_map(rng, n_rooms, None)
        lengths = dict(nx.all_pairs_shortest_path_length(graph))
        pairs = sorted((a, b) for a in lengths for b, d in lengths[a].items() if d == want)
        if pairs:
            break
    start, target = rng.choice(pairs)
    cats = sorted(rooms.CATEGORIES)
    goal = rng.choice(cats)
    others = [c for c in cats if c != goal]
    categories = {p: goal if p == target else rng.choice(others) for p in sorted(graph.nodes)}
    instance = {"seed": seed, **_map_instance(rng, graph, start, categories)}
    instance.update({"target": list(target), "target_category": goal, "distance": want})
    return instance


def graph_of(instance: dict[str, Any]) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from(tuple(r["pos"]) for r in instance["rooms"])
    graph.add_edges_from((tuple(a), tuple(b)) for a, b in instance["edges"])
    return graph


# --- scores (pure; tested on hand-made episodes) ---------------------------------------------


def good_first_steps(graph: nx.Graph, visited: set[Pos], current: Pos) -> set[Pos]:
    """The rooms that are first steps of a shortest walk from ``current`` covering every room
    seen but not yet visited (neighbours of visited rooms), using only known doors (those of
    visited rooms). Empty when there is nothing left to see."""
    targets = frozenset(n for v in visited for n in graph[v]) - visited
    if not targets:
        return set()

    def moves(node: Pos) -> list[Pos]:
        return [n for n in graph[node] if node in visited or n in visited]

    start = (current, frozenset[Pos]())
    firsts: dict[tuple[Pos, frozenset[Pos]], set[Pos]] = {}
    layer: list[tuple[Pos, frozenset[Pos]]] = []
    for n in moves(current):
        state = (n, frozenset({n}) & targets)
        if state not in firsts:
            firsts[state] = set()
            layer.append(state)
        firsts[state].add(n)
    seen = {start, *firsts}
    while layer:
        done = [s for s in layer if s[1] == targets]
        if done:
            return set().union(*(firsts[s] for s in done))
        nxt: list[tuple[Pos, frozenset[Pos]]] = []
        for state in layer:
            node, covered = state
            for n in moves(node):
                new = (n, covered | (frozenset({n}) & targets))
                if new in seen and new not in nxt:
                    continue
                if new not in firsts:
                    firsts[new] = set()
                    nxt.append(new)
                    seen.add(new)
                firsts[new] |= firsts[state]
        layer = nxt
    return set()


def exploration_scores(
    graph: nx.Graph, start: Pos, moves: list[tuple[Pos, Pos]]
) -> dict[str, float]:
    """clembench's EE scores for a sequence of moves (old, new); an invalid move has old == new.

    A move is good if the map was not yet fully visited, it changed rooms, and its new room is a
    first step of a shortest covering walk (:func:`good_first_steps`). Efficiency = 100 × share
    of good moves (0 without moves); exploration = 100 × visited / rooms; main = their harmonic
    mean (0 when both are 0).
    """
    visited = {start}
    seen = {start, *graph[start]}
    good: list[bool] = []
    valid = invalid = 0
    for old, new in moves:
        if old == new:
            invalid += 1
        else:
            valid += 1
        if len(visited) < graph.number_of_nodes() and old != new:
            good.append(new in good_first_steps(graph, visited, old))
        else:
            good.append(False)
        visited.add(new)
        seen.update(graph[new])
    efficiency = 100.0 * sum(good) / max(len(good), 1)
    exploration = 100.0 * len(visited) / graph.number_of_nodes()
    main = (
        0.0
        if not efficiency and not exploration
        else 2 * efficiency * exploration / (efficiency + exploration)
    )
    return {
        "efficiency": efficiency,
        "exploration": exploration,
        "main": main,
        "moves": float(valid + invalid),
        "valid_moves": float(valid),
        "invalid_moves": float(invalid),
        "visited": float(len(visited)),
        "seen": float(len(seen)),
        "good_moves": float(sum(good)),
    }


def g2x_efficiency(path_len: int, distance: int) -> float:
    """``100 / max(1, path_len − distance)``; ``path_len`` counts the rooms of the path including
    the start (one more than the moves), so a shortest path scores 100."""
    return 100.0 / max(1, path_len - distance)


def normalised_distance(distance: float) -> float:
    """The stretched logistic of clembench's graph similarity: 0 at distance 0, towards 1."""
    return 2.0 * (1.0 / (1.0 + math.exp(-0.5 * distance)) - 0.5)


@dataclass(frozen=True)
class EditDistance:
    """A graph edit distance search's answer: the distance (exact, or the best upper bound
    found when the budget ran out) and the steps it took."""

    distance: int
    exact: bool
    steps: int


def graph_edit_distance(
    first: nx.Graph, second: nx.Graph, max_steps: int = GED_MAX_STEPS
) -> EditDistance:
    """The unit-cost edit distance between two unlabelled graphs, and whether it is exact.

    Unlabelled nodes substitute for free, so an optimal edit maps as many nodes as possible:
    the distance is ``|ΔV|`` plus the fewest edge insertions and deletions over all one-to-one
    maps of the smaller graph's nodes into the larger's (networkx's ``graph_edit_distance``
    with its default costs gives the same numbers; the tests check that). A depth-first
    branch and bound over those maps, nodes taken most-connected first, pruned by the edges
    still to place, finds it; after ``max_steps`` node assignments it stops and returns the
    best map found so far (an upper bound) with ``exact`` False.
    """
    big, small = (first, second) if len(first) >= len(second) else (second, first)
    n = len(big)
    if n == 0:
        return EditDistance(0, True, 0)
    if (
        len(first) == len(second)
        and first.number_of_edges() == second.number_of_edges()
        and nx.is_isomorphic(first, second)
    ):
        return EditDistance(0, True, 0)  # a right map, however large, is found at once
    a_nodes, b_nodes = list(big.nodes), list(small.nodes)
    a_index = {v: i for i, v in enumerate(a_nodes)}
    b_index = {v: i for i, v in enumerate(b_nodes)}
    # Bitmask adjacency, the smaller graph padded with isolated nodes; a self-loop (a reported
    # door from a room to itself) is an edge too, matched only by a self-loop.
    adj_a, adj_b = [0] * n, [0] * n
    loops_a = loops_b = 0
    for u, v in big.edges:
        if u == v:
            loops_a |= 1 << a_index[u]
        else:
            adj_a[a_index[u]] |= 1 << a_index[v]
            adj_a[a_index[v]] |= 1 << a_index[u]
    for u, v in small.edges:
        if u == v:
            loops_b |= 1 << b_index[u]
        else:
            adj_b[b_index[u]] |= 1 << b_index[v]
            adj_b[b_index[v]] |= 1 << b_index[u]
    edges_a = sum(m.bit_count() for m in adj_a) // 2 + loops_a.bit_count()
    edges_b = sum(m.bit_count() for m in adj_b) // 2 + loops_b.bit_count()
    padding = n - len(b_nodes)  # the padded nodes are interchangeable: try only one

    # Place the big graph's nodes most-connected-to-the-placed first (ties: higher degree), so
    # edge mismatches show up early and prune.
    order: list[int] = []
    placed = 0
    left = set(range(n))
    while left:
        u = max(left, key=lambda x: ((adj_a[x] & placed).bit_count(), adj_a[x].bit_count(), -x))
        order.append(u)
        placed |= 1 << u
        left.remove(u)

    image = [0] * n  # image[u] = the small graph's node that big node u maps to
    best = edges_a + edges_b + 1
    steps = 0
    cut = False  # the budget ran out before the search proved its best

    def search(k: int, used: int, placed_a: int, cost: int, inner_a: int, inner_b: int) -> None:
        nonlocal best, steps, cut
        if cost + abs((edges_a - inner_a) - (edges_b - inner_b)) >= best:
            return
        if k == n:
            best = cost
            return
        u = order[k]
        near_a = adj_a[u] & placed_a
        loop_a = loops_a >> u & 1
        mapped = 0
        rest = near_a
        while rest:
            low = rest & -rest
            mapped |= 1 << image[low.bit_length() - 1]
            rest ^= low
        options = []
        padded_tried = False
        for v in range(n):
            if used >> v & 1:
                continue
            if v >= n - padding:
                if padded_tried:
                    continue
                padded_tried = True
            near_b = adj_b[v] & used
            loop_b = loops_b >> v & 1
            mismatch = (mapped ^ near_b).bit_count() + (loop_a != loop_b)
            options.append((mismatch, v, near_b.bit_count() + loop_b))
        options.sort()
        inner = near_a.bit_count() + loop_a
        for extra, v, inner_v in options:
            if steps >= max_steps:
                cut = True
                return
            steps += 1
            image[u] = v
            search(
                k + 1,
                used | 1 << v,
                placed_a | 1 << u,
                cost + extra,
                inner_a + inner,
                inner_b + inner_v,
            )

    search(0, 0, 0, 0, 0, 0)
    return EditDistance(abs(len(first) - len(second)) + best, not cut, steps)


def graph_similarity(
    predicted: nx.Graph, actual: nx.Graph, max_steps: int = GED_MAX_STEPS
) -> tuple[float, float, bool]:
    """``100·(1 − norm(GED))`` between two unlabelled graphs; returns (similarity, GED, bounded).

    The search is bounded by a count of steps (:func:`graph_edit_distance`), never by time, so
    the same graphs score the same on any machine; ``bounded`` is True when the budget ran out
    before the search proved its answer, in which case GED is the best upper bound found
    (similarity a lower bound).
    """
    found = graph_edit_distance(predicted, actual, max_steps)
    return (
        100.0 * (1.0 - normalised_distance(found.distance)),
        float(found.distance),
        not found.exact,
    )


def reported_graph(graph: dict[str, Any]) -> nx.Graph:
    """A player's graph (``{"nodes": [...], "edges": {"north": [[a, b], ...], ...}}``) as networkx;
    edges that are not pairs are ignored (as in clembench)."""
    result = nx.Graph()
    result.add_nodes_from(_name(n) for n in graph.get("nodes", []))
    for pairs in graph.get("edges", {}).values():
        for pair in pairs:
            if isinstance(pair, list) and len(pair) == 2:
                result.add_edge(_name(pair[0]), _name(pair[1]))
    return result


def _name(node: Any) -> str:
    return node if isinstance(node, str) else json.dumps(node)


# --- reply parsing -----------------------------------------------------------------------------

MOVE_RE = re.compile(r"^GO:\s*(north|east|south|west)$", re.IGNORECASE)
DONE_RE = re.compile(r"^DONE$", re.IGNORECASE)


def parse_reply(text: str, keys: tuple[str, ...]) -> tuple[dict[str, Any] | None, str]:
    """The reply as a JSON object with exactly ``keys``, or (None, why not)."""
    stripped = text.strip()
    if not stripped.startswith("{") or not stripped.endswith("}"):
        return None, "the reply is not a bare JSON object"
    try:
        reply = json.loads(stripped)
    except json.JSONDecodeError as exc:
        return None, f"the reply is not valid JSON ({exc.msg})"
    if not isinstance(reply, dict) or set(reply) != set(keys):
        return None, f"the JSON object must have exactly the keys {', '.join(keys)}"
    if not isinstance(reply.get("action"), str) or not isinstance(reply.get("description"), str):
        return None, "action and description must be strings"
    return reply, ""


def parse_graph(graph: Any) -> str:
    """Why a reported graph is malformed, or "" when it is well formed."""
    if not isinstance(graph, dict) or set(graph) != {"nodes", "edges"}:
        return 'the graph must be {"nodes": [...], "edges": {...}}'
    if not isinstance(graph["nodes"], list) or not isinstance(graph["edges"], dict):
        return "graph nodes must be a list and edges an object"
    if not all(isinstance(v, list) for v in graph["edges"].values()):
        return "each direction in graph edges must hold a list of [from, to] pairs"
    if set(graph["edges"]) - set(DIRECTIONS):
        return "graph edges are keyed by north, south, east and west"
    return ""


# --- prompts -----------------------------------------------------------------------------------

EE_TASK = (
    "Your task is to visit every room, with as few moves as possible, and to say when you are "
    "done: as soon as you are sure there is no room left that you have not been in."
)
G2X_TASK = (
    "Your task is to find a room of one kind, the {goal}, and to stop there: go through the "
    "building until you are in a {goal}, then say you are done."
)

SYSTEM = """\
You are exploring a building whose rooms are connected by doorways. You move one room at a \
time by going north, south, east or west. {task}

In each turn I tell you which directions you can go from the room you are in, {seeing}

Answer with a JSON object and nothing else (no code block, no extra text):
{format}
Replace <description> with one sentence that describes the room you are in. Replace <action> \
with "GO: north", "GO: south", "GO: east" or "GO: west" to move, or with "DONE" to stop.{graph_note}

Example:
{example}"""

SEEING = {
    "image": "and I show you a picture of the room.",
    "text": "and I name the room.",
}

FORMAT = '{"description": "<description>", "action": "<action>"}'
FORMAT_GR = '{"action": "<action>", "description": "<description>", "graph": <graph>}'
GRAPH_NOTE = """
Replace <graph> with the map you have uncovered so far: \
{"nodes": [<room names>], "edges": {"north": [[<from>, <to>], ...], "south": [...], "east": [...], "west": [...]}} \
where [A, B] under "north" means that B is north of A. Name each room as you like (for \
example by what it is), but use the same name for the same room every time."""

EXAMPLE = """\
(me) We are in this room. From here we can go: north, west. What is your next instruction?
(you) {"description": "A kitchen with a red fridge and a stove.", "action": "GO: north"}
(me) We have made a step and are now in this room. From here we can go: south, east. What is your next instruction?
(you) {"description": "A living room with a sofa and a television.", "action": "GO: east"}
(me) We have made a step and are now in this room. From here we can go: west. What is your next instruction?
(you) {"description": "A bathroom with a bathtub.", "action": "DONE"}"""

EXAMPLE_GR = """\
(me) We are in this room. From here we can go: north, west. What is your next instruction?
(you) {"action": "GO: north", "description": "A kitchen with a red fridge.", "graph": {"nodes": ["Kitchen"], "edges": {"north": [], "south": [], "east": [], "west": []}}}
(me) We have made a step and are now in this room. From here we can go: south, east. What is your next instruction?
(you) {"action": "DONE", "description": "A living room with a sofa.", "graph": {"nodes": ["Kitchen", "Living room"], "edges": {"north": [["Kitchen", "Living room"]], "south": [], "east": [], "west": []}}}"""


class MapWorldGame(ClemGameMaster):
    """One navigator, the game master's room messages, at most ``max_turns`` replies.

    Settings: ``variant`` (image/text), ``max_turns`` (20) and the variant's map settings.
    """

    roles = ("navigator",)
    mode: ClassVar[str] = "ee"

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.max_turns = int(self.settings.get("max_turns", MAX_TURNS))
        self.graph = graph_of(instance)
        self.rooms = {tuple(r["pos"]): r for r in instance["rooms"]}
        self.current: Pos = tuple(instance["start"])
        self.moves: list[tuple[Pos, Pos]] = []
        self.turns = 0
        self.last_graph: dict[str, Any] | None = None
        self.stopped = False
        self.note(
            "map",
            private=True,  # the whole map and its target: what the navigator explores to find
            rooms=[{"pos": r["pos"], "category": r["category"]} for r in instance["rooms"]],
            edges=instance["edges"],
            start=instance["start"],
            target=instance.get("target"),
        )
        self._tell(self._message(first=True, moved=True))

    # What the navigator sees ------------------------------------------------------------------

    def directions(self, pos: Pos | None = None) -> list[str]:
        here = self.current if pos is None else pos
        return [d for d in DIRECTIONS if step(here, d) in self.graph[here]]

    def _message(self, *, first: bool = False, moved: bool = True) -> str:
        category = self.rooms[self.current]["category"]
        where = "this room" if self.variant == "image" else f"the {category}"
        if first:
            head = f"We are in {where}."
        elif moved:
            head = f"We have made a step and are now in {where}."
        else:
            head = f"We cannot go that way; we are still in {where}."
        ways = ", ".join(self.directions())
        return f"{head} From here we can go: {ways}. What is your next instruction?"

    def _tell(self, text: str) -> None:
        self.say(GM, "navigator", text)

    def system_prompt(self, role: str) -> str:
        gr = self.mode == "eegr"
        example = EXAMPLE_GR if gr else EXAMPLE
        if self.variant == "text":  # the text variant names rooms, so its example does too
            rooms_named = iter(("the kitchen", "the living room", "the bathroom"))
            example = re.sub(r"this room", lambda _: next(rooms_named), example)
        task = EE_TASK
        if self.mode == "g2x":
            task = G2X_TASK.format(goal=self.instance["target_category"])
        return SYSTEM.format(
            task=task,
            seeing=SEEING[self.variant],
            format=FORMAT_GR if gr else FORMAT,
            graph_note=GRAPH_NOTE if gr else "",
            example=example,
        )

    def whose_turn(self) -> str | None:
        return None if self.outcome is not None else "navigator"

    def observe(self, role: str) -> Observation:
        room = self.rooms[self.current]
        data: dict[str, Any] = {"directions": self.directions(), "room": room["category"]}
        if self.mode == "g2x":
            data["goal"] = self.instance["target_category"]
        if self.mode == "eegr":
            data["report_graph"] = True
        if self.variant == "image":
            return Observation(images=[render(room["picture"])], data=data)
        return Observation(data=data)

    # Replies -------------------------------------------------------------------------------------

    def handle_reply(self, role: str, text: str) -> None:
        self.turns += 1
        keys = (
            ("action", "description", "graph") if self.mode == "eegr" else ("description", "action")
        )
        reply, why = parse_reply(text, keys)
        if reply is None:
            self.abort(role, why)
            return
        if self.mode == "eegr":
            why = parse_graph(reply["graph"])
            if why:
                self.abort(role, why)
                return
            self.last_graph = reply["graph"]
        action = reply["action"].strip()
        if DONE_RE.match(action):
            self.stopped = True
            self._finish()
            return
        move = MOVE_RE.match(action)
        if move is None:
            self.abort(role, f'action must be "GO: <direction>" or "DONE", not {action!r}')
            return
        direction = move.group(1).lower()
        old = self.current
        new = step(old, direction)
        moved = new in self.graph[old]
        if moved:
            self.current = new
        self.moves.append((old, self.current))
        self.note("move", old=list(old), new=list(self.current), direction=direction, valid=moved)
        if self.turns >= self.max_turns:
            # clembench: reaching the turn limit without DONE counts as aborted.
            self.end(
                "aborted", f"no DONE within {self.max_turns} turns", code=ReasonCode.TURN_LIMIT
            )
            return
        self._tell(self._message(moved=moved))

    def _finish(self) -> None:
        if self.mode == "g2x":
            found = self.current == tuple(self.instance["target"])
            self.end(
                "success" if found else "lost",
                "stopped in the target room" if found else "stopped in another room",
            )
            return
        visited = {tuple(self.instance["start"])} | {new for _, new in self.moves}
        if len(visited) == self.graph.number_of_nodes():
            self.end("success", "visited every room")
        else:
            self.end("lost", "stopped before visiting every room")

    # Scores ---------------------------------------------------------------------------------------

    def episode_scores(self) -> Scores:
        start: Pos = tuple(self.instance["start"])
        ee = exploration_scores(self.graph, start, self.moves)
        if self.mode == "g2x":
            path_len = 1 + len(self.moves)
            distance = int(self.instance["distance"])
            found = 100.0 if self.current == tuple(self.instance["target"]) else 0.0
            return episode_scores(
                self.outcome,
                found,
                finding=found,
                efficiency=g2x_efficiency(path_len, distance),
                moves=ee["moves"],
                valid_moves=ee["valid_moves"],
                invalid_moves=ee["invalid_moves"],
                visited=ee["visited"],
                distance=float(distance),
            )
        extra: dict[str, float | None] = {k: v for k, v in ee.items() if k != "main"}
        if self.mode == "eegr":
            if self.last_graph is None or self.outcome in (None, "aborted"):
                extra.update(graph_similarity=0.0, ged=None, ged_bounded=0.0)
            else:
                budget = int(self.settings.get("ged_max_steps", GED_MAX_STEPS))
                sim, ged, bounded = graph_similarity(
                    reported_graph(self.last_graph), self.graph, budget
                )
                extra.update(graph_similarity=sim, ged=ged, ged_bounded=float(bounded))
        return episode_scores(self.outcome, ee["main"], **extra)


class ExploreGame(MapWorldGame):
    mode = "ee"


class GoToGame(MapWorldGame):
    mode = "g2x"


class ExploreGraphGame(MapWorldGame):
    mode = "eegr"


# --- players ----------------------------------------------------------------------------------

WAYS_RE = re.compile(r"From here we can go: ([a-z, ]*)\.")
ROOM_RE = re.compile(r"We are in (?:an? )?([a-z ]+)\.")


def _known_map(view: View) -> tuple[Pos, dict[Pos, list[str]], dict[Pos, str]]:
    """The navigator's own map, rebuilt from what it was told and what it did: its position
    relative to the start, the exits of each room it visited, and the room names it gave."""
    pos: Pos = (0, 0)
    exits: dict[Pos, list[str]] = {}
    names: dict[Pos, str] = {}
    pending: str | None = None
    for speaker, text in view.history:
        if speaker == GM:
            if pending is not None and text.startswith("We have made a step"):
                pos = step(pos, pending)
            pending = None
            ways = WAYS_RE.search(text)
            if ways:
                exits[pos] = [w.strip() for w in ways.group(1).split(",") if w.strip()]
        elif speaker == view.role:
            try:
                reply = json.loads(text)
            except json.JSONDecodeError:
                continue
            move = MOVE_RE.match(str(reply.get("action", "")))
            pending = move.group(1).lower() if move else None
            room = ROOM_RE.match(str(reply.get("description", "")))
            if room and pos not in names:
                names[pos] = room.group(1)
    data = view.data or {}
    exits[pos] = list(data.get("directions", exits.get(pos, [])))
    if "room" in data:
        names.setdefault(pos, data["room"])
    return pos, exits, names


def _plan(pos: Pos, exits: dict[Pos, list[str]]) -> str | None:
    """First direction of a shortest walk over known doors covering all seen-unvisited rooms."""
    graph = nx.Graph()
    for room, ways in exits.items():
        graph.add_node(room)
        for way in ways:
            graph.add_edge(room, step(room, way))
    visited = set(exits)
    firsts = good_first_steps(graph, visited, pos)
    for direction in DIRECTIONS:
        if step(pos, direction) in firsts and direction in exits[pos]:
            return direction
    return None


def _graph(exits: dict[Pos, list[str]], names: dict[Pos, str]) -> dict[str, Any]:
    labels: dict[Pos, str] = {}
    counts: dict[str, int] = {}
    for room in exits:
        base = names.get(room, "room").capitalize()
        counts[base] = counts.get(base, 0) + 1
        labels[room] = base if counts[base] == 1 else f"{base} {counts[base]}"
    edges: dict[str, list[list[str]]] = {d: [] for d in DIRECTIONS}
    done: set[frozenset[Pos]] = set()
    for room, ways in exits.items():
        for way in ways:
            other = step(room, way)
            if other in labels and frozenset((room, other)) not in done:
                done.add(frozenset((room, other)))
                edges[way].append([labels[room], labels[other]])
    return {"nodes": list(labels.values()), "edges": edges}


def _reply(view: View, action: str, description: str, graph: dict[str, Any] | None) -> str:
    if (view.data or {}).get("report_graph"):
        return json.dumps(
            {
                "action": action,
                "description": description,
                "graph": graph or {"nodes": [], "edges": {d: [] for d in DIRECTIONS}},
            }
        )
    return json.dumps({"description": description, "action": action})


def scripted_navigator(view: View, rng: random.Random) -> str:
    """Keeps its own map by dead reckoning and explores it breadth-first: each move is the first
    step of a shortest walk over known doors that covers every room seen but not yet visited;
    G2X stops in the goal room, EE when nothing unvisited is left."""
    data = view.data or {}
    pos, exits, names = _known_map(view)
    room = data.get("room", names.get(pos, "room"))
    description = f"We are in a {room}."
    graph = _graph(exits, names)
    goal = data.get("goal")
    if goal is not None and room == goal:
        return _reply(view, "DONE", description, graph)
    direction = _plan(pos, exits)
    if direction is None:
        return _reply(view, "DONE", description, graph)
    return _reply(view, f"GO: {direction}", description, graph)


def random_navigator(view: View, rng: random.Random) -> str:
    """Uniform over the directions it can go and DONE (a well-formed reply every time)."""
    data = view.data or {}
    options = [f"GO: {d}" for d in data.get("directions", [])] + ["DONE"]
    return _reply(view, rng.choice(options), "A room.", None)


# --- the path picture (seed 000, fig. 7) --------------------------------------------------------

OLIVE, CYAN, GREY, ORANGE = (128, 128, 0), (23, 190, 207), (150, 150, 150), (255, 127, 14)


def render_path(instance: dict[str, Any], path: list[Pos], *, cell: int = 110) -> bytes:
    """The map with the walked path: current room cyan, visited rooms olive, others grey (the
    G2X target orange), doors dashed, moves as arrows (the last one red)."""
    margin = cell // 2
    side = GRID * cell + 2 * margin
    image = Image.new("RGB", (side, side), (255, 255, 255))
    d = ImageDraw.Draw(image)

    def centre(p: Pos) -> tuple[float, float]:
        return margin + p[0] * cell + cell / 2, margin + (GRID - 1 - p[1]) * cell + cell / 2

    for i in range(GRID + 1):
        v = margin + i * cell
        d.line((margin, v, side - margin, v), fill=(235, 235, 235))
        d.line((v, margin, v, side - margin), fill=(235, 235, 235))
    for a, b in instance["edges"]:
        (x1, y1), (x2, y2) = centre(tuple(a)), centre(tuple(b))
        for k in range(10):
            if k % 2 == 0:
                d.line(
                    (
                        x1 + (x2 - x1) * k / 10,
                        y1 + (y2 - y1) * k / 10,
                        x1 + (x2 - x1) * (k + 1) / 10,
                        y1 + (y2 - y1) * (k + 1) / 10,
                    ),
                    fill=GREY,
                    width=2,
                )
    target = tuple(instance["target"]) if instance.get("target") else None
    visited = set(path)
    radius = cell * 0.22
    for r in instance["rooms"]:
        p = tuple(r["pos"])
        x, y = centre(p)
        fill = CYAN if path and p == path[-1] else OLIVE if p in visited else GREY
        outline = ORANGE if p == target else (120, 60, 30)
        d.ellipse(
            (x - radius, y - radius, x + radius, y + radius),
            fill=fill,
            outline=outline,
            width=5 if p == target else 2,
        )
    count: dict[frozenset[Pos], int] = {}
    steps = [(a, b) for a, b in itertools.pairwise(path) if a != b]
    for i, (a, b) in enumerate(steps):
        key = frozenset((a, b))
        k = count.get(key, 0)
        count[key] = k + 1
        # Repeated moves through one door are drawn side by side (offsets taken across the door
        # in one fixed orientation, so a move back does not hide the move there).
        lo, hi = sorted((a, b))
        (cx1, cy1), (cx2, cy2) = centre(lo), centre(hi)
        norm = math.hypot(cx2 - cx1, cy2 - cy1)
        px, py = -(cy2 - cy1) / norm, (cx2 - cx1) / norm
        shift = 8 * (k - 0.5)
        (x1, y1), (x2, y2) = centre(a), centre(b)
        dx, dy = x2 - x1, y2 - y1
        length = math.hypot(dx, dy)
        ux, uy = dx / length, dy / length
        ox, oy = px * shift, py * shift
        sx, sy = x1 + ux * radius + ox, y1 + uy * radius + oy
        ex, ey = x2 - ux * radius + ox, y2 - uy * radius + oy
        color = (220, 30, 30) if i == len(steps) - 1 else (20, 20, 20)
        d.line((sx, sy, ex, ey), fill=color, width=3)
        head = [
            (ex, ey),
            (ex - ux * 12 - uy * 6, ey - uy * 12 + ux * 6),
            (ex - ux * 12 + uy * 6, ey - uy * 12 - ux * 6),
        ]
        d.polygon(head, fill=color)
    if path:
        x, y = centre(path[0])
        label(d, (x, y), "S", 20, fill=(255, 255, 255), anchor="mm")
    return png(image)
