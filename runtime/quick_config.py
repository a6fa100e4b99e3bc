"""A model on the command line: ``parley run GAME [GAME …] --model PROVIDER/NAME``.

Instead of a YAML path, ``parley run`` takes game names (or patterns, ``'comma.*'``) and a
model, and makes the config itself: one game block per game, and a pairing per role of the
game with the model in that role and scripted partners in the others (``--pair`` chooses the
pairings instead). The model entry takes its base URL from ``--base-url`` or the provider's
usual variable (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``) and names the key's variable
(``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``) when it is set, or when the provider's hosted API
is meant, which needs one; a local server needs none. ``--text-only`` declares a model that
takes no images, so that the games' text variants are played; a server that says it takes
none (llama.cpp without a vision projector) is taken as such without it. The config made is
validated and written to the run folder's ``config.yaml`` as any other.
"""

from __future__ import annotations

import argparse
import fnmatch
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parley.runtime.config import (
    BUILTIN_PLAYERS,
    PLAYER_SHORTHANDS,
    ConfigError,
    ExperimentConfig,
    load_config,
)

log = logging.getLogger("parley.run")

PROVIDERS: dict[str, tuple[str, str, str]] = {
    # provider: (its key's variable, its base URL's variable, its hosted API's host)
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "api.openai.com"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "api.anthropic.com"),
}
# What a --pair value may call the model, besides its registry name and PROVIDER/NAME.
MODEL_WORD = "model"
EXAMPLES = """\
examples:
  parley run configs/quickstart.yaml
  parley run comma.wire --model openai/gpt-4o-mini --seeds 5
  parley run comma.wire 'clem.*' --model openai/smollm2 --base-url http://127.0.0.1:8080/v1 \\
      --text-only --set models.smollm2.params.max_tokens=64
  parley run comma.wire --model anthropic/claude-sonnet-4-5 --pair solver=model,expert=scripted

With --model, the model plays every role of each game in turn, scripted players the others
(or the pairings --pair gives). Keys and base URLs come from OPENAI_API_KEY, OPENAI_BASE_URL,
ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL.
"""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class CommandLineError(ConfigError):
    """``parley run``'s words that make no config; said in one line (the CLI exits 2)."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__([("command line", text, "")])

    def __str__(self) -> str:
        return f"parley run: {self.text}"


def _model_word(value: str) -> str:
    provider, _, name = value.partition("/")
    if provider not in PROVIDERS or not name.strip():
        raise argparse.ArgumentTypeError(
            f"expected PROVIDER/NAME with PROVIDER {' or '.join(PROVIDERS)}, got {value!r}"
        )
    return value


def _count(value: str) -> int:
    number = int(value) if value.isdigit() else 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return number


def add_arguments(run: argparse.ArgumentParser) -> None:
    """``parley run``'s positional words (a config, or games) and the options of a model
    named on the command line."""
    run.add_argument(
        "config",
        nargs="+",
        metavar="CONFIG | GAME",
        help="an experiment YAML, or game names or patterns (comma.wire, 'clem.*') with --model",
    )
    run.add_argument(
        "--model",
        type=_model_word,
        metavar="PROVIDER/NAME",
        help="play the games with this model (openai/NAME or anthropic/NAME; NAME is sent)",
    )
    run.add_argument(
        "--base-url",
        metavar="URL",
        help="the model's server (default: $OPENAI_BASE_URL or $ANTHROPIC_BASE_URL, else the "
        "provider's API)",
    )
    run.add_argument("--seeds", type=_count, metavar="N", help="seeds 0 … N-1 (default 10)")
    run.add_argument(
        "--pair",
        action="append",
        default=[],
        metavar="ROLE=PLAYER,…",
        help="a pairing instead of the model in every role, e.g. solver=model,expert=scripted "
        "(roles left out are scripted; repeat for more)",
    )
    run.add_argument(
        "--text-only",
        action="store_true",
        help="the model takes no images: the games' text variants are played",
    )


def _is_file_word(word: str) -> bool:
    path = Path(word)
    return path.suffix.lower() in (".yaml", ".yml") or path.is_file()


def _games(words: list[str]) -> list[str]:
    from parley.environments import registry

    names: list[str] = []
    for word in words:
        if registry.find(word) is not None:
            found = [word]
        elif any(c in word for c in "*?["):
            found = [n for n in registry.all_games() if fnmatch.fnmatchcase(n, word)]
        else:
            found = []
        if not found:
            raise CommandLineError(
                f"{word!r} is neither a config file nor a game (parley games lists them)"
            )
        names += [n for n in found if n not in names]
    return names


def registry_name(model: str) -> str:
    """The name of ``--model PROVIDER/NAME``'s entry under ``models:`` (and in the results):
    NAME, in the letters a run name may hold."""
    name = _UNSAFE.sub("-", model.partition("/")[2]).strip("-.") or "model"
    return f"model-{name}" if name in BUILTIN_PLAYERS or name in PLAYER_SHORTHANDS else name


def model_entry(
    model: str, base_url: str | None, text_only: bool, environ: Mapping[str, str]
) -> dict[str, Any]:
    """The ``models:`` entry of ``--model PROVIDER/NAME``."""
    provider, _, name = model.partition("/")
    key_env, url_env, hosted = PROVIDERS[provider]
    url = base_url or environ.get(url_env) or None
    entry: dict[str, Any] = {"backend": provider, "model": name}
    if url:
        entry["base_url"] = url
    # A local server takes no key; the hosted API always wants one, so name it even unset
    # (the pre-flight then says to export it).
    if environ.get(key_env) or not url or hosted in url:
        entry["api_key_env"] = key_env
    if text_only:
        entry["images"] = False
    return entry


def _parse_pair(text: str, model: str, name: str) -> dict[str, str]:
    pairing: dict[str, str] = {}
    for item in text.split(","):
        role, sep, player = (part.strip() for part in item.partition("="))
        if not sep or not role or not player:
            raise CommandLineError(f"--pair {text!r}: expected ROLE=PLAYER,ROLE=PLAYER")
        if role in pairing:
            raise CommandLineError(f"--pair {text!r}: role {role!r} named twice")
        pairing[role] = name if player in (MODEL_WORD, model, name) else player
    return pairing


def _partner(info: Any, role: str) -> str:
    kinds = list(info.players.get(role, {}))
    if not kinds:
        raise CommandLineError(
            f"{info.name} has no built-in player for {role}: give it one with --pair"
        )
    return "scripted" if "scripted" in kinds else kinds[0]


def _pairings(info: Any, name: str, pairs: list[dict[str, str]]) -> list[dict[str, str]]:
    roles = list(info.roles)
    if not pairs:
        return [{r: name if r == role else _partner(info, r) for r in roles} for role in roles]
    fitting = [p for p in pairs if set(p) <= set(roles)]
    if not fitting:
        raise CommandLineError(
            f"no --pair names roles of {info.name}, whose roles are {', '.join(roles)}"
        )
    return [{r: p.get(r) or _partner(info, r) for r in roles} for p in fitting]


def quick_data(
    words: list[str],
    model: str,
    *,
    base_url: str | None = None,
    seeds: int | None = None,
    pairs: list[str] | None = None,
    text_only: bool = False,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The config (as YAML would give it) that plays the games ``words`` name with
    ``model`` (``PROVIDER/NAME``); raises :class:`CommandLineError`."""
    import os

    from parley.environments import registry

    env = os.environ if environ is None else environ
    name = registry_name(model)
    games = _games(words)
    parsed = [_parse_pair(text, model, name) for text in pairs or []]
    blocks = []
    for game in games:
        info = registry.get(game)
        block: dict[str, Any] = {"game": game, "pairings": _pairings(info, name, parsed)}
        if seeds is not None:
            block["seeds"] = {"start": 0, "count": seeds}
        blocks.append(block)
    for text, pair in zip(pairs or [], parsed, strict=True):
        if not any(set(pair) <= set(registry.get(g).roles) for g in games):
            raise CommandLineError(f"--pair {text!r}: no game named has these roles")
    title = _UNSAFE.sub("-", "-".join([name, *games]))[:64].strip("-.") or "run"
    return {
        "name": title,
        "games": blocks,
        "models": {name: model_entry(model, base_url, text_only, env)},
    }


