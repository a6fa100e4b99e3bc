"""``parley plan`` against what runs really do: the turns a scripted run records, the requests
an LLM run makes of the sim server (a separate process, over HTTP), and the turn limit a
stalling model runs into."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley import event_loop
from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.cli import main
from parley.runtime.config import load_config
from parley.runtime.plan import Plan, make_plan, spread, turn_limits
from parley.runtime.scheduler import run_experiment
from tests.backends.conftest import base_sim


def run(data: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    outcome = event_loop.run(run_experiment(load_config(data), out))
    return outcome.records


def plan(data: dict[str, Any], **options: Any) -> Plan:
    return event_loop.run(make_plan(load_config(data), **options))


def within(estimate: float, actual: float, share: float = 0.10) -> bool:
    return abs(estimate - actual) <= share * actual


def test_scripted_plan_matches_the_turns_a_run_records(tmp_path: Path) -> None:
    # More seeds than the sample plays: the plan estimates from part of them.
    data = {
        "name": "plan-scripted",
        "games": [
            {
                "game": "comma.led",
                "seeds": {"count": 16},
                "pairings": [
                    {"solver": "scripted", "expert": "scripted"},
                    {"solver": "random", "expert": "scripted"},
                ],
            },
            {
                "game": "clem.mapworld_ee",
                "seeds": {"count": 16},
                "settings": {"variant": "text"},
                "pairings": [{"navigator": "scripted"}],
            },
        ],
    }
    estimate = plan(data, sample=5)
    assert [p.sampled for p in estimate.pairings] == [5, 5, 5]
    records = run(data, tmp_path / "run")
    assert estimate.episodes == len(records) == 48
    actual = sum(r["turns"] for r in records)
    assert within(estimate.turns, actual), (estimate.turns, actual)
    # Every episode within the bound from the games' own limits.
    bound = {p.pairing: p.turns_max for p in estimate.pairings}
    pairing = {r["episode"]: ",".join(f"{k}={v}" for k, v in r["pairing"].items()) for r in records}
    assert all(r["turns"] <= bound[pairing[r["episode"]]] for r in records)


def test_sampling_every_episode_reproduces_the_run(tmp_path: Path) -> None:
    """The sample plays as the run does (instances, seeds of the built-in players): played
    whole, a random player's turns are the run's exactly."""
    data = {
        "name": "plan-random",
        "games": [
            {
                "game": "comma.wire",
                "seeds": {"count": 8},
                "pairings": [{"solver": "random", "expert": "scripted"}],
            }
        ],
    }
    estimate = plan(data, sample=8, turns=10_000)
    records = run(data, tmp_path / "run")
    assert estimate.turns == sum(r["turns"] for r in records)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServerProcess]:
    config = base_sim()
    config["models"]["staller"] = {"text": "Let me think about this a little longer."}
    with SimServerProcess(config) as server:
        yield server


def llm_config(sim: SimServerProcess, pairings: list[dict[str, str]], seeds: int = 6) -> dict:
    def entry(served: str) -> dict[str, Any]:
        return {
            "model": served,
            "base_url": sim.openai_url,
            "price": {"input_per_mtok": 1.0, "output_per_mtok": 4.0},
        }

    return {
        "name": "plan-llm",
        "games": [
            {
                "game": "comma.wire",
                "seeds": {"count": seeds},
                "settings": {"variant": "text"},
                "pairings": pairings,
            }
        ],
        "models": {name: entry(name) for name in ("solver-m", "expert-m", "staller")},
    }


def test_llm_plan_calls_match_the_sim_servers_request_count(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    data = llm_config(
        sim,
        [
            {"solver": "solver-m", "expert": "expert-m"},
            {"solver": "solver-m", "expert": "scripted"},
        ],
    )
    estimate = plan(data, sample=3)
    sim.reset()
    records = run(data, tmp_path / "run")
    assert {r["outcome"] for r in records} == {"success"}
    stats = sim.stats()
    calls = {m.model: m.calls for m in estimate.models}
    assert within(sum(calls.values()), stats["requests"]), (calls, stats["requests"])
    assert within(calls["solver-m"], stats["model_solver-m"])
    assert within(calls["expert-m"], stats["model_expert-m"])
    # Prompt tokens were counted and priced for each model.
    for m in estimate.models:
        assert m.input_tokens > 0 and m.cost is not None and m.cost_max is not None
        assert m.cost_max >= m.cost


def test_a_stalling_model_runs_into_the_turn_limit_the_plan_gives(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    data = llm_config(sim, [{"solver": "staller", "expert": "scripted"}], seeds=2)
    data["games"][0]["settings"]["max_turns"] = 4
    estimate = plan(data)
    [pairing] = estimate.pairings
    assert pairing.turns_max == 4 + 3  # the solver's four turns, the expert's answers between
    records = run(data, tmp_path / "run")
    assert [r["turns"] for r in records] == [pairing.turns_max] * 2
    [staller] = estimate.models
    assert staller.calls_max == 2 * 4


def test_turn_limits_of_a_game_without_one() -> None:
    assert turn_limits("clem.reference", {}, ("describer", "guesser")) is None
    data = {
        "name": "plan-seen",
        "games": [
            {
                "game": "clem.reference",
                "seeds": {"count": 3},
                "pairings": [{"describer": "scripted", "guesser": "scripted"}],
            }
        ],
    }
    [pairing] = plan(data).pairings
    assert {r.bound for r in pairing.roles} == {"seen"}
    assert pairing.turns_max >= pairing.turns > 0


def test_spread_takes_the_ends_and_keeps_order() -> None:
    items: list[Any] = list(range(10))
    assert spread(items, 3) == [0, 4, 9]  # round() halves to even
    assert spread(items, 20) == items
    assert spread(items, 1) == [0]


def test_plan_command_json_and_bad_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "cli",
                "games": [
                    {
                        "game": "comma.wire",
                        "seeds": {"count": 4},
                        "pairings": [{"solver": "scripted", "expert": "scripted"}],
                    }
                ],
            }
        )
    )
    assert main(["plan", str(config), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["episodes"] == 4 and data["pairings"][0]["game"] == "comma.wire"
    assert main(["plan", str(config), "--set", "games.0.game=no.such.game"]) == 2
    assert "no.such.game" in capsys.readouterr().err


def test_a_game_that_raises_is_counted_as_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import tests.runtime.faulty_game  # noqa: F401  (registers test.counter)

    data = {
        "name": "plan-faulty",
        "games": [
            {
                "game": "test.counter",
                "seeds": [0, 1, 2],
                "settings": {"gm_raises_on": 1},
                "pairings": [{"counter": "scripted"}],
            }
        ],
    }
    [pairing] = plan(data).pairings
    assert pairing.outcomes == {"success": 2, "error": 1}
    assert pairing.error is not None and "broke on purpose" in pairing.error
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(data))
    assert main(["plan", str(config)]) == 0
    assert "broke on purpose" in capsys.readouterr().out


def test_prompt_tokens_count_images_only_where_the_role_is_shown_them() -> None:
    def data(variant: str) -> dict[str, Any]:
        return {
            "name": "plan-images",
            "games": [
                {
                    "game": "comma.wire",
                    "seeds": {"count": 2},
                    "settings": {"variant": variant},
                    "pairings": [{"solver": "m", "expert": "m"}],
                }
            ],
            # Never called: the plan plays the roles with the game's oracle.
            "models": {"m": {"model": "m", "base_url": "http://127.0.0.1:9/v1"}},
        }

    def roles(variant: str, image_tokens: int) -> dict[str, Any]:
        [pairing] = plan(data(variant), image_tokens=image_tokens).pairings
        return {r.role: r for r in pairing.roles}

    image, text = roles("image", 1000), roles("text", 1000)
    assert image["solver"].images > 0 and text["solver"].images == 0
    assert image["expert"].images == text["expert"].images == 0
    # Each image counts image_tokens: the same plan with none differs by exactly that.
    without = roles("image", 0)
    extra = image["solver"].input_tokens - without["solver"].input_tokens
    assert extra == 1000 * image["solver"].images


def test_blocks_of_one_game_with_other_limits_are_planned_apart() -> None:
    def block(start: int, max_turns: int) -> dict[str, Any]:
        return {
            "game": "comma.wire",
            "seeds": {"start": start, "count": 2},
            "settings": {"max_turns": max_turns},
            "pairings": [{"solver": "random", "expert": "scripted"}],
        }

    estimate = plan({"name": "plan-blocks", "games": [block(0, 4), block(10, 8)]})
    assert [(p.episodes, p.turns_max) for p in estimate.pairings] == [(2, 4 + 3), (2, 8 + 7)]
