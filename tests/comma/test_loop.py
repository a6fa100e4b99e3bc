"""The COMMA loop as the paper runs it, at the game-master level: solver acts or speaks, the
expert answers; strict action parsing; feedback to the solver only; limits."""

from __future__ import annotations

from typing import Any

import pytest

from parley.environments import registry
from parley.environments.comma import PUZZLES
from parley.environments.comma.base import CommaGameMaster


def master(name: str, seed: int = 0, **settings: Any) -> CommaGameMaster:
    info = registry.get(f"comma.{name}")
    gm = info.game_master(info.instance(seed, {**info.default_settings, **settings}), settings)
    assert isinstance(gm, CommaGameMaster)
    return gm


def solver_says(gm: CommaGameMaster, text: str) -> None:
    turn = gm.next_turn()
    assert turn is not None and turn.role == "solver"
    gm.on_reply("solver", text)


def expert_says(gm: CommaGameMaster, text: str = "ok") -> None:
    turn = gm.next_turn()
    assert turn is not None and turn.role == "expert"
    gm.on_reply("expert", text)


def a_valid_action(gm: CommaGameMaster) -> str:
    return gm.legal_actions("solver")[0]


@pytest.mark.parametrize("name", list(PUZZLES))
def test_prose_or_mixed_lines_never_fire_an_action(name: str) -> None:
    gm = master(name)
    action = a_valid_action(gm)
    replies = [
        f"I think I should {action} now.",
        f"{action}\nis what I would do",
        f"{action} please",
        f"Maybe:\n{action}",
        f"{action}, {action}",
    ]
    for reply in replies:
        solver_says(gm, reply)
        events = gm.drain_events()
        assert [e.kind for e in events] == ["utterance"], reply
        assert events[0].to == "expert" and events[0].text == reply
        expert_says(gm)
        gm.drain_events()
    assert gm.actions_taken == 0 and gm.puzzle.progress == 0.0


@pytest.mark.parametrize("name", list(PUZZLES))
def test_clean_action_lines_do_fire(name: str) -> None:
    gm = master(name)
    action = a_valid_action(gm)
    solver_says(gm, f"  `{action}`  \n\n")
    kinds = [e.kind for e in gm.drain_events()]
    assert kinds[:2] == ["action", "feedback"] and kinds[-1] == "utterance"


def test_feedback_goes_to_the_solver_only_and_the_expert_hears_the_actions() -> None:
    gm = master("wire", 1)
    wrong = next(a for a in gm.legal_actions("solver") if a != f"cut_wire_{gm.puzzle.answer}")
    solver_says(gm, wrong)
    events = gm.drain_events()
    feedback = [e for e in events if e.kind == "feedback"]
    assert feedback and all(e.to == "solver" and e.visibility == "private" for e in feedback)
    expert_turn = gm.next_turn()
    assert expert_turn is not None and expert_turn.role == "expert"
    assert expert_turn.feedback is None and expert_turn.observation.images == []
    assert [m.text for m in expert_turn.incoming] == [wrong]
    gm.on_reply("expert", "try again")
    solver_turn = gm.next_turn()
    assert solver_turn is not None and "mistake" in (solver_turn.feedback or "")
    assert gm.mistakes == 1


def test_actions_after_a_mistake_are_not_carried_out() -> None:
    gm = master("keypad", 2)
    order = gm.puzzle.order
    lines = [f"press_{order[1]}_button", f"press_{order[0]}_button"]
    solver_says(gm, "\n".join(lines))
    events = gm.drain_events()
    assert [e.text for e in events if e.kind == "action"] == [lines[0]]
    assert any("not carried out" in e.text for e in events if e.kind == "feedback")
    assert gm.mistakes == 1 and gm.puzzle.progress == 0.0
    # The expert still hears the whole reply.
    assert [e.text for e in events if e.kind == "utterance"] == ["\n".join(lines)]


def test_several_actions_in_one_turn() -> None:
    gm = master("keypad", 2)
    solver_says(gm, "\n".join(f"press_{p}_button" for p in gm.puzzle.order))
    assert gm.outcome == "success" and gm.turn == 1
    assert gm.scores()["psr"] == 1.0


def test_turn_and_mistake_limits_are_settings() -> None:
    gm = master("password", 0, max_turns=3)
    for _ in range(3):
        solver_says(gm, "hello")
        if gm.outcome is None:
            expert_says(gm)
    assert gm.outcome == "lost" and "3 turns" in gm.reason
    assert gm.scores()["turns"] == 3.0

    gm = master("password", 0, max_mistakes=1)
    if gm.puzzle.current() == gm.puzzle.word:
        solver_says(gm, "up_button_1")
        expert_says(gm)
    solver_says(gm, "submit")
    assert gm.outcome == "lost" and gm.mistakes == 1

    gm = master("password", 0)
    assert (gm.max_turns, gm.max_mistakes) == (10, 3)


def test_scores_count_conversation_and_mistakes() -> None:
    gm = master("who", 4)
    solver_says(gm, "what do I do?")
    expert_says(gm, "press something")
    wrong = next(a for a in gm.legal_actions("solver") if a != f"press_{gm.puzzle.answer}_button")
    solver_says(gm, wrong)
    expert_says(gm)
    solver_says(gm, f"press_{gm.puzzle.answer}_button")
    scores = gm.scores()
    assert gm.outcome == "success" and gm.reason_code == "solved"
    assert scores.main == 100.0
    assert scores == {
        "success": 1.0,
        "psr": 1.0,
        "mistakes": 1.0,
        "conversation_length": 2.0,  # (3 solver + 2 expert messages) // 2
        "turns": 3.0,
    }


def test_atm_expert_hears_pin_keys_hidden() -> None:
    gm = master("atm", 3)
    pin = gm.puzzle.pin
    solver_says(gm, "\n".join(["press_enter", *(f"press_{d}" for d in pin), "press_enter"]))
    heard = [e.text for e in gm.drain_events() if e.kind == "utterance"]
    assert heard == ["\n".join(["press_enter", *["press_<hidden>"] * 4, "press_enter"])]
    assert gm.puzzle.logged_in
    # A wrong PIN typed after a mistake is hidden too, and so are skipped lines.
    gm = master("atm", 3)
    solver_says(gm, "\n".join(["press_enter", "press_1", "press_enter", "press_5", "press_5"]))
    heard = next(e.text for e in gm.drain_events() if e.kind == "utterance")
    assert "press_1" not in heard and "press_5" not in heard


def test_system_prompts() -> None:
    for name in PUZZLES:
        gm = master(name)
        expert = gm.system_prompt("expert")
        assert gm.puzzle.manual in expert
        solver = gm.system_prompt("solver")
        assert gm.puzzle.manual not in solver
        private = name in ("atm", "telehealth")
        assert ("Never reveal any of it to the expert" in solver) == private
        assert bool(gm.private_facts("solver")) == private
        assert gm.private_facts("expert") == {}
    atm = master("atm", 3)
    assert atm.puzzle.pin in atm.system_prompt("solver")  # the solver is given its PIN
    # The expert's instructions are the same for every instance: no private fact in them.
    assert master("atm", 4).system_prompt("expert") == atm.system_prompt("expert")
