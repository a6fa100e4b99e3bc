"""An agent: a role, a policy, working memory and episodic memory."""

from __future__ import annotations

from typing import Any

from parley.agents.policies import Decision, Policy
from parley.agents.prompt import Prompt, PromptCache
from parley.bus.messages import TextPart, TurnRequest, TurnResponse
from parley.memory import EpisodicMemory, HistoryPolicy, MemoryEntry, MemoryStore, WorkingMemory
from parley.memory.across import Recollection

NOTE_REQUEST = (
    "The episode is over ({outcome}{score}). Write a short note to yourself, a few sentences, "
    "on what to remember the next time you play this game as {role}. Reply with the note only."
)


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
        # Memory of earlier episodes, shown first in every prompt (memory/across.py).
        self.recall: list[MemoryEntry] = []
        # What this role was shown and said this episode, as text: its memory of it. Kept only
        # for a role with memory across episodes (the runtime sets a list): every turn pays
        # for it otherwise.
        self.log: list[Recollection] | None = None
        # History entries' prompt messages and texts, built once each (agents/prompt.py).
        self._cache = PromptCache()

    def prepare(self, request: TurnRequest) -> Prompt:
        """Take in a turn request and assemble the prompt it calls for."""
        if request.system is not None:
            self.system = request.system
        self.working.replace(
            request.observation, request.feedback, request.legal_actions, request.view
        )
        for said in request.incoming:
            self.episodic.append(said.sender, said.content)
        if self.log is not None:
            seen = [f"{u.sender.capitalize()}: {_text(u.content)}" for u in request.incoming]
            seen += [_text(request.observation)]
            if request.feedback:
                seen.append(f"Feedback: {request.feedback}")
            self.log.append(Recollection("seen", "gm", "\n".join(t for t in seen if t)))
        return self._prompt()

    def _prompt(self) -> Prompt:
        return Prompt(
            role=self.role,
            system=self.system,
            # A snapshot: the store's list grows with this turn's reply, which must not show up
            # in the prompt recorded for this turn.
            history=list(self.episodic.window(self.history_policy)),
            working=self.working,
            turn=self.turns,
            recall=self.recall,
            cache=self._cache,
        )

    async def respond(self, request: TurnRequest) -> TurnResponse:
        """Decide a reply to ``request`` and remember it."""
        prompt = self.prepare(request)
        decision = await self.policy.decide(prompt)
        self.episodic.append(self.role, [TextPart(text=decision.text)], own=True)
        if self.log is not None:
            self.log.append(Recollection("said", self.role, decision.text))
        self.turns += 1
        return self._response(request, prompt, decision)

    async def write_note(
        self, request: TurnRequest, outcome: str, score: float | None
    ) -> TurnResponse:
        """The end-of-episode note to itself (``notes`` memory): one more call of its policy,
        with the episode's history and the request to write the note as the observation.
        ``request`` says where it goes (run, episode, turn); its view carries
        ``{"memory_note": true, ...}`` so that a built-in player can tell it apart."""
        text = NOTE_REQUEST.format(
            outcome=outcome,
            score="" if score is None else f", score {score:g}",
            role=self.role,
        )
        self.working.replace(
            [TextPart(text=text)],
            None,
            [],
            {"memory_note": True, "outcome": outcome, "score": score},
        )
        prompt = self._prompt()
        decision = await self.policy.decide(prompt)
        if self.log is not None:
            self.log.append(Recollection("note", self.role, decision.text))
        return self._response(request, prompt, decision)

    def _response(self, request: TurnRequest, prompt: Prompt, decision: Decision) -> TurnResponse:
        response = TurnResponse(
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
            prompt=None,
        )
        if self.record_prompts:
            # Assigned, not validated: the prompt's messages are PromptMessages already, made
            # of parts that were validated, and validating the list again each turn would
            # cost the whole history (an assignment is not validated: no validate_assignment).
            response.prompt = prompt.record()
        return response

    def forget(self) -> None:
        """Release this episode's memory."""
        self.episodic.clear()
        self._cache.clear()


def _text(parts: list[Any]) -> str:
    return "\n".join(p.text for p in parts if isinstance(p, TextPart))
