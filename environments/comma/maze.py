"""COMMA's maze puzzle: a mouse in a 9×9 maze with four coloured spheres and a torus in the
middle; the torus colour names the sphere to reach, where the solver presses check_position.

The partial score is how much closer to that sphere, along the maze's paths, the mouse is than
at the start: 1 − steps left / steps at the start, at least 0. (COMMA's own partial score is
the Euclidean distance, which ignores walls and rises when the mouse moves away from the goal
in some mazes: a bug this project does not copy; docs/fidelity.md.)

``rules: comma`` (as COMMA plays it): ``check_position`` away from the goal is a mistake and
sends the mouse back to its start. ``rules: parley``: the mouse stays where it is.
"""

from __future__ import annotations

import random
import re
from collections import deque
from typing import Any, ClassVar

from parley.environments.base import StepResult, View
from parley.environments.comma.base import Puzzle, seeded
from parley.environments.comma.talk import ACKNOWLEDGE, latest_instruction, looks_like_actions
from parley.environments.render import COLORS, canvas, label, png

N = 9
CENTRE = (4, 4)
SPHERES = ("green", "blue", "red", "yellow")
TARGET = {"green": "blue", "blue": "red", "red": "green", "yellow": "yellow"}
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

_MANUAL = """\
Maze module. The module shows a 9×9 maze seen from above: white squares are open floor, dark \
squares are walls. A grey ball (the mouse) sits on the floor; it moves one square at a time \
up, down, left or right, and cannot enter a wall. Four coloured spheres (green, blue, red, \
yellow) lie on the floor, and a coloured ring (a torus) lies in the middle square.

The colour of the torus tells which sphere marks the goal:
- torus green → go to the blue sphere
- torus blue → go to the red sphere
- torus red → go to the green sphere
- torus yellow → go to the yellow sphere

Move the mouse onto the goal sphere's square, then press the round labyrinth button \
(check_position). Pressing it anywhere else is a mistake{after}. Bumping into a wall is not a \
mistake; the mouse just stays where it is."""

MANUAL = _MANUAL.format(after=" and sends the mouse back to where it started")
PARLEY_MANUAL = _MANUAL.format(after="")

Cell = tuple[int, int]


