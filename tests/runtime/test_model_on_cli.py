"""A model on the command line (``parley run GAME … --model PROVIDER/NAME``): the config it
makes (pairings, the model entry from the usual variables, text variants for --text-only),
the one-line refusals, and a run against the stand-in server as a separate process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.cli import build_parser, main, resume_command
from parley.runtime.config import ConfigError, ExperimentConfig
from parley.runtime.experiment import expand
from parley.runtime.quick_config import model_entry, registry_name, run_config

QUICKSTART = Path(__file__).parents[2] / "configs" / "quickstart.yaml"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServerProcess]:
    with SimServerProcess({"models": {"tiny-m": {"text": "cut_wire_1"}}}) as server:
        yield server


def config_of(*words: str) -> ExperimentConfig:
    args = build_parser("run").parse_args(["run", *words])
    return run_config(args, args.set)


def pairings(config: ExperimentConfig, block: int = 0) -> list[dict[str, str]]:
    return [
        {role: player.label for role, player in pairing.items()}  # type: ignore[union-attr]
        for pairing in config.games[block].pairings
    ]


def test_the_model_plays_each_role_in_turn_with_scripted_partners() -> None:
    config = config_of("comma.wire", "clem.reference", "--model", "openai/tiny-m", "--seeds", "3")
    assert [b.game for b in config.games] == ["comma.wire", "clem.reference"]
    assert pairings(config, 0) == [
        {"solver": "tiny-m", "expert": "scripted"},
        {"solver": "scripted", "expert": "tiny-m"},
    ]
    assert pairings(config, 1) == [
        {"describer": "tiny-m", "guesser": "scripted"},
        {"describer": "scripted", "guesser": "tiny-m"},
    ]
    assert all(b.seed_list() == [0, 1, 2] for b in config.games)
    assert config.models["tiny-m"].model == "tiny-m"
    assert len(expand(config)) == 2 * 2 * 3


def test_a_pattern_names_every_game_it_matches() -> None:
    config = config_of("comma.w*", "--model", "openai/m")
    assert [b.game for b in config.games] == ["comma.who", "comma.wire"]


def test_pair_chooses_the_roles_and_fills_the_others_with_scripted() -> None:
    config = config_of(
        "comma.wire", "--model", "anthropic/claude-x", "--pair", "solver=model",
        "--pair", "solver=random,expert=claude-x",
    )  # fmt: skip
    assert pairings(config) == [
        {"solver": "claude-x", "expert": "scripted"},
        {"solver": "random", "expert": "claude-x"},
    ]
    assert config.models["claude-x"].backend == "anthropic"


def test_text_only_plays_the_text_variant_and_images_stay_by_default() -> None:
    seeing = config_of("comma.wire", "--model", "openai/m", "--pair", "solver=model")
    blind = config_of("comma.wire", "--model", "openai/m", "--pair", "solver=model", "--text-only")
    assert seeing.models["m"].images and not blind.models["m"].images
    assert {s.settings["variant"] for s in expand(seeing)} == {"image"}
    assert {s.settings["variant"] for s in expand(blind)} == {"text"}


def test_the_model_entry_takes_urls_and_keys_from_the_usual_variables() -> None:
    local = "http://127.0.0.1:9/v1"
    assert model_entry("openai/m", local, False, {}) == {
        "backend": "openai",
        "model": "m",
        "base_url": local,
    }  # a local server without a key: none named
    keyed = model_entry("openai/m", None, False, {"OPENAI_BASE_URL": local, "OPENAI_API_KEY": "k"})
    assert (keyed["base_url"], keyed["api_key_env"]) == (local, "OPENAI_API_KEY")
    # The hosted API wants a key: its variable is named even while unset.
    hosted = model_entry("anthropic/claude-x", None, True, {})
    assert hosted == {
        "backend": "anthropic",
        "model": "claude-x",
        "api_key_env": "ANTHROPIC_API_KEY",
        "images": False,
    }


def test_registry_names_are_plain_and_never_a_built_in_player() -> None:
    assert registry_name("openai/meta-llama/Llama-3.1-8B") == "meta-llama-Llama-3.1-8B"
    assert registry_name("openai/scripted") == "model-scripted"


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["no-such-game"], "'no-such-game' is neither a config file nor a game"),
        (["comma.wire"], "name the model to play comma.wire with: --model PROVIDER/NAME"),
        ([str(QUICKSTART), "--model", "openai/m"], "--model: only with games named"),
        ([str(QUICKSTART), "comma.wire"], "give one config file, or games with --model"),
        (["comma.wire", "--model", "openai/m", "--pair", "guesser=model"], "no --pair names"),
        (["comma.wire", "--model", "openai/m", "--pair", "solver"], "expected ROLE=PLAYER"),
        (["comma.wire", "--model", "openai/m", "--pair", "solver=m,solver=m"], "named twice"),
    ],
)
def test_words_that_make_no_config_are_one_line(
    words: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", *words]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1


def test_an_unknown_provider_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "comma.wire", "--model", "mistral/x"])
    assert exit_.value.code == 2
    assert "PROVIDER/NAME" in capsys.readouterr().err


def test_a_missing_config_file_is_still_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no such file"):
        config_of("missing.yaml")


def test_help_shows_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "parley run comma.wire --model openai/" in out and "--text-only" in out


def test_a_run_from_the_command_line_plays_and_resumes(
    sim: SimServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sim.reset()
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    out = tmp_path / "run"
    words = ["comma.wire", "--model", "openai/tiny-m", "--base-url", sim.openai_url]
    words += ["--seeds", "2", "--text-only", "--quiet", "--out", str(out)]
    assert main(["run", *words]) == 0
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == 4 and "error" not in {r["outcome"] for r in records}
    made = sum(c["requests"] for r in records for c in r["model_calls"].values())
    assert sim.stats()["requests"] == 1 + made  # the pre-flight's request, then the run's
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["models"]["tiny-m"]["base_urls"] == [sim.openai_url]
    assert saved["models"]["tiny-m"]["api_key_env"] is None
    assert [g["game"] for g in saved["games"]] == ["comma.wire"]
    # The resume command names the same games and model, and finds everything done.
    args = build_parser("run").parse_args(["run", *words])
    resume = resume_command(args, out)
    assert "comma.wire --model openai/tiny-m --base-url" in resume and "--text-only" in resume
    capsys.readouterr()
    assert main(["run", *words, "--resume"]) == 0
    assert "0 played now, 4 already done" in capsys.readouterr().err
