"""Episodes on synthetic mazes: what the navigator is shown (from the recorded prompts), the
walkthrough placements and memory, violations, and how seeds map onto questions."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from parley.environments.base import View
from parley.environments.mango.data import MangoDataError
from parley.environments.mango.game import check_settings, make_instance, plan
from parley.environments.mango.offline import play_episode
from parley.environments.mango.players import random_navigator, scripted_navigator
from parley.runtime.config import ConfigError, load_config
from parley.runtime.experiment import expand
from parley.runtime.results import RunFolder
from parley.runtime.scheduler import run_experiment
from parley.tokens import count_tokens

ORACLE = {"navigator": {"kind": "scripted", "name": "oracle"}}


def run(tmp_path: Path, games: list[dict[str, Any]], **top: Any) -> tuple[list[dict], RunFolder]:
    config = load_config(
        {"name": "mango-test", "tracing": {"enabled": False}, "games": games, **top}
    )
    outcome = asyncio.run(run_experiment(config, tmp_path / "run"))
    return outcome.records, outcome.folder


def prompts(folder: RunFolder, episode: str) -> list[list[dict[str, Any]]]:
    """The recorded prompts of an episode's turns, in order."""
    return [m["prompt"] for m in folder.iter_transcript(episode) if m["kind"] == "turn_response"]


def text_of(prompt: list[dict[str, Any]]) -> str:
    return "\n".join(p.get("text", "") for m in prompt for p in m["content"])


def test_navigator_sees_the_cut_walkthrough_lists_and_question_only(tmp_path: Path) -> None:
    settings = {"cutoff": 20, "synthetic_games": 2}
    records, folder = run(
        tmp_path,
        [
            {"game": f"mango.{k}", "seeds": {"count": 4}, "settings": settings,
             "pairings": [{"navigator": "scripted"}, ORACLE]}
            for k in ("df", "rf")
        ],
    )  # fmt: skip
    assert len(records) == 16 and all(r["outcome"] == "success" for r in records)
    for r in records:
        instance = make_instance(r["game"].split(".")[1], r["seed"], r["spec"]["settings"])
        q = instance["questions"][0]
        [prompt] = prompts(folder, r["episode"])
        shown = text_of(prompt)
        assert "STEP NUM: 20\n" in shown and "STEP NUM: 21\n" not in shown  # cut at the cutoff
        assert f'"{q["src"]}"' in shown
        requests = [m for m in folder.iter_transcript(r["episode"]) if m["kind"] == "turn_request"]
        view = requests[0]["view"]
        if q["kind"] == "df":
            # The destination and the path are the answer: neither reaches the navigator.
            assert view["question"]["dst"] is None and "path" not in json.dumps(view)
            assert "Where are you now?" in shown
        else:
            assert f'"{q["dst"]}"' in shown
        assert prompt[0]["role"] == "system" and "WALKTHROUGH of" in text_of(prompt[:1])


def test_token_budget_cuts_the_walkthrough() -> None:
    settings = {"token_budget": 400, "synthetic_games": 1, "questions_per_episode": 0}
    instance = make_instance("df", 0, settings)
    from parley.environments.mango.game import MangoMaster

    gm = MangoMaster(instance, settings)
    walkthrough = gm.block.split("Allowed actions")[0]
    assert (
        count_tokens(walkthrough)
        <= 400
        < count_tokens(MangoMaster(make_instance("df", 0, {"synthetic_games": 1}), {}).block)
    )
    # Only questions answerable from what is shown are asked.
    assert all(q["answerable"] <= instance["cutoff"] for q in instance["questions"])
    assert instance["cutoff"] < 70


def test_walkthrough_as_a_message_lives_as_long_as_the_memory(tmp_path: Path) -> None:
    settings = {"walkthrough": "message", "questions_per_episode": 3, "synthetic_games": 1}
    block = {"game": "mango.rf", "seeds": {"count": 1}, "settings": settings,
             "pairings": [{"navigator": "scripted"}]}  # fmt: skip
    memories = {"full": "full", "last_k": {"policy": "last_k", "k": 1}, "none": "none"}
    records, folder = run(
        tmp_path, [{**block, "memory": {"navigator": m}} for m in memories.values()]
    )
    by = {r["spec"]["memory"]["navigator"]["policy"]: r for r in records}
    # Full memory keeps the walkthrough message; the last turn only (k=1) keeps it for two
    # questions; "none" keeps only the latest message, the question, from the first turn on.
    # The scripted navigator without a walkthrough has no map and answers with no route.
    assert by["full"]["scores"]["success_strict"] == 1.0
    assert by["last_k"]["scores"]["success_strict"] == pytest.approx(2 / 3)
    assert by["none"]["scores"]["success_strict"] == 0.0
    shown = [
        ["STEP NUM: 0" in text_of(p) for p in prompts(folder, by[m]["episode"])] for m in memories
    ]
    assert shown == [[True, True, True], [True, True, False], [False, False, False]]
    first = prompts(folder, by["full"]["episode"])[0]
    assert "STEP NUM: 0" not in text_of(first[:1])  # not in the system text


