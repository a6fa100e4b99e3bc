"""The scripted navigator's map: built from the walkthrough text alone, as a reader would.

It knows only what its prompt shows: the walkthrough steps, the allowed actions and the list of
places. Where each step leaves the player is found by matching place names in the
observation's heading-like lines; a step whose command is an allowed action and that lands in a
new place is a move, and a compass or up/down move is assumed to be reversible. Questions are
then answered by walking (DF) or searching (RF) that map. :func:`parse_steps` reads the
walkthrough as the prompts render it.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

import networkx as nx

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
    "in": "out",
    "out": "in",
    "enter": "exit",
    "exit": "enter",
}
_STEP = re.compile(r"^STEP NUM: (\d+)\nACT: (.*)\nOBSERVATION: ?", re.MULTILINE)
_YOU_ARE = re.compile(
    r"^(?:you are|you're|you find yourself)\s+(?:(?:standing|now|sitting|lying)\s+)?"
    r"(?:in|on|at|inside|beside|by|under)?\s*(?:the|a|an)?\s*(.+?)(?:[.,;:!]|$)",
    re.IGNORECASE,
)


@lru_cache(maxsize=1 << 16)
def norm(text: str) -> str:
    """Lower case, single spaces, no surrounding quotes or punctuation."""
    return re.sub(r"\s+", " ", text.lower()).strip().strip("\"'`.,;:!?*").strip()


def parse_steps(text: str) -> list[tuple[int, str, str]]:
    """``(step, act, observation)`` of a walkthrough rendered as ``STEP NUM:`` blocks."""
    marks = list(_STEP.finditer(text))
    out = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out.append((int(mark.group(1)), mark.group(2).strip(), text[mark.end() : end].strip()))
    return out


def _clean_line(line: str) -> str:
    # Status bars ("Cabin      Score: 0   Moves: 3") keep their first field; decorations such as
    # "<< Bedroom >>" or "(east part)" are dropped.
    line = re.split(r"\s{3,}", line.strip())[0]
    line = re.sub(r"^[<>*=\s-]+|[<>*=\s-]+$", "", line)
    wrapped = re.fullmatch(r"\((.*)\)|\[(.*)\]", line)
    if wrapped:
        line = wrapped.group(1) or wrapped.group(2) or ""
    return norm(line)


_DARK = re.compile(r"\bdark|pitch black|can't see", re.IGNORECASE)
_STOPWORDS = {"a", "an", "the", "to", "of", "and", "in", "on", "at", "is", "you", "are", "here"}


def _body(observation: str) -> str:
    """The first line of description after a place's heading: a room's fingerprint."""
    lines = [ln.strip() for ln in observation.splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if _titled(line) and i + 1 < len(lines):
            return norm(lines[i + 1])[:200]
    return ""


def _base(place: str) -> str:
    """A place name without the annotators' disambiguating mark: ``hall (1st floor)`` → ``hall``."""
    return norm(re.split(r"\s*\(", place, maxsplit=1)[0]) or norm(place)


def _titled(line: str) -> bool:
    """Does a raw line look like a room heading (short, no sentence punctuation)?"""
    words = line.split()
    return 0 < len(words) <= 8 and not line.rstrip().endswith((".", "!", "?", ",", ":", '"'))