def _quick_options(args: argparse.Namespace) -> list[str]:
    given = [
        ("--model", args.model),
        ("--base-url", args.base_url),
        ("--seeds", args.seeds),
        ("--pair", args.pair),
        ("--text-only", args.text_only),
    ]
    return [flag for flag, value in given if value]


def run_config(args: argparse.Namespace, overrides: list[str]) -> ExperimentConfig:
    """``parley run``'s config: the YAML file named, or the one ``--model`` makes for the
    games named; ``overrides`` (``--set``) apply to either."""
    words: list[str] = args.config
    files = [w for w in words if _is_file_word(w)]
    if files and len(words) > 1:
        raise CommandLineError(
            f"give one config file, or games with --model; got {', '.join(map(repr, words))}"
        )
    if files:
        if _quick_options(args):
            raise CommandLineError(
                f"{', '.join(_quick_options(args))}: only with games named on the command line; "
                f"{words[0]} names its own models and pairings (change them with --set)"
            )
        return load_config(words[0], overrides)
    if not args.model:
        games = ", ".join(_games(words))
        raise CommandLineError(f"name the model to play {games} with: --model PROVIDER/NAME")
    text_only = args.text_only or _takes_no_images(args.model, args.base_url)
    data = quick_data(
        words,
        args.model,
        base_url=args.base_url,
        seeds=args.seeds,
        pairs=args.pair,
        text_only=text_only,
    )
    return load_config(data, overrides)


def _takes_no_images(model: str, base_url: str | None) -> bool:
    """Whether the server at ``base_url`` says it takes no images (dialect.py's probe, as
    llama.cpp's ``/props`` tells): then the text variants are played, as with
    ``--text-only``, and the run says so. A server that says nothing is taken at its word
    of ``images: true``, which the pre-flight then checks."""
    if not base_url:
        return False
    from parley import event_loop
    from parley.agents.backends import dialect

    provider, _, name = model.partition("/")
    info, _ = event_loop.run(dialect.probe(provider, base_url.rstrip("/"), name))
    if info.images is False:
        log.warning(
            "%s at %s takes no images (%s): the games' text variants are played",
            name,
            base_url,
            info.evidence,
        )
        return True
    return False


def command_words(args: argparse.Namespace) -> list[str]:
    """The words of ``parley run`` that say what is played: the config, or the games and
    the model's options."""
    words = list(args.config)
    if not args.model:
        return words
    words += ["--model", args.model]
    if args.base_url:
        words += ["--base-url", args.base_url]
    if args.seeds:
        words += ["--seeds", str(args.seeds)]
    for pair in args.pair:
        words += ["--pair", pair]
    if args.text_only:
        words.append("--text-only")
    return words
