"""Honest counts, from runs against the stand-in server (a separate process): a retry is an
attempt that was tried again, never the last attempt of a request that gave up nor a refusal;
every per-turn figure carries the input read from the server's prompt cache apart, as the
episode totals do; the plan's typical reply tokens never exceed its maximum."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parley import event_loop
from parley.agents.backends.simserver import SimServerProcess
from parley.records import RecordedRun
from parley.results import episodes, export, read_jsonl, turns
from parley.runtime.config import load_config
from parley.runtime.plan import make_plan
from parley.runtime.report import build_report
from parley.runtime.scheduler import run_experiment
from tests.backends.conftest import FAST_RETRY, SEEDS, base_sim, wire_config

KEY_ENV = "PARLEY_HONEST_KEY"  # the key the server wants
WRONG_ENV = "PARLEY_HONEST_WRONG_KEY"  # a variable holding another one
KEY = "sk-honest-counts"


@pytest.fixture(scope="module")
def server() -> Iterator[SimServerProcess]:
    with SimServerProcess({**base_sim(), "api_key_env": KEY_ENV}, env={KEY_ENV: KEY}) as sim:
        yield sim


@pytest.fixture
def sim(server: SimServerProcess, monkeypatch: pytest.MonkeyPatch) -> SimServerProcess:
    """The module's server set back to its config, the keys in the environment."""
    server.configure(**base_sim(), api_key_env=KEY_ENV)
    server.reset()
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(WRONG_ENV, "sk-not-this-one")
    return server


def entry(sim: SimServerProcess, served: str, key_env: str = KEY_ENV, **extra: Any) -> dict:
    return {"model": served, "base_url": sim.openai_url, "api_key_env": key_env, **extra}


def play(config: Any, out: Path) -> list[dict[str, Any]]:
    return event_loop.run(run_experiment(config, out)).records


def attempts(run: Path, record: dict[str, Any], role: str) -> list[list[dict[str, Any]]]:
    """The call records of each of ``role``'s replies, as the transcript holds them."""
    return [
        m["calls"]
        for m in RecordedRun(run).iter_transcript(record["episode"])
        if m["kind"] == "turn_response" and m["role"] == role
    ]


def usage_row(report: str, model: str) -> dict[str, str]:
    """The row of ``model`` in the report's usage table, by column."""
    lines = report.split("## Models: usage and cost", 1)[1].strip().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == model:
            return dict(zip(header, cells, strict=True))
    raise AssertionError(f"no row for {model} in:\n{report}")


# --- retries --------------------------------------------------------------------------------


def test_a_refusal_that_was_not_retried_is_no_retry(sim: SimServerProcess, tmp_path: Path) -> None:
    """A wrong key (401) is refused and never tried again: one attempt, no retry."""
    models = {"refused": entry(sim, "solver-m", WRONG_ENV, images=False, retry=FAST_RETRY)}
    config = wire_config(models, [{"solver": "refused", "expert": "scripted"}], seeds=[0, 1])
    records = play(config, tmp_path)
    assert [r["outcome"] for r in records] == ["error", "error"]
    assert sim.stats()["unauthorised"] == 2  # each refused once, at the server
    for r in records:
        calls = r["model_calls"]["solver"]
        assert calls["requests"] == 1 and calls["attempts"] == 1
        assert calls["retries"] == {}
    assert usage_row(build_report(tmp_path), "refused")["retries"] == "0"


