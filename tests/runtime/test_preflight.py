"""Pre-flight (``parley check``, and ``parley run`` before its first episode) against the sim
server as a separate process over real HTTP: missing key, refused key, wrong served name,
server down, image round-trip, a slow server (a warning, and the run goes on), all passing, a
run that refuses to start, and a rerun from the response cache that asks nothing."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley import event_loop
from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.cli import main
from parley.runtime.config import ConfigError, load_config
from parley.runtime.preflight import ModelCheck, check_config, models_in_use

KEY_ENV = "PARLEY_PREFLIGHT_TEST_KEY"
KEY = "sk-preflight-0123456789"
UNSET_ENV = "PARLEY_PREFLIGHT_UNSET_KEY"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServerProcess]:
    """A sim server that serves two names and wants the key in KEY_ENV on every request."""
    config = {
        "replies": {"text": "OK"},
        "models": {"solver-m": {"text": "OK"}, "expert-m": {"text": "OK"}, "hang-m": {}},
        # hang-m never answers a request in time (it is listed, so it gets that far).
        "faults": [{"kind": "timeout", "hang_s": 30, "models": ["hang-m"]}],
        "api_key_env": KEY_ENV,
    }
    with SimServerProcess(config, env={KEY_ENV: KEY}) as server:
        yield server


@pytest.fixture
def fresh(sim: SimServerProcess) -> SimServerProcess:
    sim.reset()
    return sim


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def entry(sim: SimServerProcess, name: str, backend: str = "openai", **extra: Any) -> dict:
    url = sim.openai_url if backend == "openai" else sim.url
    return {"backend": backend, "model": name, "base_url": url, "api_key_env": KEY_ENV, **extra}


def wire(models: dict[str, Any], solver: str, expert: str = "scripted", **settings: Any) -> dict:
    return {
        "name": "preflight",
        "games": [
            {
                "game": "comma.wire",
                "seeds": {"count": 2},
                "settings": settings,
                "pairings": [{"solver": solver, "expert": expert}],
            }
        ],
        "models": models,
    }


def check(data: dict[str, Any], environ: dict[str, str] | None = None) -> list[ModelCheck]:
    env = {KEY_ENV: KEY} if environ is None else environ
    return event_loop.run(check_config(load_config(data), timeout_s=10, environ=env))


def by_model(results: list[ModelCheck]) -> dict[str, ModelCheck]:
    return {r.model: r for r in results}


def test_all_ok_and_only_the_role_that_sees_images_gets_one(fresh: SimServerProcess) -> None:
    models = {"s": entry(fresh, "solver-m"), "e": entry(fresh, "expert-m", "anthropic")}
    # The image variant shows the solver a picture of the wires; the expert reads a manual.
    results = by_model(check(wire(models, "s", "e", variant="image")))
    assert {r.status for r in results.values()} == {"ok"}, [r.message for r in results.values()]
    assert results["s"].images and not results["e"].images
    stats = fresh.stats()
    assert stats.get("images_solver-m") == 1
    assert "images_expert-m" not in stats
    assert stats["requests_openai"] == 1 and stats["requests_anthropic"] == 1


def test_text_variant_sends_no_image(fresh: SimServerProcess) -> None:
    results = check(wire({"s": entry(fresh, "solver-m")}, "s", variant="text"))
    assert [(r.status, r.images) for r in results] == [("ok", False)]
    assert "images_solver-m" not in fresh.stats()


def test_missing_key_names_model_and_variable_and_calls_nothing(fresh: SimServerProcess) -> None:
    models = {"gpt": entry(fresh, "solver-m", api_key_env=UNSET_ENV)}
    [result] = check(wire(models, "gpt"), environ={})
    assert (result.status, result.step) == ("failed", "key")
    assert result.message.startswith(f"model gpt: {UNSET_ENV} is not set")
    assert "api_key_env" in result.fix
    assert fresh.stats().get("requests", 0) == 0


def test_hosted_api_without_a_key_variable_fails() -> None:
    [result] = check(wire({"gpt": {"model": "gpt-4o"}}, "gpt"), environ={})
    assert (result.status, result.step) == ("failed", "key")
    assert "OPENAI_API_KEY" in result.fix


def test_refused_key_fails_at_the_request_without_showing_it(fresh: SimServerProcess) -> None:
    wrong = "sk-wrong-key-987654321"
    [result] = check(wire({"m": entry(fresh, "solver-m")}, "m"), environ={KEY_ENV: wrong})
    assert (result.status, result.step) == ("failed", "request")
    assert "401" in result.detail and KEY_ENV in result.fix
    assert wrong not in result.message  # the sim server echoes the key it got
    assert fresh.stats()["unauthorised"] == 1


def test_wrong_served_name_lists_the_served_ones(fresh: SimServerProcess) -> None:
    [result] = check(wire({"m": entry(fresh, "solver-model")}, "m"))
    assert (result.status, result.step) == ("failed", "models")
    assert "'solver-model'" in result.detail and "solver-m" in result.detail
    assert "models.m.model" in result.fix
    assert fresh.stats().get("requests", 0) == 0


def test_a_listed_model_with_no_reply_in_time_is_a_warning(fresh: SimServerProcess) -> None:
    data = wire({"m": entry(fresh, "hang-m")}, "m", variant="text")
    results = event_loop.run(check_config(load_config(data), timeout_s=1, environ={KEY_ENV: KEY}))
    [result] = results
    assert (result.status, result.step) == ("warning", "request") and result.ok
    assert "got no reply in" in result.detail and "the check waits 1 s" in result.detail
    assert "--check-timeout" in result.fix and "models.m.timeout_s (120 s)" in result.fix
    assert result.seconds >= 1
    assert fresh.stats()["fault_timeout"] == 1


def test_the_config_sets_the_check_time(fresh: SimServerProcess) -> None:
    data = {**wire({"m": entry(fresh, "hang-m")}, "m", variant="text"), "check_timeout_s": 1}
    [result] = event_loop.run(check_config(load_config(data), environ={KEY_ENV: KEY}))
    assert result.status == "warning" and "the check waits 1 s" in result.detail
    assert load_config(wire({}, "scripted")).check_timeout_s == 10
    with pytest.raises(ConfigError, match="check_timeout_s"):
        load_config({**data, "check_timeout_s": 0})


@pytest.fixture(scope="module")
def slow() -> Iterator[SimServerProcess]:
    """A server that lists its model at once and takes 3 s to a first token."""
    config = {"models": {"slow-m": {"text": "OK"}}, "latency": {"ttft_s": 3.0}}
    with SimServerProcess(config) as server:
        yield server


def test_a_slow_server_warns_and_the_run_goes_on(
    slow: SimServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slow.reset()
    models = {"m": {"model": "slow-m", "base_url": slow.openai_url}}
    data = wire(models, "m", variant="text", max_turns=1)
    data["games"][0]["seeds"] = {"count": 1}
    config, out = write(tmp_path, data), tmp_path / "run"
    assert main(["check", config, "--timeout", "1"]) == 0  # the old name still works
    assert "model m: the server answers, but" in capsys.readouterr().err
    assert main(["check", config, "--check-timeout", "1", "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert (result["status"], result["step"]) == ("warning", "request")
    assert main(["run", config, "--check-timeout", "1", "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "pre-flight: model m: the server answers, but a tiny request" in err
    assert "1 with a warning" not in err  # --quiet: the warning, not the summary line
    [record] = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert record["outcome"] != "error" and record["model_calls"]["solver"]["requests"] == 1


def test_server_down() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    models = {"m": {"model": "x", "base_url": url}}
    [result] = check(wire(models, "m"))
    assert (result.status, result.step) == ("failed", "server")
    assert "connection refused" in result.detail and url in result.detail
    assert "models.m.base_url" in result.fix


def test_each_endpoint_of_a_model_is_checked(fresh: SimServerProcess) -> None:
    down = f"http://127.0.0.1:{closed_port()}/v1"
    models = {"m": {**entry(fresh, "solver-m"), "base_url": [fresh.openai_url, down]}}
    results = check(wire(models, "m", variant="text"))
    assert sorted((r.endpoint, r.status) for r in results) == sorted(
        [(fresh.openai_url, "ok"), (down, "failed")]
    )


def test_launched_model_is_skipped_with_a_reason() -> None:
    models = {"v": {"model": "local", "launch": {"command": "true"}}}
    [result] = check(wire(models, "v"))
    assert (result.status, result.step) == ("skipped", "launch")
    assert result.ok and "health check" in result.detail


def test_scripted_config_has_nothing_to_check() -> None:
    config = load_config(Path(__file__).parents[2] / "configs" / "quickstart.yaml")
    assert models_in_use(config) == {}
    assert event_loop.run(check_config(config)) == []


def write(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_check_command_exit_codes(
    fresh: SimServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    good = write(tmp_path, wire({"m": entry(fresh, "solver-m")}, "m", variant="text"))
    assert main(["check", good]) == 0
    capsys.readouterr()
    assert main(["check", good, "--json", "--set", "models.m.model=nope"]) == 1
    [result] = json.loads(capsys.readouterr().out)
    assert (result["model"], result["status"], result["step"]) == ("m", "failed", "models")
    assert main(["check", good, "--set", "models.m.model=nope"]) == 1
    assert main(["check", good, "--set", "games.0.pairings.0.solver=unknown"]) == 2
    quickstart = str(Path(__file__).parents[2] / "configs" / "quickstart.yaml")
    assert main(["check", quickstart]) == 0
    assert main(["check", quickstart, "--set", "games.0.game=no.such.game"]) == 2


def test_run_refuses_before_any_episode_and_no_check_skips(
    fresh: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(UNSET_ENV, raising=False)
    models = {"m": entry(fresh, "solver-m", api_key_env=UNSET_ENV, retry={"max_attempts": 1})}
    config = write(tmp_path, wire(models, "m", variant="text"))
    out = tmp_path / "run"
    assert main(["run", config, "--out", str(out), "--quiet"]) == 1
    assert not out.exists()  # no folder, so no episodes.jsonl
    # --no-check: the run starts, and its episodes end as error for the missing key.
    main(["run", config, "--out", str(out), "--quiet", "--no-check"])
    lines = (out / "episodes.jsonl").read_text().splitlines()
    records = [yaml.safe_load(line) for line in lines]
    assert len(records) == 2 and {r["outcome"] for r in records} == {"error"}


def test_run_starts_after_a_passing_check(
    fresh: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    config = write(tmp_path, wire({"m": entry(fresh, "solver-m")}, "m", variant="text"))
    out = tmp_path / "run"
    main(["run", config, "--out", str(out), "--quiet"])
    records = [yaml.safe_load(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == 2 and "error" not in {r["outcome"] for r in records}
    # The check's one request, then the run's own.
    made = sum(c["requests"] for r in records for c in r["model_calls"].values())
    assert made > 0 and fresh.stats()["requests"] == 1 + made


def test_check_launch_starts_checks_and_stops_the_server(tmp_path: Path) -> None:
    sim_config = tmp_path / "sim.yaml"
    sim_config.write_text(yaml.safe_dump({"models": {"served-a": {"text": "OK"}}}))
    command = f"{{python}} -m parley.agents.backends.simserver --config {sim_config} --host {{host}} --port {{port}}"
    launch = {"command": command, "startup_timeout_s": 60}
    models = {
        "a": {"model": "served-a", "launch": launch},
        "b": {"model": "served-b", "launch": launch},  # the server serves another name
    }
    data = wire(models, "a", "b", variant="text")
    skipped = check(data)
    assert {(r.model, r.status) for r in skipped} == {("a", "skipped"), ("b", "skipped")}
    results = by_model(
        event_loop.run(check_config(load_config(data), timeout_s=10, environ={}, launch=True))
    )
    assert (results["a"].status, results["b"].status) == ("ok", "failed")
    assert results["b"].step == "models" and "served-a" in results["b"].detail
    for result in results.values():  # stopped again: nothing answers at its address
        host, port = result.endpoint.removeprefix("http://").removesuffix("/v1").split(":")
        with pytest.raises(ConnectionRefusedError), socket.create_connection((host, int(port))):
            pass


def test_a_cached_model_whose_server_is_down_runs_from_the_cache(
    fresh: SimServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    cache = tmp_path / "cache.sqlite"
    data = wire({"m": entry(fresh, "solver-m")}, "m", variant="text")
    data["cache"] = str(cache)
    first = tmp_path / "first"
    assert main(["run", write(tmp_path, data), "--out", str(first), "--quiet"]) == 0
    # The same config with its server gone: the cache holds the model's replies, so the check
    # asks nothing, and the cache answers every request the first run made.
    data["models"]["m"]["base_url"] = f"http://127.0.0.1:{closed_port()}/v1"
    second = tmp_path / "second"
    capsys.readouterr()
    assert main(["run", write(tmp_path, data), "--out", str(second)]) == 0
    assert "m: from the cache, not checked here" in capsys.readouterr().err
    records = [
        yaml.safe_load(line) for line in (second / "episodes.jsonl").read_text().splitlines()
    ]
    assert len(records) == 2 and {r["outcome"] for r in records} != {"error"}
    calls = [c for r in records for c in r["model_calls"].values()]
    assert calls and all(c["cached"] == c["requests"] for c in calls)


def test_a_rerun_from_the_cache_sends_nothing_at_all(
    fresh: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    data = wire({"m": entry(fresh, "solver-m")}, "m", variant="text")
    data["cache"] = str(tmp_path / "cache.sqlite")
    config = write(tmp_path, data)
    [before] = event_loop.run(check_config(load_config(config), skip_cached=True))
    assert before.status == "ok"  # an empty cache: the model is checked
    assert main(["run", config, "--out", str(tmp_path / "first"), "--quiet"]) == 0
    sent = fresh.stats()["requests"]
    [skipped] = event_loop.run(check_config(load_config(config), skip_cached=True))
    assert (skipped.status, skipped.step) == ("skipped", "cache")
    assert "cache.sqlite holds" in skipped.detail and "'solver-m'" in skipped.detail
    assert main(["run", config, "--out", str(tmp_path / "second"), "--quiet"]) == 0
    assert fresh.stats()["requests"] == sent  # neither the check nor an episode asked
    # parley check itself still asks the server: that is what it is run for.
    assert main(["check", config]) == 0
    assert fresh.stats()["requests"] == sent + 1
