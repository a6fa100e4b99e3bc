"""Prompt assembly: the messages a policy gets, and the fast message constructor behind them."""

from __future__ import annotations

import copy

from parley.agents.prompt import Prompt, _message
from parley.bus.messages import ImagePart, PromptMessage, TextPart, TurnResponse
from parley.memory import MemoryEntry, WorkingMemory


def test_the_fast_constructor_makes_what_model_construct_makes() -> None:
    content = [TextPart(text="hi"), ImagePart.from_bytes(b"\x89PNG fake")]
    fast = _message("user", content)
    slow = PromptMessage.model_construct(role="user", content=content)
    assert fast == slow
    assert fast.__dict__ == slow.__dict__
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__
    assert fast.__pydantic_private__ == slow.__pydantic_private__
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_dump_json() == slow.model_dump_json()
    assert copy.deepcopy(fast) == fast
    assert fast.model_copy(update={"role": "assistant"}).role == "assistant"
    assert PromptMessage.model_validate(fast.model_dump()) == fast
    # It goes into a turn response like any other message.
    response = TurnResponse(run="r", sender="a", role="a", text="t", prompt=[fast])
    assert TurnResponse.model_validate_json(response.model_dump_json()).prompt == [slow]


def test_messages_label_others_and_end_with_the_observation() -> None:
    working = WorkingMemory()
    working.replace([TextPart(text="Now.")], "Too late.", [], None)
    history = [
        MemoryEntry(speaker="expert", own=False, parts=(TextPart(text="Cut wire 1."),)),
        MemoryEntry(speaker="solver", own=True, parts=(TextPart(text="Done."),)),
        MemoryEntry(speaker="expert", own=False, parts=(ImagePart.from_bytes(b"img"),)),
    ]
    prompt = Prompt(role="solver", system="Be brief.", history=history, working=working, turn=2)
    messages = prompt.messages()
    assert messages is prompt.messages()  # built once
    assert [(m.role, [getattr(p, "text", "<image>") for p in m.content]) for m in messages] == [
        ("system", ["Be brief."]),
        ("user", ["Expert: Cut wire 1."]),
        ("assistant", ["Done."]),
        ("user", ["Expert:", "<image>"]),
        ("user", ["Now.", "Feedback: Too late."]),
    ]
    recorded = prompt.record()
    assert recorded[3].content[1].data is None and messages[3].content[1].data is not None
    assert recorded[:3] == messages[:3]
