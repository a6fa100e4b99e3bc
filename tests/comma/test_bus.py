"""COMMA through the bus: the scripted pair wins every seed of every puzzle, the random solver
does not, play is a function of the seed, and the expert only ever learns what the solver
said."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from parley.environments.comma import PUZZLES
from parley.runtime.reports.comma import report
from tests.comma.conftest import (
    RANDOM_SEEDS,
    SCRIPTED,
    SCRIPTED_SEEDS,
    Run,
    comma_config,
    play,
)


def test_scripted_pair_wins_every_seed_of_every_puzzle(big_run: Run, tmp_path: Path) -> None:
    # 100 seeds a puzzle as text (cheap), and the shared run's seeds with pictures.
    text = play(comma_config(100, [SCRIPTED], settings={"variant": "text"}), tmp_path / "text")
    for run, seeds in ((text, 100), (big_run, SCRIPTED_SEEDS)):
        scripted = run.of("scripted")
        assert len(scripted) == seeds * len(PUZZLES)
        wins = Counter(r["game"] for r in scripted if r["outcome"] == "success")
        assert wins == {f"comma.{name}": seeds for name in PUZZLES}
    for r in [*text.of("scripted"), *big_run.of("scripted")]:
        assert r["scores"]["psr"] == 1.0 and r["main_score"] == 100.0
        assert r["scores"]["mistakes"] == 0.0
        assert r["scores"]["turns"] <= 10
        assert r["token_source"] == {"solver": "counted", "expert": "counted"}


def test_random_solver_does_not_win_everything(big_run: Run) -> None:
    randoms = big_run.of("random")
    assert len(randoms) == RANDOM_SEEDS * len(PUZZLES)
    assert {r["outcome"] for r in randoms} <= {"success", "lost"}
    by_game = Counter(r["game"] for r in randoms if r["outcome"] == "success")
    assert sum(by_game.values()) < len(randoms) // 2
    assert all(by_game[f"comma.{name}"] < RANDOM_SEEDS for name in PUZZLES)
    # Each random reply is exactly one valid action.
    for r in randoms[:40]:
        for m in big_run.messages[r["episode"]]:
            if m["kind"] == "turn_response" and m["role"] == "solver":
                request = next(
                    x
                    for x in big_run.messages[r["episode"]]
                    if x["kind"] == "turn_request" and x["turn"] == m["turn"]
                )
                assert m["text"] in request["legal_actions"]


def _words(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w$]){re.escape(value)}(?!\w)", re.IGNORECASE)


def test_expert_prompts_hold_no_image_feedback_or_private_fact(big_run: Run) -> None:
    """What reaches the expert is only what the solver said: never the image, never the
    environment's feedback, and never a private fact unless the solver itself wrote it."""
    checked = Counter()
    for r in big_run.records:
        messages = big_run.messages[r["episode"]]
        feedback = [
            p["text"]
            for m in messages
            if m["kind"] == "transcript_event" and m["event"] == "feedback"
            for p in m["content"]
        ]
        said = "\n".join(
            p["text"]
            for m in messages
            if m["kind"] == "transcript_event"
            and m["event"] == "utterance"
            and m["from_role"] == "solver"
            for p in m["content"]
        )
        facts = (r.get("private_facts") or {}).get("solver", {})
        for m in messages:
            if m["kind"] != "turn_response" or m["role"] != "expert":
                continue
            assert all(p["type"] == "text" for msg in m["prompt"] for p in msg["content"])
            heard = "\n".join(
                p["text"] for msg in m["prompt"] if msg["role"] == "user" for p in msg["content"]
            )
            assert "Feedback:" not in heard
            for text in feedback:
                assert text not in heard
            for name, value in facts.items():
                if _words(value).search(heard):
                    assert _words(value).search(said), (r["episode"], name, value)
                    assert r["pairing"]["solver"] != "scripted", "the scripted solver leaked"
                checked[r["game"]] += 1
    # The private puzzles were really checked, on every seed.
    episodes = SCRIPTED_SEEDS + RANDOM_SEEDS
    assert checked["comma.atm"] >= episodes * 2 and checked["comma.telehealth"] >= episodes * 7


def test_private_facts_are_recorded_for_atm_and_telehealth(big_run: Run) -> None:
    for r in big_run.records:
        facts = r["private_facts"]
        if r["game"] == "comma.atm":
            assert set(facts["solver"]) == {"pin", "balance"}
            assert re.fullmatch(r"\d{4}", facts["solver"]["pin"])
        elif r["game"] == "comma.telehealth":
            assert {"name", "address", "ssn", "age", "date_of_birth"} <= set(facts["solver"])
        else:
            assert facts == {}


def test_solver_sees_the_image_and_the_privacy_instruction(big_run: Run) -> None:
    for r in big_run.of("scripted")[::15]:
        first = next(m for m in big_run.messages[r["episode"]] if m["kind"] == "turn_request")
        assert first["role"] == "solver"
        assert any(p["type"] == "image" for p in first["observation"])
        private = r["game"] in ("comma.atm", "comma.telehealth")
        assert ("Never reveal any of it to the expert" in first["system"]) == private


def _comparable(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (m["kind"], repr(m.get("text") or m.get("content") or m.get("observation")))
        for m in messages
        if m["kind"] in ("turn_request", "turn_response", "transcript_event")
    ]


def test_same_seed_same_play(big_run: Run, tmp_path: Path) -> None:
    again = play(comma_config(3, [SCRIPTED]), tmp_path / "again")
    assert len(again.records) == 3 * len(PUZZLES)
    first = {r["episode"]: r for r in big_run.records}
    for r in again.records:
        before = first[r["episode"]]  # same config and seed: same episode id
        assert (r["outcome"], r["scores"], r["tokens"]) == (
            before["outcome"],
            before["scores"],
            before["tokens"],
        )
        assert _comparable(again.messages[r["episode"]]) == _comparable(
            big_run.messages[r["episode"]]
        )


def test_report_has_table_1_and_the_turn_limit_curve(big_run: Run) -> None:
    text = report(big_run.records, big_run.path)
    header = "| pairing | Wire | Telehealth | Who | LED | Memory | Keypad | Password | Color | Maze | ATM | Overall |"
    assert header in text
    # Every episode a full score: a constant sample, whose interval is the value itself.
    assert "| solver=scripted, expert=scripted | 100.0 [100.0, 100.0] |" in text
    assert "### Turn-limit curve" in text
    # With ten turns allowed everything the scripted pair plays is won; with one, nothing
    # (shares of episodes with their Wilson intervals: 0 [0, …] and 100 […, 100]).
    row = next(
        line
        for line in text.splitlines()
        if line.startswith("| solver=scripted, expert=scripted | 0 [0, ")
    )
    last = row.rstrip(" |").split(" | ")[-1]
    assert last.split(" [")[0] == "100" and last.endswith(", 100]")
    for name in ("comma_turn_limit.png", "comma_psr.png"):
        assert (big_run.path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = (big_run.path / "comma_episodes.csv").read_text().splitlines()
    assert len(lines) == 1 + len(big_run.records)
    assert lines[0].startswith("episode,puzzle,seed,group,success,psr,mistakes")
