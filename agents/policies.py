"""Policies decide a reply from a prompt. All are async; scripted and random ones wrap a
function the runtime hands over (game knowledge lives with the game, not here)."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio

from parley.agents.backends.formats import repair_text
from parley.agents.prompt import Prompt
from parley.bus.messages import ImagePart, TextPart, Usage


@dataclass
class Decision:
    """A policy's reply and what it cost."""

    text: str
    model: str = ""
    usage: Usage | None = None
    latency_s: float = 0.0
    raw: dict[str, Any] | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)


class Policy(Protocol):
    """Turns a prompt into a reply."""

    name: str

    async def decide(self, prompt: Prompt) -> Decision: ...

    async def aclose(self) -> None: ...


class FunctionPolicy:
    """A synchronous function of the prompt: how scripted and random players run.

    ``offload=True`` runs it in a worker thread, for players that search (chess engines,
    alpha-beta) and would otherwise stall the event loop.
    """

    def __init__(self, name: str, fn: Callable[[Prompt], str], *, offload: bool = False) -> None:
        self.name = name
        self._fn = fn
        self.offload = offload

    async def decide(self, prompt: Prompt) -> Decision:
        start = time.perf_counter()
        if self.offload:
            text = await anyio.to_thread.run_sync(self._fn, prompt)
        else:
            text = self._fn(prompt)
        return Decision(text=text, model=self.name, latency_s=time.perf_counter() - start)

    async def aclose(self) -> None:
        return None


class HumanPolicy:
    """A person at the terminal: prints what the role sees, reads a reply ending in a blank line.

    Images are written as PNG files to ``image_dir`` (default: ``$PARLEY_HUMAN_IMAGES`` or
    ``<tmp>/parley-human``) and their paths printed, so the person can open them mid-episode.
    """

    name = "human"

    def __init__(
        self,
        read: Callable[[str], str] = input,
        write: Callable[[str], Any] = print,
        image_dir: str | Path | None = None,
    ):
        self._read, self._write = read, write
        default = (
            os.environ.get("PARLEY_HUMAN_IMAGES") or Path(tempfile.gettempdir()) / "parley-human"
        )
        self.image_dir = Path(image_dir or default)

    async def decide(self, prompt: Prompt) -> Decision:
        start = time.perf_counter()
        terminal = _stdin_lines() if self._read is input else None
        if terminal is not None:
            # The real stdin: read from the event loop (loop.add_reader), so Ctrl-C (which
            # cancels the episode) ends the wait at once instead of when a line is typed.
            self._show_prompt(prompt)
            text = await terminal.reply()
        else:  # a given read function (or a replaced sys.stdin): read it in a thread
            text = await anyio.to_thread.run_sync(self._ask, prompt, abandon_on_cancel=True)
        return Decision(
            text=repair_text(text)[0],  # a terminal's undecodable bytes: U+FFFD
            model="human",
            latency_s=time.perf_counter() - start,
            raw={"player": "human", "via": "terminal"},
        )

    def _ask(self, prompt: Prompt) -> str:
        self._show_prompt(prompt)
        lines: list[str] = []
        while True:
            try:
                line = self._read("")
            except EOFError:
                break
            if not line and lines:
                break
            lines.append(line)
        sys.stdout.flush()
        return "\n".join(lines)

    def _show_prompt(self, prompt: Prompt) -> None:
        write = self._write
        write(f"\n===== {prompt.role}, turn {prompt.turn} =====")
        if prompt.turn == 0 or not prompt.history:
            write(prompt.system)
        for entry in prompt.history[-4:]:
            texts = [p.text for p in entry.parts if isinstance(p, TextPart)]
            write(f"[{entry.speaker}] " + "\n".join(texts))
        for part in prompt.working.observation:
            if isinstance(part, TextPart):
                write(part.text)
            elif isinstance(part, ImagePart):
                write(self._show(part))
        if prompt.working.feedback:
            write(f"Feedback: {prompt.working.feedback}")
        if prompt.working.legal_actions:
            write("Actions: " + ", ".join(prompt.working.legal_actions))
        write("Your reply (end with an empty line):")
        sys.stdout.flush()

    def _show(self, part: ImagePart) -> str:
        """Where the person can look at an image (its bytes, when present, go to a file)."""
        if part.data is None:
            return f"(image {part.sha256[:12]}, {part.size} bytes: see the run's images/ folder)"
        self.image_dir.mkdir(parents=True, exist_ok=True)
        path = self.image_dir / f"{part.sha256}.png"
        if not path.exists():
            path.write_bytes(part.data)
        return f"(image: {path})"

    async def aclose(self) -> None:
        return None


