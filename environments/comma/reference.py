"""COMMA's own prompts and instances, read at run time from a user's checkout of COMMA.

A game's ``reference`` setting names the checkout: COMMA's own repository, a
``multimodal_comms`` checkout (COMMA under ``src/multimodal_comms/apps/comma``), or any folder
holding COMMA's ``config/``. From it parley reads ``prompts.json`` (the expert's and solver's
instructions and each puzzle's manual), ``puzzles_final.json`` (COMMA's instances, 100 a
puzzle) and ``random_config.json`` (the run's turn and mistake limits and serial number). None
of that text is part of parley; see docs/comma.md for what a reference changes.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from parley.environments.comma import keypad, led, memory
from parley.environments.comma.talk import POSITIONS6
from parley.environments.reference import ReferenceError, git_commit, read_hashed

# Where COMMA's config folder sits in each kind of checkout, tried in order.
CONFIG_PLACES = ("config", "src/multimodal_comms/apps/comma/config", "apps/comma/config")
PROMPTS = "prompts.json"
INSTANCES = "puzzles_final.json"
RUN_SETTINGS = "random_config.json"

# parley's puzzle name -> the class name COMMA keys its manual and instances by.
CLASS_NAMES = {
    "wire": "SimpleWirePuzzle",
    "telehealth": "TelehealthPuzzle",
    "who": "WhoPuzzle",
    "led": "LedPuzzle",
    "memory": "MemoryPuzzle",
    "keypad": "KeyPadPuzzle",
    "password": "PasswordPuzzle",
    "colour": "ColourPuzzle",
    "maze": "MazePuzzle",
    "atm": "AtmPuzzle",
}
# COMMA's keypad draws its buttons column by column: first the left pair, then the right.
KEYPAD_ORDER = ("top_left", "bottom_left", "top_right", "bottom_right")
# Where COMMA's maze puts its four spheres (row, column): fixed by its code, not its config.
MAZE_SPHERES = {"green": [1, 1], "blue": [1, 7], "red": [7, 1], "yellow": [7, 7]}


@dataclass(frozen=True)
class CommaReference:
    """What parley read from one COMMA checkout, and the hash of every file it read."""

    root: Path
    config: Path
    prompts: dict[str, str]
    instances: dict[str, list[dict[str, Any]]]
    max_turns: int
    max_mistakes: int
    serial: str
    files: dict[str, str] = field(default_factory=dict)

    def expert_prompt(self, puzzle: str) -> str:
        """The expert's prompt as COMMA builds it: its instructions, then the puzzle's manual."""
        return f"{self.prompts['EXPERT']}\n\n{self.prompts[CLASS_NAMES[puzzle]]}"

    def solver_prompt(self) -> str:
        """The solver's instructions, as COMMA gives them."""
        return self.prompts["SOLVER"]

    def instance(self, puzzle: str, seed: int) -> dict[str, Any] | None:
        """COMMA's instance ``seed`` (modulo their number) of ``puzzle`` as a parley instance;
        None where parley keeps its own.

        What COMMA leaves to chance at play time (the LED letters, the memory module's later
        displays) is drawn from ``seed``. Telehealth's instances name PAD-UFES-20 images, which
        a checkout does not hold: that puzzle keeps parley's own instances."""
        if puzzle not in _CONVERT:
            return None
        rows = self.instances[CLASS_NAMES[puzzle]]
        index = seed % len(rows)
        params = rows[index]
        try:
            made = _CONVERT[puzzle](params, seed, self)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ReferenceError(
                f"{self.config / INSTANCES}: {CLASS_NAMES[puzzle]} instance {index} "
                f"cannot be read ({type(exc).__name__}: {exc})"
            ) from None
        return {"seed": seed, "reference_index": index, **made}

    def provenance(self) -> dict[str, Any]:
        """For ``run.json``: the checkout's path, its git commit (None outside git) and the
        sha256 of every file read, by path relative to the checkout."""
        return {
            "family": "comma",
            "path": str(self.root),
            "commit": git_commit(self.root),
            "files": dict(self.files),
        }


