"""An agent over many turns: what each turn's prompt shows of the history is the same whether
the agent builds it afresh or reuses the messages it built for earlier turns."""

from __future__ import annotations

import pytest

from parley import event_loop
from parley.agents.agent import Agent
from parley.agents.policies import FunctionPolicy
from parley.agents.prompt import Prompt
from parley.bus.messages import PromptMessage, TextPart, TurnRequest, Utterance
from parley.memory import HistoryPolicy


def _turn(n: int) -> TurnRequest:
    return TurnRequest(
        run="r",
        episode="e",
        sender="gm",
        turn=n,
        role="solver",
        system="Be brief." if n == 1 else None,
        observation=[TextPart(text=f"Observation {n}.")],
        incoming=[Utterance(sender="expert", content=[TextPart(text=f"Hint {n}.")])],
    )


@pytest.mark.parametrize("history", [HistoryPolicy(), HistoryPolicy("last_k", 2)])
def test_each_turn_shows_the_history_a_fresh_prompt_would(history: HistoryPolicy) -> None:
    agent = Agent("solver", FunctionPolicy("echo", lambda p: f"Reply {p.turn}."), history=history)

    async def play() -> list[tuple[list[PromptMessage], list[PromptMessage]]]:
        seen = []
        for n in range(1, 9):
            response = await agent.respond(_turn(n))
            assert response.prompt is not None
            # The same turn's prompt built without reusing anything.
            fresh = Prompt(
                role="solver",
                system=agent.system,
                # The window over the entries as they were before this turn's reply.
                history=history.select(agent.episodic.entries()[:-1]),
                working=agent.working,
                turn=n - 1,
            ).messages()
            seen.append((response.prompt, fresh))
        return seen

    for recorded, fresh in event_loop.run(play()):
        assert [m.model_dump() for m in recorded] == [m.model_dump() for m in fresh]
    # The last prompt: system, the history its policy keeps, and the observation.
    last = recorded
    texts = [p.text for m in last for p in m.content if isinstance(p, TextPart)]
    assert texts[-1] == "Observation 8."
    assert ("Reply 1." in texts) == (history.kind == "full")
