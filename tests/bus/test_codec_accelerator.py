"""The codec's accelerator (bus/pydantic_fast.py) against pydantic itself: the same bytes for
every message kind, images inline and by reference, and for a transcript; and the codec with
the accelerator forced off (``PARLEY_PYDANTIC_FAST=0``, in a process of its own) writes what
this process writes."""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.bus import codec, pydantic_fast
from parley.bus import messages as wire
from parley.bus.messages import (
    ImagePart,
    Message,
    PromptMessage,
    TextPart,
    TranscriptEvent,
    TurnRequest,
    TurnResponse,
    Usage,
    image_json,
)
from tests.bus.strategies import messages

ROOT = Path(__file__).resolve().parents[2]
FAST = pydantic_fast.Encoder(wire, ImagePart, image_json)


def _pydantic(message: Message, inline: bool) -> bytes:
    context = None if inline else {"images": "ref"}
    return message.model_dump_json(context=context).encode()


TESTED_HERE = pydantic_fast.release_check()[0]


@settings(max_examples=300, deadline=None)
@given(messages, st.booleans())
def test_the_accelerator_writes_the_bytes_pydantic_writes(message: Message, inline: bool) -> None:
    """At a pydantic it was tested on, the accelerator's bytes are pydantic's; at any other
    (CI's run at the floors) it is off and the codec writes through pydantic alone."""
    if TESTED_HERE:
        fast = FAST.json(message, inline)
        if fast is not None:  # None: a value orjson cannot write, and pydantic is asked
            assert fast == _pydantic(message, inline)
    else:
        assert not pydantic_fast.ACTIVE
    assert codec.decode(codec.encode(message, inline_images=True)) == message


def test_every_plain_model_is_a_message_model_without_a_serializer_of_its_own() -> None:
    assert TurnRequest in FAST.plain and TextPart in FAST.plain
    assert ImagePart not in FAST.plain  # its bytes go through image_json
    assert all(model.__module__ == wire.__name__ for model in FAST.plain)


def _corpus() -> list[Message]:
    picture = ImagePart.from_bytes(b"\x89PNG not really a picture", "image/png")
    shared = PromptMessage(role="system", content=[TextPart(text="You play the guesser.")])
    common = {"run": "r1", "episode": "e1", "sender": "gm", "traceparent": None}
    request = TurnRequest(
        role="guesser",
        observation=[TextPart(text="Which one? ünïcode ✓"), picture],
        legal_actions=["a", "b"],
        view={"big": 2**70, "nested": [1.5, None, True]},
        **common,
    )
    first = TurnResponse(
        role="guesser",
        text="a",
        model="m",
        usage=Usage(input_tokens=3, output_tokens=1),
        prompt=[shared, PromptMessage(role="user", content=[picture])],
        **common,
    )
    second = TurnResponse(role="guesser", text="b", model="m", prompt=[shared], **common)
    event = TranscriptEvent(event="note", from_role="gm", content=[picture], **common)
    return [request, first, second, event]


def _encodings(corpus: list[Message]) -> dict[str, str]:
    out = {}
    for n, message in enumerate(corpus):
        for inline in (True, False):
            payload = codec.encode(message, inline_images=inline)
            out[f"{n}-{inline}"] = base64.b64encode(payload).decode()
    out["transcript"] = base64.b64encode(codec.encode_transcript(corpus)).decode()
    return out


_CHILD = """
import json, pickle, sys
from parley.bus import pydantic_fast
from tests.bus.test_codec_accelerator import _encodings
corpus = pickle.loads(sys.stdin.buffer.read())
print(json.dumps({"active": pydantic_fast.ACTIVE, "encodings": _encodings(corpus)}))
"""


def test_the_codec_forced_onto_pydantic_writes_the_same_bytes(tmp_path: Path) -> None:
    corpus = _corpus()
    here = _encodings(corpus)
    env = {**os.environ, pydantic_fast.FORCE_PUBLIC_VARIABLE: "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=pickle.dumps(corpus),
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    there = json.loads(done.stdout)
    assert there["active"] is False
    assert b"outside the range" not in done.stderr  # forcing it off is not a warning
    assert there["encodings"] == here
    # Both readings decode to the messages they came from.
    for n, message in enumerate(corpus):
        payload = base64.b64decode(here[f"{n}-True"])
        assert codec.decode(payload) == message


def test_a_release_outside_the_tested_range_is_the_public_path_said_at_debug_level(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A supported pydantic the accelerator was not tested on is an ordinary install: one debug
    # record, no warning on every command.
    monkeypatch.delenv(pydantic_fast.FORCE_PUBLIC_VARIABLE, raising=False)
    assert pydantic_fast.check() == pydantic_fast.release_check()
    with caplog.at_level(logging.DEBUG, logger="parley.bus.codec"):
        assert pydantic_fast._start(((1, 0), (1, 1))) is False
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert "outside the range" in caplog.records[0].getMessage()
    caplog.clear()
    # Asked for by name, the same is one warning.
    monkeypatch.setenv(pydantic_fast.FORCE_PUBLIC_VARIABLE, "1")
    with caplog.at_level(logging.DEBUG, logger="parley.bus.codec"):
        assert pydantic_fast._start(((1, 0), (1, 1))) is False
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "outside the range" in caplog.records[0].getMessage()
    caplog.clear()
    monkeypatch.setenv(pydantic_fast.FORCE_PUBLIC_VARIABLE, "0")
    with caplog.at_level(logging.DEBUG, logger="parley.bus.codec"):
        assert pydantic_fast._start() is False
    assert caplog.records == []  # turned off: nothing to say
