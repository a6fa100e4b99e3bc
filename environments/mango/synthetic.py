"""Synthetic mazes in the MANGO format, so the game runs and is tested without the real data.

A maze is grown on a 3-D grid (compass moves and up/down, a few one-way passages and one-way
special moves such as ``pull lever``); a walkthrough explores it the way a player's does —
walking to each unvisited room, trying the odd blocked exit, doing things that do not move the
player, seeing one room in the dark until the lamp is lit — and every step gets a game-style
observation (the room's name as a heading, a description that may name a neighbouring room).
The edges file, the locations and the DF/RF questions are then derived from the first
``horizon`` steps with the same rules as the real data (see :mod:`parley.environments.mango.data`).
Everything is a pure function of ``(seed, index)`` and the size settings.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from typing import Any

import networkx as nx

from parley.environments.mango.data import (
    EDGE_FIELDS,
    NEVER,
    MangoGame,
    Question,
    Step,
    build_graph,
    df_fields,
    df_question,
    rf_question,
    rf_table,
)

DIRECTIONS: dict[str, tuple[int, int, int]] = {
    "north": (0, 1, 0),
    "south": (0, -1, 0),
    "east": (1, 0, 0),
    "west": (-1, 0, 0),
    "northeast": (1, 1, 0),
    "southwest": (-1, -1, 0),
    "northwest": (-1, 1, 0),
    "southeast": (1, -1, 0),
    "up": (0, 0, 1),
    "down": (0, 0, -1),
}
REVERSE = {
    "north": "south",
    "south": "north",
    "east": "west",
    "west": "east",
    "northeast": "southwest",
    "southwest": "northeast",
    "northwest": "southeast",
    "southeast": "northwest",
    "up": "down",
    "down": "up",
}
# How often each direction is tried when growing the maze: mostly the four main ones.
_WEIGHTS = {d: 4 if d in ("north", "south", "east", "west") else 1 for d in DIRECTIONS}
SPECIAL_MOVES = ("pull lever", "climb rope", "jump into the well", "say xyzzy", "enter portal")

ADJECTIVES = (
    "dusty", "narrow", "flooded", "golden", "crumbling", "silent", "windy", "mossy", "painted",
    "sunken", "frozen", "hidden", "echoing", "crooked", "marble", "smoky", "velvet", "rusty",
)  # fmt: skip
NOUNS = (
    "cellar", "gallery", "chapel", "library", "stable", "kitchen", "tower", "crypt", "garden",
    "attic", "corridor", "workshop", "bridge", "cavern", "pantry", "landing", "courtyard", "vault",
)  # fmt: skip
ITEMS = ("brass key", "old map", "candle", "rope", "silver coin", "clay jar", "feather")
FEATURES = (
    "Cobwebs hang from the beams.",
    "Water drips somewhere out of sight.",
    "Faded paintings line the walls.",
    "The floor is covered in straw.",
    "A cold draught blows through here.",
    "Someone has scratched arrows into the stone.",
)

DARK = "Darkness\nIt is pitch dark here. You might stumble into something."
LIGHT_ACT = "turn on lamp"


def synthetic_name(seed: int, index: int) -> str:
    return f"synthetic-s{seed}-g{index}"


def _title(name: str) -> str:
    return " ".join(w.capitalize() for w in name.split())


def _id(*parts: Any) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()


def _grow(rng: random.Random, rooms: int) -> tuple[list[str], dict[tuple[str, str], str]]:
    """Rooms and moves: ``moves[(room, action)] = room``."""
    names = [f"{a} {n}" for a in ADJECTIVES for n in NOUNS]
    rng.shuffle(names)
    # One word per room is unique among the first rooms, so no name is a suffix of another.
    chosen: list[str] = []
    used_nouns: set[str] = set()
    for name in names:
        noun = name.split()[1]
        if noun not in used_nouns:
            chosen.append(name)
            used_nouns.add(noun)
        if len(chosen) == rooms:
            break
    at: dict[tuple[int, int, int], str] = {(0, 0, 0): chosen[0]}
    pos = {chosen[0]: (0, 0, 0)}
    moves: dict[tuple[str, str], str] = {}
    directions = list(DIRECTIONS)
    weights = [_WEIGHTS[d] for d in directions]
    for name in chosen[1:]:
        while True:
            base = rng.choice(list(pos))
            d = rng.choices(directions, weights)[0]
            x, y, z = pos[base]
            dx, dy, dz = DIRECTIONS[d]
            target = (x + dx, y + dy, z + dz)
            if target not in at and (base, d) not in moves:
                break
        at[target] = name
        pos[name] = target
        moves[(base, d)] = name
        if rng.random() > 0.12:  # now and then a passage only goes one way
            moves[(name, REVERSE[d])] = base
    # A few extra passages between neighbours make loops.
    for name, (x, y, z) in sorted(pos.items()):
        for d in ("north", "east", "up"):
            dx, dy, dz = DIRECTIONS[d]
            other = at.get((x + dx, y + dy, z + dz))
            if other and (name, d) not in moves and rng.random() < 0.2:
                moves[(name, d)] = other
                moves[(other, REVERSE[d])] = name
    # Every room must lead back to the start: open the reverse of one-way passages until it does.
    while True:
        graph = nx.DiGraph([(r, dst) for (r, _), dst in moves.items()])
        back = nx.ancestors(graph, chosen[0]) | {chosen[0]}
        stuck = [name for name in chosen if name not in back]
        if not stuck:
            break
        for (r, a), dst in sorted(moves.items()):
            if dst in stuck and r in back and a in REVERSE and (dst, REVERSE[a]) not in moves:
                moves[(dst, REVERSE[a])] = r
                break
    # One-way special moves between rooms that are not neighbours.
    for _ in range(rng.randint(1, 2)):
        a, b = rng.sample(chosen, 2)
        action = rng.choice(SPECIAL_MOVES)
        if (a, action) not in moves:
            moves[(a, action)] = b
    return chosen, moves


def _describe(rng: random.Random, room: str, moves: dict[tuple[str, str], str], first: bool) -> str:
    exits = [a for (r, a) in moves if r == room and a in DIRECTIONS]
    head = _title(room)
    if not first and rng.random() < 0.6:
        return head  # brief mode on a revisit, as many games do
    lines = [f"You are in the {room}. {rng.choice(FEATURES)}"]
    if exits:
        lines.append(f"Exits lead {', '.join(exits)}.")
    neighbours = [moves[(room, a)] for a in exits]
    if neighbours and rng.random() < 0.35:
        # The name of another room in the text: readers must not take it for a move.
        lines.append(f"From here you can make out the {_title(rng.choice(neighbours))}.")
    if rng.random() < 0.3:
        item = rng.choice(ITEMS)
        lines.append(f"There is {'an' if item[0] in 'aeiou' else 'a'} {item} here.")
    return f"{head}\n" + " ".join(lines)


def _route(moves: dict[tuple[str, str], str], src: str, targets: set[str]) -> list[str] | None:
    """Shortest action list from ``src`` to the nearest of ``targets`` (breadth first)."""
    queue: deque[tuple[str, list[str]]] = deque([(src, [])])
    seen = {src}
    while queue:
        room, path = queue.popleft()
        if room in targets:
            return path
        for (r, a), nxt in sorted(moves.items()):
            if r == room and nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, [*path, a]))
    return None


def _walkthrough(
    rng: random.Random, rooms: list[str], moves: dict[tuple[str, str], str], length: int
) -> tuple[list[Step], list[tuple[int, str, str, str, int]]]:
    """Steps, and the moves made: (step, src, action, dst, step the dst's name is shown)."""
    start = rooms[0]
    steps = [Step(0, "Init", f"Welcome to the maze.\n\n{_describe(rng, start, moves, True)}")]
    made: list[tuple[int, str, str, str, int]] = []
    here, visited, lamp = start, {start}, False
    dark_room: str | None = None
    plan: list[str] = []
    while len(steps) <= length:
        t = len(steps)
        roll = rng.random()
        if roll < 0.25:
            item = rng.choice(ITEMS)
            act, obs = rng.choice(
                [
                    (f"take {item}", "Taken."),
                    (f"examine {item}", f"The {item} looks ordinary enough."),
                    ("inventory", "You are carrying a lamp."),
                    ("wait", "Time passes."),
                ]
            )
            steps.append(Step(t, act, obs))
            continue
        if roll < 0.3:
            blocked = [d for d in DIRECTIONS if (here, d) not in moves]
            if blocked:
                steps.append(Step(t, rng.choice(blocked), "You can't go that way."))
                continue
        if not plan:
            unvisited = set(rooms) - visited
            route = _route(moves, here, unvisited) if unvisited else None
            if route:
                plan = route
            elif rng.random() < 0.15:
                # Everything seen: the player mostly stays put now, solving puzzles.
                exits = sorted(a for (r, a) in moves if r == here)
                plan = [rng.choice(exits)]
            else:
                steps.append(Step(t, "search", "You find nothing of interest."))
                continue
        action = plan.pop(0)
        nxt = moves[(here, action)]
        first = nxt not in visited
        if first and not lamp and dark_room is None and t > 3 and len(steps) < length - 1:
            # The first new room after a few steps is dark: its name shows only once lit.
            dark_room = nxt
            steps.append(Step(t, action, DARK))
            steps.append(
                Step(t + 1, LIGHT_ACT, f"The lamp is now on.\n\n{_describe(rng, nxt, moves, True)}")
            )
            lamp = True
            made.append((t, here, action, nxt, t + 1))
        else:
            steps.append(Step(t, action, _describe(rng, nxt, moves, first)))
            made.append((t, here, action, nxt, t))
        visited.add(nxt)
        here = nxt
    return steps[: length + 1], made


def _edges(
    made: list[tuple[int, str, str, str, int]], moves: dict[tuple[str, str], str], horizon: int
) -> list[dict[str, Any]]:
    """The edges file: every edge walked or inferred in reverse by ``horizon``, with steps."""
    seen: dict[tuple[str, str, str], dict[str, int]] = {}

    def mark(key: tuple[str, str, str], field: str, step: int, shown: int) -> None:
        row = seen.setdefault(key, {f: NEVER for f in EDGE_FIELDS})
        row[field] = min(row[field], step)
        row[f"{field}_answerable"] = min(row[f"{field}_answerable"], shown)

    for step, src, action, dst, shown in made:
        if step > horizon:
            continue
        mark((src, dst, action), "seen_in_forward", step, shown)
        back = REVERSE.get(action)
        if back and moves.get((dst, back)) == src:
            mark((dst, src, back), "seen_in_reversed", step, shown)
    edges = []
    for (src, dst, action), row in seen.items():
        row["edge_min_step"] = min(row["seen_in_forward"], row["seen_in_reversed"])
        row["edge_min_step_answerable"] = min(
            row["seen_in_forward_answerable"], row["seen_in_reversed_answerable"]
        )
        edges.append({"src_node": src, "dst_node": dst, "action": action, **row})
    return edges


def _questions(
    name: str, graph: nx.MultiDiGraph, locations: list[str]
) -> tuple[list[Question], list[Question]]:
    rf: list[Question] = []
    df: list[Question] = []
    table = rf_table(graph, locations)
    for src in locations:
        lengths = nx.single_source_shortest_path_length(graph, src)
        for dst in locations:
            if dst == src:
                continue
            row = table[(src, dst)]
            fields = {"src_node": src, "dst_node": dst, "num_paths": row["num_paths"]}
            fields["id"] = _id(name, "rf", src, dst)
            fields.update({k: v for k, v in row.items() if k != "num_paths"})
            rf.append(rf_question(fields))
            if dst not in lengths:
                continue
            for path in nx.all_simple_edge_paths(graph, src, dst):
                details = [
                    {"prev_node": u, "node": v, "action": k}
                    | {f: graph.edges[u, v, k][f] for f in EDGE_FIELDS}
                    for u, v, k in path
                ]
                q = {
                    "src_node": src,
                    "dst_node": dst,
                    "diff_shortest": len(path) - lengths[dst],
                    "path_details": details,
                    "step_count": len(path),
                    "id": _id(name, "df", src, dst, [k for _, _, k in path]),
                    **df_fields(details),
                }
                df.append(df_question(q))
    return df, rf


def synthetic_game(
    seed: int, index: int = 0, *, rooms: int = 12, length: int = 80, horizon: int = 70
) -> MangoGame:
    """Synthetic maze number ``index`` of generator seed ``seed``: ``rooms`` rooms, a
    walkthrough of steps 0..``length``, files describing its first ``horizon`` steps."""
    rng = random.Random(f"mango.synthetic:{seed}:{index}:{rooms}:{length}")
    names, moves = _grow(rng, rooms)
    steps, made = _walkthrough(rng, names, moves, length)
    edges = _edges(made, moves, horizon)
    graph = build_graph(edges)
    order: list[str] = []
    for _, src, _, dst, _ in made:
        for room in (src, dst):
            if room in graph and room not in order:
                order.append(room)
    actions = sorted({e["action"] for e in edges}, key=lambda a: (a not in DIRECTIONS, a))
    name = synthetic_name(seed, index)
    df, rf = _questions(name, graph, order)
    return MangoGame(name, order, actions, steps, edges, df, rf)
