"""COMMA's colour puzzle: a 4×4 grid of coloured squares; whiten it group by group, the groups
chosen by a table. A wrong square resets the grid.

``rules: comma`` (as COMMA plays it): every square starts coloured, one click on a square of
the group to press whitens the whole group, every square can be clicked (a white one is just a
wrong square), and the partial score is the best share of the 16 squares that was ever white.
Grids are drawn until the manual's solution takes at most nine groups (7 in 10 full grids do;
the solution takes 5–12, typically 9): a perfect pair then wins within COMMA's 10 turns, the
expert teaching the solver the table in its first answer and the solver whitening one group a
turn, told by the feedback which group it whitened (docs/fidelity.md: the bound's effect).
``rules: parley``: 5–8 squares start coloured, each square of a group is clicked on its own,
only coloured squares can be clicked, and the partial score is the share of the squares that
started coloured which are white now; grids are drawn until the manual's solution takes at
most four groups, so that a perfect pair solves every one within 10 turns.
"""

from __future__ import annotations

import random
import re
from typing import Any, ClassVar

from parley.environments.base import StepResult, View
from parley.environments.comma.base import Puzzle, rules_of, seeded
from parley.environments.comma.talk import ACKNOWLEDGE, latest_instruction, looks_like_actions
from parley.environments.render import canvas, label, png

SIZE = 4
COLOURS = ("red", "blue", "green", "yellow", "magenta")
GROUPS = (*COLOURS, "row", "column")
FILL = {
    "red": (214, 39, 40),
    "blue": (31, 90, 200),
    "green": (44, 160, 44),
    "yellow": (240, 200, 30),
    "magenta": (210, 40, 200),
    "white": (250, 250, 250),
}
# Instances are drawn so that the manual's solution takes at most this many groups, for a
# perfect pair to finish within 10 turns. Under ``rules: parley`` each group costs it two
# turns (describe, act); under ``comma`` one turn after the first answer (see the players).
MAX_STAGES = 4
MAX_STAGES_COMMA = 9

# The next group, by the group pressed last (rows) and the number of white squares (1–15).
_CODES = {
    "R": "red",
    "B": "blue",
    "G": "green",
    "Y": "yellow",
    "M": "magenta",
    "W": "row",
    "C": "column",
}
_TABLE_ROWS = {
    "red": "RWBCBGBMBGBGRGM",
    "blue": "YYWYYBBWBMBCWCC",
    "green": "RYGYRGBBRGCYCCM",
    "yellow": "RBGRWWGRMBWWBWR",
    "magenta": "YYGGWBBWBWCMRYR",
    "row": "CGRGRRRBRBYRMWG",
    "column": "RWBMCCBYWWRWBCG",
}
TABLE: dict[str, list[str]] = {g: [_CODES[c] for c in codes] for g, codes in _TABLE_ROWS.items()}


def _manual(pressing: str, group: str) -> str:
    header = "| last group | " + " | ".join(str(n) for n in range(1, 16)) + " |"
    rule = "|---" * 16 + "|"
    rows = [f"| {g} | " + " | ".join(TABLE[g]) + " |" for g in GROUPS]
    table = "\n".join([header, rule, *rows])
    return f"""\
Colour module. The module is a 4×4 grid of squares; rows are numbered 1–4 from the top and \
columns 1–4 from the left. A square is white or one of five colours: red, blue, green, \
yellow, magenta. {pressing} The module is solved when every square is white.

Squares are pressed a group at a time. A group is one of:
- a colour: every square of that colour;
- "row": every non-white square in the topmost row that still has a non-white square;
- "column": every non-white square in the leftmost column that still has a non-white square.
{group} After a group is finished, the squares that are still coloured may change colour, so \
look again.

Which group to press:
1. At the start (nothing pressed yet, or right after a mistake), press the colour with the \
fewest squares. If colours tie, take the one that comes first in this list: red, blue, green, \
yellow, magenta.
2. After that, find the row of the table for the group you pressed last and the column for \
the number of white squares now; it names the next group.
3. If the table names a colour that has no squares left, use rule 1 instead.

Pressing a square that is not in the group you should be pressing is a mistake: the whole \
grid goes back to how it looked at the start, and you begin again with rule 1.

Next group, by the group pressed last (rows) and the number of white squares (columns):
{table}"""


