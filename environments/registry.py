"""The games parley knows, by name, with their roles, instance generators and built-in players."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from pydantic import create_model

from parley import spelling
from parley.environments.base import GameMaster, PlayFn, Settings
from parley.environments.privacy import LeakDetectors

InstanceFn = Callable[[int, dict[str, Any]], dict[str, Any]]
# Why a game departs from one of ``parley check-game``'s checks: the reason, or a function of
# the game's settings that gives it ("" for settings under which the check holds).
Exemption = str | Callable[[dict[str, Any]], str]

# Where games come from: every entry point of this group names a module that registers its
# games when imported (parley's own families are entry points of parley itself, in
# pyproject.toml); PARLEY_PLUGINS adds modules by name, for a quick hack without packaging.
GAMES_GROUP = "parley.games"
PLUGINS_ENV = "PARLEY_PLUGINS"


# settings, roles -> the most turns of each role in one episode (None: no limit is set).
TurnLimitsFn = Callable[[Mapping[str, Any], tuple[str, ...]], dict[str, int] | None]


@dataclass(frozen=True)
class GameInfo:
    """A playable game.

    ``instance(seed, settings)`` builds an instance deterministically; ``players[role][kind]``
    are the built-in players (``scripted``, ``random``); ``text_only`` says whether the game
    shows text alone (no images), so a text-only model can play it.

    ``settings`` is the game's :class:`~parley.environments.base.Settings` model: a config's
    settings are validated against it, and ``default_settings`` is its defaults as a dict.
    ``text_settings`` are the settings of the game's text variant (for text-only models).
    A game may give ``default_settings`` instead of a model (games written before models):
    a model is then made from it, each setting typed after its default value.

    What the game knows about its own checks and facts (docs/games.md):
    ``check_exemptions`` maps a check of ``parley check-game`` (``"oracle wins"``…) that the
    game departs from to an :data:`Exemption`; ``shown_otherwise`` maps an observation-data
    path to how the role is shown it when not in the data's own words (``"board"``: "the text
    draws the board"), so the observation-data check skips it; ``leak_detectors`` says how
    ``parley leaks`` finds each of the game's private facts in what a role says.
    ``turn_limits(settings, roles)`` gives the most turns each role can take in one episode
    (``parley plan``'s upper bound of model calls), or None where the settings set no limit.
    """

    name: str
    family: str
    roles: tuple[str, ...]
    game_master: type[GameMaster]
    instance: InstanceFn
    players: dict[str, dict[str, PlayFn]] = field(default_factory=dict)
    description: str = ""
    text_only: bool = False
    settings: type[Settings] = Settings
    default_settings: dict[str, Any] = field(default_factory=dict)
    text_settings: dict[str, Any] | None = None
    offload_players: bool = False
    # Problems with a block's settings (merged over the defaults) that make every episode fail,
    # such as a data folder that does not exist; reported as config errors before the run.
    check_settings: Callable[[dict[str, Any]], list[str]] | None = None
    # Run the instance generator and the game master in a worker thread (games that render
    # pictures or search inside the game master), so the event loop never waits on them; or a
    # function of the episode's settings (a text variant renders nothing: a thread hop per call
    # would cost more than it saves).
    offload_game_master: bool | Callable[[dict[str, Any]], bool] = False
    check_exemptions: Mapping[str, Exemption] = field(default_factory=dict)
    shown_otherwise: Mapping[str, str] = field(default_factory=dict)
    leak_detectors: LeakDetectors = field(default_factory=LeakDetectors)
    # The most turns each role can take in one episode, from the game's own limits in its
    # settings (for ``parley plan``'s bounds); None where the game has no such limit.
    turn_limits: TurnLimitsFn | None = None
    # What the run folder records of the reference checkout a ``reference`` setting names
    # (its path, git commit and the sha256 of each file read), for games that read one; raises
    # ``parley.environments.reference.ReferenceError`` for a checkout it cannot use.
    reference_provenance: Callable[[str], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        model = self.settings
        if self.default_settings and model is Settings:
            model = settings_model(self.name, self.default_settings)
        elif self.default_settings and self.default_settings != model().model_dump(mode="json"):
            # (Equal ones are this info's own, as dataclasses.replace passes them on.)
            raise ValueError(f"{self.name}: give a settings model or default_settings, not both")
        # Frozen: the derived fields are set once, here.
        object.__setattr__(self, "settings", model)
        object.__setattr__(self, "default_settings", model().model_dump(mode="json"))
        if self.text_settings:
            model.model_validate({**self.default_settings, **self.text_settings})

    def resolve_settings(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The settings episodes get: ``values`` validated by the game's model, defaults filled
        in, as a JSON-able dict (raises ``pydantic.ValidationError``)."""
        return self.settings.model_validate(dict(values)).model_dump(mode="json")

    def exemption(self, check: str, settings: dict[str, Any] | None = None) -> str:
        """Why this game departs from ``check`` with ``settings``, or "" where it keeps it."""
        reason = self.check_exemptions.get(check, "")
        return reason if isinstance(reason, str) else reason(settings or {})

    def offloads(self, settings: dict[str, Any]) -> bool:
        """Whether episodes with ``settings`` call the game in a worker thread."""
        offload = self.offload_game_master
        return offload(settings) if callable(offload) else offload


def renders_pictures(settings: dict[str, Any]) -> bool:
    """For ``offload_game_master``: games with a ``variant`` setting draw only when it is not
    ``text``."""
    return settings.get("variant", "image") != "text"


def settings_model(game: str, defaults: Mapping[str, Any]) -> type[Settings]:
    """A :class:`Settings` model for a game that declares its settings as a dict of defaults:
    each setting typed after its default (``None``: any value)."""
    fields: dict[str, Any] = {
        key: (Any if value is None else type(value), value) for key, value in defaults.items()
    }
    name = "".join(part.capitalize() for part in game.replace("-", "_").split(".")) + "Settings"
    return create_model(name, __base__=Settings, **fields)


_GAMES: dict[str, GameInfo] = {}


def register(info: GameInfo) -> GameInfo:
    if info.name in _GAMES and _GAMES[info.name] is not info:
        raise ValueError(f"game {info.name!r} registered twice")
    _GAMES[info.name] = info
    return info


@dataclass(frozen=True)
class PluginError:
    """A game module that failed to import: which, from where, and why (one line each)."""

    name: str
    module: str
    source: str  # "entry point parley.games" or "PARLEY_PLUGINS"
    error: str
    traceback: str = ""

    def __str__(self) -> str:
        return (
            f"game plugin {self.name!r} ({self.source}: {self.module}) failed to load: {self.error}"
        )


_ERRORS: list[PluginError] = []


def _plugin_modules() -> list[tuple[str, str, str]]:
    """(name, module, source) of every game module to import, entry points first."""
    found = [
        (ep.name, ep.value, f"entry point {GAMES_GROUP}")
        for ep in sorted(entry_points(group=GAMES_GROUP), key=lambda ep: (ep.value, ep.name))
    ]
    hacks = [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
    return found + [(module, module, PLUGINS_ENV) for module in hacks]


@cache
def _load_plugins() -> None:
    import traceback

    seen: set[str] = set()
    for name, module, source in _plugin_modules():
        if module in seen:  # a distribution installed twice (editable and not) lists it twice
            continue
        seen.add(module)
        try:
            # "module" or "module:attribute": importing the module registers its games.
            importlib.import_module(module.partition(":")[0].strip())
        except Exception as exc:  # a broken plugin must not take the other games down
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            _ERRORS.append(PluginError(name, module, source, error, traceback.format_exc()))


def _load_family(family: str) -> None:
    """Import only the game modules whose entry point is named ``family`` (a run that plays
    ``clem.*`` games need not import chess and networkx for the other families). A failure
    is left for :func:`_load_plugins` to record, which the caller falls back on."""
    if family in _FAMILIES_TRIED:
        return
    _FAMILIES_TRIED.add(family)
    for name, module, _source in _plugin_modules():
        if name != family:
            continue
        # A broken module is imported again (and its error recorded) by _load_plugins.
        with contextlib.suppress(Exception):
            importlib.import_module(module.partition(":")[0].strip())


_FAMILIES_TRIED: set[str] = set()


def find(name: str) -> GameInfo | None:
    """The game ``name``, or None: its family's module first (``clem`` for ``clem.reference``),
    then, when that does not register it, every game module."""
    info = _GAMES.get(name)
    if info is not None:
        return info
    _load_family(name.partition(".")[0])
    info = _GAMES.get(name)
    if info is not None:
        return info
    _load_plugins()
    return _GAMES.get(name)


def plugin_errors() -> list[PluginError]:
    """The game modules that failed to import (after the games were first listed)."""
    _load_plugins()
    return list(_ERRORS)


def all_games() -> dict[str, GameInfo]:
    _load_plugins()
    return dict(sorted(_GAMES.items()))


def get(name: str) -> GameInfo:
    """The game ``name`` (see :func:`find`); ``KeyError`` naming the known games if none."""
    info = find(name)
    if info is None:
        guess = did_you_mean(name)
        raise KeyError(f"unknown game {name!r}{guess}; {known_games_hint()}")
    return info


def did_you_mean(name: str) -> str:
    """`` (did you mean 'comma.wire'?)`` for a mistyped game name, or empty."""
    guess = spelling.did_you_mean(name, all_games(), most=3)
    return f" ({guess})" if guess else ""


def known_games_hint() -> str:
    """The known games for an error message, and why some may be missing."""
    games = all_games()
    if not games:
        text = (
            f"no games are registered: parley's own are `{GAMES_GROUP}` entry points in its "
            "installed metadata (reinstall it: pip install -e .)"
        )
    else:
        text = f"known games: {', '.join(games)}"
    return "; ".join([text, *(str(error) for error in _ERRORS)])
