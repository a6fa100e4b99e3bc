"""The task game masters on hand-made replies: accuracy and validity scores, strict parsing,
and E2E games whose scores are computed by hand from the paper's formulas."""

from __future__ import annotations

import json
from typing import Any

import chess
import pytest

from parley.environments import registry
from parley.environments.base import GameMaster
from parley.environments.playground import KITS
from parley.environments.playground.common import cell_name


def master(
    name: str, seed: int = 0, instance: dict[str, Any] | None = None, **settings: Any
) -> GameMaster:
    info = registry.get(f"playground.{name}")
    merged = {**info.default_settings, **settings}
    return info.game_master(instance or info.instance(seed, merged), merged)


def play(gm: GameMaster, replies: dict[str, list[str]]) -> None:
    """Feed each role its replies in turn order until the game ends or replies run out."""
    queues = {role: list(texts) for role, texts in replies.items()}
    while (turn := gm.next_turn()) is not None:
        if not queues.get(turn.role):
            return
        gm.on_reply(turn.role, queues[turn.role].pop(0))


def kinds(gm: GameMaster) -> list[str]:
    return [e.kind for e in gm.drain_events()]


# --- perceiving, QA, rule following ---------------------------------------------------------


def test_perceiving_scores_cell_accuracy() -> None:
    gm = master("tictactoe.perceiving", 3)
    truth = gm.instance["board"]
    guess = [list(row) for row in truth]
    guess[0][0] = 5  # two cells wrong: 7 of 9 right
    guess[2][1] = 5
    gm.on_reply("player", f"Game State: {json.dumps(guess)}")
    assert gm.outcome == "lost" and gm.scores()["accuracy"] == pytest.approx(7 / 9)
    gm = master("chess.perceiving", 3)
    gm.on_reply("player", "Game State: " + json.dumps(gm.instance["board"]))
    assert gm.outcome == "success" and gm.scores().main == 100.0
    assert gm.scores() == {"accuracy": 1.0, "parsed": 1.0}


@pytest.mark.parametrize(
    "reply",
    ["I cannot read the image.", "Game State: [[1, 2], [3]]", "Game State: [[-1, -1, -1]]", ""],
)
def test_unreadable_matrices_score_zero_and_are_recorded(reply: str) -> None:
    gm = master("tictactoe.perceiving", 1)
    gm.on_reply("player", reply)
    assert gm.scores().main == 0.0 and gm.scores() == {"accuracy": 0.0, "parsed": 0.0}
    assert gm.outcome == "lost" and "violation" in kinds(gm)


def test_qa_reads_only_the_answer_letter() -> None:
    gm = master("sudoku.qa", 11)
    right = "ABCD"[gm.instance["question"]["answer"]]
    wrong = next(x for x in "ABCD"[: len(gm.instance["question"]["options"])] if x != right)
    gm.on_reply("player", f"The answer might be {right} or {wrong}.\nAnswer: {right}")
    assert gm.scores()["accuracy"] == 1.0
    gm = master("sudoku.qa", 11)
    gm.on_reply("player", f"Answer: {wrong}")
    assert gm.scores()["accuracy"] == 0.0 and gm.scores()["parsed"] == 1.0
    gm = master("sudoku.qa", 11)
    gm.on_reply("player", f"I'd say {right}")  # no Answer field, not a bare letter
    assert gm.scores().main == 0.0 and gm.scores() == {"accuracy": 0.0, "parsed": 0.0}


def test_rule_following_checks_the_movement_field_only() -> None:
    gm = master("tictactoe.rule", 2)
    position = KITS["tictactoe"].load(gm.instance["state"])
    taken = (
        next(cell_name(r, c) for r in range(3) for c in range(3) if position.matrix()[r][c] != -1)
        if any(v != -1 for row in position.matrix() for v in row)
        else None
    )
    free = position.legal_moves()[0]
    gm.on_reply("player", f"Observation: {free} is free.\nMovement: {free}")
    assert gm.scores()["valid"] == 1.0 and gm.outcome == "success"
    if taken:
        gm = master("tictactoe.rule", 2)
        # The reference took the first cell-like token anywhere; here only the field counts.
        gm.on_reply("player", f"{free} looks good.\nMovement: {taken}")
        assert gm.scores()["valid"] == 0.0
    gm = master("tictactoe.rule", 2)
    gm.on_reply("player", f"I play {free}.")
    assert gm.scores().main == 0.0 and gm.scores() == {"valid": 0.0, "parsed": 0.0}


