"""The four LVLM-Playground tasks as game masters, written once for every game kit.

- Perceiving: one turn; the reply's ``Game State:`` matrix is compared cell by cell.
- QA: one turn; the reply's ``Answer:`` letter is right or wrong.
- Rule following: one turn; the reply's ``Movement:`` is legal or not under the rules.
- End-to-end: a whole game; the opponent (two-player games) is its own role, so a search
  player, a random player, a model or a person can take it, and its search runs in a worker
  thread like any built-in player. Three invalid replies end the game.

A reply that cannot be read is recorded as a violation and scored 0; it never crashes the
episode, and it does not make the score "aborted" (the paper scores it, so do we).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from parley.environments.base import (
    GameMaster,
    Observation,
    ObserverView,
    ReasonCode,
    Scores,
    StepResult,
)
from parley.environments.playground.common import (
    LETTERS,
    answer_letter,
    cpu_bound,
    matrix_text,
    movement_field,
    parse_matrix,
)
from parley.environments.playground.kit import Kit, Position, Question

TASKS = ("perceiving", "qa", "rule", "e2e")


def _board(
    kit: Kit, variant: str, matrix: list[list[int]], extra: dict[str, Any]
) -> tuple[str, list[bytes]]:
    """The board for a prompt: a picture (image variant) or the text grid (text variant)."""
    if variant == "text":
        return f"The board:\n{kit.text(matrix, extra)}", []
    with cpu_bound():
        picture = kit.render(matrix, extra)
    return "The picture shows the board.", [picture]


def _seen_as(variant: str) -> str:
    return "as text" if variant == "text" else "as a picture"


class _PlaygroundMaster(GameMaster):
    kit: ClassVar[Kit]
    task: ClassVar[str]

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.variant = str(self.settings.get("variant", "image"))
        if self.variant not in ("image", "text"):
            raise ValueError(f"variant must be 'image' or 'text', not {self.variant!r}")
        self._observed: tuple[str, list[bytes]] | None = None  # the observer's last picture

    def observer_view(self, images: bool = True) -> ObserverView:
        """The board as it stands (the position of a game in play, else the task's board), as
        text and, in the image variant, as a picture; nothing on it is hidden from the
        players, so it is public."""
        position = getattr(self, "position", None)
        if position is not None:
            matrix, extra = position.matrix(), position.extra()
            status = list(position.status_lines())
        else:
            matrix, extra, status = self.instance["board"], self.instance.get("extra", {}), []
        text = "\n".join([f"{self.kit.title} ({self.task})", self.kit.text(matrix, extra), *status])
        pictures: list[bytes] = []
        if images and self.variant == "image":  # the text variant draws no picture
            key = json.dumps([matrix, extra], sort_keys=True, default=str)
            if self._observed is None or self._observed[0] != key:  # drawn when it changed
                self._observed = (key, _board(self.kit, "image", matrix, extra)[1])
            pictures = self._observed[1]
        return ObserverView(text=text, images=pictures, data=self._whose_turn_data())

    def _intro(self) -> str:
        kit = self.kit
        picture = f" {kit.picture_words}" if self.variant == "image" and kit.picture_words else ""
        return f"{kit.rules}\n\n{kit.board_words}{picture}"


class _OneTurnMaster(_PlaygroundMaster):
    """A single question and a single reply."""

    roles = ("player",)

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.answered = False
        self.parsed = False
        self.score = 0.0

    def whose_turn(self) -> str | None:
        return None if self.answered else "player"

    def _finish(
        self, action: str, score: float, feedback: str, code: ReasonCode | None = None
    ) -> None:
        """Score the one reply and end: ``solved`` when right, else ``code`` (``failed``)."""
        self.answered = True
        self.score = score
        self.record_action(
            "player", action, StepResult(feedback, mistake=score < 1, progress=score)
        )
        if score >= 1:
            self.end("success", feedback, code=ReasonCode.SOLVED)
        else:
            self.end("lost", feedback, code=code or ReasonCode.FAILED)

    def scores(self) -> Scores:
        return Scores(main=100.0 * self.score, accuracy=self.score, parsed=float(self.parsed))


class PerceivingMaster(_OneTurnMaster):
    """Transcribe a random board (it may be unreachable in play) into the matrix encoding."""

    task: ClassVar[str] = "perceiving"

    def system_prompt(self, role: str) -> str:
        kit = self.kit
        example = [[kit.blank] * kit.cols for _ in range(kit.rows)]
        return (
            f"{self._intro()}\n\nYou will be shown a {kit.title} board {_seen_as(self.variant)}. "
            f"Write it down as a {kit.rows}x{kit.cols} matrix: one list per row, from the top "
            f"row down, each row from left to right, where {kit.encoding}. Reply in exactly "
            f"this format:\nGame State: <matrix>\nFor example, an empty board is:\n"
            f"Game State: {matrix_text(example)}"
        )

    def observe(self, role: str) -> Observation:
        matrix, extra = self.instance["board"], self.instance.get("extra", {})
        text, images = _board(self.kit, self.variant, matrix, extra)
        return Observation(
            text=f"{text}\nWrite its matrix.",
            images=images,
            data={"task": "perceiving", "game": self.kit.name, "board": matrix, **extra},
        )

    def handle_reply(self, role: str, text: str) -> None:
        kit = self.kit
        got = parse_matrix(text, kit.rows, kit.cols)
        if got is None:
            self.violation(
                role,
                f"no readable {kit.rows}x{kit.cols} 'Game State:' matrix",
                abort=False,
                code=ReasonCode.PARSE_ERROR,
            )
            self._finish(
                "unreadable", 0.0, "no readable matrix: accuracy 0", ReasonCode.PARSE_ERROR
            )
            return
        self.parsed = True
        truth = self.instance["board"]
        right = sum(1 for r in range(kit.rows) for c in range(kit.cols) if got[r][c] == truth[r][c])
        accuracy = right / (kit.rows * kit.cols)
        self._finish(matrix_text(got), accuracy, f"{right} of {kit.rows * kit.cols} cells right")


class QAMaster(_OneTurnMaster):
    """A multiple-choice question about a random board."""

    task: ClassVar[str] = "qa"

    @property
    def question(self) -> Question:
        return Question.from_json(self.instance["question"])

    def system_prompt(self, role: str) -> str:
        return (
            f"{self._intro()}\n\nYou will be shown a {self.kit.title} board "
            f"{_seen_as(self.variant)} and asked a multiple-choice question about it. Reply in "
            "exactly this format:\nAnswer: <letter>\nwhere <letter> is the letter of one "
            "option, and nothing else on that line."
        )

    def observe(self, role: str) -> Observation:
        matrix, extra = self.instance["board"], self.instance.get("extra", {})
        question = self.question
        text, images = _board(self.kit, self.variant, matrix, extra)
        options = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(question.options))
        return Observation(
            text=f"{text}\n\nQuestion: {question.text}\n{options}",
            images=images,
            data={
                "task": "qa",
                "game": self.kit.name,
                "board": matrix,
                **extra,
                "question": {
                    "kind": question.kind,
                    "params": question.params,
                    "text": question.text,
                    "options": question.options,
                },
            },
        )

    def handle_reply(self, role: str, text: str) -> None:
        question = self.question
        letters = LETTERS[: len(question.options)]
        letter = answer_letter(text, letters)
        if letter is None:
            self.violation(
                role,
                f"no 'Answer:' with one of {', '.join(letters)}",
                abort=False,
                code=ReasonCode.PARSE_ERROR,
            )
            self._finish("unreadable", 0.0, "no readable answer", ReasonCode.PARSE_ERROR)
            return
        self.parsed = True
        right = LETTERS[question.answer]
        ok = letter == right
        self._finish(
            letter, 1.0 if ok else 0.0, "right" if ok else f"wrong (the answer is {right})"
        )


class RuleMaster(_OneTurnMaster):
    """A rule-following state (drawn as the reference draws them); name one valid move."""

    task: ClassVar[str] = "rule"

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.position: Position = self.kit.load(instance["state"])

    def system_prompt(self, role: str) -> str:
        kit = self.kit
        return (
            f"{self._intro()}\n\nYou will be shown a {kit.title} position "
            f"{_seen_as(self.variant)} and must give one valid move in it. {kit.rule_task} "
            f"Write the move as {kit.move_help}. Reply in exactly this format:\n"
            "Movement: <move>"
        )

    def observe(self, role: str) -> Observation:
        position = self.position
        text, images = _board(self.kit, self.variant, position.matrix(), position.extra())
        facts = "\n".join(position.status_lines())
        side = position.to_move()
        turn = "It is your move." if side == "you" else f"{side} is to move; you play {side}."
        body = "\n".join(part for part in (text, facts, turn) if part)
        return Observation(
            text=f"{body}\nGive one valid move.",
            images=images,
            data={"task": "rule", "game": self.kit.name, **position.view()},
        )

    def handle_reply(self, role: str, text: str) -> None:
        raw, why = movement_field(text)
        if raw is None:
            self.violation(role, why, abort=False, code=ReasonCode.PARSE_ERROR)
            self._finish("unreadable", 0.0, why, ReasonCode.PARSE_ERROR)
            return
        move = self.position.parse(raw)
        if move is None:
            reason = f"{raw!r} is not a move; write {self.kit.move_help}"
            self.violation(role, reason, abort=False, code=ReasonCode.PARSE_ERROR)
            self._finish(raw, 0.0, reason, ReasonCode.PARSE_ERROR)
            return
        self.parsed = True
        illegal = self.position.illegal(move)
        if illegal:
            self._finish(raw, 0.0, f"invalid: {illegal}", ReasonCode.RULE_VIOLATION)
        else:
            self._finish(move, 1.0, "valid")

    def scores(self) -> Scores:
        out = super().scores()
        out["valid"] = out.pop("accuracy")
        return out


class E2EMaster(_PlaygroundMaster):
    """A whole game. Two-player games have roles ``player`` and ``opponent``; single-player
    games only ``player``. Settings: ``variant``, ``max_invalid`` (3), ``max_moves`` (200, the
    player's moves; reaching it ends the game unfinished), plus the game's search settings,
    which the opponent role is shown."""

    task: ClassVar[str] = "e2e"

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.position = self.kit.load(instance["start"])
        self.max_invalid = int(self.settings.get("max_invalid", 3))
        self.max_moves = int(self.settings.get("max_moves", 200))
        self.invalid = dict.fromkeys(self.roles, 0)
        self.moves = dict.fromkeys(self.roles, 0)
        self.captured = 0
        self.result_word: str | None = None
        self.news: dict[str, list[str]] = {role: [] for role in self.roles}

    # --- who plays what ------------------------------------------------------------------

    def side_of(self, role: str) -> str:
        if role == "player":
            return self.kit.player_side
        return self.kit.opponent_side or ""

    def role_of(self, side: str) -> str:
        return "player" if side == self.kit.player_side or side == "you" else "opponent"

    def system_prompt(self, role: str) -> str:
        kit = self.kit
        me, other = self.side_of(role), self.side_of("opponent" if role == "player" else "player")
        if kit.opponent_side is None:
            who = "You play alone."
        else:
            first = self.position.to_move()
            order = "you move first" if first == me else f"{other} moves first"
            who = f"You play {me}; your opponent plays {other}, and {order}."
        fields = (
            "Observation: <a short description of the situation>\n"
            "Strategy: <your plan, briefly>\n"
            "Movement: <your move>\n"
        )
        return (
            f"{self._intro()}\n\nYou are playing a whole game of {kit.title}. {who} Each turn "
            f"you are shown the board {_seen_as(self.variant)}. First observe the situation, "
            "then think briefly about your strategy, then give your move. Reply in exactly "
            f"this format:\n{fields}where <your move> is {kit.move_help}. Only the Movement "
            f"line is read. A missing, unreadable or illegal move counts as invalid; after "
            f"{self.max_invalid} invalid replies the game ends and you lose."
        )

    def whose_turn(self) -> str | None:
        if self.outcome is not None:
            return None
        return self.role_of(self.position.to_move())

    def observe(self, role: str) -> Observation:
        position = self.position
        text, images = _board(self.kit, self.variant, position.matrix(), position.extra())
        news = self.news[role]
        me = self.side_of(role)
        turn = "It is your move." if me == "you" else f"You play {me}; it is your move."
        lines = [*news, text, *position.status_lines(), turn]
        data: dict[str, Any] = {"task": "e2e", "game": self.kit.name, "you": me, **position.view()}
        if role == "opponent":
            data["search"] = self.kit.opponent_params(self.settings)
            lines.append(f"(Search settings for a built-in opponent: {data['search']}.)")
        return Observation(text="\n".join(lines), images=images, data=data)

    def legal_actions(self, role: str) -> list[str]:
        """The moves ``role`` may make now, each a reply the game reads (a bare move is one):
        a human's browser seat shows them as buttons (docs/humans.md)."""
        if self.outcome is not None or self.whose_turn() != role:
            return []
        return self.position.legal_moves()

    # --- replies -------------------------------------------------------------------------

    def handle_reply(self, role: str, text: str) -> None:
        raw, why = movement_field(text)
        if raw is None:
            self._invalid(role, why, ReasonCode.PARSE_ERROR)
            return
        move = self.position.parse(raw)
        if move is None:
            self._invalid(
                role, f"{raw!r} is not a move; write {self.kit.move_help}", ReasonCode.PARSE_ERROR
            )
            return
        reason = self.position.illegal(move)
        if reason:
            self._invalid(role, f"invalid move {raw}: {reason}", ReasonCode.RULE_VIOLATION)
            return
        played = self.position.play(move)
        self.news[role] = []  # what happened before this move has been seen
        self.moves[role] += 1
        if role == "player":
            self.captured += played.captured
        shown = played.note if self.kit.tells_move_note and played.note else raw
        self.record_action(role, move, StepResult(played.note or "played", progress=0.0))
        for other in self.roles:
            if other != role:
                self.news[other].append(f"Your opponent ({self.side_of(role)}) played {shown}.")
        for side in played.passed:
            passer = self.role_of(side)
            self.note(f"{side} has no legal move and passes")
            self.news[passer].append("You had no legal move, so you passed.")
            for other in self.roles:
                if other != passer:
                    self.news[other].append(f"{side} had no legal move and passed.")
        self._check_end()

    @property
    def competitive(self) -> bool:
        """Player against opponent (two-player games): the roles' results are recorded."""
        return "opponent" in self.roles

    def _winner(self, role: str) -> str | None:
        return role if self.competitive else None

    def _invalid(self, role: str, reason: str, code: ReasonCode) -> None:
        self.invalid[role] += 1
        count = self.invalid[role]
        self.violation(role, reason, abort=False, code=code)
        self.give_feedback(
            role,
            f"Your reply was not accepted: {reason}. Invalid replies so far: {count} of "
            f"{self.max_invalid}.",
        )
        if count >= self.max_invalid:
            # Too many invalid replies forfeit the game: the other side wins it.
            if role == "player":
                self.result_word = "loss"
                self.end(
                    "lost",
                    f"{count} invalid replies",
                    code=ReasonCode.MISTAKE_LIMIT,
                    winner=self._winner("opponent"),
                )
            else:
                # The opponent failing is no achievement of the player's: not scored.
                self.end(
                    "aborted",
                    f"the opponent gave {count} invalid replies",
                    code=ReasonCode.MISTAKE_LIMIT,
                    winner="player",
                )

    def _check_end(self) -> None:
        result = self.position.result()
        if result is not None:
            if result in ("won",) or result == self.kit.player_side:
                self.result_word = "win"
            elif result == "draw":
                self.result_word = "draw"
            else:
                self.result_word = "loss"
            outcome: Literal["success", "lost"] = "success" if self.result_word == "win" else "lost"
            reason = {"win": "won", "draw": "draw", "loss": f"lost ({result})"}[self.result_word]
            if self.competitive:
                winner = {"win": "player", "loss": "opponent"}.get(self.result_word)
                self.end(
                    outcome,
                    reason,
                    code=ReasonCode.GAME_OVER,
                    winner=winner,
                    draw=self.result_word == "draw",
                )
            else:  # a puzzle played alone (Sudoku, Minesweeper): solved or not
                code = ReasonCode.SOLVED if self.result_word == "win" else ReasonCode.FAILED
                self.end(outcome, reason, code=code)
        elif self.moves["player"] >= self.max_moves:
            self.result_word = "unfinished"
            self.end("lost", f"move limit of {self.max_moves} reached", code=ReasonCode.TURN_LIMIT)

    # --- scores --------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {
            "moves": self.moves["player"],
            "result": self.result_word or "unfinished",
            "captured": self.captured,
            **self.kit.e2e_counts(self.position),
        }

    def scores(self) -> Scores:
        stats = self.stats()
        raw = self.kit.e2e_score(stats)
        ceiling = self.kit.e2e_ceiling(self.instance, self.settings)
        main = None if self.outcome == "aborted" else min(100.0, 100.0 * raw / ceiling)
        out = Scores(
            main=main,
            e2e_score=raw,
            win=float(stats["result"] == "win"),
            draw=float(stats["result"] == "draw"),
            moves=float(stats["moves"]),
            invalid=float(self.invalid["player"]),
        )
        for key in ("captured", "black_discs", "filled", "correct", "revealed"):
            if key in stats and (key != "captured" or self.kit.scores_captured):
                out[key] = float(stats[key])
        return out


MASTERS: dict[str, type[_PlaygroundMaster]] = {
    "perceiving": PerceivingMaster,
    "qa": QAMaster,
    "rule": RuleMaster,
    "e2e": E2EMaster,
}


def master_for(kit: Kit, task: str) -> type[_PlaygroundMaster]:
    """The game-master class of ``task`` for ``kit`` (E2E gets an opponent role when the game
    has one)."""
    base = MASTERS[task]
    attrs: dict[str, Any] = {"kit": kit}
    if task == "e2e":
        attrs["roles"] = ("player", "opponent") if kit.opponent_side else ("player",)
    name = f"{kit.name.capitalize()}{base.__name__}"
    return type(name, (base,), attrs)
