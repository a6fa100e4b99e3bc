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
    compile_parley()  # the number of modules that had no current bytecode
"""

from __future__ import annotations

import compileall
import importlib.util
import io
import sys
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parley_sources() -> list[Path]:
    """The folders of parley's packages in this checkout (the package maps several)."""
    folders = {ROOT / "parley"}
    for name in ("agents", "bus", "environments", "memory", "observability", "runtime"):
        folders.add(ROOT / name)
    return sorted(f for f in folders if f.is_dir())


def stale_modules() -> list[Path]:
    """parley's modules whose bytecode is missing or older than their source."""
    stale = []
    for folder in parley_sources():
        for source in folder.rglob("*.py"):
            cached = Path(importlib.util.cache_from_source(str(source)))
            if not cached.exists() or cached.stat().st_mtime < source.stat().st_mtime:
                stale.append(source)
    return stale


def compile_parley() -> int:
    """Write bytecode for every parley module that lacks current bytecode; how many there were.

    ``compileall`` writes it whatever ``PYTHONDONTWRITEBYTECODE`` says, as pip does."""
    stale = stale_modules()
    if stale:
        with redirect_stdout(io.StringIO()):  # compileall names each file it compiles
            for folder in parley_sources():
                if not compileall.compile_dir(folder, quiet=1):
                    raise RuntimeError(f"parley's modules under {folder} do not compile")
        print(
            f"compiled {len(stale)} parley modules to bytecode first "
            "(as pip did for the peers; benchmarks/precompile.py says why)",
            file=sys.stderr,
        )
    return len(stale)
