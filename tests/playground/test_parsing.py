"""Reply parsing: cells, the Movement field (and only it), answer letters, matrices."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from parley.environments.playground.common import (
    LETTERS,
    answer_letter,
    cell_name,
    field_values,
    movement_field,
    parse_cell,
    parse_matrix,
)


@given(st.integers(1, 15), st.integers(1, 15), st.data())
def test_cell_names_round_trip_on_every_board(rows: int, cols: int, data: st.DataObject) -> None:
    r = data.draw(st.integers(0, rows - 1))
    c = data.draw(st.integers(0, cols - 1))
    name = cell_name(r, c)
    assert parse_cell(name, rows, cols) == (r, c)
    assert parse_cell(name.lower(), rows, cols) == (r, c)
    assert parse_cell(f"{r + 1}{LETTERS[c]}", rows, cols) == (r, c)  # "3B" works too
    assert parse_cell(f" {name} ", rows, cols) == (r, c)


@given(st.text(max_size=12))
def test_parse_cell_accepts_only_cells_on_the_board(text: str) -> None:
    cell = parse_cell(text, 8, 8)
    if cell is not None:
        r, c = cell
        assert 0 <= r < 8 and 0 <= c < 8
        assert text.strip().upper().replace(" ", "") in (cell_name(r, c), f"{r + 1}{LETTERS[c]}")


def test_off_board_cells_are_refused() -> None:
    assert parse_cell("I1", 8, 8) is None
    assert parse_cell("A9", 8, 8) is None
    assert parse_cell("A0", 8, 8) is None
    assert parse_cell("O15", 15, 15) == (14, 14)
    assert parse_cell("P1", 15, 15) is None
    assert parse_cell("B22", 15, 15) is None
    assert parse_cell("B 3", 8, 8) == (2, 1)
    assert parse_cell("B3 and C4", 8, 8) is None


def test_the_movement_field_is_the_only_move_read() -> None:
    reply = (
        "Observation: White threatens E5 and the corner A1 is open.\n"
        "Strategy: I considered C3 but D6 is stronger.\n"
        "Movement: D6"
    )
    assert movement_field(reply) == ("D6", "")
    # A cell in prose without the field is not a move.
    move, why = movement_field("I would play D6 here because it flips two discs.")
    assert move is None and "Movement" in why
    # Markdown emphasis, quotes, a full stop and the value on the next line are fine.
    assert movement_field("**Movement:** `e8=Q+`.")[0] == "e8=Q+"
    assert movement_field("Observation: x\nMovement:\n  B3 7\n")[0] == "B3 7"
    assert movement_field("- movement: <H8>")[0] == "H8"
    # A bare move is accepted; two disagreeing fields are not.
    assert movement_field("  c3 ")[0] == "c3"
    assert movement_field("Movement: A1\nMovement: B2")[0] is None
    assert movement_field("Movement: A1\nMOVEMENT: a1")[0] == "A1"
    assert movement_field("Movement:")[0] is None


@given(st.text(max_size=200))
@settings(max_examples=300)
def test_movement_field_never_crashes_and_reads_one_line(text: str) -> None:
    move, why = movement_field(text)
    assert (move is None) != (why == "")
    if move is not None:
        assert "\n" not in move


@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40).filter(
        lambda s: "\n" not in s and ":" not in s
    ),
    st.sampled_from(["A1", "H8", "O15", "e2e4", "Nf3", "B3 7"]),
)
def test_prose_around_the_field_never_changes_the_move(prose: str, move: str) -> None:
    reply = f"Observation: {prose}\nStrategy: {prose}\nMovement: {move}"
    assert movement_field(reply)[0] == move


def test_answer_letters_are_read_strictly() -> None:
    assert answer_letter("Answer: B", "ABCD") == "B"
    assert answer_letter("answer: (c)", "ABCD") == "C"
    assert answer_letter("**Answer:** D) 7", "ABCD") == "D"
    assert answer_letter("B", "ABCD") == "B"
    assert answer_letter("Answer: Because the board shows it", "ABCD") is None
    assert answer_letter("Answer: E", "ABCD") is None
    assert answer_letter("Answer: C", "AB") is None  # a Yes/No question has two options
    assert answer_letter("I think it is B.", "ABCD") is None
    assert answer_letter("Answer: A\nAnswer: B", "ABCD") is None
    assert answer_letter("Answer: A\nAnswer: a", "ABCD") == "A"


@given(st.text(max_size=100))
def test_answer_letter_never_crashes(text: str) -> None:
    letter = answer_letter(text, "ABCD")
    assert letter is None or letter in "ABCD"


@given(
    st.lists(st.lists(st.integers(-9, 9), min_size=3, max_size=3), min_size=3, max_size=3),
    st.sampled_from(["Game State: {}", "game state:\n{}", "Here it is.\nGame State: {}\nDone."]),
)
def test_matrices_parse_in_every_layout(matrix: list[list[int]], template: str) -> None:
    text = template.format(json.dumps(matrix))
    assert parse_matrix(text, 3, 3) == matrix
    pretty = template.format(json.dumps(matrix, indent=2))
    assert parse_matrix(pretty, 3, 3) == matrix


def test_malformed_matrices_are_unreadable() -> None:
    assert parse_matrix("Game State: [[1, 2], [3, 4]]", 3, 3) is None  # wrong shape
    assert parse_matrix("Game State: [[1, 2, 3], [3, 4]]", 2, 3) is None  # ragged
    assert parse_matrix("Game State: [[1, 'x'], [3, 4]]", 2, 2) is None
    assert parse_matrix("Game State: [[1, 2.5], [3, 4]]", 2, 2) is None
    assert parse_matrix("Game State: [[true, 0], [0, 0]]", 2, 2) is None
    assert parse_matrix("Game State: [[1, 2], [3, 4]", 2, 2) is None
    assert parse_matrix("no matrix at all", 2, 2) is None
    # Python-style lists (single quotes aside) are fine, as is a trailing comma.
    assert parse_matrix("Game State: [[1, 2,], [3, 4]]", 2, 2) == [[1, 2], [3, 4]]
    # The matrix after the label wins over an earlier example.
    text = "e.g. [[0, 0], [0, 0]]\nGame State: [[1, 0], [0, 1]]"
    assert parse_matrix(text, 2, 2) == [[1, 0], [0, 1]]


@given(st.text(max_size=120))
def test_parse_matrix_never_crashes(text: str) -> None:
    got = parse_matrix(text, 2, 2)
    assert got is None or (len(got) == 2 and all(len(row) == 2 for row in got))


def test_field_values_ignores_other_fields() -> None:
    text = "Observation: Movement: A1 is tempting\nStrategy: x\nMovement: B2"
    assert field_values(text, "movement") == ["B2"]
