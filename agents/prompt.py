"""Prompt assembly: system text + episodic memory (through a policy) + working memory."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    _messages: list[PromptMessage] | None = field(default=None, init=False, repr=False)

    def messages(self) -> list[PromptMessage]:
        """The prompt as chat messages: system, the history, then the current observation.

        Messages from other roles are labelled with the sender; consecutive messages of the same
        chat role are left to the backend to merge where its API needs alternation. Built once
        per prompt (the policy and the transcript both need it); treat it as read-only.
        """
        if self._messages is not None:
            return self._messages
        # The parts are validated already (they came off the bus): construct without re-checking.
        message, text = PromptMessage.model_construct, TextPart.model_construct
        out = [message(role="system", content=[text(type="text", text=self.system)])]
        for entry in self.history:
            if entry.own:
                out.append(message(role="assistant", content=list(entry.parts)))
            else:
                out.append(message(role="user", content=_labelled(entry)))
        current: list[Part] = list(self.working.observation)
        if self.working.feedback:
            current.append(text(type="text", text=f"Feedback: {self.working.feedback}"))
        if current:
            out.append(message(role="user", content=current))
        self._messages = out
        return out

    def record(self) -> list[PromptMessage]:
        """The prompt with images by reference, for the transcript."""
        messages = list(self.messages())
        for i, m in enumerate(messages):
            if any(isinstance(p, ImagePart) and p.data is not None for p in m.content):
                content = [p.by_reference() if isinstance(p, ImagePart) else p for p in m.content]
                messages[i] = PromptMessage.model_construct(role=m.role, content=content)
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
    label = entry.speaker.capitalize()
    if parts and isinstance(parts[0], TextPart):
        parts[0] = TextPart.model_construct(type="text", text=f"{label}: {parts[0].text}")
    else:
        parts.insert(0, TextPart.model_construct(type="text", text=f"{label}:"))
    return parts


def history_text(history: list[MemoryEntry]) -> list[tuple[str, str]]:
    """History as (speaker, text) pairs, images left out."""
    return [
        (e.speaker, "\n".join(p.text for p in e.parts if isinstance(p, TextPart))) for e in history
    ]