def config_folder(root: Path) -> Path:
    """COMMA's config folder inside ``root``; a :class:`ReferenceError` naming the places tried."""
    if not root.is_dir():
        raise ReferenceError(f"{root}: not a folder (expected a checkout of COMMA)")
    for place in CONFIG_PLACES:
        if (root / place / PROMPTS).is_file():
            return root / place
    tried = ", ".join(f"{place}/{PROMPTS}" for place in CONFIG_PLACES)
    raise ReferenceError(f"{root}: no COMMA config folder (looked for {tried})")


def load(path: str | Path) -> CommaReference:
    """The COMMA checkout at ``path``, read and checked (cached while its files are unchanged)."""
    root = Path(path).expanduser().resolve()
    config = config_folder(root)
    stamps = tuple(_stamp(config / name) for name in (PROMPTS, INSTANCES, RUN_SETTINGS))
    return _load(root, config, stamps)


def problems(path: Any) -> list[str]:
    """What is wrong with ``path`` as a reference (empty when it can be played)."""
    if not isinstance(path, str) or not path:
        return [f"reference must be the path of a COMMA checkout, not {path!r}"]
    try:
        load(path)
    except ReferenceError as exc:
        return [f"reference: {exc}"]
    return []


def _stamp(file: Path) -> tuple[str, int, int]:
    try:
        info = file.stat()
    except OSError:
        return (str(file), -1, -1)
    return (str(file), info.st_mtime_ns, info.st_size)


@lru_cache(maxsize=8)
def _load(root: Path, config: Path, stamps: tuple[Any, ...]) -> CommaReference:
    files: dict[str, str] = {}
    prompts = _read(config / PROMPTS, root, files)
    instances = _read(config / INSTANCES, root, files)
    run = _read(config / RUN_SETTINGS, root, files)
    return CommaReference(
        root=root,
        config=config,
        prompts=_check_prompts(config / PROMPTS, prompts),
        instances=_check_instances(config / INSTANCES, instances),
        **_check_run(config / RUN_SETTINGS, run),
        files=files,
    )


def _read(file: Path, root: Path, files: dict[str, str]) -> Any:
    raw = read_hashed(file, root, files)
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReferenceError(f"{file}: not JSON ({exc})") from None


def _check_prompts(file: Path, prompts: Any) -> dict[str, str]:
    if not isinstance(prompts, dict):
        raise ReferenceError(f"{file}: expected an object of prompt texts")
    for key in ("EXPERT", "SOLVER", *CLASS_NAMES.values()):
        if not isinstance(prompts.get(key), str) or not prompts[key].strip():
            raise ReferenceError(f"{file}: no {key} text")
    return {k: v for k, v in prompts.items() if isinstance(v, str)}


def _check_instances(file: Path, entries: Any) -> dict[str, list[dict[str, Any]]]:
    if not isinstance(entries, list):
        raise ReferenceError(f"{file}: expected a list of instances")
    found: dict[str, list[dict[str, Any]]] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or len(entry) != 1:
            raise ReferenceError(f"{file}: entry {i} is not one {{puzzle class: settings}} pair")
        ((name, params),) = entry.items()
        if not isinstance(params, dict):
            raise ReferenceError(f"{file}: entry {i} ({name}) has no settings object")
        found.setdefault(name, []).append(params)
    missing = [name for name in CLASS_NAMES.values() if not found.get(name)]
    if missing:
        raise ReferenceError(f"{file}: no instances of {', '.join(missing)}")
    return found


def _check_run(file: Path, run: Any) -> dict[str, Any]:
    hyper = run.get("Hyperparameters") if isinstance(run, dict) else None
    if not isinstance(hyper, dict):
        raise ReferenceError(f"{file}: no Hyperparameters object")
    values: dict[str, Any] = {}
    for key, name in (("MAX_CONVERSATION_TURNS", "max_turns"), ("MAX_MISTAKES", "max_mistakes")):
        value = hyper.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ReferenceError(f"{file}: Hyperparameters.{key} must be a positive integer")
        values[name] = value
    serial = hyper.get("SERIAL_NUMBER")
    if not isinstance(serial, int | str) or not str(serial).isdigit():
        raise ReferenceError(f"{file}: Hyperparameters.SERIAL_NUMBER must be digits")
    values["serial"] = str(serial)
    return values


# --- COMMA's instance settings as parley instances -------------------------------------------


