"""The ``models:`` registry in configs, and what expansion does with it: names in pairings,
generation parameters, the text variant for text-only models."""

from __future__ import annotations

import random
from typing import Any

import pytest

from parley.environments.base import GameMaster, Observation, View
from parley.environments.registry import GameInfo, register
from parley.runtime.config import ConfigError, load_config
from parley.runtime.experiment import expand


def _config(models: dict[str, Any], pairings: list[Any], **block: Any) -> dict[str, Any]:
    return {
        "games": [{"game": "comma.wire", "seeds": {"count": 2}, "pairings": pairings, **block}],
        "models": models,
    }


def _problems(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        expand(load_config(data))
    return {field: expected for field, _, expected in info.value.problems}


VLM = {"model": "vlm", "base_url": "http://127.0.0.1:9/v1"}
TEXT = {"model": "txt", "base_url": "http://127.0.0.1:9/v1", "images": False}


def test_a_registry_entry_is_validated_field_by_field() -> None:
    data = _config(
        {
            "m": {
                "model": "x",
                "api_key_env": "sk-live-1234",
                "base_url": "localhost:8000",
                "concurrency": {"start": 5, "min": 10},
                "backend": "gemini",
            }
        },
        [{"solver": "m", "expert": "scripted"}],
    )
    with pytest.raises(ConfigError) as info:
        load_config(data)
    fields = {f for f, _, _ in info.value.problems}
    assert fields == {
        "models.m.api_key_env",
        "models.m.base_urls",
        "models.m.concurrency",
        "models.m.backend",
    }
    assert "never the key itself" in str(info.value)


def test_base_url_or_base_urls_and_defaults() -> None:
    config = load_config(
        _config(
            {
                "one": {"model": "a", "base_url": "http://h:1/v1/"},
                "many": {"model": "b", "base_urls": ["http://h:1/v1", "http://h:2/v1"]},
                "hosted": {"model": "gpt", "api_key_env": "OPENAI_API_KEY"},
                "claude": {
                    "backend": "anthropic",
                    "model": "c",
                    "api_key_env": "ANTHROPIC_API_KEY",
                },
            },
            [{"solver": "one", "expert": "many"}],
        )
    )
    assert config.models["one"].base_urls == ["http://h:1/v1"]
    assert config.models["many"].base_urls == ["http://h:1/v1", "http://h:2/v1"]
    assert config.models["hosted"].base_urls == ["https://api.openai.com/v1"]
    assert config.models["claude"].base_urls == ["https://api.anthropic.com"]


def test_pairings_name_models_and_unknown_names_are_errors() -> None:
    problems = _problems(_config({"vlm": VLM}, [{"solver": "vlm", "expert": "gpt-5"}]))
    assert problems == {"games.0.pairings.0.expert": "a model declared under `models` (vlm)"}
    with pytest.raises(ConfigError, match="built-in player"):
        load_config(_config({"random": VLM}, [{"solver": "scripted", "expert": "scripted"}]))


def test_pairing_params_override_the_model_and_are_checked() -> None:
    good = _config(
        {"vlm": VLM},
        [
            {
                "solver": {"kind": "llm", "model": "vlm", "params": {"temperature": 0.7}},
                "expert": "vlm",
            }
        ],
    )
    specs = expand(load_config(good))
    assert specs[0].players["solver"].params == {"temperature": 0.7}
    bad = _config(
        {"vlm": VLM},
        [{"solver": {"kind": "llm", "model": "vlm", "params": {"temprature": 1}}, "expert": "vlm"}],
    )
    assert list(_problems(bad)) == ["games.0.pairings.0.solver.params"]


def test_a_text_only_solver_gets_the_text_variant_and_a_text_only_expert_does_not() -> None:
    data = _config(
        {"vlm": VLM, "txt": TEXT},
        [{"matrix": {"solver": ["vlm", "txt"], "expert": ["vlm", "txt"]}}],
    )
    variants = {
        (s.players["solver"].label, s.players["expert"].label): s.settings["variant"]
        for s in expand(load_config(data))
    }
    # The wire puzzle shows images to the solver only.
    assert variants == {
        ("vlm", "vlm"): "image",
        ("vlm", "txt"): "image",
        ("txt", "vlm"): "text",
        ("txt", "txt"): "text",
    }


def test_a_text_only_model_cannot_override_an_explicit_image_setting() -> None:
    data = _config(
        {"txt": TEXT}, [{"solver": "txt", "expert": "scripted"}], settings={"variant": "image"}
    )
    problems = _problems(data)
    assert list(problems) == ["games.0.pairings.0.solver"]
    assert "needs variant='text'" in problems["games.0.pairings.0.solver"]


class _PictureMaster(GameMaster):
    roles = ("viewer",)

    def system_prompt(self, role: str) -> str:
        return "Say what you see."

    def whose_turn(self) -> str | None:
        return "viewer"

    def observe(self, role: str) -> Observation:
        return Observation(text="Look:", images=[b"\x89PNG fake"])

    def handle_reply(self, role: str, text: str) -> None:
        self.end("success", "said something")

    def scores(self) -> dict[str, float | None]:
        return {"main": 100.0}


def _viewer(view: View, rng: random.Random) -> str:
    return "a picture"


register(
    GameInfo(
        name="test.picture_only",
        family="test",
        roles=("viewer",),
        game_master=_PictureMaster,
        instance=lambda seed, settings: {"seed": seed},
        players={"viewer": {"scripted": _viewer}},
        description="images and no text variant",
    )
)


def test_a_game_without_a_text_variant_refuses_a_text_only_model() -> None:
    data = {
        "games": [
            {
                "game": "test.picture_only",
                "seeds": [0],
                "pairings": [{"viewer": "txt"}, {"viewer": "vlm"}],
            }
        ],
        "models": {"txt": TEXT, "vlm": VLM},
    }
    problems = _problems(data)
    assert list(problems) == ["games.0.pairings.0.viewer"]
    assert "has no text variant" in problems["games.0.pairings.0.viewer"]
