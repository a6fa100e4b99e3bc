"""QA: every generated question's marked answer, recomputed here independently of the game
code (different code paths: flattened strings, explicit scans), and well-formed options."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from parley.environments.playground import KITS
from parley.environments.playground.kit import Question

LETTERS = "ABCDEFGHIJKLMNO"
PIECES = {1: "pawn", 2: "knight", 3: "bishop", 4: "rook", 5: "queen", 6: "king"}


def _col(matrix: list[list[int]], j: int) -> list[int]:
    return [matrix[i][j] for i in range(len(matrix))]


def _line(matrix: list[list[int]], p: dict[str, Any]) -> list[int]:
    return list(matrix[p["index"]]) if p["line"] == "row" else _col(matrix, p["index"])


def _runs(values: list[int], target: int) -> int:
    text = "".join("x" if v == target else "." for v in values)
    return max((len(chunk) for chunk in text.split(".")), default=0)


def _all_diagonals(matrix: list[list[int]]) -> list[list[int]]:
    n = len(matrix)
    cells: dict[tuple[str, int], list[int]] = {}
    for r in range(n):
        for c in range(n):
            cells.setdefault(("down", r - c), []).append(matrix[r][c])
            cells.setdefault(("up", r + c), []).append(matrix[r][c])
    return list(cells.values())


def _near(matrix: list[list[int]], r: int, c: int) -> list[int]:
    n = len(matrix)
    return [
        matrix[r + dr][c + dc]
        for dr in (-1, 0, 1)
        for dc in (-1, 0, 1)
        if (dr, dc) != (0, 0) and 0 <= r + dr < n and 0 <= c + dc < n
    ]


def expected(game: str, m: list[list[int]], kind: str, p: dict[str, Any]) -> str:
    flat = [v for row in m for v in row]
    if game == "tictactoe":
        name = {1: "X", 0: "O", -1: "empty"}
        mark = {"X": 1, "O": 0}
        if kind == "symbol_at":
            return name[m[p["row"]][p["col"]]]
        if kind == "count_symbol":
            return str(sum(v == mark[p["symbol"]] for v in flat))
        if kind == "count_empty":
            return str(sum(v == -1 for v in flat))
        if kind == "count_in_line":
            return str(sum(v == mark[p["symbol"]] for v in _line(m, p)))
        if kind == "count_color":
            target = 1 if p["color"] == "red" else 0
            pool = flat if p.get("line") is None else _line(m, p)
            return str(sum(v == target for v in pool))
        if kind == "winner":
            lines = [
                *m,
                *(_col(m, j) for j in range(3)),
                [m[i][i] for i in range(3)],
                [m[i][2 - i] for i in range(3)],
            ]
            won = {line[0] for line in lines if line[0] != -1 and len(set(line)) == 1}
            return "both" if len(won) == 2 else "neither" if not won else name[won.pop()]
    if game in ("reversi", "gomoku"):
        color = {"Black": 1, "White": 2}
        name = {1: "Black", 2: "White", 0: "empty"}
        if kind in ("symbol_at", "stone_at"):
            return name[m[p["row"]][p["col"]]]
        if kind == "count_color":
            return str(flat.count(color[p["color"]]))
        if kind == "count_empty":
            return str(flat.count(0))
        if kind == "count_color_in_line":
            return str(_line(m, p).count(color[p["color"]]))
        if kind == "row_most":
            counts = [row.count(color[p["color"]]) for row in m]
            best = [i for i, k in enumerate(counts) if k == max(counts)]
            assert len(best) == 1, "row_most is only asked when one row has the most"
            return str(best[0] + 1)
        if kind == "compare":
            b, w = flat.count(1), flat.count(2)
            return "equal" if b == w else ("Black" if b > w else "White")
        if kind == "total_in_line":
            return str(len([v for v in _line(m, p) if v]))
        if kind == "winning_line":
            lines = [*m, *(_col(m, j) for j in range(15)), *_all_diagonals(m)]
            return "Yes" if any(_runs(line, t) >= 5 for line in lines for t in (1, 2)) else "No"
        if kind == "adjacent":
            return str(sum(1 for v in _near(m, p["row"], p["col"]) if v))
        if kind == "max_run":
            lines = [m[p["index"]]] if p["where"] == "row" else _all_diagonals(m)
            return str(max(_runs(line, color[p["color"]]) for line in lines))
        if kind == "edge":
            ring = m[0] + m[-1] + [row[0] for row in m[1:-1]] + [row[-1] for row in m[1:-1]]
            return str(ring.count(color[p["color"]]))
    if game == "sudoku":

        def box(b: int) -> list[int]:
            return [m[r][c] for r in range(9) for c in range(9) if (r // 3) * 3 + c // 3 == b]

        if kind == "number_at":
            v = m[p["row"]][p["col"]]
            return "empty" if v == 0 else str(v)
        if kind == "count_number":
            return str(flat.count(p["number"]))
        if kind == "count_empty":
            return str(flat.count(0))
        if kind == "count_number_in_line":
            return str(_line(m, p).count(p["number"]))
        if kind == "count_number_in_box":
            return str(box(p["box"]).count(p["number"]))
        if kind == "sum_line":
            return str(sum(_line(m, p)))
        if kind == "sum_box":
            return str(sum(box(p["box"])))
        if kind == "contains":
            return "Yes" if p["number"] in _line(m, p) else "No"
        if kind == "empty_in_box":
            return str(box(p["box"]).count(0))
    if game == "minesweeper":
        v = m[p["row"]][p["col"]] if "row" in p else None
        if kind == "symbol_at":
            return {-1: "hidden", 9: "mine"}.get(v, str(v))  # type: ignore[arg-type]
        if kind == "count_mines":
            return str(flat.count(9))
        if kind == "count_revealed":
            return str(len(flat) - flat.count(-1))
        if kind == "count_revealed_in_line":
            line = _line(m, p)
            return str(len(line) - line.count(-1))
        if kind == "adjacent_mines":
            assert v is not None and 0 <= v <= 8, "asked only about revealed numbers"
            return str(v)
        if kind == "is_mine":
            return "Yes" if v == 9 else "No"
    if game == "chess":
        if kind == "color_at":
            v = m[p["row"]][p["col"]]
            return "empty" if v == 0 else ("White" if v > 0 else "Black")
        if kind == "piece_at":
            v = m[p["row"]][p["col"]]
            return PIECES.get(abs(v), "empty")
        if kind == "count_piece":
            return str(flat.count(p["piece"] if p["color"] == "White" else -p["piece"]))
        if kind == "count_in_line":
            line = m[8 - p["index"]] if p["line"] == "rank" else _col(m, p["index"])
            return str(8 - line.count(0))
        if kind == "compare_colors":
            w, b = sum(v > 0 for v in flat), sum(v < 0 for v in flat)
            return "equal" if w == b else ("White" if w > b else "Black")
        if kind == "compare_types":
            a = sum(abs(v) == p["a"] for v in flat)
            b = sum(abs(v) == p["b"] for v in flat)
            return "equal" if a == b else PIECES[p["a"] if a > b else p["b"]] + "s"
        if kind == "count_edge":
            ring = m[0] + m[7] + [row[0] for row in m[1:7]] + [row[7] for row in m[1:7]]
            return str(8 * 4 - 4 - ring.count(0))
        if kind == "half_empty":
            top = [v for row in m[:4] for v in row].count(0)
            bottom = [v for row in m[4:] for v in row].count(0)
            return "equal" if top == bottom else ("top" if top > bottom else "bottom")
    raise AssertionError(f"no independent answer for {game} {kind}")


@pytest.mark.parametrize("game", sorted(KITS))
def test_every_marked_answer_is_right(game: str) -> None:
    from parley.environments import registry

    info = registry.get(f"playground.{game}.qa")
    kinds: Counter[str] = Counter()
    for seed in range(400):
        instance = info.instance(seed, {})
        question = Question.from_json(instance["question"])
        assert 2 <= len(question.options) <= 4
        assert len(set(question.options)) == len(question.options)
        assert 0 <= question.answer < len(question.options)
        truth = expected(game, instance["board"], question.kind, question.params)
        assert question.options[question.answer] == truth, (seed, question)
        # The game's own answer (what the scripted player uses) agrees too.
        assert KITS[game].answer(instance["board"], question.kind, question.params) == truth
        kinds[question.kind] += 1
    assert len(kinds) >= 5, f"{game}: too few question types ({kinds})"


def test_answers_are_spread_over_the_letters() -> None:
    from parley.environments import registry

    for game in KITS:
        info = registry.get(f"playground.{game}.qa")
        letters = Counter(
            LETTERS[info.instance(seed, {})["question"]["answer"]] for seed in range(300)
        )
        assert len(letters) >= 3 and max(letters.values()) < 0.6 * 300, (game, letters)