class _StdinLines:
    """Lines of the process's stdin, read from the event loop (``loop.add_reader`` on its file
    descriptor) rather than by a thread blocked in ``input()``: a cancelled wait (Ctrl-C ends
    the episode) stops at once, and what was typed so far stays buffered for the next prompt.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.eof = False

    def _line(self) -> str | None:
        if b"\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\n")
            return line.decode(errors="replace").rstrip("\r")
        if self.eof and self.buffer:
            line, self.buffer = self.buffer, b""
            return line.decode(errors="replace")
        return None

    async def readline(self) -> str | None:
        """The next line (without its end), or None at the end of input."""
        while (line := self._line()) is None:
            if self.eof:
                return None
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[None] = loop.create_future()

            def on_readable(ready: asyncio.Future[None] = ready) -> None:
                if not ready.done():
                    ready.set_result(None)

            loop.add_reader(self.fd, on_readable)
            try:
                await ready
            finally:
                loop.remove_reader(self.fd)
            data = os.read(self.fd, 65536)  # readable: does not block
            self.eof = not data
            self.buffer += data
        return line

    async def reply(self) -> str:
        """Lines up to an empty line after some text (or the end of input), joined."""
        lines: list[str] = []
        while True:
            line = await self.readline()
            if line is None or (not line and lines):
                break
            lines.append(line)
        return "\n".join(lines)


_STDIN: _StdinLines | None = None


def _stdin_lines() -> _StdinLines | None:
    """The shared reader of the real stdin, or None where it cannot be watched by the event
    loop (stdin replaced, e.g. by a test, or not a file descriptor the loop can poll)."""
    global _STDIN
    if sys.stdin is not sys.__stdin__ or sys.stdin is None:
        return None
    try:
        fd = sys.stdin.fileno()
    except (OSError, ValueError):
        return None
    if _STDIN is None or _STDIN.fd != fd:
        import stat

        # A terminal, pipe or socket can be polled; epoll refuses regular files and devices
        # such as /dev/null: those are read in a thread.
        mode = os.fstat(fd).st_mode
        if not (os.isatty(fd) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return None
        _STDIN = _StdinLines(fd)
    return _STDIN


class SeatClosed(RuntimeError):
    """The seat was closed (its episode ended) before its person answered."""


class SeatPolicy:
    """A person at a dashboard seat (``via: browser``, docs/humans.md): the reply is what they
    send from their browser.

    The seat's server (``parley.observability.dashboard.seats``) plays the role's agent with
    this policy: :meth:`decide` hands the assembled prompt (what a model in the role would be
    given: system text, the conversation so far under the role's memory policy, the
    observation, feedback and legal actions) to ``on_prompt``, which shows it to the person,
    and waits until :meth:`answer` gives their reply. Its latency is the time the person took.
    Example::

        policy = SeatPolicy(on_prompt=show)
        response = await Agent("solver", policy).respond(request)  # waits for answer()
        policy.answer("cut_wire_2")   # from the browser, meanwhile
    """

    name = "human"

    def __init__(self, on_prompt: Callable[[Prompt], Any] | None = None) -> None:
        self.on_prompt = on_prompt
        self.prompt: Prompt | None = None  # the prompt waiting for an answer, if any
        self._answer: asyncio.Future[str] | None = None

    @property
    def waiting(self) -> bool:
        return self._answer is not None and not self._answer.done()

    async def decide(self, prompt: Prompt) -> Decision:
        start = time.perf_counter()
        self.prompt = prompt
        self._answer = asyncio.get_running_loop().create_future()
        if self.on_prompt is not None:
            self.on_prompt(prompt)
        try:
            text = await self._answer
        finally:
            self.prompt = None
            self._answer = None
        return Decision(
            # Half an emoji pasted in a page arrives as a lone surrogate, which no record can
            # hold: U+FFFD instead, as for a model's reply.
            text=repair_text(text)[0],
            model="human",
            latency_s=time.perf_counter() - start,
            raw={"player": "human", "via": "browser"},
        )

    def answer(self, text: str) -> bool:
        """The person's reply to the waiting prompt; False when none is waiting."""
        if not self.waiting:
            return False
        assert self._answer is not None
        self._answer.set_result(text)
        return True

    async def aclose(self) -> None:
        if self.waiting:
            assert self._answer is not None
            self._answer.set_exception(SeatClosed("the seat was closed"))
