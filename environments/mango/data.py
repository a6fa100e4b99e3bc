"""The MANGO data format (seed 002): one folder per game, loaded into a maze graph, the
walkthrough and the destination-finding (DF) and route-finding (RF) questions.

A folder ``<g>/`` holds ``<g>.walkthrough`` (blocks ``==>STEP NUM: k`` / ``==>ACT:`` /
``==>OBSERVATION:``), ``<g>.actions.json``, ``<g>.locations.json``, ``<g>.edges.json``,
``<g>.all_pairs.jsonl`` (RF) and ``<g>.all2all.jsonl`` (DF, one simple path a line).

Edges carry the step at which they were first walked forward or inferred in reverse (9999 =
never), and ``*_answerable`` variants: the step from which the walkthrough text lets a reader
know the edge (a move into a dark room is only answerable once the room's name is shown). The
edges file already holds the reverse edges the benchmark imputed and checked in play (those
with ``seen_in_forward == 9999``); reverses the annotators rejected are absent, so the graph
is the file as it is.

Labels at a step cutoff ``c``: a question is answerable if ``min_step_total_answerable <= c``,
easy if also ``min_step_forward_answerable <= c`` (every edge it needs was walked forward by
then), else hard. For a DF question both numbers are the largest over its path's edges; for
an RF question they are the bottleneck over all routes: the smallest, over simple paths, of the
largest edge step (:func:`bottleneck`).
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal

import networkx as nx

from parley.environments.data_files import reading

NEVER = 9999
Kind = Literal["df", "rf"]
Label = Literal["easy", "hard"]

EDGE_FIELDS = (
    "seen_in_forward",
    "seen_in_reversed",
    "edge_min_step",
    "seen_in_forward_answerable",
    "seen_in_reversed_answerable",
    "edge_min_step_answerable",
)
# question field -> the edge field it is the maximum (DF) or bottleneck (RF) of
LABEL_FIELDS = {
    "min_step_total": "edge_min_step",
    "min_step_forward": "seen_in_forward",
    "min_step_total_answerable": "edge_min_step_answerable",
    "min_step_forward_answerable": "seen_in_forward_answerable",
}


class MangoDataError(ValueError):
    """A data folder that is missing or not in the MANGO format."""


@dataclass(frozen=True)
class Step:
    """One walkthrough step: the player's command and what the game printed."""

    num: int
    act: str
    observation: str


@dataclass(frozen=True)
class Question:
    """A DF or RF question (a "skeleton" in the paper).

    ``actions`` are the DF actions to follow (empty for RF); ``path`` is the DF path as
    ``(location_before, action, location_after)`` triples (empty for RF). ``answerable`` and
    ``easy`` are the steps from which the question is answerable and easy.
    """

    id: str
    kind: Kind
    src: str
    dst: str
    answerable: int
    easy: int
    actions: tuple[str, ...] = ()
    path: tuple[tuple[str, str, str], ...] = ()
    fields: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def label(self, cutoff: int) -> Label | None:
        """``easy`` or ``hard`` at ``cutoff``; None when not answerable yet."""
        if self.answerable > cutoff:
            return None
        return "easy" if self.easy <= cutoff else "hard"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "src": self.src,
            "dst": self.dst,
            "answerable": self.answerable,
            "easy": self.easy,
            "actions": list(self.actions),
            "path": [list(p) for p in self.path],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Question:
        return cls(
            id=data["id"],
            kind=data["kind"],
            src=data["src"],
            dst=data["dst"],
            answerable=int(data["answerable"]),
            easy=int(data["easy"]),
            actions=tuple(data.get("actions", ())),
            path=tuple(tuple(p) for p in data.get("path", ())),
        )


@dataclass
class MangoGame:
    """One maze: its files, parsed. ``edges`` and the question ``fields`` keep the files' own
    numbers so they can be checked against what :func:`df_fields`/:func:`rf_fields` compute."""

    name: str
    locations: list[str]
    actions: list[str]
    steps: list[Step]
    edges: list[dict[str, Any]]
    df: list[Question]
    rf: list[Question]

    @cached_property
    def graph(self) -> nx.MultiDiGraph:
        return build_graph(self.edges)

    def questions(self, kind: Kind) -> list[Question]:
        return self.df if kind == "df" else self.rf

    def steps_upto(self, cutoff: int) -> list[Step]:
        return [s for s in self.steps if s.num <= cutoff]

    def known_edges(self, cutoff: int) -> list[dict[str, Any]]:
        """Edges a reader of the walkthrough up to ``cutoff`` can know."""
        return [e for e in self.edges if e["edge_min_step_answerable"] <= cutoff]

    def lists_at(self, cutoff: int) -> tuple[list[str], list[str]]:
        """The allowed actions and the places known at ``cutoff``, in the files' order."""
        known = self.known_edges(cutoff)
        places = {e["src_node"] for e in known} | {e["dst_node"] for e in known}
        moves = {e["action"] for e in known}
        return [a for a in self.actions if a in moves], [p for p in self.locations if p in places]