ONE_CLICK = "turns the whole group white at once"
MANUAL = _manual(
    f"Pressing a square of the group to press {ONE_CLICK}.",
    "Press one square of the group to whiten the whole group.",
)
PARLEY_MANUAL = _manual(
    "Pressing a square turns it white.",
    "Press every square of the group (in any order) before going on.",
)

Grid = list[list[str]]


def cells_of(grid: Grid, group: str) -> list[tuple[int, int]]:
    """The (row, col) squares of ``group`` (0-based)."""
    coloured = [(r, c) for r in range(SIZE) for c in range(SIZE) if grid[r][c] != "white"]
    if group == "row":
        top = min((r for r, _ in coloured), default=None)
        return [(r, c) for r, c in coloured if r == top]
    if group == "column":
        left = min((c for _, c in coloured), default=None)
        return sorted((r, c) for r, c in coloured if c == left)
    return [(r, c) for r, c in coloured if grid[r][c] == group]


def fewest(grid: Grid) -> str:
    """Rule 1: the colour with the fewest squares (ties in list order)."""
    counts = {c: len(cells_of(grid, c)) for c in COLOURS}
    present = [c for c in COLOURS if counts[c] > 0]
    return min(present, key=lambda c: (counts[c], COLOURS.index(c)))


def next_group(grid: Grid, last: str | None) -> str:
    """The manual's group to press now, given the group pressed last (None at the start)."""
    if last is None:
        return fewest(grid)
    whites = sum(row.count("white") for row in grid)
    group = TABLE[last][whites - 1]
    if group in COLOURS and not cells_of(grid, group):
        return fewest(grid)
    return group


def recolour(grid: Grid, seed: int, stage: int) -> Grid:
    """The colours after ``stage`` groups are done: a pure function of seed, stage and grid."""
    rng = seeded(seed, f"comma.colour.recolour.{stage}")
    out = [row[:] for row in grid]
    for r in range(SIZE):
        for c in range(SIZE):
            if out[r][c] != "white" and rng.random() < 0.5:
                out[r][c] = rng.choice(COLOURS)
    return out


def solution(grid: Grid, seed: int, limit: int = 10**6) -> list[str]:
    """The groups the manual has the solver press, in order (stopping after ``limit`` + 1)."""
    groups: list[str] = []
    last: str | None = None
    while any(v != "white" for row in grid for v in row) and len(groups) <= limit:
        last = next_group(grid, last)
        for r, c in cells_of(grid, last):
            grid[r][c] = "white"
        groups.append(last)
        grid = recolour(grid, seed, len(groups))
    return groups


