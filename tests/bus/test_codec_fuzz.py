"""The wire codec is closed: whatever arrives on a topic — bytes, JSON of any shape, deep
nesting, kinds that are not strings, lone surrogates — decode returns a message or raises
CodecError, never anything else (a subscriber drops the payload and goes on)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.bus.codec import CodecError, decode
from parley.bus.messages import KINDS
from tests.bus.strategies import json_values

hostile_text = st.text(max_size=8) | st.sampled_from(["\ud800", "a\udc00", *sorted(KINDS)])
wire_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | hostile_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
    max_leaves=8,
)
# Nearly messages: the envelope fields with values of any type.
envelopes = st.fixed_dictionaries(
    {"kind": st.sampled_from(sorted(KINDS)) | wire_values},
    optional={"v": st.just(1) | wire_values, "id": wire_values, "run": wire_values},
)


def closed(payload: bytes | str) -> None:
    try:
        decode(payload)
    except CodecError as exc:
        assert str(exc)


@settings(max_examples=400, deadline=None)
@given(
    st.binary(max_size=64)
    | st.builds(lambda v: json.dumps(v), wire_values | envelopes)
    | st.builds(lambda v: json.dumps(v).encode(), json_values)
)
def test_decode_raises_only_codec_errors(payload: bytes | str) -> None:
    closed(payload)


@pytest.mark.parametrize(
    "payload",
    [
        b'{"kind": []}',
        b'{"kind": {}}',
        b'{"v": 1, "kind": ' + b"[" * 3000 + b"]" * 3000 + b"}",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"kind": "turn_response", "raw": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        '{"kind": "turn_response", "text": "\ud800"}',
    ],
)
def test_what_broke_the_codec_before(payload: bytes | str) -> None:
    with pytest.raises(CodecError):
        decode(payload)
