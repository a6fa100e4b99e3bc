"""The LLM policy: the assembled prompt becomes a chat request, the reply goes back to the game."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from parley.agents.backends import constrain
from parley.agents.backends.client import ModelClient, ModelUnavailable
from parley.agents.backends.spec import GenerationParams
from parley.agents.policies import Decision
from parley.agents.prompt import Prompt


class LlmPolicy:
    """Plays a role with a model of the registry.

    The reply text, the raw response, one record per attempt (endpoint, outcome, latency,
    usage, retries and why) and the token usage go into the :class:`Decision`, hence into the
    transcript. A call that cannot succeed raises :class:`ModelUnavailable`, which ends the
    episode as ``error`` with the reason (the run goes on).
    """

    def __init__(
        self,
        client: ModelClient | None,
        params: GenerationParams,
        *,
        role: str = "",
        name: str = "",
        unavailable: str | None = None,
        draw: Mapping[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.params = params
        self.role = role
        # What makes this episode's requests a draw of their own (its seed and repetition):
        # part of the response cache's key unless sampling is greedy.
        self.draw = dict(draw) if draw else None
        self.name = name or (client.name if client is not None else "")
        self._unavailable = unavailable
        # Set when this policy owns its clients (no run-wide pool): closes them.
        self.closer: Callable[[], Awaitable[None]] | None = None

    @classmethod
    def unavailable(cls, name: str, reason: str) -> LlmPolicy:
        """A policy whose every turn fails with ``reason`` (missing key, unknown model…)."""
        return cls(None, GenerationParams(), name=name, unavailable=reason)

    async def decide(self, prompt: Prompt) -> Decision:
        if self.client is None:
            raise ModelUnavailable(self._unavailable or f"model {self.name} is unavailable")
        constraint, held = self.constraint(prompt)
        done = await self.client.complete(
            prompt.messages(), self.params, constraint=constraint, draw=self.draw
        )
        reply = done.reply
        if constraint is None and held and done.calls:
            done.calls[0].update(held)  # asked for, and why it could not be held
        text = reply.text
        sent = done.constraint
        if sent is not None:
            text = sent.unwrap(text)
            if not sent.honoured(text) and done.calls:
                # The server was sent the constraint and answered outside it anyway.
                done.calls[-1]["constraint_honoured"] = False
                constrain.not_honoured(self.name, self.role, sent)
        return Decision(
            text=text,
            model=reply.model or self.client.spec.model,
            usage=reply.usage,
            latency_s=done.latency_s,
            raw=reply.raw,
            calls=done.calls,
        )

    def constraint(self, prompt: Prompt) -> tuple[constrain.Constraint | None, dict[str, Any]]:
        """What this turn's reply is held to (``constrain``), and what its call record says."""
        assert self.client is not None
        spec = self.client.spec
        view = prompt.working.view
        if isinstance(view, dict) and view.get("memory_note"):
            return None, {}  # the end-of-episode note to itself is no move of the game
        return constrain.for_turn(
            self.params.constrain or spec.constrain,
            prompt.working.legal_actions,
            backend=spec.backend,
            via=spec.constrain_via,
            model=self.name,
            role=self.role,
        )

    async def aclose(self) -> None:
        # Clients belong to the run's pool; only a policy made without one closes its own.
        if self.closer is not None:
            closer, self.closer = self.closer, None
            await closer()
