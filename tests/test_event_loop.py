"""``parley.event_loop.run``: the coroutine's result comes back untouched (never formatted as
text on the way out, which costs time in proportion to a run's outcome), its exceptions come
back as they were raised, and Ctrl-C still cancels it."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator

import pytest

from parley import event_loop


class Outcome:
    """A result that counts how often it is written out as text."""

    def __init__(self) -> None:
        self.reprs = 0

    def __repr__(self) -> str:
        self.reprs += 1
        return "Outcome()"


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler, which the runner replaces only when it is the one in place
    (a process started in the background inherits SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("python_sigint")
def test_the_result_comes_back_without_being_formatted() -> None:
    outcome = Outcome()

    async def main() -> Outcome:
        await asyncio.sleep(0)
        return outcome

    assert threading.current_thread() is threading.main_thread()  # where the runner sets SIGINT
    assert event_loop.run(main()) is outcome
    assert outcome.reprs == 0


def test_an_exception_comes_back_as_raised() -> None:
    async def main() -> None:
        raise LookupError("no such episode")

    with pytest.raises(LookupError, match="no such episode"):
        event_loop.run(main())


@pytest.mark.usefixtures("python_sigint")
def test_ctrl_c_cancels_the_coroutine_and_raises_keyboard_interrupt() -> None:
    seen: list[str] = []

    async def main() -> None:
        signal.raise_signal(signal.SIGINT)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        finally:
            seen.append("cleaned up")

    with pytest.raises(KeyboardInterrupt):
        event_loop.run(main())
    assert seen == ["cancelled", "cleaned up"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
