"""``parley dashboard``: watch runs live in a browser, and read finished ones from their folders.

The server (:mod:`.server`, aiohttp) aggregates what the bus carries and what run folders hold
(:mod:`.hub`), and pushes each browser view at most a few updates a second over a WebSocket;
the front end (``static/``) is plain JavaScript modules, with no build step.

Example::

    parley dashboard --bus mqtt://localhost:1883 --runs runs/
    parley run configs/comma.yaml --dashboard          # embedded, on the run's own bus
"""

from __future__ import annotations

from parley.observability.dashboard.hub import Hub
from parley.observability.dashboard.server import Dashboard

__all__ = ["Dashboard", "Hub"]
