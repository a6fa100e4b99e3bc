"""Prompt assembly: system text + episodic memory (through a policy) + working memory."""

from __future__ import annotations

from collections.abc import Sequence
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


class _Entry:
    """What a history entry turns into, built once per entry and kept by the agent: its chat
    message, its (speaker, text) pair for built-in players, whether its message carries image
    bytes (which the transcript's copy leaves out)."""

    __slots__ = ("entry", "images", "message", "pair")

    def __init__(self, entry: MemoryEntry) -> None:
        # The entry itself is kept, so that its id is never reused while cached.
        self.entry = entry
        self.message: PromptMessage | None = None
        self.images = False
        self.pair: tuple[str, str] | None = None


class PromptCache:
    """An agent's prompt pieces across the turns of one episode: a long episode otherwise
    rebuilds its whole history every turn (a 19-turn episode built 170 messages instead of 19).

    The history a turn shows usually extends the previous turn's (full memory: the store is
    append-only): then only the new entries are turned into messages. A window that moved
    (last k turns) is put together again from the entries' cached pieces.
    """

    __slots__ = ("entries", "history", "hits", "images", "messages", "pairs", "system")

    def __init__(self) -> None:
        self.entries: dict[int, _Entry] = {}
        self.system: tuple[str, PromptMessage] | None = None
        self.history: list[MemoryEntry] = []  # the entries of the latest prompt, in order
        self.messages: list[PromptMessage] = []  # their messages
        self.hits: list[_Entry] = []  # their cached pieces (the pairs are made from these)
        self.pairs: list[tuple[str, str]] = []  # their (speaker, text) pairs, as far as asked
        self.images = False  # whether any of those messages carries image bytes

    def of(self, entry: MemoryEntry) -> _Entry:
        hit = self.entries.get(id(entry))
        if hit is None or hit.entry is not entry:
            hit = self.entries[id(entry)] = _Entry(entry)
        return hit

    def _follow(self, history: list[MemoryEntry]) -> int:
        """How many of ``history``'s first entries the cached lists hold already (all of the
        previous history, when ``history`` extends it; else none, and they are emptied)."""
        previous = self.history
        n = len(previous)
        # Entries of one store in order: a window that starts and ends as the old one did
        # at the same places holds the same entries in between.
        if n and len(history) >= n and history[0] is previous[0] and history[n - 1] is previous[-1]:
            return n
        self.messages, self.hits, self.pairs, self.images = [], [], [], False
        if len(self.entries) > 2 * len(history) + 16:
            # Entries that left the window (last_k) or a store that loads new objects.
            keep = {id(e) for e in history}
            for key in [k for k in self.entries if k not in keep]:
                del self.entries[key]
        return 0

    def history_messages(self, history: list[MemoryEntry]) -> list[PromptMessage]:
        """The messages of ``history``'s entries (the cache's own list: copy before changing)."""
        start = self._follow(history)
        messages, hits = self.messages, self.hits
        for entry in history[start:]:
            hit = self.of(entry)
            if hit.message is None:
                if entry.own:
                    hit.message = _message("assistant", list(entry.parts))
                else:
                    hit.message = _message("user", _labelled(entry))
                hit.images = _has_image(entry.parts)
            messages.append(hit.message)
            hits.append(hit)
            self.images = self.images or hit.images
        self.history = history
        return messages

    def history_pairs(self, history: list[MemoryEntry]) -> list[tuple[str, str]]:
        """:func:`history_text` of ``history`` (the cache's own list: copy before changing)."""
        # Messages must keep pace with the entries (following ``history`` empties the pairs
        # where it does not extend the previous one); the pairs may lag behind them.
        self.history_messages(history)
        pairs = self.pairs
        for hit in self.hits[len(pairs) :]:
            if hit.pair is None:
                hit.pair = _pair(hit.entry)
            pairs.append(hit.pair)
        return pairs

    def clear(self) -> None:
        self.entries.clear()
        self.system = None
        self.history, self.messages, self.hits, self.pairs = [], [], [], []
        self.images = False


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
    # The agent's pieces of earlier turns' prompts (see PromptCache); None: built afresh.
    cache: PromptCache | None = field(default=None, repr=False)
    _messages: list[PromptMessage] | None = field(default=None, init=False, repr=False)
    _images: bool = field(default=False, init=False, repr=False)

    def messages(self) -> list[PromptMessage]:
        """The prompt as chat messages: system, the history, then the current observation.

        Messages from other roles are labelled with the sender; consecutive messages of the same
        chat role are left to the backend to merge where its API needs alternation. Built once
        per prompt (the policy and the transcript both need it); treat it as read-only.
        """
        if self._messages is not None:
            return self._messages
        cache = self.cache if self.cache is not None else PromptCache()
        # The parts are validated already (they came off the bus): messages are constructed
        # without re-checking them. (A new TextPart is validated: that is cheaper than
        # model_construct for a model this small.)
        system = cache.system
        if system is None or system[0] != self.system:
            system = cache.system = (self.system, _message("system", [TextPart(text=self.system)]))
        out = [system[1]]
        images = False
        for entry in self.recall:
            out.append(_message("user", list(entry.parts)))
            images = images or _has_image(entry.parts)
        out += cache.history_messages(self.history)
        images = images or cache.images
        current: list[Part] = list(self.working.observation)
        if self.working.feedback:
            current.append(TextPart(text=f"Feedback: {self.working.feedback}"))
        if current:
            out.append(_message("user", current))
            images = images or _has_image(current)
        self._messages = out
        self._images = images
        return out

    def record(self) -> list[PromptMessage]:
        """The prompt with images by reference, for the transcript (the very messages when
        no image bytes are in it: they are shared with earlier turns' records, not copied)."""
        messages = list(self.messages())
        if not self._images:
            return messages
        for i, m in enumerate(messages):
            if _has_image(m.content):
                content = [p.by_reference() if isinstance(p, ImagePart) else p for p in m.content]
                messages[i] = _message(m.role, content)
        return messages

    def history_pairs(self) -> list[tuple[str, str]]:
        """:func:`history_text` of the recall and the history, each entry's pair made once."""
        cache = self.cache if self.cache is not None else PromptCache()
        pairs = cache.history_pairs(self.history)
        # A copy either way: the cache's list grows with later turns.
        return history_text(self.recall) + pairs if self.recall else pairs[:]

    @property
    def text(self) -> str:
        """The current observation's text."""
        return _text(self.working.observation, "\n\n")

    @property
    def images(self) -> list[ImagePart]:
        return [p for p in self.working.observation if isinstance(p, ImagePart)]


def _has_image(parts: Sequence[Part]) -> bool:
    # A loop, not any() over a generator (its frames cost more than the test): asked of every
    # new entry and observation.
    for p in parts:  # noqa: SIM110
        if isinstance(p, ImagePart) and p.data is not None:
            return True
    return False


def _pair(entry: MemoryEntry) -> tuple[str, str]:
    return entry.speaker, _text(entry.parts, "\n")


def _text(parts: Sequence[Part], sep: str) -> str:
    """The texts of ``parts`` joined by ``sep``, images left out."""
    if len(parts) == 1 and type(parts[0]) is TextPart:
        return parts[0].text  # the usual single text, without a generator
    return sep.join(p.text for p in parts if isinstance(p, TextPart))


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
    return [_pair(e) for e in history]
