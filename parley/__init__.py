"""parley: models and scripted, random or human players in communication games, puzzles and
board games, many episodes at once, every turn traced.

The repository's top-level folders are this package's subpackages (``parley.runtime``,
``parley.agents``, ``parley.environments``, ``parley.bus``, ``parley.memory``,
``parley.observability``), mapped by ``package-dir`` in ``pyproject.toml``.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # Looked up on use: importlib.metadata costs every process that imports parley ~0.1 s.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("parley")
        except PackageNotFoundError:  # imported from a checkout that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'parley' has no attribute {name!r}")
