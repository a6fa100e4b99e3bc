"""clembench's own Reference game instances and prompts, read at run time from a user's
checkout of clembench (the ``reference`` setting of ``clem.reference``).

clembench's ``referencegame/in/instances.json`` holds each instance with both players' prompts
already filled (its instance generator fills ``resources/initial_prompts``), the grids, the
target's names for the guesser and the reply patterns. parley plays them as clembench's game
master does; none of that text is part of parley.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from parley.environments.clem import grids
from parley.environments.reference import ReferenceError, git_commit, read_hashed

GAME = "referencegame"
INSTANCES = f"{GAME}/in/instances.json"
FIELDS = (
    "player_1_prompt_header",
    "player_2_prompt_header",
    "player_1_target_grid",
    "player_1_second_grid",
    "player_1_third_grid",
    "player_2_first_grid",
    "player_2_second_grid",
    "player_2_third_grid",
    "target_grid_name",
    "player_1_response_pattern",
    "player_2_response_pattern",
)
# clembench's grids mark empty cells with either of two squares; parley's with one.
_EMPTY = {"□", "▢"}


@dataclass(frozen=True)
class ClembenchReference:
    """The Reference game's instances from one clembench checkout, and the hash of the file."""

    root: Path
    instances: list[dict[str, Any]]
    files: dict[str, str] = field(default_factory=dict)

    def instance(self, seed: int) -> dict[str, Any]:
        """clembench's instance ``seed`` (modulo their number, experiments in file order) as a
        parley instance: the grids as parley's stimuli, clembench's own texts under
        ``clembench``."""
        index = seed % len(self.instances)
        item = self.instances[index]
        p1 = [_grid(item[f"player_1_{k}_grid"]) for k in ("target", "second", "third")]
        p2 = [_grid(item[f"player_2_{k}_grid"]) for k in ("first", "second", "third")]
        if sorted(p1) != sorted(p2) or len(set(p1)) != 3:
            raise ReferenceError(
                f"{self.root / INSTANCES}: instance {index}: the guesser's grids are not the "
                "describer's three grids"
            )
        texts = {k: item[k] for k in FIELDS if k.endswith(("header", "pattern", "name"))}
        return {
            "seed": seed,
            "set": f"clembench:{item['experiment']}",
            "source": "clembench",
            "images": [{"kind": "grid", "rows": list(g)} for g in p1],
            "guesser_order": [p1.index(g) for g in p2],
            "reference_index": index,
            "clembench": {
                **texts,
                "p1_mode": item.get("p1_mode", "strict"),
                "p2_mode": item.get("p2_mode", "strict"),
            },
        }

    def provenance(self) -> dict[str, Any]:
        """For ``run.json``: path, git commit (None outside git), sha256 of each file read."""
        return {
            "family": "clem",
            "path": str(self.root),
            "commit": git_commit(self.root),
            "files": dict(self.files),
        }


def load(path: str | Path) -> ClembenchReference:
    """The clembench checkout at ``path`` (cached while its instances file is unchanged)."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise ReferenceError(f"{root}: not a folder (expected a checkout of clembench)")
    file = root / INSTANCES
    try:
        info = file.stat()
    except OSError:
        raise ReferenceError(f"{root}: no {INSTANCES}") from None
    return _load(root, (info.st_mtime_ns, info.st_size))


def problems(path: Any) -> list[str]:
    """What is wrong with ``path`` as a clembench reference (empty when it can be played)."""
    if not isinstance(path, str) or not path:
        return [f"reference must be the path of a clembench checkout, not {path!r}"]
    try:
        load(path)
    except ReferenceError as exc:
        return [f"reference: {exc}"]
    return []


@lru_cache(maxsize=8)
def _load(root: Path, stamp: tuple[int, int]) -> ClembenchReference:
    files: dict[str, str] = {}
    file = root / INSTANCES
    raw = read_hashed(file, root, files)
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReferenceError(f"{file}: not JSON ({exc})") from None
    experiments = data.get("experiments") if isinstance(data, dict) else None
    if not isinstance(experiments, list):
        raise ReferenceError(f"{file}: no experiments list")
    found: list[dict[str, Any]] = []
    for e, experiment in enumerate(experiments):
        items = experiment.get("game_instances") if isinstance(experiment, dict) else None
        if not isinstance(items, list):
            raise ReferenceError(f"{file}: experiment {e} has no game_instances list")
        for i, item in enumerate(items):
            missing = [k for k in FIELDS if not isinstance(item, dict) or k not in item]
            if missing:
                raise ReferenceError(
                    f"{file}: experiment {e} instance {i} lacks {', '.join(missing)}"
                )
            for key in ("player_1_response_pattern", "player_2_response_pattern"):
                try:
                    re.compile(item[key])
                except (re.error, TypeError) as exc:
                    raise ReferenceError(
                        f"{file}: experiment {e} instance {i}: {key} is not a pattern ({exc})"
                    ) from None
            found.append({**item, "experiment": str(experiment.get("name", e))})
    if not found:
        raise ReferenceError(f"{file}: no instances")
    return ClembenchReference(root=root, instances=found, files=files)


def _grid(text: Any) -> grids.Grid:
    """clembench's grid text (cells separated by spaces, one row a line) as parley's rows."""
    if not isinstance(text, str):
        raise ReferenceError(f"a grid must be text, not {type(text).__name__}")
    rows = tuple(
        "".join(grids.EMPTY if cell in _EMPTY else cell for cell in line.split())
        for line in text.strip().splitlines()
    )
    if len(rows) != grids.SIZE or any(len(r) != grids.SIZE for r in rows):
        raise ReferenceError(f"a grid must be {grids.SIZE}x{grids.SIZE}, not {rows!r}")
    return rows


def matches(pattern: str, mode: str, reply: str) -> re.Match[str] | None:
    """``reply`` read as clembench's game master reads it: the pattern matched from the start,
    case ignored; in ``strict`` mode nothing may follow (its ``remainder`` group empty)."""
    found = re.compile(pattern, re.IGNORECASE).match(reply)
    if found is None:
        return None
    if mode == "strict" and (found.groupdict().get("remainder") or ""):
        return None
    return found
