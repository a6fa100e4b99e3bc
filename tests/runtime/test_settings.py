"""Game settings are typed: a config's settings are checked against the game's model before any
episode runs, and the games get the validated values with every default filled in."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import Field, ValidationError

import tests.runtime.faulty_game  # noqa: F401  (registers test.counter, a dict-declared game)
from parley.environments import registry
from parley.environments.base import Settings
from parley.environments.registry import GameInfo
from parley.runtime.config import ConfigError, load_config, settings_problems
from parley.runtime.experiment import expand
from tests.runtime.faulty_game import CounterMaster, instance


def _config(game: str, settings: dict[str, Any], roles: dict[str, str]) -> dict[str, Any]:
    block = {"game": game, "seeds": {"count": 2}, "pairings": [roles], "settings": settings}
    return {"name": "t", "games": [block]}


WIRE = {"solver": "scripted", "expert": "scripted"}


def _problems(data: dict[str, Any], overrides: list[str] | None = None) -> dict[str, tuple]:
    with pytest.raises(ConfigError) as caught:
        expand(load_config(data, overrides))
    return {field: (value, expected) for field, value, expected in caught.value.problems}


def test_a_wrong_type_names_game_setting_value_and_what_is_expected() -> None:
    problems = _problems(_config("comma.wire", {"max_turns": "abc"}, WIRE))
    value, expected = problems["games.0.settings.max_turns"]
    assert value == "abc"
    assert "comma.wire takes max_turns: int, default 10" in expected
    assert "integer" in expected


def test_an_unknown_setting_is_an_error_listing_the_settings_there_are() -> None:
    problems = _problems(_config("comma.wire", {"max_guesses": 3, "max_turns": 0}, WIRE))
    value, expected = problems["games.0.settings.max_guesses"]
    assert value == 3
    assert "not a setting of comma.wire" in expected
    for known in ("max_turns", "max_mistakes", "variant"):
        assert known in expected
    # Every problem at once: the range of a known setting too.
    assert "greater than or equal to 1" in problems["games.0.settings.max_turns"][1]


def test_a_choice_outside_a_literal_is_named_with_its_choices() -> None:
    problems = _problems(_config("comma.wire", {"variant": "audio"}, WIRE))
    value, expected = problems["games.0.settings.variant"]
    assert value == "audio" and "'image' or 'text'" in expected


def test_a_rule_across_settings_is_reported_on_the_block() -> None:
    roles = {"player_a": "scripted", "player_b": "scripted"}
    problems = _problems(_config("clem.matchit", {"set": "grids", "pair": "similar"}, roles))
    value, expected = problems["games.0.settings"]
    assert value == {"set": "grids", "pair": "similar"}
    assert "set 'grids' has pairs" in expected


def test_overrides_are_validated_and_the_episodes_get_typed_settings_with_defaults() -> None:
    data = _config("comma.wire", {}, WIRE)
    specs = expand(load_config(data, ["games.0.settings.max_turns=4"]))
    assert {s.settings["max_turns"] for s in specs} == {4}
    assert specs[0].settings == {
        "variant": "image",
        "max_turns": 4,
        "max_mistakes": 3,
        "rules": "comma",
        "serial": None,
    }
    problems = _problems(_config("comma.wire", {}, WIRE), ["games.0.settings.max_turns=abc"])
    assert problems["games.0.settings.max_turns"][0] == "abc"


def test_a_number_given_as_text_is_converted_and_ids_do_not_depend_on_how_it_was_written() -> None:
    typed = expand(load_config(_config("comma.wire", {"max_turns": 4}, WIRE)))
    text = expand(load_config(_config("comma.wire", {"max_turns": "4"}, WIRE)))
    assert [s.id for s in typed] == [s.id for s in text]
    assert text[0].settings["max_turns"] == 4


def test_every_game_declares_a_model_whose_defaults_validate() -> None:
    for name, info in registry.all_games().items():
        assert info.settings is not None and issubclass(info.settings, Settings), name
        assert info.resolve_settings({}) == info.default_settings, name
        assert info.resolve_settings(info.default_settings) == info.default_settings, name
        if info.text_settings:
            assert info.resolve_settings(info.text_settings)["variant"] == "text", name


def test_a_game_declared_with_a_dict_gets_a_model_typed_after_its_defaults() -> None:
    info = registry.get("test.counter")
    assert info.default_settings == {"target": 3, "gm_raises_on": -1}
    assert info.resolve_settings({"target": "5"})["target"] == 5
    with pytest.raises(ValidationError):
        info.resolve_settings({"target": "many"})
    with pytest.raises(ValidationError):
        info.resolve_settings({"targte": 5})


class _CountingSettings(Settings):
    target: int = Field(3, ge=1)


def _info(**fields: Any) -> GameInfo:
    return GameInfo(
        name="test.typed_counter",
        family="test",
        roles=("counter",),
        game_master=CounterMaster,
        instance=instance,
        **fields,
    )


def test_a_game_gives_a_model_or_defaults_and_its_text_variant_must_fit_the_model() -> None:
    info = _info(settings=_CountingSettings)
    assert info.default_settings == {"target": 3}
    assert dataclasses.replace(info, description="again").settings is _CountingSettings
    with pytest.raises(ValueError, match="not both"):
        _info(settings=_CountingSettings, default_settings={"target": 4})
    with pytest.raises(ValidationError):
        _info(settings=_CountingSettings, text_settings={"variant": "text"})


def test_a_text_only_model_needs_a_text_variant_the_other_settings_allow() -> None:
    data = _config("clem.reference", {"set": "pentomino"}, {"describer": "txt", "guesser": "txt"})
    data["models"] = {"txt": {"model": "txt", "base_url": "http://127.0.0.1:9/v1", "images": False}}
    problems = _problems(data)
    value, expected = problems["games.0.pairings.0.describer"]
    assert value == "txt"
    assert "text variant" in expected and "'pentomino' has pictures only" in expected


def test_a_number_setting_must_be_finite() -> None:
    """A game's float setting refuses .inf as the run's config does (it would pass ``ge=0``
    and every other bound, then overflow or never end wherever the game uses it)."""

    class Paced(Settings):
        delay_s: float = Field(0.5, ge=0.0)

    assert Paced.model_validate({"delay_s": 2.5}).delay_s == 2.5
    (problem,) = settings_problems("test.paced", Paced, {"delay_s": float("inf")}, "games.0")
    assert problem[0] == "games.0.delay_s" and "finite number" in problem[2]
