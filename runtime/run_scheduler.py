"""What every way of playing a run offers its caller: the run command, the run status, the
embedded dashboard.

Three classes implement it: :class:`~parley.runtime.scheduler.Scheduler` (episodes in this
process), :class:`~parley.runtime.workers.WorkerScheduler` (child processes) and
:class:`~parley.runtime.remote.RemoteScheduler` (``parley worker`` processes over MQTT).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opentelemetry import trace

    from parley.runtime.episode import EpisodeOptions
    from parley.runtime.experiment import EpisodeSpec
    from parley.runtime.scheduler import Progress
    from parley.runtime.status import StatusPublisher


class RunScheduler(Protocol):
    """Plays a run's episodes and is steered while it does.

    ``stop()`` ends the run (the episodes in flight are played again on ``--resume``);
    ``pause()`` starts no new episode until ``resume()``; ``abort(episode, reason)`` ends one
    running episode as ``aborted``, False when it is not running. ``progress`` counts the run,
    ``turns_in_flight()`` and ``endpoint_figures()`` are what the run status adds to it.
    """

    specs: list[EpisodeSpec]
    options: EpisodeOptions
    progress: Progress
    # The run status (runtime/status.py), set by run_experiment before the run starts.
    status: StatusPublisher | None
    stopping: bool
    paused: bool
    # What went wrong outside any episode; the run stays resumable.
    errors: list[str]

    async def run(self, parent: trace.Span | None = None) -> None: ...

    def stop(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def abort(self, episode: str, reason: str = "") -> bool: ...

    def turns_in_flight(self) -> int: ...

    def endpoint_figures(self) -> list[list[dict[str, Any]]]: ...
