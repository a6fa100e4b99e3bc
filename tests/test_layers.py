"""Imports point one way between parley's layers (the architecture's Layout section).

Every module's imports are read with ``ast`` (module-level, function-local and
``TYPE_CHECKING`` ones alike: each is a dependency) and checked against the allowed directions:

- ``bus``, ``memory`` and ``environments`` import nothing of the other subpackages
  (environments: pure game logic, no bus, no model, no agent);
- ``agents`` knows bus messages and memory, not environments, the runtime or observability;
- ``observability`` may read anything but the runtime (its hot-path tracing included);
- ``runtime`` wires everything;
- the modules in the package root (``parley/tokens.py``, ``event_loop.py``, ``records.py`` …)
  are neutral ground every layer may import, so they import no subpackage themselves.

And no module anywhere imports the bare folder names (``runtime``, ``bus`` …) instead of
``parley.*``. A violation fails naming the file, the line and the import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("runtime", "agents", "environments", "bus", "memory", "observability")
# Which other subpackages each layer may import (the package root's modules: all of them).
ALLOWED: dict[str, frozenset[str]] = {
    "bus": frozenset(),
    "memory": frozenset(),
    "environments": frozenset(),
    "agents": frozenset({"bus", "memory"}),
    "observability": frozenset({"bus", "memory", "agents", "environments"}),
    "runtime": frozenset(SUBPACKAGES),
    "parley": frozenset(),  # the root's neutral modules
}
SCANNED = (*SUBPACKAGES, "parley", "tests", "benchmarks", "examples")
# The one exception: the package's own __init__ exposes the notebook API (``parley.run``, from
# parley.runtime.api) on first use, in its ``__getattr__``; no root module imports it.
FACADE: dict[str, frozenset[str]] = {"parley/__init__.py": frozenset({"runtime"})}


def modules(folder: str, root: Path = ROOT) -> Iterator[Path]:
    for path in sorted((root / folder).rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield path


def module_name(path: Path, root: Path = ROOT) -> str:
    """The dotted name ``path`` is imported as (``agents/x.py`` → ``parley.agents.x``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] in SUBPACKAGES:
        parts.insert(0, "parley")
    return ".".join(parts)


def imports(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``; ``from parley import name``
    gives ``parley.name`` (the name may be a subpackage)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's own package
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            if module == "parley":
                for alias in node.names:
                    yield node.lineno, f"parley.{alias.name}"
            else:
                yield node.lineno, module


def target_layer(module: str) -> str | None:
    """The subpackage ``module`` belongs to, ``"parley"`` for the root's modules, None outside."""
    parts = module.split(".")
    if parts[0] != "parley":
        return None
    if len(parts) > 1 and parts[1] in SUBPACKAGES:
        return parts[1]
    return "parley"


def layer_violations(here: str, root: Path = ROOT) -> list[str]:
    """``file:line: layer imports module`` for each import of the folder ``here`` (a layer)
    that its layer may not make."""
    found = []
    for path in modules(here, root):
        allowed = ALLOWED[here] | FACADE.get(path.relative_to(root).as_posix(), frozenset())
        for line, module in imports(path, root):
            there = target_layer(module)
            if there is None or there in (here, "parley"):
                continue  # outside parley, the same layer, or the neutral root
            if there not in allowed:
                found.append(f"{path.relative_to(root).as_posix()}:{line}: {here} imports {module}")
    return sorted(set(found))


@pytest.mark.parametrize("folder", [*SUBPACKAGES, "parley"])
def test_imports_point_one_way(folder: str) -> None:
    found = layer_violations(folder)
    assert not found, f"{folder} may import only {sorted(ALLOWED[folder])}:\n" + "\n".join(found)


def bare_imports(folder: str, root: Path = ROOT) -> list[str]:
    """``file:line: name`` for each import of a bare folder name (``runtime.x``) in ``folder``,
    also through ``importlib.import_module("…")`` and ``__import__("…")``."""
    found: list[tuple[str, int, str]] = []
    for path in modules(folder, root):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif (
                isinstance(node, ast.Call)
                and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
                in ("import_module", "__import__")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names = [node.args[0].value]
            for name in names:
                if name.split(".")[0] in SUBPACKAGES:
                    found.append((path.relative_to(root).as_posix(), node.lineno, name))
    return [f"{file}:{line}: {name}" for file, line, name in sorted(found)]


@pytest.mark.parametrize("folder", SCANNED)
def test_no_bare_top_level_names(folder: str) -> None:
    found = bare_imports(folder)
    assert not found, "import parley.<name>, not the bare folder name:\n" + "\n".join(found)


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """The scan itself: relative and absolute imports of a forbidden layer are found, imports
    of the neutral root and of the layer itself are not."""
    probe = tmp_path / "environments" / "_layers_probe.py"
    probe.parent.mkdir()
    probe.write_text(
        "from ..agents import policies\n"
        "import parley.bus.messages\n"
        "from parley import tokens, memory\n"
        "from . import registry\n",
        encoding="utf-8",
    )
    assert layer_violations("environments", tmp_path) == [
        "environments/_layers_probe.py:1: environments imports parley.agents",
        "environments/_layers_probe.py:2: environments imports parley.bus.messages",
        "environments/_layers_probe.py:3: environments imports parley.memory",
    ]


def test_the_checker_sees_a_bare_name(tmp_path: Path) -> None:
    probe = tmp_path / "tests" / "test_probe.py"
    probe.parent.mkdir()
    probe.write_text(
        "import runtime.cli\n"
        "from bus.messages import Message\n"
        "import importlib\n"
        "importlib.import_module('agents.policies')\n"
        "from parley.runtime import cli\n"
        "import tests.conftest\n",
        encoding="utf-8",
    )
    assert bare_imports("tests", tmp_path) == [
        "tests/test_probe.py:1: runtime.cli",
        "tests/test_probe.py:2: bus.messages",
        "tests/test_probe.py:4: agents.policies",
    ]
