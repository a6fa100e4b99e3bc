"""Scoring a navigator's answer (seed 002, section 2.3 and appendix A.6, C.1).

An answer is the first ``[...]`` of the reply: a JSON (or Python-literal) list of objects with
the keys ``location_before``, ``action`` and ``location_after`` (the paper's ``prev_node`` and
``node`` are accepted too). Anything else is a parse violation.

- DF success: the answer's last ``location_after`` against the destination; *strict* = the
  same name (case and spacing aside), *loose* = edit similarity ``1 - d / max(len)``. Where the
  maze is not deterministic (one place and action lead to two places, 192 DF questions of the
  real data), every place the given actions can lead to counts as the destination, since the
  question cannot tell them apart. (The reference evaluator scores DF by comparing the truth
  with itself; here the answer is compared.)
- RF success: each action is snapped to the closest allowed action (edit distance) and the
  route is walked in the maze from the start; strict = it ends at the destination, loose =
  edit similarity of where it ends to the destination; a move the maze does not have stops the
  walk (0). The answer's location names play no part.
- Reasoning accuracy (1/0): every step is a real edge (snapped action), the steps chain, the
  first starts at the start; RF: the last ends at the destination; DF: the snapped actions are
  the given ones, in order.
- Success weighted by route length (Anderson et al. 2018): strict success × ``L / max(n, L)``,
  ``L`` the shortest route's length (DF: the number of given actions), ``n`` the answer's.

Averages over questions follow the ``unparsable`` setting: ``zero`` (the default) counts an
answer that did not parse, or parsed to an empty list, as a 0 in every average; ``exclude``
(MANGO's evaluator) leaves such answers out of every average and so of the easy/hard split.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import networkx as nx

from parley.environments.mango.data import Question
from parley.environments.mango.mapper import norm
from parley.environments.parsing import first_bracketed

KEYS = ("location_before", "action", "location_after")
UNPARSABLE = ("zero", "exclude")
Unparsable = Literal["zero", "exclude"]
ALIASES = {"prev_node": "location_before", "node": "location_after"}


@dataclass(frozen=True)
class AnswerStep:
    before: str
    action: str
    after: str


class ParseError(ValueError):
    """A reply that holds no answer in the required form."""


@lru_cache(maxsize=65536)
def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insert, delete, substitute: 1 each)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def similarity(a: str, b: str) -> float:
    """``1 - d / l``: 1 for the same (normalized) name, 0 with nothing in common."""
    a, b = norm(a), norm(b)
    if a == b:
        return 1.0
    longest = max(len(a), len(b))
    return 1.0 if longest == 0 else 1.0 - edit_distance(a, b) / longest


def snap(action: str, allowed: list[str]) -> str | None:
    """The allowed action closest to ``action`` (first in list order on a tie)."""
    if not allowed:
        return None
    if action in allowed:
        return action
    wanted = norm(action)
    return min(allowed, key=lambda a: edit_distance(wanted, norm(a)))


def parse_answer(text: str) -> list[AnswerStep]:
    """The answer of a reply; raises :class:`ParseError` saying what is wrong."""
    value: Any = None
    stripped = text.strip()
    if stripped.startswith("["):
        # Fast path: a reply that is exactly one JSON list is its own first [...] block.
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError:
            value = None
    if value is not None:
        block = stripped
    else:
        found = first_bracketed(text)
        if found is None:
            raise ParseError("no [...] list in the reply")
        block = found
    try:
        if value is None:
            value = json.loads(block)
    except json.JSONDecodeError:
        try:
            value = ast.literal_eval(block)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise ParseError("the first [...] is neither JSON nor a Python literal") from None
    if not isinstance(value, list):
        raise ParseError("the first [...] is not a list")
    steps = []
    for i, item in enumerate(value, 1):
        if not isinstance(item, dict):
            raise ParseError(f"item {i} of the list is not an object")
        item = {ALIASES.get(k, k): v for k, v in item.items()}
        missing = [k for k in KEYS if k not in item]
        if missing:
            raise ParseError(f"item {i} lacks {', '.join(missing)}")
        if not all(isinstance(item[k], str) for k in KEYS):
            raise ParseError(f"item {i} has a value that is not a string")
        steps.append(AnswerStep(item["location_before"], item["action"], item["location_after"]))
    return steps


@dataclass
class Score:
    """One answered question."""

    parsed: bool
    success_loose: float = 0.0
    success_strict: float = 0.0
    reasoning: float = 0.0
    weighted: float = 0.0
    route_length: int = 0
    answer_length: int = 0
    final: str | None = None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Maze:
    """The graph a question is scored on, with names matched after normalization."""

    def __init__(self, graph: nx.MultiDiGraph, allowed: list[str]) -> None:
        self.graph = graph
        self.allowed = list(allowed)
        self.by_name = {norm(n): n for n in graph.nodes}
        self._moves: dict[tuple[str, str], list[str]] = {}
        for u, v, k in graph.edges(keys=True):
            self._moves.setdefault((u, k), []).append(v)

    def place(self, name: str) -> str | None:
        return self.by_name.get(norm(name))

    def targets(self, place: str, action: str) -> list[str]:
        return self._moves.get((place, action), [])

    def walk(self, start: str, actions: list[str]) -> set[str]:
        """Every place the actions can lead to (empty if some move does not exist)."""
        here = {start}
        for action in actions:
            here = {v for u in here for v in self.targets(u, action)}
            if not here:
                break
        return here

    def shortest(self, src: str, dst: str) -> int:
        try:
            return nx.shortest_path_length(self.graph, src, dst)
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            return 0

    def chained(self, steps: list[AnswerStep], start: str, snapped: list[str | None]) -> bool:
        """Every step a real edge, each starting where the last ended, the first at ``start``."""
        here = start
        for step, action in zip(steps, snapped, strict=True):
            before, after = self.place(step.before), self.place(step.after)
            if before != here or after is None or action is None:
                return False
            if after not in self.targets(before, action):
                return False
            here = after
        return True


def score(question: Question, reply: str, maze: Maze) -> Score:
    """Score one reply to ``question`` on ``maze``; an unparsable reply scores 0."""
    try:
        steps = parse_answer(reply)
    except ParseError as exc:
        return Score(parsed=False, error=str(exc))
    snapped = [snap(s.action, maze.allowed) for s in steps]
    if question.kind == "df":
        return _score_df(question, steps, snapped, maze)
    return _score_rf(question, steps, snapped, maze)


def _score_df(q: Question, steps: list[AnswerStep], snapped: list[str | None], maze: Maze) -> Score:
    truth = maze.walk(q.src, list(q.actions)) or {q.dst}
    out = Score(parsed=True, route_length=len(q.actions), answer_length=len(steps))
    if not steps:
        return out
    final = steps[-1].after
    out.final = final
    out.success_loose = max(similarity(final, t) for t in truth)
    out.success_strict = float(maze.place(final) in truth)
    follows = snapped == list(q.actions)
    out.reasoning = float(follows and maze.chained(steps, q.src, snapped))
    out.weighted = out.success_strict * _ratio(out.route_length, len(steps))
    return out


def _score_rf(q: Question, steps: list[AnswerStep], snapped: list[str | None], maze: Maze) -> Score:
    out = Score(parsed=True, route_length=maze.shortest(q.src, q.dst), answer_length=len(steps))
    if not steps or any(a is None for a in snapped):
        return out
    ends = maze.walk(q.src, [a for a in snapped if a is not None])
    if ends:
        out.final = q.dst if q.dst in ends else sorted(ends)[0]
        out.success_loose = max(similarity(e, q.dst) for e in ends)
        out.success_strict = float(q.dst in ends)
    arrives = maze.place(steps[-1].after) == q.dst
    out.reasoning = float(arrives and maze.chained(steps, q.src, snapped))
    out.weighted = out.success_strict * _ratio(out.route_length, len(steps))
    return out


def _ratio(shortest: int, taken: int) -> float:
    return shortest / max(shortest, taken) if max(shortest, taken) else 1.0


def answered(row: dict[str, Any]) -> bool:
    """Whether a scored answer (a :class:`Score`'s JSON) gave a route: it parsed and holds at
    least one step. MANGO's evaluator cannot read a place from an empty list either."""
    return bool(row.get("parsed")) and int(row.get("answer_length") or 0) > 0


def counted(rows: list[dict[str, Any]], unparsable: Unparsable) -> list[dict[str, Any]]:
    """The answers an average runs over: all of them under ``zero``, the answered ones under
    ``exclude``."""
    if unparsable not in UNPARSABLE:
        raise ValueError(f"unparsable must be 'zero' or 'exclude', not {unparsable!r}")
    return list(rows) if unparsable == "zero" else [r for r in rows if answered(r)]


def average(rows: list[dict[str, Any]], key: str, unparsable: Unparsable) -> float | None:
    """The mean of ``key`` over the answers ``unparsable`` counts (None when it counts none)."""
    kept = counted(rows, unparsable)
    return sum(float(r[key]) for r in kept) / len(kept) if kept else None
