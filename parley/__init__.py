"""parley: models and scripted, random or human players in communication games, puzzles and
board games, many episodes at once, every turn traced.

The repository's top-level folders are this package's subpackages (``parley.runtime``,
``parley.agents``, ``parley.environments``, ``parley.bus``, ``parley.memory``,
``parley.observability``), mapped by ``package-dir`` in ``pyproject.toml``.

From Python (docs/api.md)::

    import parley

    result = await parley.run("configs/quickstart.yaml", out="runs/nb")  # or parley.run_sync
    df = result.episodes()  # or parley.results.episodes("runs/nb")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parley.runtime.api import RunResult, run, run_sync

__all__ = ["RunResult", "__version__", "run", "run_sync"]

# The notebook API (parley.runtime.api), imported on first use: `import parley` stays light
# (the runtime pulls in the bus, the model SDKs' clients and the games), and the root's
# neutral modules (records, tokens, …) never load the runtime.
_API = ("run", "run_sync", "RunResult")


def __getattr__(name: str) -> Any:
    # Looked up on use: importlib.metadata is a costly import for every process of parley.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("parley")
        except PackageNotFoundError:  # imported from a checkout that was never installed
            return "0+unknown"
    if name in _API:
        from parley.runtime import api

        return getattr(api, name)
    raise AttributeError(f"module 'parley' has no attribute {name!r}")