def test_the_last_attempt_of_a_request_that_gave_up_is_no_retry(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    sim.configure(faults=[{"kind": "server_error", "models": ["solver-m"]}])
    retry = {**FAST_RETRY, "max_attempts": 3}
    models = {"down": entry(sim, "solver-m", images=False, retry=retry)}
    config = wire_config(models, [{"solver": "down", "expert": "scripted"}], seeds=[0])
    (record,) = play(config, tmp_path)
    assert record["outcome"] == "error" and "gave up after 3 attempts" in record["reason"]
    injected = sim.stats()["fault_server_error"]
    calls = record["model_calls"]["solver"]
    assert calls["attempts"] == injected == 3
    # Tried again after the first two; the third was the last.
    assert calls["retries"] == {"server_error": injected - 1}
    assert usage_row(build_report(tmp_path), "down")["retries"] == "2 (server_error 2)"


def test_failed_attempts_followed_by_another_are_the_retries(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    """The first two requests fail and are tried again: every failure is a retry, as the
    transcript's failed attempts with a wait before the next (``backoff_s``) say."""
    sim.configure(faults=[{"kind": "server_error", "first": 2, "models": ["solver-m"]}])
    models = {"flaky": entry(sim, "solver-m", images=False, retry=FAST_RETRY)}
    config = wire_config(models, [{"solver": "flaky", "expert": "scripted"}], seeds=SEEDS[:3])
    records = play(config, tmp_path)
    assert {r["outcome"] for r in records} == {"success"}, [r["reason"] for r in records]
    retried = sum(r["model_calls"]["solver"]["retries"].get("server_error", 0) for r in records)
    waited = sum(
        "backoff_s" in call
        for r in records
        for calls in attempts(tmp_path, r, "solver")
        for call in calls
    )
    assert retried == waited == sim.stats()["fault_server_error"] == 2


# --- cached input per turn ------------------------------------------------------------------


def test_every_per_turn_figure_carries_the_cached_input_apart(
    sim: SimServerProcess, tmp_path: Path
) -> None:
    sim.configure(prompt_cache=True)
    models = {
        "solver": entry(sim, "solver-m", images=False),
        "expert": entry(sim, "expert-m"),
    }
    config = wire_config(
        models,
        [{"solver": "solver", "expert": "expert"}],
        seeds=SEEDS[:3],
        settings={"variant": "text"},
    )
    records = play(config, tmp_path)
    assert {r["outcome"] for r in records} == {"success"}, [r["reason"] for r in records]
    frame = turns(tmp_path)
    model_turns = frame[frame["input_tokens"].notna()]
    assert int(model_turns["cache_read_tokens"].sum()) > 0  # the server's cache was read
    # Per episode and role, the turns add up to the record's totals, cached input apart.
    for r in records:
        for role, tokens in r["tokens"].items():
            mine = model_turns[(model_turns["episode"] == r["episode"]) & (frame["role"] == role)]
            assert int(mine["input_tokens"].sum()) == tokens["input"]
            assert int(mine["cache_read_tokens"].sum()) == tokens.get("cache_read", 0)
            assert int(mine["cache_write_tokens"].sum()) == tokens.get("cache_write", 0)
    # ... and each turn's figure is its call's usage.
    calls = [
        c for r in records for role in r["tokens"] for cs in attempts(tmp_path, r, role) for c in cs
    ]
    assert sorted(int(x) for x in model_turns["cache_read_tokens"]) == sorted(
        int((c.get("usage") or {}).get("cache_read", 0)) for c in calls
    )
    # The episodes' table has the cached input too, and both survive an export.
    table = episodes(tmp_path)
    assert list(table["cache_read_tokens"]) == [
        sum(t.get("cache_read", 0) for t in r["tokens"].values()) for r in records
    ]
    written = {p.stem: p for p in export(tmp_path, "jsonl", tmp_path / "export")}
    back = read_jsonl(written["turns"], frame)
    assert back["cache_read_tokens"].equals(frame["cache_read_tokens"])
    # The report's per-turn table shows it in a column of its own.
    report = build_report(tmp_path)
    assert "cached in tok/turn" in report.split("## Time and tokens per role and player")[1]


def test_a_scripted_turn_has_no_cached_input_figure(tmp_path: Path) -> None:
    config = load_config(
        {
            "name": "scripted",
            "games": [
                {
                    "game": "comma.wire",
                    "seeds": [0],
                    "pairings": [{"solver": "scripted", "expert": "scripted"}],
                }
            ],
        }
    )
    play(config, tmp_path)
    frame = turns(tmp_path)
    assert len(frame) > 0
    assert frame["cache_read_tokens"].isna().all() and frame["input_tokens"].isna().all()
    assert list(episodes(tmp_path)["cache_read_tokens"]) == [0]


# --- the plan's reply tokens ----------------------------------------------------------------


def test_the_plans_typical_reply_tokens_never_exceed_its_maximum(sim: SimServerProcess) -> None:
    """The oracle's replies are longer than one token; a model may write one a call, so the
    typical figure is the calls, each at its limit."""
    models = {
        "terse": entry(sim, "solver-m", images=False, params={"max_tokens": 1}),
        "roomy": entry(sim, "expert-m", params={"max_tokens": 4096}),
    }
    data = {
        "name": "plan-cap",
        "games": [
            {
                "game": "comma.wire",
                "seeds": {"count": 4},
                "settings": {"variant": "text"},
                "pairings": [{"solver": "terse", "expert": "roomy"}],
            }
        ],
        "models": models,
    }
    plan = event_loop.run(make_plan(load_config(data), sample=4))
    by_name = {m.model: m for m in plan.models}
    terse, roomy = by_name["terse"], by_name["roomy"]
    assert terse.output_tokens <= terse.output_tokens_max
    assert terse.output_tokens == pytest.approx(terse.calls)
    # Replies that fit are counted whole: more than a token each.
    assert roomy.calls < roomy.output_tokens <= roomy.output_tokens_max
    (role,) = [r for r in plan.pairings[0].roles if r.model == "terse"]
    assert role.reply_tokens_max == 1 and role.output_tokens == pytest.approx(role.turns)