def test_chess_rule_following_counts_moves_with_and_without_check_marks() -> None:
    fen = "r1bqkb1r/pppp1ppp/2n2n2/4p2Q/2B1P3/8/PPPP1PPP/RNB1K1NR w KQkq - 4 4"
    instance = {"seed": 0, "state": {"fen": fen, "moves": []}}
    for written in ("Qxf7#", "Qxf7", "Qxf7+", "h5f7", "Ke2"):
        gm = master("chess.rule", instance=instance)
        gm.on_reply("player", f"Movement: {written}")
        assert gm.scores()["valid"] == 1.0, written
    gm = master("chess.rule", instance=instance)
    gm.on_reply("player", "Movement: O-O")  # the bishop on f1 is gone but the knight is not
    assert gm.scores()["valid"] == 0.0 and gm.scores()["parsed"] == 1.0


# --- end-to-end games with hand-computed scores ----------------------------------------------


def e2e(name: str, **settings: Any) -> GameMaster:
    return master(f"{name}.e2e", 0, **settings)


def test_tictactoe_win_and_draw_scores() -> None:
    gm = e2e("tictactoe")
    # O: A1 B1 C1 (a row); X: A2 B2.
    play(
        gm,
        {
            "player": ["Movement: A1", "Movement: B1", "Movement: C1"],
            "opponent": ["Movement: A2", "Movement: B2"],
        },
    )
    assert gm.outcome == "success" and gm.scores()["e2e_score"] == 10 * 3 + 50
    gm = e2e("tictactoe")
    # A drawn game ending O X O / O X X / X O O.
    play(
        gm,
        {
            "player": [
                "Movement: A1",
                "Movement: C1",
                "Movement: B3",
                "Movement: A2",
                "Movement: C3",
            ],
            "opponent": ["Movement: B2", "Movement: B1", "Movement: C2", "Movement: A3"],
        },
    )
    assert gm.position.result() == "draw"
    assert gm.outcome == "lost" and gm.scores()["e2e_score"] == 10 * 5 + 20
    assert gm.scores()["draw"] == 1.0 and gm.scores().main == 70.0


def test_an_illegal_tictactoe_move_counts_toward_the_three() -> None:
    gm = e2e("tictactoe")
    play(
        gm,
        {
            "player": [
                "Movement: B2",
                "Movement: B2",
                "Movement: A1",
                "no move here",
                "Movement: Z9",
            ],
            "opponent": ["Movement: C3", "Movement: A3"],
        },
    )
    # B2 played; B2 again (taken), then A1 played; then two unreadable replies: three invalid.
    assert gm.outcome == "lost" and gm.reason == "3 invalid replies"
    assert gm.invalid["player"] == 3
    assert gm.scores()["e2e_score"] == 10 * 2 and gm.scores()["invalid"] == 3.0


def test_reversi_score_counts_moves_and_black_discs() -> None:
    gm = e2e("reversi")
    play(
        gm,
        {
            "player": ["Movement: D3", "Movement: D3", "bad", "Movement: A1"],
            "opponent": ["Movement: C3"],
        },
    )
    # Black D3 turns D4 (4 black); White C3 turns D4 back (3 black); then three invalid.
    assert gm.outcome == "lost" and gm.scores()["black_discs"] == 3.0
    assert gm.scores()["e2e_score"] == 10 * 1 + 20 * 3


def test_sudoku_scores_filled_and_correct_cells() -> None:
    gm = e2e("sudoku")
    position = gm.position
    solution = position.solution
    empty = [s for s in range(81) if position.grid[s] == 0]
    # One correct digit, then a digit that fits but is not the solution's, then give up.
    right = empty[0]
    moves = [f"Movement: {cell_name(right // 9, right % 9)} {solution[right]}"]
    from parley.environments.playground.sudoku import candidates

    grid = list(position.grid)
    grid[right] = solution[right]
    wrong_square = next(s for s in empty[1:] if len(candidates(grid, s)) > 1)
    wrong_digit = next(d for d in candidates(grid, wrong_square) if d != solution[wrong_square])
    moves.append(f"Movement: {cell_name(wrong_square // 9, wrong_square % 9)} {wrong_digit}")
    moves += ["Movement: A1 0", "nothing", "Movement: A1 A1"]
    play(gm, {"player": moves})
    scores = gm.scores()
    assert scores["filled"] == 2.0 and scores["correct"] == 1.0
    assert scores["e2e_score"] == 2 * 2 + 10 * 1 and gm.outcome == "lost"


def test_sudoku_win_scores_every_cell_and_the_bonus() -> None:
    gm = e2e("sudoku")
    solution, grid = gm.position.solution, gm.position.grid
    moves = [
        f"Movement: {cell_name(s // 9, s % 9)} {solution[s]}" for s in range(81) if not grid[s]
    ]
    play(gm, {"player": moves})
    assert gm.outcome == "success"
    assert gm.scores()["e2e_score"] == 2 * 45 + 10 * 45 + 1000 and gm.scores().main == 100.0


