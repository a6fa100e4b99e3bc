"""Working memory: what an agent holds for the current turn only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class WorkingMemory:
    """The current observation (content parts: text and images), the latest feedback, the legal
    actions and the role's machine-readable view.

    Bounded by construction: each turn replaces it whole, so images from earlier turns are not
    carried into later prompts. Parts are opaque here; the agent knows what they are.
    """

    observation: list[Any] = field(default_factory=list)
    feedback: str | None = None
    legal_actions: list[str] = field(default_factory=list)
    view: dict[str, Any] | None = None

    def replace(
        self,
        observation: list[Any],
        feedback: str | None,
        legal_actions: list[str],
        view: dict[str, Any] | None,
    ) -> None:
        self.observation = list(observation)
        self.feedback = feedback
        self.legal_actions = list(legal_actions)
        self.view = view
