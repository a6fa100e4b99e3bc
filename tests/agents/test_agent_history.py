"""An agent over many turns: what each turn's prompt shows of the history is the same whether
the agent builds it afresh or reuses the messages (and the texts built-in players read) it built
for earlier turns."""

from __future__ import annotations

import pytest

from parley import event_loop
from parley.agents.agent import Agent
from parley.agents.policies import FunctionPolicy
from parley.agents.prompt import Prompt, history_text
from parley.bus.messages import ImagePart, PromptMessage, TextPart, TurnRequest, Utterance
from parley.memory import HistoryPolicy

PICTURE = ImagePart.from_bytes(b"\x89PNG a picture the expert sent")


def _turn(n: int) -> TurnRequest:
    return TurnRequest(
        run="r",
        episode="e",
        sender="gm",
        turn=n,
        role="solver",
        system="Be brief." if n == 1 else None,
        observation=[TextPart(text=f"Observation {n}.")],
        incoming=[Utterance(sender="expert", content=[TextPart(text=f"Hint {n}."), PICTURE])]
        if n == 3
        else [Utterance(sender="expert", content=[TextPart(text=f"Hint {n}.")])],
    )


@pytest.mark.parametrize(
    "history", [HistoryPolicy(), HistoryPolicy("last_k", 2), HistoryPolicy("none")]
)
def test_each_turn_shows_the_history_a_fresh_prompt_would(history: HistoryPolicy) -> None:
    pairs: list[tuple[list[tuple[str, str]], list[tuple[str, str]]]] = []

    def echo(prompt: Prompt) -> str:
        # What a built-in player reads, beside the same texts made afresh.
        pairs.append((list(prompt.history_pairs()), history_text(prompt.history)))
        return f"Reply {prompt.turn}."

    agent = Agent("solver", FunctionPolicy("echo", echo), history=history)

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
        # The transcript's copy names the picture by its hash; the prompt itself holds it.
        assert [m.model_dump(mode="json", context={"images": "ref"}) for m in recorded] == [
            m.model_dump(mode="json", context={"images": "ref"}) for m in fresh
        ]
        shown = [p for m in fresh for p in m.content if isinstance(p, ImagePart)]
        kept = [p for m in recorded for p in m.content if isinstance(p, ImagePart)]
        assert [p.sha256 for p in shown] == [p.sha256 for p in kept]
        assert all(p.data is not None for p in shown) and all(p.data is None for p in kept)
    assert len(pairs) == 8
    for cached, made in pairs:
        assert cached == made
    # The picture's turn, in the texts of later turns as far as the window reaches back.
    assert (("expert", "Hint 3.") in pairs[4][0]) == (history.kind != "none")
    # The last prompt: system, the history its policy keeps, and the observation.
    last = recorded
    texts = [p.text for m in last for p in m.content if isinstance(p, TextPart)]
    assert texts[-1] == "Observation 8."
    assert ("Reply 1." in texts) == (history.kind == "full")