def test_unparsable_replies_are_violations_not_crashes() -> None:
    settings = {"questions_per_episode": 4, "synthetic_games": 1}
    instance = make_instance("df", 0, settings)
    replies = iter(["no idea", "[{'location_before': 1}]", "[]", "```[{]```"])
    gm = play_episode(instance, settings, lambda view, rng: next(replies))
    kinds = [e.kind for e in gm.drain_events()]
    assert kinds.count("violation") == 3 and kinds.count("note") == 4
    assert gm.outcome == "lost"  # one answer ("[]") parsed, nothing right
    assert gm.scores()["answered"] == 1.0 and gm.scores().main == 0.0
    gm = play_episode(instance, settings, lambda view, rng: "I cannot say.")
    assert gm.outcome == "aborted" and gm.scores().main is None


def test_seeds_map_onto_questions_round_robin() -> None:
    settings = {"synthetic_games": 3}
    episodes = plan("df", settings)
    games = [e["game"] for e in episodes[:6]]
    assert games == ["synthetic-s0-g0", "synthetic-s0-g1", "synthetic-s0-g2"] * 2
    # Per game, the questions come in file order, one per seed.
    first = [e["questions"][0]["id"] for e in episodes if e["game"] == "synthetic-s0-g1"]
    from parley.environments.mango.game import source_game

    ids = [q.id for q in source_game(episodes[1]["source"]).df if q.label(70)]
    assert first == ids
    with pytest.raises(MangoDataError, match="past the last episode"):
        make_instance("df", len(episodes), settings)
    # Whole-game episodes: one seed per game.
    whole = plan("rf", {**settings, "questions_per_episode": 0})
    assert [len(e["questions"]) for e in whole] == [len(ids_of(e)) for e in whole]
    # Samples are stable and drawn per game; difficulty filters.
    sample = plan("df", {**settings, "sample": 5, "questions_per_episode": 0})
    assert [len(e["questions"]) for e in sample] == [5, 5, 5]
    assert sample == plan("df", {**settings, "sample": 5, "questions_per_episode": 0})
    hard = plan("df", {**settings, "difficulty": "hard"})
    assert hard and all(e["questions"][0]["label"] == "hard" for e in hard)


def ids_of(episode: dict[str, Any]) -> list[str]:
    from parley.environments.mango.game import source_game

    game = source_game(episode["source"])
    return [q.id for q in game.rf if q.label(episode["cutoff"])]


def test_bad_settings_are_config_errors() -> None:
    assert check_settings({}) == []
    assert any("difficulty" in p for p in check_settings({"difficulty": "medium"}))
    assert any("unknown game" in p for p in check_settings({"games": ["zork9"]}))
    config = load_config(
        {"games": [{"game": "mango.df", "settings": {"data_dir": "/no/such/mango"},
                    "pairings": [{"navigator": "scripted"}]}]}
    )  # fmt: skip
    with pytest.raises(ConfigError, match="MANGO data folder '/no/such/mango' not found"):
        expand(config)


def test_random_navigator_is_seeded_and_uses_allowed_actions() -> None:
    settings = {"synthetic_games": 1}
    instance = make_instance("rf", 0, settings)
    from parley.environments.mango.game import MangoMaster

    gm = MangoMaster(instance, settings)
    turn = gm.next_turn()
    assert turn is not None
    view = View("navigator", gm.system_prompt("navigator"), "", turn.observation.data, None, [],
                [("game", turn.incoming[-1].text)], 0)  # fmt: skip
    a = random_navigator(view, random.Random(1))
    assert a == random_navigator(view, random.Random(1))
    assert {s["action"] for s in json.loads(a)} <= set(gm.actions)
    # The scripted navigator answers the same from the text alone: without the oracle's
    # pointer in its view data.
    blind = View(**{**view.__dict__, "data": {"question": view.data["question"]}})
    assert scripted_navigator(blind, random.Random(0)) == scripted_navigator(view, random.Random(0))
