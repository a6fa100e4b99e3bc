"""Prompt assembly: system text + episodic memory (through a policy) + working memory."""

from __future__ import annotations

from dataclasses import dataclass

from bus.messages import ImagePart, PromptMessage, TextPart
from memory import MemoryEntry, WorkingMemory

Part = TextPart | ImagePart


@dataclass
class Prompt:
    """Everything a policy may use for one turn, and nothing else."""

    role: str
    system: str
    history: list[MemoryEntry]
    working: WorkingMemory
    turn: int

    def messages(self) -> list[PromptMessage]:
        """The prompt as chat messages: system, the history, then the current observation.

        Messages from other roles are labelled with the sender; consecutive messages of the same
        chat role are left to the backend to merge where its API needs alternation.
        """
        out = [PromptMessage(role="system", content=[TextPart(text=self.system)])]
        for entry in self.history:
            if entry.own:
                out.append(PromptMessage(role="assistant", content=list(entry.parts)))
            else:
                out.append(PromptMessage(role="user", content=_labelled(entry)))
        current: list[Part] = list(self.working.observation)
        if self.working.feedback:
            current.append(TextPart(text=f"Feedback: {self.working.feedback}"))
        if current:
            out.append(PromptMessage(role="user", content=current))
        return out

    def record(self) -> list[PromptMessage]:
        """The prompt with images by reference, for the transcript."""
        messages = self.messages()
        for i, m in enumerate(messages):
            if any(isinstance(p, ImagePart) and p.data is not None for p in m.content):
                content = [p.by_reference() if isinstance(p, ImagePart) else p for p in m.content]
                messages[i] = PromptMessage(role=m.role, content=content)
        return messages

    @property
    def text(self) -> str:
        """The current observation's text."""
        return "\n\n".join(p.text for p in self.working.observation if isinstance(p, TextPart))

    @property
    def images(self) -> list[ImagePart]:
        return [p for p in self.working.observation if isinstance(p, ImagePart)]


def _labelled(entry: MemoryEntry) -> list[Part]:
    parts = list(entry.parts)
    if parts and isinstance(parts[0], TextPart):
        parts[0] = TextPart(text=f"{entry.speaker.capitalize()}: {parts[0].text}")
    else:
        parts.insert(0, TextPart(text=f"{entry.speaker.capitalize()}:"))
    return parts


def history_text(history: list[MemoryEntry]) -> list[tuple[str, str]]:
    """History as (speaker, text) pairs, images left out."""
    return [
        (e.speaker, "\n".join(p.text for p in e.parts if isinstance(p, TextPart))) for e in history
    ]
