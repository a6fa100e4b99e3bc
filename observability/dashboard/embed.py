"""The dashboard inside a run's own process (``parley run CONFIG --dashboard [PORT]``).

It watches the run's bus (the local one by default: no broker needed), reads the run folder
as episodes are recorded, and pauses, resumes and aborts through the scheduler directly.

Example::

    dashboard = await start_embedded(scheduler, "runs/quickstart", port=8765)
    print(dashboard.url)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from parley.observability.dashboard.hub import Hub
from parley.observability.dashboard.server import Dashboard


def _progress_status(scheduler: Any, name: str) -> dict[str, Any]:
    """A status of the run's process from its scheduler's counters, for as long as no
    ``RunStatus`` arrives on the bus."""
    p = scheduler.progress
    return {
        "process": "main",
        "name": name,
        "planned": p.planned,
        "done": dict(p.outcomes),
        "running": p.running,
        "failed": p.failed,
        "skipped": p.skipped,
        "paused": bool(getattr(scheduler, "paused", False)),
        "turns_per_s": p.turns_per_s,
        "updated_at": time.time(),
    }


async def start_embedded(
    scheduler: Any,
    folder: str | Path,
    *,
    name: str = "",
    host: str = "127.0.0.1",
    port: int = 8765,
) -> Dashboard:
    """Serve a dashboard of the run ``scheduler`` plays into ``folder``; returns it started."""
    run = scheduler.options.run

    async def controller(target: str, command: str, episode: str, reason: str) -> str:
        if target != run:
            raise ValueError(f"this dashboard controls run {run!r}, not {target!r}")
        if command == "pause":
            scheduler.pause()
        elif command == "resume":
            scheduler.resume()
        elif scheduler.abort(episode, reason) is False:
            raise ValueError(f"episode {episode!r} is not running")
        return "scheduler"

    hub = Hub()
    state = hub.follow(folder, run=run) or hub.run(run)
    state.name = name or state.name
    state.live = True
    state.local_status = lambda: _progress_status(scheduler, state.name)
    dashboard = Dashboard(hub, host=host, port=port, controller=controller)
    bus = getattr(scheduler, "bus", None)
    if bus is not None:  # with worker processes, episodes play on their buses, not here
        await dashboard.watch(bus, run)
    await dashboard.start()
    return dashboard
