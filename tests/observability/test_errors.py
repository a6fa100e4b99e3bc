"""Error analysis: each rule-based detector on crafted transcripts (a case that must fire and
near cases that must not), no false alarms on perfect play, real findings on random play, and
the model judge through the stand-in server."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.agents.backends.simserver import SimServerProcess
from parley.bus.broker import free_port
from parley.observability.errors import episode_errors, mentioned_actions, primary
from parley.observability.judge import PROMPT_VERSION, parse_verdict
from parley.runtime.cli import main
from parley.runtime.results import RunFolder
from parley.runtime.scheduler import run_experiment
from tests.observability.conftest import JUDGE_REPLY, KEY_ENV, SECRET, config, model_entry
from tests.records import record as episode_record

MANUAL = (
    "You are the expert. MANUAL: Wires. If there is exactly one yellow wire and more than one "
    "white wire, cut the fourth wire. Otherwise cut the first wire."
)
WIRE_ACTIONS = [f"cut_wire_{i}" for i in range(1, 7)]
MEMORY_ACTIONS = [f"press_{i}" for i in range(1, 5)]
ATM_ACTIONS = [f"press_{d}" for d in range(10)] + [
    "press_up",
    "press_down",
    "press_enter",
    "press_delete",
]
RECORD = episode_record(
    episode="e1", game="comma.test", outcome="lost", pairing={"solver": "m", "expert": "m"}
)


def text(value: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": value}]


def request(
    turn: int,
    role: str,
    *,
    view: Any = None,
    legal: list[str] | None = None,
    system: str | None = None,
    heard: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "kind": "turn_request", "turn": turn, "role": role, "view": view,
        "legal_actions": legal or [], "system": system, "observation": text("(the puzzle)"),
        "incoming": [{"sender": "expert", "content": text(h)} for h in heard or []],
    }  # fmt: skip


def reply(turn: int, role: str, value: str) -> dict[str, Any]:
    return {"kind": "turn_response", "turn": turn, "role": role, "text": value}


def say(turn: int, sender: str, to: str, value: str) -> dict[str, Any]:
    return {"kind": "transcript_event", "event": "utterance", "turn": turn, "from_role": sender,
            "to_role": to, "content": text(value)}  # fmt: skip


def act(turn: int, action: str, mistake: bool) -> dict[str, Any]:
    return {"kind": "transcript_event", "event": "action", "turn": turn, "from_role": "solver",
            "to_role": "environment", "content": text(action),
            "data": {"action": action, "mistake": mistake}}  # fmt: skip


def solver_talks(
    turn: int, words: str, view: Any, legal: list[str], heard: list[str] | None = None
) -> list[dict[str, Any]]:
    return [request(turn, "solver", view=view, legal=legal, system="You are the solver.", heard=heard),
            reply(turn, "solver", words), say(turn, "solver", "expert", words)]  # fmt: skip


def solver_acts(
    turn: int,
    actions: list[tuple[str, bool]],
    view: Any,
    legal: list[str],
    heard: list[str] | None = None,
    relayed: str | None = None,
) -> list[dict[str, Any]]:
    lines = "\n".join(a for a, _ in actions)
    out = [
        request(turn, "solver", view=view, legal=legal, heard=heard),
        reply(turn, "solver", lines),
    ]
    out += [act(turn, a, m) for a, m in actions]
    return [*out, say(turn, "solver", "expert", relayed if relayed is not None else lines)]


def expert_says(turn: int, words: str) -> list[dict[str, Any]]:
    return [
        request(turn, "expert", system=MANUAL),
        reply(turn, "expert", words),
        say(turn, "expert", "solver", words),
    ]


def categories(messages: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(f.category, f.turn) for f in episode_errors(RECORD, messages)]


MEMORY_VIEW = {"stage": 1, "display": 1, "labels": [4, 3, 2, 1]}


def test_repetition_same_state_same_failed_action() -> None:
    describe = "The display shows 1; the buttons are labeled 4, 3, 2 and 1. What should I do?"
    messages = (
        solver_talks(1, describe, MEMORY_VIEW, MEMORY_ACTIONS)
        + expert_says(2, 'Press the button labeled "4".')
        + solver_acts(3, [("press_1", True)], MEMORY_VIEW, MEMORY_ACTIONS)
        + expert_says(4, "Tell me what you see now.")
        + solver_acts(5, [("press_1", True)], MEMORY_VIEW, MEMORY_ACTIONS)
    )
    found = categories(messages)
    assert ("repetition", 5) in found
    assert [c for c, _ in found].count("repetition") == 1


def test_no_repetition_in_another_state_or_after_success() -> None:
    other = {**MEMORY_VIEW, "display": 2}
    messages = (
        solver_acts(1, [("press_1", True)], MEMORY_VIEW, MEMORY_ACTIONS)
        + expert_says(2, "Tell me what you see now.")
        + solver_acts(3, [("press_1", True)], other, MEMORY_ACTIONS)  # a different state
        + expert_says(4, "Tell me what you see now.")
        + solver_acts(5, [("press_2", False)], MEMORY_VIEW, MEMORY_ACTIONS)
        + expert_says(6, "Tell me what you see now.")
        + solver_acts(7, [("press_2", False)], MEMORY_VIEW, MEMORY_ACTIONS)  # it worked before
    )
    assert "repetition" not in [c for c, _ in categories(messages)]


def test_roleplay_expert_speaks_as_the_solver_or_sees_the_puzzle() -> None:
    view = {"symbols": {}}
    base = solver_acts(1, [("press_top_left_button", True)], view, ["press_top_left_button"])
    as_solver = base + expert_says(2, 'SOLVER: The top left button has the symbol "C".')
    assert categories(as_solver)[0] == ("roleplay", 2)
    sees = base + expert_says(2, "I can see the top left symbol is a C, so press it.")
    assert ("roleplay", 2) in categories(sees)
    fine = base + expert_says(2, "I see. Then press the bottom right button.")
    assert "roleplay" not in [c for c, _ in categories(fine)]


def test_roleplay_solver_recites_the_manual_it_was_never_told() -> None:
    view = {"colors": ["white", "white", "white", "yellow", "white", "white"]}
    recite = "There is exactly one yellow wire and more than one white wire, cut the fourth wire?"
    messages = expert_says(1, "Describe the wires.") + solver_talks(2, recite, view, WIRE_ACTIONS)
    assert ("roleplay", 2) in categories(messages)
    # The same words after the expert said them: the solver repeats its partner, no roleplay.
    told = "If there is exactly one yellow wire and more than one white wire, cut the fourth wire."
    messages = expert_says(1, told) + solver_talks(2, recite, view, WIRE_ACTIONS, heard=[told])
    assert "roleplay" not in [c for c, _ in categories(messages)]


def test_miscommunication_the_solver_does_something_else() -> None:
    view = {"screen": "amount"}
    said = 'Press the up arrow to move the selection to "Go back", then press the enter button.'
    ignored = expert_says(2, said) + solver_acts(
        3, [("press_9", False), ("press_enter", False)], view, ATM_ACTIONS
    )
    assert categories(ignored) == [("miscommunication", 3)]
    followed = expert_says(2, said) + solver_acts(
        3, [("press_up", False), ("press_enter", False)], view, ATM_ACTIONS
    )
    assert categories(followed) == []
    # PIN keys the expert hears hidden are not held against the solver.
    pin = expert_says(2, "Type your PIN, then press enter.") + solver_acts(
        3, [("press_1", False), ("press_2", False), ("press_enter", False)], {"screen": "pin"},
        ATM_ACTIONS, relayed="press_<hidden>\npress_<hidden>\npress_enter",
    )  # fmt: skip
    assert categories(pin) == []


def test_mentioned_actions_in_words() -> None:
    assert mentioned_actions("Cut the fourth wire.", WIRE_ACTIONS) == ["cut_wire_4"]
    assert mentioned_actions("press_up then press_enter", ATM_ACTIONS) == [
        "press_up",
        "press_enter",
    ]
    assert mentioned_actions("Tell me what you see now.", ATM_ACTIONS) == []


def test_misinterpretation_the_description_contradicts_the_state() -> None:
    view = {
        "colors": ["white", "white", "white", "yellow", "yellow", "white"],
        "serial": "AB12C3",
        "cut": [],
    }
    wrong = "Six wires, top to bottom: white, white, white, yellow, white, white. Serial AB12C3."
    assert ("misinterpretation", 1) in categories(solver_talks(1, wrong, view, WIRE_ACTIONS))
    right = "Six wires, top to bottom: white, white, white, yellow, yellow, white. Serial AB12C3."
    assert categories(solver_talks(1, right, view, WIRE_ACTIONS)) == []
    misread = "The display shows the number 2 and the buttons are labeled 4, 3, 2 and 1."
    assert categories(solver_talks(1, misread, MEMORY_VIEW, MEMORY_ACTIONS)) == [
        ("misinterpretation", 1)
    ]


def test_primary_category_is_the_first_finding() -> None:
    assert primary([]) == "other"


@pytest.mark.anyio
async def test_no_false_alarms_on_perfect_play_and_repetitions_on_random_play(
    tmp_path: Path,
) -> None:
    games = ["comma.wire", "comma.keypad", "comma.led", "comma.memory", "comma.maze",
             "comma.password", "comma.who", "comma.colour", "comma.atm", "comma.telehealth"]  # fmt: skip
    from parley.runtime.config import load_config

    cfg = load_config(
        {
            "name": "errs",
            "games": [
                {"game": g, "seeds": [0], "pairings": [{"solver": "scripted", "expert": "scripted"}],
                 "settings": {"variant": "text"}}
                for g in games
            ]
            + [{"game": "comma.memory", "seeds": list(range(6)), "settings": {"variant": "text"},
                "pairings": [{"solver": "random", "expert": "scripted"}]}],
        }
    )  # fmt: skip
    outcome = await run_experiment(cfg, tmp_path)
    folder = RunFolder(tmp_path)
    random_findings = []
    for record in outcome.records:
        found = episode_errors(record, folder.iter_transcript(record["episode"]))
        if record["pairing"]["solver"] == "scripted":
            assert record["outcome"] == "success" and found == [], (record["game"], found)
        else:
            random_findings += found
    repeated = [f for f in random_findings if f.category == "repetition"]
    assert repeated  # the random baseline repeats failed presses in the same state
    assert main(["errors", str(tmp_path)]) == 0
    lines = [json.loads(x) for x in (tmp_path / "errors.jsonl").read_text().splitlines()]
    assert len(lines) == len(random_findings)
    assert (tmp_path / "error_categories.png").stat().st_size > 1000


def test_parse_verdict() -> None:
    assert parse_verdict(JUDGE_REPLY) == ("repetition", 3, "press_1 again")
    assert parse_verdict('Sure: {"category": "Communication", "turn": "x"}')[:2] == (
        "miscommunication",
        None,
    )
    for bad in ("roleplay", '{"category": "weather"}', "{not json}"):
        with pytest.raises(ValueError):
            parse_verdict(bad)


def test_the_judge_through_a_configured_backend(
    sim: SimServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = config("comma.memory", [0, 1], [{"solver": "random", "expert": "scripted"}])
    outcome = asyncio.run(run_experiment(cfg, tmp_path / "run"))  # the CLI runs its own loop
    failed = [r for r in outcome.records if r["outcome"] == "lost"]
    assert failed
    models = tmp_path / "models.yaml"
    down = model_entry(sim, "judge-m", base_url=f"http://127.0.0.1:{free_port()}/v1")
    models.write_text(yaml.safe_dump({"models": {
        "judge": model_entry(sim, "judge-m"), "garbled": model_entry(sim, "garbled-judge"),
        "down": down}}))  # fmt: skip
    run = str(tmp_path / "run")
    assert main(["errors", run, "--judge", "judge", "--models", str(models)]) == 0
    verdicts = [
        json.loads(x) for x in (tmp_path / "run" / "errors_judge.jsonl").read_text().splitlines()
    ]
    assert [v["category"] for v in verdicts] == ["repetition"] * len(failed)
    assert all(v["prompt_version"] == PROMPT_VERSION and v["model"] == "judge" for v in verdicts)
    assert f"prompt {PROMPT_VERSION}" in capsys.readouterr().out
    # A judge whose reply is not the JSON asked for: recorded as unparsed, nothing crashes.
    assert main(["errors", run, "--judge", "garbled", "--models", str(models)]) == 0
    verdicts = [
        json.loads(x) for x in (tmp_path / "run" / "errors_judge.jsonl").read_text().splitlines()
    ]
    assert {v["category"] for v in verdicts} == {"unparsed"} and all(v["error"] for v in verdicts)
    assert main(["errors", run, "--judge", "nobody", "--models", str(models)]) == 2
    # A judge that cannot be reached: one line, exit 1, and the last verdicts stay as they were.
    before = (tmp_path / "run" / "errors_judge.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["errors", run, "--judge", "down", "--models", str(models)]) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert (
        said.startswith("the judge cannot be reached: http://127.0.0.1:")
        and "Traceback" not in said
    )
    assert (tmp_path / "run" / "errors_judge.jsonl").read_bytes() == before
    # A run none of whose episodes failed (the same records, every one won): nothing to judge.
    won = tmp_path / "won"
    shutil.copytree(tmp_path / "run", won)
    (won / "errors_judge.jsonl").unlink()
    records = [json.loads(x) for x in (won / "episodes.jsonl").read_text().splitlines()]
    (won / "episodes.jsonl").write_text(
        "".join(json.dumps({**r, "outcome": "success"}) + "\n" for r in records)
    )
    assert main(["errors", str(won), "--judge", "judge", "--models", str(models)]) == 0
    printed = capsys.readouterr()
    assert "nothing to judge" in " ".join((printed.out + printed.err).split())
    assert not (won / "errors_judge.jsonl").exists()