class ColourPuzzle(Puzzle):
    name: ClassVar[str] = "colour"
    title: ClassVar[str] = "Colour module"
    manual: ClassVar[str] = MANUAL
    multi_step: ClassVar[bool] = True
    controls: ClassVar[str] = (
        "click_row_R_col_C presses the square in row R (from the top) and column C (from the left)."
    )

    @classmethod
    def generate(cls, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        if rules_of(settings) == "comma":
            # COMMA: every square coloured.
            rng = seeded(seed, "comma.colour.full")
            while True:
                grid = [[rng.choice(COLOURS) for _ in range(SIZE)] for _ in range(SIZE)]
                steps = solution([row[:] for row in grid], seed, MAX_STAGES_COMMA)
                if len(steps) <= MAX_STAGES_COMMA:
                    return {"seed": seed, "grid": grid}
        rng = seeded(seed, "comma.colour")
        while True:
            grid = [["white"] * SIZE for _ in range(SIZE)]
            for cell in rng.sample(range(SIZE * SIZE), rng.randint(5, 8)):
                grid[cell // SIZE][cell % SIZE] = rng.choice(COLOURS)
            # Keep grids the manual solves in few groups: each group costs the pair two turns.
            if len(solution([row[:] for row in grid], seed, MAX_STAGES)) <= MAX_STAGES:
                return {"seed": seed, "grid": grid}

    def reset(self, instance: dict[str, Any]) -> None:
        self.instance = instance
        self.seed = int(instance["seed"])
        self.start: Grid = [list(row) for row in instance["grid"]]
        self.coloured = sum(v != "white" for row in self.start for v in row)
        self._restart()
        self.solved = False
        self.progress = 0.0

    def expert_manual(self) -> str:
        return MANUAL if self.rules == "comma" else PARLEY_MANUAL

    def _restart(self) -> None:
        self.grid = [row[:] for row in self.start]
        self.stages = 0
        self.last: str | None = None
        self.group = next_group(self.grid, None)
        self.todo = set(cells_of(self.grid, self.group))

    def _score(self) -> float:
        whites = sum(v == "white" for row in self.grid for v in row)
        if self.rules == "comma":
            # COMMA: the best share of white squares so far (a reset does not lower it).
            return max(self.progress, whites / (SIZE * SIZE))
        return (whites - (SIZE * SIZE - self.coloured)) / self.coloured

    def legal_actions(self, role: str = "solver") -> list[str]:
        return [
            f"click_row_{r + 1}_col_{c + 1}"
            for r in range(SIZE)
            for c in range(SIZE)
            if self.rules == "comma" or self.grid[r][c] != "white"
        ]

    def apply(self, action: str) -> StepResult:
        parts = action.split("_")
        r, c = int(parts[2]) - 1, int(parts[4]) - 1
        if (r, c) not in self.todo:
            self._restart()
            self.progress = self._score()
            return StepResult(
                "mistake (the grid is back to its start)", mistake=True, progress=self.progress
            )
        # COMMA: one click whitens the whole group; parley: the square clicked.
        for sr, sc in list(self.todo) if self.rules == "comma" else [(r, c)]:
            self.grid[sr][sc] = "white"
            self.todo.discard((sr, sc))
        done = ""
        if not self.todo:
            done = f" (the {self.group} group is white)"
            self.stages += 1
            self.last = self.group
            self.grid = recolour(self.grid, self.seed, self.stages)
            if all(v == "white" for row in self.grid for v in row):
                self.solved = True
            else:
                self.group = next_group(self.grid, self.last)
                self.todo = set(cells_of(self.grid, self.group))
        self.progress = 1.0 if self.solved else self._score()
        return StepResult(f"performed successfully{done}", progress=self.progress)

    def visible(self) -> dict[str, Any]:
        return {"grid": [row[:] for row in self.grid]}

    def describe(self) -> str:
        return "\n".join(f"Row {r + 1}: " + ", ".join(self.grid[r]) for r in range(SIZE))

    def render(self) -> bytes:
        image, draw = canvas(400, 400)
        draw.rectangle((16, 16, 384, 384), fill=(92, 96, 104), outline=(150, 150, 150), width=3)
        for r in range(SIZE):
            label(draw, (34, 80 + r * 80), str(r + 1), 16, anchor="mm")
            label(draw, (90 + r * 80, 36), str(r + 1), 16, anchor="mm")
            for c in range(SIZE):
                x, y = 55 + c * 80, 45 + r * 80
                draw.rectangle(
                    (x, y, x + 70, y + 70), fill=FILL[self.grid[r][c]], outline=(0, 0, 0), width=2
                )
        return png(image)


# Players -------------------------------------------------------------------------------------

_SQUARE = re.compile(r"\brow (\d) column (\d)\b", re.IGNORECASE)


def _taught_table(view: View) -> dict[str, list[str]] | None:
    """The next-group table, if the expert has taught it (``rules: comma``), as it wrote it."""
    for speaker, text in reversed(view.history):
        if speaker == "expert" and (match := _TAUGHT.search(text)):
            rows = dict(_TAUGHT_ROW.findall(match.group(1)))
            if set(rows) == set(GROUPS) and all(len(v) == 15 for v in rows.values()):
                return {g: [_CODES[c] for c in codes] for g, codes in rows.items()}
    return None


def scripted_solver(view: View, rng: random.Random) -> str:
    """Reads the grid row by row; presses the squares the expert lists. Under ``rules:
    comma`` the expert also teaches it the table, and it then picks each next group itself
    (the feedback names the group just whitened): one group a turn."""
    said = latest_instruction(view)
    if said:
        actions = [f"click_row_{r}_col_{c}" for r, c in _SQUARE.findall(said)]
        if actions and all(a in view.legal_actions for a in actions):
            return "\n".join(actions)
    grid = (view.data or {}).get("grid", [])
    done = _DONE.search(view.feedback or "")
    table = _taught_table(view) if done else None
    if done and table and grid:
        group = _next_taught(grid, done.group(1), table)
        r, c = cells_of(grid, group)[0]
        return f"click_row_{r + 1}_col_{c + 1}"
    rows = " ".join(f"Row {r + 1}: {', '.join(grid[r])}." for r in range(len(grid)))
    reset = " The grid was reset after a mistake." if "mistake" in (view.feedback or "") else ""
    return f"The grid, each row from left to right: {rows}{reset} What should I press?"


_DONE = re.compile(r"the (\w+) group is white\)\s*$")
_TAUGHT = re.compile(r"TABLE (.*?) END")
_TAUGHT_ROW = re.compile(r"(\w+): ([RBGYMWC]{15})")


def _next_taught(grid: Grid, last: str, table: dict[str, list[str]]) -> str:
    """The manual's next group, from a table the solver was told (rules 2 and 3)."""
    group = table[last][sum(row.count("white") for row in grid) - 1]
    if group in COLOURS and not cells_of(grid, group):
        return fewest(grid)
    return group


def _teaching() -> str:
    """The table in words the scripted solver reads back (``TABLE … END``)."""
    rows = "; ".join(f"{g}: {_TABLE_ROWS[g]}" for g in GROUPS)
    return (
        "From then on pick each next group yourself, one a turn: count the white squares N and "
        "read the N-th letter of the row for the group you whitened last (R red, B blue, "
        "G green, Y yellow, M magenta, W row, C column). If it names a colour with no squares "
        f"left, press the colour with the fewest squares. TABLE {rows} END"
    )


_ROW = re.compile(r"\bRow (\d): ([a-z, ]+)\.", re.IGNORECASE)
_TOLD = re.compile(r"Press the (\w+) group", re.IGNORECASE)


def scripted_expert(view: View, rng: random.Random) -> str:
    """Picks the group from the grid it is told and the group it named last."""
    said = view.last_from("solver") or ""
    if looks_like_actions(said):
        return ACKNOWLEDGE
    rows = {int(n): [v.strip().lower() for v in vals.split(",")] for n, vals in _ROW.findall(said)}
    grid = [rows.get(r, []) for r in range(1, SIZE + 1)]
    if any(len(row) != SIZE or any(v not in FILL for v in row) for row in grid):
        return "Tell me the colour of every square, row by row from the top, each row from left to right."
    if all(v == "white" for row in grid for v in row):
        return "Everything is white already; the module should be solved."
    # The group pressed last: the latest one this expert named that the solver then acted on,
    # forgotten when the solver reports a reset.
    last: str | None = None
    pending: str | None = None
    for speaker, text in view.history:
        if speaker == view.role:
            told = _TOLD.search(text)
            pending = told.group(1).lower() if told else None
        elif speaker == "solver":
            if looks_like_actions(text) and pending:
                last = pending
            if "reset" in text.lower():
                last = None
            pending = None
    group = next_group(grid, last)
    cells = cells_of(grid, group)
    # One click whitens the whole group unless the manual is parley's own variant's (COMMA's
    # own manual, read from a reference, does not say so, but its module works that way).
    if PARLEY_MANUAL not in view.system:
        # Name one square of the group.
        r, c = cells[0]
        # Two turns a group (describe, act) would not fit COMMA's 10 turns: teach the table.
        return (
            f"Press the {group} group: row {r + 1} column {c + 1} (one click whitens it all). "
            + _teaching()
        )
    squares = ", ".join(f"row {r + 1} column {c + 1}" for r, c in cells)
    return f"Press the {group} group: {squares}."
