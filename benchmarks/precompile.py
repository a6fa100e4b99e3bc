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
            if not _current(source, Path(importlib.util.cache_from_source(str(source)))):
                stale.append(source)
    return stale


def _current(source: Path, cached: Path) -> bool:
    """Whether ``cached`` holds the bytecode of ``source`` as it is now: the test the import
    system makes, on the source's mtime and size kept in the bytecode file's header."""
    try:
        with cached.open("rb") as f:
            head = f.read(16)
    except OSError:
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER or head[4:8] != bytes(4):
        return False
    stat = source.stat()
    return (
        int.from_bytes(head[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
        and int.from_bytes(head[12:16], "little") == stat.st_size & 0xFFFFFFFF
    )


def compile_parley() -> int:
    """Write bytecode for every parley module that lacks current bytecode; how many there were.

    ``compileall`` writes it whatever ``PYTHONDONTWRITEBYTECODE`` says, as pip does."""
    stale = stale_modules()
    if stale:
        said = io.StringIO()
        with redirect_stdout(said):  # compileall names each file it compiles, and each failure
            failed = [f for f in parley_sources() if not compileall.compile_dir(f, quiet=1)]
        if failed:
            # A read-only checkout, say: the benchmark still runs, its processes compiling.
            print(
                "some parley modules got no bytecode, and the timed processes will compile "
                f"them at their start: {said.getvalue().strip()[-500:]}",
                file=sys.stderr,
            )
        print(
            f"compiled {len(stale) - len(stale_modules())} of {len(stale)} parley modules "
            "without bytecode first (as pip did for the peers; benchmarks/precompile.py "
            "says why)",
            file=sys.stderr,
        )
    return len(stale)
