"""How episodes end: a reason code beside the reason, per-role results for competitive games,
the main score as a declared field, and records of older runs still read and reported."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import tests.runtime.faulty_game  # noqa: F401  (registers test.counter)
from parley.environments import registry
from parley.environments.base import ReasonCode, Scores
from parley.runtime.config import load_config
from parley.runtime.report import build_report, ending_rows, summary_rows
from parley.runtime.results import main_score, read_records
from parley.runtime.scheduler import run_experiment
from tests.runtime.faulty_game import CounterMaster

OLD_RUN = Path(__file__).parent / "data" / "schema1_run"


def _counter() -> CounterMaster:
    return CounterMaster({"seed": 0}, {"target": 3})


def test_end_records_the_code_and_a_default_code_after_the_outcome() -> None:
    gm = _counter()
    gm.end("lost", "too slow", code=ReasonCode.TURN_LIMIT)
    gm.end("success", "ignored: the first ending counts")
    assert (gm.outcome, gm.reason, gm.reason_code) == ("lost", "too slow", "turn_limit")
    assert gm.role_results == {}
    for outcome, code in (("success", "solved"), ("lost", "failed"), ("aborted", "rule_violation")):
        gm = _counter()
        gm.end(outcome)  # type: ignore[arg-type]
        assert gm.reason_code == code


def test_a_violation_aborts_with_its_code_and_marks_its_event() -> None:
    gm = _counter()
    gm.violation("counter", "no number", code=ReasonCode.PARSE_ERROR)
    assert (gm.outcome, gm.reason_code) == ("aborted", "parse_error")
    assert gm.drain_events()[-1].data == {"code": "parse_error"}


def test_winner_and_draw_give_every_role_its_result() -> None:
    master = registry.get("playground.tictactoe.e2e").game_master
    info = registry.get("playground.tictactoe.e2e")
    gm = master(info.instance(0, info.default_settings), info.default_settings)
    gm.end("lost", "three in a row", code=ReasonCode.GAME_OVER, winner="opponent")
    assert gm.role_results == {"player": "loss", "opponent": "win"}
    gm = master(info.instance(0, info.default_settings), info.default_settings)
    gm.end("lost", "full board", code=ReasonCode.GAME_OVER, draw=True)
    assert gm.role_results == {"player": "draw", "opponent": "draw"}
    with pytest.raises(ValueError, match="not a role"):
        master(info.instance(0, {}), {}).end("success", winner="referee")


def test_scores_declare_the_main_score_and_a_plain_dict_still_gives_it() -> None:
    scores = Scores(main=75.0, psr=0.75)
    assert scores.main == 75.0 and scores == {"psr": 0.75}
    legacy = Scores.of({"main": 50.0, "psr": 0.5})
    assert legacy.main == 50.0 and legacy == {"psr": 0.5}
    assert Scores.of(scores) is scores


@pytest.mark.anyio
async def test_records_carry_schema_code_main_score_and_role_results(tmp_path: Path) -> None:
    config = load_config(
        {
            "name": "t",
            "games": [
                {
                    "game": "playground.tictactoe.e2e",
                    "seeds": {"count": 3},
                    "settings": {"variant": "text"},
                    "pairings": [{"player": "scripted", "opponent": "random"}],
                }
            ],
        }
    )
    outcome = await run_experiment(config, tmp_path / "run")
    on_disk = read_records(tmp_path / "run")
    assert len(on_disk) == len(outcome.records) == 3
    for r in on_disk:
        assert r["schema"] == 2 and "main" not in r["scores"]
        results = r["role_results"]
        assert r["reason_code"] in ("game_over", "turn_limit", "mistake_limit")
        if r["reason_code"] == "game_over":
            assert sorted(results.values()) in (["loss", "win"], ["draw", "draw"])
            assert (results["player"] == "win") == (r["outcome"] == "success")
        assert r["main_score"] is not None and 0 <= r["main_score"] <= 100
    codes = {r["reason_code"] for r in on_disk}
    header, rows = ending_rows(on_disk)
    assert header == ["game", "pairing", *sorted(codes)]
    assert sum(int(cell or 0) for cell in rows[0][2:]) == 3


@pytest.mark.anyio
async def test_the_runtime_s_own_endings_have_codes_too(tmp_path: Path) -> None:
    # 0.2 s a reply against a 0.1 s limit: the episode times out.
    config = load_config(
        {
            "name": "t",
            "episode_timeout_s": 0.1,
            "games": [
                {
                    "game": "test.counter",
                    "seeds": {"count": 1},
                    "pairings": [{"counter": {"kind": "scripted", "name": "slow"}}],
                }
            ],
        }
    )
    outcome = await run_experiment(config, tmp_path / "run")
    [r] = outcome.records
    assert (r["outcome"], r["reason_code"], r["main_score"]) == ("error", "timeout", None)


def test_records_of_an_older_run_still_read_and_report(tmp_path: Path) -> None:
    run = tmp_path / "old"
    shutil.copytree(OLD_RUN, run)
    raw = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert all("schema" not in r and "main_score" not in r for r in raw)  # the old shape
    assert [main_score(r) for r in raw] == [100.0, 100.0, 0.0, None]
    records = {(r["seed"], r["pairing"]["solver"]): r for r in read_records(run)}
    solved, timed_out = records[(0, "scripted")], records[(1, "random")]
    assert solved["main_score"] == 100.0 and "main" not in solved["scores"]
    assert solved["reason_code"] is None  # only the game knew; not guessed
    assert timed_out["reason_code"] == "timeout" and timed_out["role_results"] == {}
    _, rows = summary_rows(list(records.values()))
    main = {row[1]: row[-2].split(" [")[0] for row in rows}  # the mean, before its interval
    assert main == {
        "solver=random, expert=scripted": "0.0",
        "solver=scripted, expert=scripted": "100.0",
    }
    report = build_report(run)
    # Endings by code: the old codes derived where the runtime set them, unknown ones shown so.
    assert "| game | pairing | timeout | – |" in report
    assert "## COMMA" in report and "| main: solver \\ expert | scripted |" in report
