"""The games parley knows, by name, with their roles, instance generators and built-in players."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from parley.environments.base import GameMaster, PlayFn

InstanceFn = Callable[[int, dict[str, Any]], dict[str, Any]]

# Families register their games when imported; listed here so `all_games()` finds them.
FAMILIES = (
    "parley.environments.comma",
    "parley.environments.clem",
    "parley.environments.mango",
    "parley.environments.playground",
)


@dataclass(frozen=True)
class GameInfo:
    """A playable game.

    ``instance(seed, settings)`` builds an instance deterministically; ``players[role][kind]``
    are the built-in players (``scripted``, ``random``); ``text_only`` says whether the game
    shows text alone (no images), so a text-only model can play it.
    """

    name: str
    family: str
    roles: tuple[str, ...]
    game_master: type[GameMaster]
    instance: InstanceFn
    players: dict[str, dict[str, PlayFn]] = field(default_factory=dict)
    description: str = ""
    text_only: bool = False
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

    def offloads(self, settings: dict[str, Any]) -> bool:
        """Whether episodes with ``settings`` call the game in a worker thread."""
        offload = self.offload_game_master
        return offload(settings) if callable(offload) else offload


def renders_pictures(settings: dict[str, Any]) -> bool:
    """For ``offload_game_master``: games with a ``variant`` setting draw only when it is not
    ``text``."""
    return settings.get("variant", "image") != "text"


_GAMES: dict[str, GameInfo] = {}


def register(info: GameInfo) -> GameInfo:
    if info.name in _GAMES and _GAMES[info.name] is not info:
        raise ValueError(f"game {info.name!r} registered twice")
    _GAMES[info.name] = info
    return info


@cache
def _load_families() -> None:
    # PARLEY_PLUGINS: extra modules (comma-separated) that register games of their own.
    plugins = [m.strip() for m in os.environ.get("PARLEY_PLUGINS", "").split(",") if m.strip()]
    for module in plugins:
        importlib.import_module(module)
    for module in FAMILIES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # a family that exists but fails to import is a real error
                raise


def all_games() -> dict[str, GameInfo]:
    _load_families()
    return dict(sorted(_GAMES.items()))


def get(name: str) -> GameInfo:
    games = all_games()
    if name not in games:
        raise KeyError(f"unknown game {name!r}; known games: {', '.join(games)}")
    return games[name]