def build_graph(edges: Iterable[dict[str, Any]]) -> nx.MultiDiGraph:
    """The maze: a node per location, an edge per (src, action, dst) keyed by the action, with
    the edge's step fields as attributes."""
    graph = nx.MultiDiGraph()
    for e in edges:
        graph.add_edge(
            e["src_node"],
            e["dst_node"],
            key=e["action"],
            action=e["action"],
            **{f: e[f] for f in EDGE_FIELDS},
        )
    return graph


def df_fields(path_edges: list[dict[str, Any]]) -> dict[str, int]:
    """A DF question's label fields: the largest step along its path."""
    return {q: max(e[f] for e in path_edges) for q, f in LABEL_FIELDS.items()}


def bottlenecks(graph: nx.MultiDiGraph, src: str, attr: str) -> dict[str, int]:
    """For every location reachable from ``src``, the smallest ``t`` such that it is reachable
    over edges with ``attr <= t``: the min over simple paths of the largest edge value (dropping
    a cycle from a walk never raises its maximum), by Dijkstra with ``max`` for ``+``."""
    best: dict[str, int] = {src: -1}
    heap: list[tuple[int, str]] = [(-1, src)]
    while heap:
        value, node = heapq.heappop(heap)
        if value > best.get(node, NEVER + 1):
            continue
        for _, nxt, data in graph.out_edges(node, data=True):
            candidate = max(value, data[attr])
            if candidate < best.get(nxt, NEVER + 1):
                best[nxt] = candidate
                heapq.heappush(heap, (candidate, nxt))
    best.pop(src)
    return best


def simple_path_counts(graph: nx.MultiDiGraph, src: str) -> dict[str, int]:
    """How many simple paths lead from ``src`` to each other location (parallel edges told
    apart by action), by one depth-first walk."""
    counts: dict[str, int] = {}
    on_path = {src}

    def walk(node: str) -> None:
        for _, nxt, _ in graph.out_edges(node, keys=True):
            if nxt in on_path:
                continue
            counts[nxt] = counts.get(nxt, 0) + 1
            on_path.add(nxt)
            walk(nxt)
            on_path.discard(nxt)

    walk(src)
    return counts


def rf_table(
    graph: nx.MultiDiGraph, sources: Iterable[str]
) -> dict[tuple[str, str], dict[str, int]]:
    """For every source and every location, the RF label fields (:data:`NEVER` when
    unreachable) and ``num_paths``."""
    table: dict[tuple[str, str], dict[str, int]] = {}
    for src in sources:
        if src not in graph:
            continue
        per_field = {q: bottlenecks(graph, src, f) for q, f in LABEL_FIELDS.items()}
        paths = simple_path_counts(graph, src)
        for dst in graph.nodes:
            if dst == src:
                continue
            row = {q: values.get(dst, NEVER) for q, values in per_field.items()}
            row["num_paths"] = paths.get(dst, 0)
            table[(src, dst)] = row
    return table


# --- reading -----------------------------------------------------------------------------

_STEP = re.compile(r"^==>STEP NUM: (\d+)\s*$", re.MULTILINE)


def parse_walkthrough(text: str) -> list[Step]:
    """The steps of a ``.walkthrough`` file."""
    steps = []
    marks = list(_STEP.finditer(text))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        block = text[mark.end() : end]
        act = re.search(r"^==>ACT:(.*)$", block, re.MULTILINE)
        obs = re.search(r"^==>OBSERVATION:(.*)", block, re.MULTILINE | re.DOTALL)
        observation = obs.group(1) if obs else ""
        # Each block ends with the separator line of the next one.
        observation = re.sub(r"\n=+\s*$", "", observation.rstrip()).strip()
        steps.append(Step(int(mark.group(1)), act.group(1).strip() if act else "", observation))
    return steps


def format_walkthrough(steps: list[Step]) -> str:
    """The ``.walkthrough`` file text of ``steps`` (what :func:`parse_walkthrough` reads)."""
    blocks = [
        f"===========\n==>STEP NUM: {s.num}\n==>ACT: {s.act}\n==>OBSERVATION: {s.observation}\n"
        for s in steps
    ]
    return "\n".join(blocks)


