"""An agent: a role, a policy, working memory and episodic memory."""

from __future__ import annotations

from parley.agents.policies import Policy
from parley.agents.prompt import Prompt
from parley.bus.messages import TextPart, TurnRequest, TurnResponse
from parley.memory import EpisodicMemory, HistoryPolicy, MemoryStore, WorkingMemory


class Agent:
    """Plays one role in one episode: remembers, assembles the prompt, asks its policy."""

    def __init__(
        self,
        role: str,
        policy: Policy,
        *,
        history: HistoryPolicy | None = None,
        memory_key: str = "",
        store: MemoryStore | None = None,
        record_prompts: bool = True,
    ) -> None:
        self.role = role
        self.policy = policy
        self.history_policy = history or HistoryPolicy()
        self.system = ""
        self.working = WorkingMemory()
        self.episodic = EpisodicMemory(memory_key or role, store)
        self.record_prompts = record_prompts
        self.turns = 0

    def prepare(self, request: TurnRequest) -> Prompt:
        """Take in a turn request and assemble the prompt it calls for."""
        if request.system is not None:
            self.system = request.system
        self.working.replace(
            request.observation, request.feedback, request.legal_actions, request.view
        )
        for said in request.incoming:
            self.episodic.append(said.sender, said.content)
        return Prompt(
            role=self.role,
            system=self.system,
            # A snapshot: the store's list grows with this turn's reply, which must not show up
            # in the prompt recorded for this turn.
            history=list(self.episodic.window(self.history_policy)),
            working=self.working,
            turn=self.turns,
        )

    async def respond(self, request: TurnRequest) -> TurnResponse:
        """Decide a reply to ``request`` and remember it."""
        prompt = self.prepare(request)
        decision = await self.policy.decide(prompt)
        self.episodic.append(self.role, [TextPart(text=decision.text)], own=True)
        self.turns += 1
        return TurnResponse(
            run=request.run,
            episode=request.episode,
            sender=self.role,
            recipient="gm",
            turn=request.turn,
            role=self.role,
            text=decision.text,
            model=decision.model,
            usage=decision.usage,
            latency_s=decision.latency_s,
            raw=decision.raw,
            calls=decision.calls,
            prompt=prompt.record() if self.record_prompts else None,
        )

    def forget(self) -> None:
        """Release this episode's memory."""
        self.episodic.clear()