@dataclass
class WalkthroughMap:
    """A map read from a walkthrough: ``seen`` edges were walked, ``inferred`` ones are the
    compass reverses of walked moves."""

    places: list[str]
    actions: list[str]
    seen: dict[tuple[str, str], str] = field(default_factory=dict)
    inferred: dict[tuple[str, str], str] = field(default_factory=dict)
    start: str | None = None
    visits: list[tuple[int, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._exact = {norm(p): p for p in self.places}
        self._by_base: dict[str, list[str]] = defaultdict(list)
        for p in self.places:
            self._by_base[_base(p)].append(p)
        self._allowed = {norm(a): a for a in self.actions}
        self._bodies: dict[str, set[str]] = {}

    # --- reading -------------------------------------------------------------------------

    @classmethod
    def read(cls, text: str, places: list[str], actions: list[str]) -> WalkthroughMap:
        m = cls(list(places), list(actions))
        m._read(parse_steps(text))
        return m

    def _candidates(self, observation: str, *, exact: bool = False) -> list[list[str]]:
        """Groups of places the observation's lines name, best evidence first (``exact``:
        only lines that are a place's name)."""
        tiers: list[list[list[str]]] = [[], [], [], []]
        for raw in observation.splitlines():
            if not raw.strip():
                continue
            line = _clean_line(raw)
            if not line:
                continue
            if line in self._exact:
                tiers[0].append([self._exact[line]])
                continue
            if exact:
                continue
            if line in self._by_base and _titled(raw):
                tiers[1].append(self._by_base[line])
                continue
            said = _YOU_ARE.match(raw.strip())
            if said:
                phrase = norm(said.group(1))
                if phrase in self._by_base:
                    tiers[2].append(self._by_base[phrase])
                    continue
                named = [p for name, p in self._exact.items() if phrase.startswith(name)]
                if named:
                    tiers[2].append([max(named, key=len)])
                continue
            if _titled(raw):
                hits = [p for name, p in self._exact.items() if len(name) > 3 and name in line]
                if hits:
                    tiers[3].append([max(hits, key=len)])
        return [group for tier in tiers for group in tier]

    def _choose(self, group: list[str], here: str | None, act: str | None, body: str) -> str:
        """One place of a group sharing a heading (``hall (1st floor)``, ``hall (2nd floor)``)."""
        if len(group) == 1:
            return group[0]
        if here is not None and act is not None:
            known = self.seen.get((here, act))
            if known in group:
                return known
            back = REVERSE.get(act)
            for p in group:
                if back and self.seen.get((p, back)) == here:
                    return p
        # A room's description is printed the same way on every full visit.
        for p in group:
            if body and body in self._bodies.get(p, ()):
                return p
        words = set(re.findall(r"[a-z0-9]+", body)) - _STOPWORDS

        def rank(p: str) -> tuple[int, float, int]:
            mark = set(re.findall(r"[a-z0-9]+", p[len(_base(p)) :])) - _STOPWORDS
            # A description never seen before is likely a place not yet visited.
            fresh = int(bool(body) and p not in self._bodies)
            # The share of the mark's words the text has (a longer mark is not a better one).
            share = len(words & mark) / len(mark) if mark else 0.0
            return (fresh, share, int(p != here))

        return max(group, key=rank)

    def _read(self, steps: list[tuple[int, str, str]]) -> None:
        here: str | None = None
        pending: list[str] = []  # allowed commands since the last known place
        silent: str | None = None  # the last allowed command whose reply named no place
        for num, act, obs in steps:
            move = self._allowed.get(norm(act)) if num > 0 else None
            if move is None and here is not None and not pending:
                # Other commands do not move the player, but one may print the heading of
                # where a silent move led ("get on couch", then "look"); anything weaker
                # than an exact heading (a map, a view from a window) is not a move.
                groups = self._candidates(obs, exact=True)
                if silent and groups and groups[0][0] != here:
                    self._add(here, silent, groups[0][0])
                    here = groups[0][0]
                    self.visits.append((num, here))
                    silent = None
                continue
            groups = self._candidates(obs)
            if move is not None:
                pending.append(move)
                silent = None
            if not groups:
                if move is not None and not _DARK.search(obs):
                    pending.pop()  # no new place named: most likely the player stayed
                    silent = move
                continue
            body = _body(obs)
            place = self._choose(groups[0], here, pending[-1] if pending else None, body)
            if here is None:
                self.start = self.start or place
            elif place != here and len(pending) == 1:
                # Exactly one command could have moved the player: that is the edge.
                self._add(here, pending[0], place)
            if body:
                self._bodies.setdefault(place, set()).add(body)
            pending = []
            silent = None
            here = place
            self.visits.append((num, place))

    def _add(self, src: str, action: str, dst: str) -> None:
        self.seen.setdefault((src, action), dst)
        back = REVERSE.get(action)
        if back and back in self._allowed.values():
            self.inferred.setdefault((dst, back), src)

    # --- answering -----------------------------------------------------------------------

    def next(self, place: str, action: str) -> str | None:
        return self.seen.get((place, action)) or self.inferred.get((place, action))

    def graph(self) -> nx.MultiDiGraph:
        g = nx.MultiDiGraph()
        g.add_nodes_from(self.places)
        for (src, action), dst in self.inferred.items():
            if (src, action) not in self.seen:
                # Guessed edges cost more, so routes prefer what the walkthrough showed.
                g.add_edge(src, dst, key=action, weight=100)
        for (src, action), dst in self.seen.items():
            g.add_edge(src, dst, key=action, weight=1)
        return g

    def destination(self, src: str, actions: list[str]) -> list[dict[str, str]]:
        """DF: follow ``actions`` from ``src``; an unknown move is answered with the place
        unchanged, as a game would when the move fails."""
        here, out = src, []
        for action in actions:
            nxt = self.next(here, action) or here
            out.append({"location_before": here, "action": action, "location_after": nxt})
            here = nxt
        return out

    def route(self, src: str, dst: str) -> list[dict[str, str]]:
        """RF: the cheapest route on the map (fewest guessed edges, then fewest moves)."""
        g = self.graph()
        try:
            nodes = nx.dijkstra_path(g, src, dst, weight=_weight)
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            return []
        out = []
        for u, v in itertools.pairwise(nodes):
            action = min(g[u][v], key=lambda k: g[u][v][k]["weight"])
            out.append({"location_before": u, "action": action, "location_after": v})
        return out


def _weight(u: str, v: str, data: dict) -> float:
    return min(d["weight"] for d in data.values())