def test_minesweeper_hand_made_boards() -> None:
    mines = [7, 15, 23, 31, 39, 47, 55, 63, 6, 14]
    start = {"seed": 0, "count": 10, "mines": mines, "revealed": [False] * 64, "exploded": None}
    gm = master("minesweeper.e2e", instance={"seed": 0, "start": start})
    play(gm, {"player": ["Movement: A1"]})  # opens all 54 safe cells at once
    assert gm.outcome == "success" and gm.scores()["e2e_score"] == 10 * 1 + 2 * 54 + 1000
    gm = master("minesweeper.e2e", instance={"seed": 0, "start": start})
    play(gm, {"player": ["Movement: F1", "Movement: F1", "Movement: G1"]})
    # F1 (a 2) revealed; F1 again is invalid; G1 is a mine.
    assert gm.outcome == "lost" and gm.scores()["revealed"] == 1.0
    assert gm.scores()["e2e_score"] == 10 * 2 + 2 * 1 and gm.invalid["player"] == 1


def test_minesweeper_pictures_show_the_revealed_cells() -> None:
    import io

    from PIL import Image

    from parley.environments.playground.common import Grid

    kit = KITS["minesweeper"]
    grid = Grid(8, 8, kit.cell_px)
    colours = {-1: (150, 150, 155), 9: (225, 40, 40)}

    def check(png: bytes, matrix: list[list[int]]) -> None:
        picture = Image.open(io.BytesIO(png)).convert("RGB")
        for r in range(8):
            for c in range(8):
                x0, y0, _, _ = grid.box(r, c)
                # Up and left of the centre: clear of digits, mine spikes and tile bevels.
                seen = picture.getpixel((x0 + 9, y0 + 13))
                assert seen == colours.get(matrix[r][c], (236, 236, 232)), (r, c, matrix[r][c])

    # Offline tasks: the picture shows exactly the revealed cells of the matrix.
    for seed in range(5):
        for task in ("perceiving", "qa"):
            gm = master(f"minesweeper.{task}", seed)
            check(gm.next_turn().observation.images[0], gm.instance["board"])
    # In play: after a reveal the next picture shows it.
    mines = [0, 2, 4, 6, 16, 18, 20, 22, 40, 63]
    start = {"seed": 0, "count": 10, "mines": mines, "revealed": [False] * 64, "exploded": None}
    gm = master("minesweeper.e2e", instance={"seed": 0, "start": start})
    check(gm.next_turn().observation.images[0], [[-1] * 8 for _ in range(8)])
    gm.on_reply("player", "Movement: B2")
    turn = gm.next_turn()
    assert turn is not None and gm.position.matrix()[1][1] == 4  # A1 C1 A3 C3
    check(turn.observation.images[0], gm.position.matrix())


def test_gomoku_five_in_a_row_scores_the_bonus() -> None:
    gm = e2e("gomoku")
    play(
        gm,
        {
            "player": [f"Movement: H{row}" for row in range(8, 13)],
            "opponent": [f"Movement: A{row}" for row in range(1, 5)],
        },
    )
    assert gm.outcome == "success" and gm.scores()["e2e_score"] == 10 * 5 + 1000


