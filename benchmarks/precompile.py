"""Bytecode for parley's own modules before a benchmark times processes that start.

pip compiles a package's modules when it installs one, so the peers' virtual environments
start with bytecode for every module. An editable install of parley (the README's) has none
until Python writes it on a module's first import, and where ``PYTHONDONTWRITEBYTECODE=1`` is
set (container images often set it; so do the machines the figures in docs/performance.md
come from) Python never writes it: each process, the run's worker processes included, then
compiles every parley module it imports, about 0.3 s of CPU a process on those machines. A
benchmark that times process starts calls :func:`compile_parley` first, which does for parley
what pip did for the peers (and what ``python -m compileall`` does for a user).

    from precompile import compile_parley
    compile_parley()  # how many modules got bytecode (0 when all had it already)
"""

from __future__ import annotations

import compileall
import importlib.util
import io
import sys
import tomllib
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parley_sources() -> list[Path]:
    """The folders of parley's packages in this checkout, as pyproject.toml maps them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = project["tool"]["setuptools"]["package-dir"].values()
    return sorted({ROOT / folder for folder in folders})


def _bytecode_times() -> dict[Path, int | None]:
    """When each parley module's bytecode file was last written (None: it has none)."""
    times: dict[Path, int | None] = {}
    for folder in parley_sources():
        for source in folder.rglob("*.py"):
            cached = Path(importlib.util.cache_from_source(str(source)))
            times[source] = cached.stat().st_mtime_ns if cached.exists() else None
    return times


def compile_parley() -> int:
    """Write bytecode for every parley module whose bytecode is missing or out of date; how
    many modules got it.

    ``compileall`` writes it whatever ``PYTHONDONTWRITEBYTECODE`` says, as pip does, and
    leaves bytecode that is current alone (the import system's own test)."""
    before = _bytecode_times()
    said = io.StringIO()
    with redirect_stdout(said):  # compileall names each file it compiles, and each failure
        failed = [f for f in parley_sources() if not compileall.compile_dir(f, quiet=1)]
    written = sum(when != before.get(source) for source, when in _bytecode_times().items())
    if failed:
        # A read-only checkout, say: the benchmark still runs, its processes compiling.
        print(
            "some parley modules got no bytecode, and the timed processes will compile "
            f"them at their start: {said.getvalue().strip()[-500:]}",
            file=sys.stderr,
        )
    if written:
        print(
            f"compiled {written} parley modules to bytecode first (as pip did for the peers; "
            "benchmarks/precompile.py says why)",
            file=sys.stderr,
        )
    return written
