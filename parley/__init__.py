"""parley: models and scripted, random or human players in communication games, puzzles and
board games, many episodes at once, every turn traced.

The repository's top-level folders are this package's subpackages (``parley.runtime``,
``parley.agents``, ``parley.environments``, ``parley.bus``, ``parley.memory``,
``parley.observability``), mapped by ``package-dir`` in ``pyproject.toml``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("parley")
except PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"