def test_gomoku_coordinates_agree_between_prompt_picture_and_parser() -> None:
    import io

    from PIL import Image

    kit = KITS["gomoku"]
    grid = kit.grid()  # type: ignore[attr-defined]
    for name, (row, col) in {"C12": (11, 2), "H8": (7, 7), "O1": (0, 14), "A15": (14, 0)}.items():
        gm = e2e("gomoku")
        play(gm, {"player": [f"Movement: {name}"]})
        assert gm.position.matrix()[row][col] == 1
        picture = Image.open(io.BytesIO(gm.next_turn().observation.images[0])).convert("RGB")
        assert picture.getpixel(grid.center(row, col)) == (15, 15, 15)  # the black stone
        # The column's letter is printed straight above the stone, the row's number level
        # with it, and nothing is printed between two labels.
        x, y = grid.center(row, col)
        assert _dark(picture, x, grid.margin // 2) and _dark(picture, grid.margin // 2, y)
        assert not _dark(picture, x + grid.cell // 2, grid.margin // 2)


def _dark(picture: Any, x: int, y: int, radius: int = 5) -> bool:
    return any(
        sum(picture.getpixel((x + dx, y + dy))) < 200
        for dx in range(-radius, radius + 1)
        for dy in range(-radius, radius + 1)
    )


def test_chess_scores_moves_captures_and_outcome() -> None:
    gm = e2e("chess")
    # Scholar's mate: 1.e4 e5 2.Qh5 Nc6 3.Bc4 Nf6 4.Qxf7# (a pawn taken on f7).
    play(
        gm,
        {
            "player": ["Movement: e4", "Movement: Qh5", "Movement: Bc4", "Movement: Qxf7"],
            "opponent": ["Movement: e5", "Movement: Nc6", "Movement: Nf6"],
        },
    )
    assert gm.outcome == "success" and gm.position.board.is_checkmate()
    assert gm.scores()["e2e_score"] == 10 * 4 + 5 * 1 + 1000 and gm.scores()["captured"] == 1.0
    gm = e2e("chess")
    # Fool's mate: White loses after two moves, nothing taken.
    play(
        gm,
        {
            "player": ["Movement: f3", "Movement: g2g4"],
            "opponent": ["Movement: e5", "Movement: Qh4#"],
        },
    )
    assert gm.outcome == "lost" and gm.scores()["e2e_score"] == 10 * 2
    gm = e2e("chess")
    # 1.e4 d5 2.exd5 Qxd5 3.Nc3 Qxa2 4.Rxa2: a pawn and a queen taken, castling later.
    play(
        gm,
        {
            "player": [
                "Movement: e4",
                "Movement: exd5",
                "Movement: Nc3",
                "Movement: Rxa2",
                "Movement: O-O-O",
            ],
            "opponent": ["Movement: d5", "Movement: Qxd5", "Movement: Qxa2", "Movement: e5"],
        },
    )
    assert gm.scores()["captured"] == 1 + 9 and gm.moves["player"] == 4
    assert gm.invalid["player"] == 1  # O-O-O is not legal here
    assert gm.scores()["e2e_score"] == 10 * 4 + 5 * 10
    assert gm.position.board.fen().startswith("rnb1kbnr/ppp2ppp/8/4p3/8/2N5/RPPP1PPP/2BQKBNR")


def test_chess_castling_en_passant_and_promotion_in_play() -> None:
    fen = "r3k3/1P6/8/3pP3/8/8/8/R3K2R w KQq d6 0 1"
    gm = master("chess.e2e", instance={"seed": 0, "start": {"fen": fen, "moves": []}})
    play(
        gm,
        {
            "player": ["Movement: exd6", "Movement: 0-0", "Movement: bxa8=Q+"],
            "opponent": ["Movement: Kd7", "Movement: Ke6"],
        },
    )
    board = gm.position.board
    assert gm.invalid["player"] == 0 and gm.moves["player"] == 3
    assert board.piece_at(chess.G1) == chess.Piece(chess.KING, chess.WHITE)
    assert board.piece_at(chess.A8) == chess.Piece(chess.QUEEN, chess.WHITE)
    assert gm.scores()["captured"] == 1 + 5  # en passant pawn, then the rook on a8


def test_opponent_invalid_replies_abort_without_a_score() -> None:
    gm = e2e("gomoku")
    play(gm, {"player": ["Movement: H8"], "opponent": ["pass", "Movement: H8", "Movement: Z1"]})
    assert gm.outcome == "aborted" and gm.scores().main is None


def test_prompts_say_who_plays_which_side() -> None:
    expectations = {
        "tictactoe": ("You play O; your opponent plays X, and you move first.", "O"),
        "reversi": ("You play Black; your opponent plays White, and you move first.", "Black"),
        "gomoku": ("You play Black; your opponent plays White, and you move first.", "Black"),
        "chess": ("You play White; your opponent plays Black, and you move first.", "White"),
    }
    for game, (sentence, side) in expectations.items():
        gm = e2e(game)
        assert sentence in gm.system_prompt("player")
        turn = gm.next_turn()
        assert turn.role == "player" and gm.position.to_move() == side  # and it is true
        assert f"You play {side}; it is your move." in turn.observation.text
        assert gm.kit.opponent_side in gm.system_prompt("opponent").split("You play ")[1][:6]
    for game in ("sudoku", "minesweeper"):
        assert "You play alone." in e2e(game).system_prompt("player")


def test_text_variant_shows_no_picture_and_the_same_board() -> None:
    for game in KITS:
        gm = master(f"{game}.perceiving", 4, variant="text")
        observation = gm.next_turn().observation
        assert observation.images == [] and "The board:" in observation.text
        board = gm.instance["board"]
        assert KITS[game].text(board, {}) in observation.text
        gm = master(f"{game}.perceiving", 4)
        assert len(gm.next_turn().observation.images) == 1
