"""What ``parley run`` shows while its run plays: a live table on a terminal, a status line
now and then in a log (nohup, Slurm), nothing with ``--quiet``.

Both show the run status its scheduler last published (runtime/status.py). Example::

    display = RunDisplay(console, "comma", quiet=False, log_every_s=None)
    display.start()
    display.scheduler = scheduler  # once the run has one
    ...
    display.show_final()
    display.stop()
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.table import Table

from parley.runtime import status
from parley.runtime.status import pairing_fields, progress_fields, rate_fields, status_line

if TYPE_CHECKING:
    from parley.bus.messages import RunStatus
    from parley.runtime.run_scheduler import RunScheduler


class RunDisplay:
    """The progress of the run ``name`` on ``console``: a table refreshed four times a second
    where ``console`` is a terminal, else a :func:`status_line` on stderr every
    ``log_every_s`` (default :data:`~parley.runtime.status.LOG_EVERY_S`); nothing when
    ``quiet``. It shows "starting…" until :attr:`scheduler` is set and has published a
    status."""

    def __init__(
        self, console: Console, name: str, *, quiet: bool, log_every_s: float | None
    ) -> None:
        self.console = console
        self.name = name
        self.quiet = quiet
        # The status module's default as it is now, not as it was when this was imported.
        self.log_every_s = log_every_s or status.LOG_EVERY_S
        self.live = not quiet and console.is_terminal
        self.scheduler: RunScheduler | None = None
        # Not transient: the last figures stay on the screen above the results.
        self._live = Live(self.table(), console=console, refresh_per_second=4, transient=False)
        self._ticker: asyncio.Task[None] | None = None

    def latest(self) -> RunStatus | None:
        """The run's status as last published: what the display shows."""
        publisher = self.scheduler.status if self.scheduler is not None else None
        return publisher.latest if publisher is not None else None

    def table(self) -> Table:
        """The live table: progress, rates, success by pairing, why the run waits."""
        table = Table.grid(padding=(0, 2))
        now = self.latest()
        if now is None:
            table.add_row("starting…")
            return table
        progress = [
            f"[red]{f}[/]" if f.startswith("failed") and now.failed else f
            for f in progress_fields(now)
        ]
        rates = [
            f"[yellow]{f}[/]" if f.startswith("429s") and not f.startswith("429s 0,") else f
            for f in rate_fields(now)
        ]
        # One line of figures a row (wrapped by rich where the terminal is narrow).
        table.add_row(f"[bold]{self.name}[/]", "  ".join(progress))
        table.add_row("", "  ".join(rates))
        for pairing in pairing_fields(now, limit=8):  # success so far by pairing
            table.add_row("", pairing)
        waiting = getattr(self.scheduler, "waiting", None)  # workers: remote, none there
        if waiting:
            table.add_row("", f"[yellow]{waiting}[/]")
        return table

    def start(self) -> None:
        """Show the table, or start the log lines (in the running event loop)."""
        if self.live:
            self._live.start()
        if not self.quiet:
            self._ticker = asyncio.create_task(self._refresh() if self.live else self._log())

    def show_final(self) -> None:
        """The run's final figures: the table once more, or a last log line."""
        if self.live:
            self._live.update(self.table(), refresh=True)
        elif not self.quiet and (now := self.latest()) is not None:
            print(status_line(now), file=sys.stderr, flush=True)

    def stop(self) -> None:
        """Stop refreshing; the table's last figures stay on the screen."""
        if self._ticker is not None:
            self._ticker.cancel()
        if self.live:
            self._live.stop()

    async def _refresh(self) -> None:
        while True:
            self._live.update(self.table())
            await asyncio.sleep(0.25)

    async def _log(self) -> None:
        # The first line as soon as the run has a status: a log shows the run has started.
        while True:
            now = self.latest()
            if now is None:
                await asyncio.sleep(0.1)
                continue
            print(status_line(now), file=sys.stderr, flush=True)
            await asyncio.sleep(self.log_every_s)
