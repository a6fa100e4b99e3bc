"""Prompt assembly: system text + episodic memory (through a policy) + working memory."""

from __future__ import annotations

from dataclasses import dataclass, field

from parley.bus.messages import ImagePart, PromptMessage, TextPart
from parley.memory import MemoryEntry, WorkingMemory

Part = TextPart | ImagePart

_new = PromptMessage.__new__
_set = object.__setattr__


def _message(role: str, content: list[Part]) -> PromptMessage:
    """``PromptMessage.model_construct(role=role, content=content)`` for parts that are valid
    already (they came off the bus), at a third of the CPU: a prompt has a handful of messages
    and is built every turn. Sets what ``model_construct`` sets (tested against it)."""
    message = _new(PromptMessage)
    _set(message, "__dict__", {"role": role, "content": content})
    _set(message, "__pydantic_fields_set__", {"role", "content"})
    _set(message, "__pydantic_extra__", None)
    _set(message, "__pydantic_private__", None)
    return message


@dataclass
class Prompt:
    """Everything a policy may use for one turn, and nothing else."""

    role: str
    system: str
    history: list[MemoryEntry]
    working: WorkingMemory
    turn: int
    # Memory of earlier episodes (memory/across.py), first after the system text.
    recall: list[MemoryEntry] = field(default_factory=list)
    # The agent's messages of history entries it built for earlier turns, by entry (the
    # entry kept beside its message, so an id is never reused while cached): a long episode
    # otherwise rebuilds its whole history every turn.
    cache: dict[int, tuple[MemoryEntry, PromptMessage]] | None = field(default=None, repr=False)
    _messages: list[PromptMessage] | None = field(default=None, init=False, repr=False)

    def messages(self) -> list[PromptMessage]:
        """The prompt as chat messages: system, the history, then the current observation.

        Messages from other roles are labelled with the sender; consecutive messages of the same
        chat role are left to the backend to merge where its API needs alternation. Built once
        per prompt (the policy and the transcript both need it); treat it as read-only.
        """
        if self._messages is not None:
            return self._messages
        # The parts are validated already (they came off the bus): messages are constructed
        # without re-checking them. (A new TextPart is validated: that is cheaper than
        # model_construct for a model this small.)
        out = [_message("system", [TextPart(text=self.system)])]
        for entry in self.recall:
            out.append(_message("user", list(entry.parts)))
        cache = self.cache
        for entry in self.history:
            hit = cache.get(id(entry)) if cache is not None else None
            if hit is not None and hit[0] is entry:
                out.append(hit[1])
                continue
            if entry.own:
                message = _message("assistant", list(entry.parts))
            else:
                message = _message("user", _labelled(entry))
            if cache is not None:
                cache[id(entry)] = (entry, message)
            out.append(message)
        if cache is not None and len(cache) > 2 * len(self.history) + 16:
            # Entries that left the window (last_k) or a store that loads new objects.
            keep = {id(e) for e in self.history}
            for key in [k for k in cache if k not in keep]:
                del cache[key]
        current: list[Part] = list(self.working.observation)
        if self.working.feedback:
            current.append(TextPart(text=f"Feedback: {self.working.feedback}"))
        if current:
            out.append(_message("user", current))
        self._messages = out
        return out

    def record(self) -> list[PromptMessage]:
        """The prompt with images by reference, for the transcript."""
        messages = list(self.messages())
        for i, m in enumerate(messages):
            for part in m.content:
                if isinstance(part, ImagePart) and part.data is not None:
                    content = [
                        p.by_reference() if isinstance(p, ImagePart) else p for p in m.content
                    ]
                    messages[i] = _message(m.role, content)
                    break
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
        parts[0] = TextPart(text=f"{label}: {parts[0].text}")
    else:
        parts.insert(0, TextPart(text=f"{label}:"))
    return parts


def history_text(history: list[MemoryEntry]) -> list[tuple[str, str]]:
    """History as (speaker, text) pairs, images left out."""
    return [
        (e.speaker, "\n".join(p.text for p in e.parts if isinstance(p, TextPart))) for e in history
    ]