def _wire(p: dict[str, Any], seed: int, ref: CommaReference) -> dict[str, Any]:
    colors = [str(c).lower() for c in p["colors"]]
    if len(colors) != int(p["n_wires"]):
        raise ValueError(f"n_wires {p['n_wires']} but {len(colors)} colours")
    return {"colors": colors, "serial": ref.serial}


def _who(p: dict[str, Any], seed: int, ref: CommaReference) -> dict[str, Any]:
    labels = [str(t) for t in p["button_texts"]]
    return {
        "display": str(p["display_text"]),
        "labels": dict(zip(POSITIONS6, labels, strict=True)),
    }


def _led(p: dict[str, Any], seed: int, ref: CommaReference) -> dict[str, Any]:
    colours = [str(c).lower() for c in p["led_colors"]]
    if len(colours) != int(p["num_stages"]):
        raise ValueError(f"num_stages {p['num_stages']} but {len(colours)} LED colours")
    # COMMA draws each stage's letters when the stage starts: here from the seed.
    rng = random.Random(f"comma.led.reference:{seed}")
    return {"leds": colours, "stages": [led._stage(rng, c) for c in colours]}


def _memory(p: dict[str, Any], seed: int, ref: CommaReference) -> dict[str, Any]:
    # COMMA fixes only the first display; the later ones it draws as the module advances.
    stages = memory.MemoryPuzzle.generate(seed, {"rules": "comma"})["stages"]
    first = int(p["display_text"])
    if not 1 <= first <= 4:
        raise ValueError(f"display_text {first} is not 1-4")
    stages[0]["display"] = first
    return {"stages": stages}


def _keypad(p: dict[str, Any], seed: int, ref: CommaReference) -> dict[str, Any]:
    column = keypad.COLUMNS[int(p["strip_num"])]
    symbols = [column[int(i)] for i in p["image_nums"]]
    return {"symbols": dict(zip(KEYPAD_ORDER, symbols, strict=True))}


def _password(p: dict[str, Any], seed: int, ref: CommaReference) -> dict[str, Any]:
    word = str(p["answer_word"]).lower()
    shown = [str(c).lower() for c in p["current_letters"]]
    # Each wheel holds the letter before the answer's, the answer's and the one after.
    wheels = [[chr((ord(ch) - 98) % 26 + 97), ch, chr((ord(ch) - 96) % 26 + 97)] for ch in word]
    selected = [wheel.index(c) for wheel, c in zip(wheels, shown, strict=True)]
    return {"word": word, "wheels": wheels, "selected": selected}


def _colour(p: dict[str, Any], seed: int, ref: CommaReference) -> dict[str, Any]:
    colours = [str(c).lower() for c in p["colors"]]
    if len(colours) != 16:
        raise ValueError(f"{len(colours)} colours for a 4x4 grid")
    return {"grid": [colours[row * 4 : row * 4 + 4] for row in range(4)]}


def _maze(p: dict[str, Any], seed: int, ref: CommaReference) -> dict[str, Any]:
    grid = p["maze"]
    walls = ["".join("." if cell == 0 else "#" for cell in row) for row in grid]
    if len(walls) != 9 or any(len(row) != 9 for row in walls):
        raise ValueError("the maze is not 9x9")
    return {
        "walls": walls,
        "mouse": [int(p["start_x"]), int(p["start_y"])],
        "spheres": {k: list(v) for k, v in MAZE_SPHERES.items()},
        "torus": str(p["torus_color"]).lower(),
    }


def _atm(p: dict[str, Any], seed: int, ref: CommaReference) -> dict[str, Any]:
    pin = str(p["PIN"])
    if len(pin) != 4 or not pin.isdigit():
        raise ValueError(f"PIN {pin!r} is not four digits")
    # COMMA's cursor starts on the first option.
    return {"pin": pin, "balance": int(p["Balance"]), "cursor": 0}


_CONVERT = {
    "wire": _wire,
    "who": _who,
    "led": _led,
    "memory": _memory,
    "keypad": _keypad,
    "password": _password,
    "colour": _colour,
    "maze": _maze,
    "atm": _atm,
}

__all__ = ["CLASS_NAMES", "CommaReference", "ReferenceError", "load", "problems"]