def _questions(path: Path, parse: Callable[[dict[str, Any]], Question]) -> list[Question]:
    """The questions of a JSONL file; :class:`MangoDataError` names the file and line of one
    that is not a question."""
    questions = []
    with reading(path, "a MANGO question", MangoDataError) as where, path.open("rb") as f:
        for where.line, line in enumerate(f, 1):
            if line.strip():
                questions.append(parse(json.loads(line)))
    return questions


def _read(path: Path, parse: Callable[[str], Any]) -> Any:
    """``parse`` of a file's text; :class:`MangoDataError` names the file it fails on."""
    with reading(path, "in the MANGO format", MangoDataError):
        return parse(path.read_text(encoding="utf-8"))


def df_question(q: dict[str, Any]) -> Question:
    path = tuple((s["prev_node"], s["node"], s["action"]) for s in q["path_details"])
    return Question(
        id=q["id"],
        kind="df",
        src=q["src_node"],
        dst=q["dst_node"],
        answerable=int(q["min_step_total_answerable"]),
        easy=int(q["min_step_forward_answerable"]),
        actions=tuple(a for _, _, a in path),
        path=tuple((u, a, v) for u, v, a in path),
        fields=q,
    )


def rf_question(q: dict[str, Any]) -> Question:
    return Question(
        id=q["id"],
        kind="rf",
        src=q["src_node"],
        dst=q["dst_node"],
        answerable=int(q["min_step_total_answerable"]),
        easy=int(q["min_step_forward_answerable"]),
        fields=q,
    )


def load_game(folder: str | Path) -> MangoGame:
    """Read one game folder; raises :class:`MangoDataError` naming what is missing."""
    path = Path(folder)
    name = path.name
    files = {
        ext: path / f"{name}.{ext}"
        for ext in (
            "walkthrough",
            "actions.json",
            "locations.json",
            "edges.json",
            "all_pairs.jsonl",
            "all2all.jsonl",
        )
    }
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise MangoDataError(f"{path} is not a MANGO game folder: missing {', '.join(missing)}")
    return MangoGame(
        name=name,
        locations=_read(files["locations.json"], json.loads),
        actions=_read(files["actions.json"], json.loads),
        steps=_read(files["walkthrough"], parse_walkthrough),
        edges=_read(files["edges.json"], json.loads),
        df=_questions(files["all2all.jsonl"], df_question),
        rf=_questions(files["all_pairs.jsonl"], rf_question),
    )


def game_names(data_dir: str | Path) -> list[str]:
    """The game folders of a data directory, sorted; raises :class:`MangoDataError` with a
    hint when the directory is missing or holds none."""
    root = Path(data_dir)
    if not root.is_dir():
        raise MangoDataError(
            f"MANGO data folder {str(root)!r} not found (resolved: {root.resolve()}). Set the "
            "game setting `data_dir` to a folder with one sub-folder per game (e.g. "
            "`--set games.0.settings.data_dir=../shared/data/mango`), or leave it empty to "
            "play synthetic mazes."
        )
    names = sorted(
        p.name for p in root.iterdir() if p.is_dir() and (p / f"{p.name}.edges.json").is_file()
    )
    if not names:
        raise MangoDataError(f"{root} holds no MANGO game folders (<g>/<g>.edges.json)")
    return names


@lru_cache(maxsize=128)
def _cached_game(folder: str) -> MangoGame:
    return load_game(folder)


def cached_game(data_dir: str | Path, name: str) -> MangoGame:
    """:func:`load_game`, once per process and folder (the files do not change during a run)."""
    return _cached_game(str(Path(data_dir).resolve() / name))


# --- writing -----------------------------------------------------------------------------


def write_game(game: MangoGame, root: str | Path) -> Path:
    """Write ``game`` as a MANGO folder under ``root``; returns the folder."""
    folder = Path(root) / game.name
    folder.mkdir(parents=True, exist_ok=True)
    n = game.name
    (folder / f"{n}.walkthrough").write_text(format_walkthrough(game.steps), encoding="utf-8")
    (folder / f"{n}.actions.json").write_text(json.dumps(game.actions, indent=4))
    (folder / f"{n}.locations.json").write_text(json.dumps(game.locations, indent=4))
    (folder / f"{n}.edges.json").write_text(json.dumps(game.edges, indent=4))
    with (folder / f"{n}.all2all.jsonl").open("w", encoding="utf-8") as f:
        for q in game.df:
            f.write(json.dumps(q.fields) + "\n")
    with (folder / f"{n}.all_pairs.jsonl").open("w", encoding="utf-8") as f:
        for q in game.rf:
            f.write(json.dumps(q.fields) + "\n")
    return folder
