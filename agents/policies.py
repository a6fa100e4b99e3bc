"""Policies decide a reply from a prompt. All are async; scripted and random ones wrap a
function the runtime hands over (game knowledge lives with the game, not here)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio

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
        text = await anyio.to_thread.run_sync(self._ask, prompt)
        return Decision(text=text, model="human", latency_s=time.perf_counter() - start)

    def _ask(self, prompt: Prompt) -> str:
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