def carve(rng: random.Random) -> list[list[bool]]:
    """A maze as ``walls[r][c]``: rooms on even squares joined by a random spanning tree
    (depth-first), plus a few extra openings so that it has some loops."""
    walls = [[True] * N for _ in range(N)]
    rooms = [(r, c) for r in range(0, N, 2) for c in range(0, N, 2)]
    start = rng.choice(rooms)
    walls[start[0]][start[1]] = False
    stack, seen = [start], {start}
    while stack:
        r, c = stack[-1]
        options = [
            (r + dr, c + dc)
            for dr, dc in ((-2, 0), (2, 0), (0, -2), (0, 2))
            if 0 <= r + dr < N and 0 <= c + dc < N and (r + dr, c + dc) not in seen
        ]
        if not options:
            stack.pop()
            continue
        nr, nc = rng.choice(options)
        walls[nr][nc] = False
        walls[(r + nr) // 2][(c + nc) // 2] = False
        seen.add((nr, nc))
        stack.append((nr, nc))
    joints = [(r, c) for r in range(N) for c in range(N) if (r + c) % 2 == 1 and walls[r][c]]
    for r, c in rng.sample(joints, 3):
        walls[r][c] = False
    return walls


def distances(walls: list[list[bool]], goal: Cell) -> dict[Cell, int]:
    """Steps from every reachable open square to ``goal``."""
    dist = {goal: 0}
    queue = deque([goal])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < N and 0 <= nc < N and not walls[nr][nc] and (nr, nc) not in dist:
                dist[(nr, nc)] = dist[(r, c)] + 1
                queue.append((nr, nc))
    return dist


def path(walls: list[list[bool]], start: Cell, goal: Cell) -> list[str]:
    """The moves of a shortest path from ``start`` to ``goal``."""
    dist = distances(walls, goal)
    moves, (r, c) = [], start
    while (r, c) != goal:
        for name, (dr, dc) in MOVES.items():
            nxt = (r + dr, c + dc)
            if dist.get(nxt, 10**9) == dist[(r, c)] - 1:
                moves.append(name)
                r, c = nxt
                break
    return moves


class MazePuzzle(Puzzle):
    name: ClassVar[str] = "maze"
    title: ClassVar[str] = "Maze module"
    manual: ClassVar[str] = MANUAL
    multi_step: ClassVar[bool] = True
    controls: ClassVar[str] = (
        "move_up/move_down/move_left/move_right move the grey mouse one square; "
        "check_position presses the labyrinth button."
    )
    shown_otherwise: ClassVar[dict[str, str]] = dict.fromkeys(
        ("mouse", "spheres", "torus", "walls"), "0-based (row, column); the text draws the maze"
    )

    @classmethod
    def generate(cls, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        rng = seeded(seed, "comma.maze")
        walls = carve(rng)
        rooms = [(r, c) for r in range(0, N, 2) for c in range(0, N, 2) if (r, c) != CENTRE]
        picked = rng.sample(rooms, 5)
        spheres = dict(zip(SPHERES, picked[:4], strict=True))
        return {
            "seed": seed,
            "walls": ["".join("#" if w else "." for w in row) for row in walls],
            "mouse": list(picked[4]),
            "spheres": {k: list(v) for k, v in spheres.items()},
            "torus": rng.choice(SPHERES),
        }

    def reset(self, instance: dict[str, Any]) -> None:
        self.instance = instance
        self.walls = [[ch == "#" for ch in row] for row in instance["walls"]]
        self.mouse: Cell = (instance["mouse"][0], instance["mouse"][1])
        self.spheres: dict[str, Cell] = {k: (v[0], v[1]) for k, v in instance["spheres"].items()}
        self.torus: str = instance["torus"]
        self.goal = self.spheres[TARGET[self.torus]]
        self.dist = distances(self.walls, self.goal)
        self.start = self.mouse
        self.start_distance = self.dist[self.mouse]
        self.solved = False
        self.progress = 0.0

    def expert_manual(self) -> str:
        return MANUAL if self.rules == "comma" else PARLEY_MANUAL

    def legal_actions(self, role: str = "solver") -> list[str]:
        return [f"move_{m}" for m in MOVES] + ["check_position"]

    def apply(self, action: str) -> StepResult:
        if action == "check_position":
            if self.mouse == self.goal:
                self.solved = True
                self.progress = 1.0
                return StepResult("performed successfully", progress=1.0)
            if self.rules == "comma":
                self.mouse = self.start
                self.progress = 0.0
                return StepResult(
                    "mistake (the mouse is back at its start)", mistake=True, progress=0.0
                )
            return StepResult("mistake", mistake=True, progress=self.progress)
        dr, dc = MOVES[action.removeprefix("move_")]
        r, c = self.mouse[0] + dr, self.mouse[1] + dc
        if not (0 <= r < N and 0 <= c < N) or self.walls[r][c]:
            return StepResult("blocked by a wall; the mouse did not move", progress=self.progress)
        self.mouse = (r, c)
        self.progress = max(0.0, 1 - self.dist[self.mouse] / self.start_distance)
        return StepResult("performed successfully", progress=self.progress)

    def visible(self) -> dict[str, Any]:
        return {
            "walls": ["".join("#" if w else "." for w in row) for row in self.walls],
            "mouse": list(self.mouse),
            "spheres": {k: list(v) for k, v in self.spheres.items()},
            "torus": self.torus,
        }

    def describe(self) -> str:
        marks = {v: k[0].upper() for k, v in self.spheres.items()}
        lines = ["Maze, top row first (# wall, . floor, M mouse, G/B/R/Y spheres, T torus):"]
        for r in range(N):
            row = ""
            for c in range(N):
                if (r, c) == self.mouse:
                    row += "M"
                elif (r, c) in marks:
                    row += marks[(r, c)]
                elif (r, c) == CENTRE:
                    row += "T"
                else:
                    row += "#" if self.walls[r][c] else "."
            lines.append("  " + row)
        lines.append(f"The torus in the middle is {self.torus}.")
        return "\n".join(lines)

    def render(self) -> bytes:
        cell, top = 44, 30
        image, draw = canvas(N * cell + 40, N * cell + top + 40)
        label(draw, (20, 8), "MAZE", 16)
        for r in range(N):
            for c in range(N):
                x, y = 20 + c * cell, top + r * cell
                fill = (35, 38, 44) if self.walls[r][c] else (240, 240, 240)
                draw.rectangle((x, y, x + cell, y + cell), fill=fill, outline=(120, 120, 120))
        cx, cy = 20 + CENTRE[1] * cell, top + CENTRE[0] * cell
        draw.ellipse(
            (cx + 6, cy + 6, cx + cell - 6, cy + cell - 6), outline=COLORS[self.torus], width=7
        )
        for name, (r, c) in self.spheres.items():
            x, y = 20 + c * cell, top + r * cell
            draw.ellipse(
                (x + 10, y + 10, x + cell - 10, y + cell - 10), fill=COLORS[name], outline=(0, 0, 0)
            )
        r, c = self.mouse
        x, y = 20 + c * cell, top + r * cell
        draw.ellipse(
            (x + 13, y + 13, x + cell - 13, y + cell - 13),
            fill=COLORS["grey"],
            outline=(0, 0, 0),
            width=2,
        )
        bx, by = N * cell + 20 - 30, 6
        draw.ellipse((bx, by, bx + 20, by + 20), fill=(200, 200, 200), outline=(0, 0, 0))
        return png(image)


# Players -------------------------------------------------------------------------------------

_GO = re.compile(r"\bgo to the (\w+) sphere", re.IGNORECASE)


def scripted_solver(view: View, rng: random.Random) -> str:
    """Names the torus colour; walks a shortest path to the sphere the expert names."""
    data = view.data or {}
    said = latest_instruction(view)
    if said:
        match = _GO.search(said)
        goal = data.get("spheres", {}).get(match.group(1).lower()) if match else None
        if goal is not None:
            walls = [[ch == "#" for ch in row] for row in data["walls"]]
            moves = path(walls, tuple(data["mouse"]), tuple(goal))
            return "\n".join([*(f"move_{m}" for m in moves), "check_position"])
    return (
        f"I see a maze with a grey mouse, four spheres (green, blue, red and yellow) and a "
        f"{data.get('torus', '?')} torus in the middle. Where should the mouse go?"
    )


_TORUS = re.compile(r"\b(green|blue|red|yellow) torus\b", re.IGNORECASE)


def scripted_expert(view: View, rng: random.Random) -> str:
    """Maps the torus colour to the goal sphere."""
    said = view.last_from("solver") or ""
    if looks_like_actions(said):
        return ACKNOWLEDGE
    match = _TORUS.search(said)
    if not match:
        return "What colour is the torus (the ring) in the middle of the maze?"
    sphere = TARGET[match.group(1).lower()]
    return f"Go to the {sphere} sphere, then press check_position there."
