"""API keys: read from the variable a model entry names, sent to the server, and never written
into results, transcripts, traces or reports — not even when the server refuses them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.report import write_report
from tests.backends.conftest import FAST_RETRY, base_sim, model, play, wire_config

pytestmark = pytest.mark.anyio

SECRET = "sk-parley-test-5ecret-0f-a-kind-7c1e"


@pytest.fixture(scope="module")
def keyed_sim() -> Iterator[SimServerProcess]:
    config = {**base_sim(), "api_key_env": "PARLEY_SIM_REQUIRED_KEY"}
    with SimServerProcess(config, env={"PARLEY_SIM_REQUIRED_KEY": SECRET}) as server:
        yield server


def _everything_written(run: Path) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in run.rglob("*") if p.is_file()
    )


@pytest.mark.parametrize(
    ("backend", "transport"),
    [("openai", "sdk"), ("openai", "direct"), ("anthropic", "sdk"), ("anthropic", "direct")],
)
async def test_the_key_is_used_but_never_recorded(
    keyed_sim: SimServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    transport: str,
) -> None:
    monkeypatch.setenv("PARLEY_TEST_KEY", SECRET)
    keyed_sim.configure(faults=[{"kind": "rate_limit", "first": 3, "retry_after_s": 0.01}])
    keyed_sim.reset()
    extra = {"api_key_env": "PARLEY_TEST_KEY", "retry": FAST_RETRY, "transport": transport}
    models = {
        "solver": model(keyed_sim, "solver-m", backend, images=False, **extra),
        "expert": model(keyed_sim, "expert-m", backend, **extra),
    }
    config = wire_config(
        models, [{"solver": "solver", "expert": "expert"}], tracing={"content": True}
    )
    records = await play(config, tmp_path)
    assert {r["outcome"] for r in records} == {"success"}
    stats = keyed_sim.stats()
    assert stats.get("unauthorised", 0) == 0 and stats["completed"] > 0
    write_report(tmp_path)
    written = _everything_written(tmp_path)
    assert "PARLEY_TEST_KEY" in written  # the variable's name is in the resolved config
    assert SECRET not in written
    assert SECRET[-12:] not in written


@pytest.mark.parametrize("transport", ["sdk", "direct"])
async def test_a_wrong_key_is_refused_once_and_not_recorded(
    keyed_sim: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    wrong = "sk-wrong-key-that-must-not-leak-42"
    monkeypatch.setenv("PARLEY_TEST_KEY", wrong)
    keyed_sim.configure(faults=[])
    keyed_sim.reset()
    models = {
        "solver": model(
            keyed_sim, "solver-m", images=False, api_key_env="PARLEY_TEST_KEY", transport=transport
        )
    }
    config = wire_config(models, [{"solver": "solver", "expert": "scripted"}], seeds=[0, 1])
    records = await play(config, tmp_path)
    assert [r["outcome"] for r in records] == ["error", "error"]
    assert all("refused the request (auth 401" in r["reason"] for r in records)
    # Not retried: one request per episode.
    assert keyed_sim.stats()["unauthorised"] == 2
    write_report(tmp_path)
    assert wrong not in _everything_written(tmp_path)


async def test_an_unset_key_variable_is_a_clear_episode_error(
    keyed_sim: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PARLEY_TEST_UNSET_KEY", raising=False)
    models = {
        "solver": model(keyed_sim, "solver-m", images=False, api_key_env="PARLEY_TEST_UNSET_KEY")
    }
    config = wire_config(models, [{"solver": "solver", "expert": "scripted"}], seeds=[0])
    records = await play(config, tmp_path)
    assert records[0]["outcome"] == "error"
    assert "PARLEY_TEST_UNSET_KEY" in records[0]["reason"]
    assert "is not set" in records[0]["reason"]
