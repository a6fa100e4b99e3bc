"""The wire codec: lossless round trips for every kind, images inline and by reference, and
a typed, explained error for every way a payload can be wrong."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parley.bus import codec
from parley.bus.codec import (
    CodecError,
    MalformedPayload,
    MissingImage,
    PayloadTooLarge,
    UnknownKind,
    UnsupportedVersion,
    decode,
    encode,
)
from parley.bus.messages import (
    KINDS,
    ImagePart,
    PromptMessage,
    StateUpdate,
    TextPart,
    TranscriptEvent,
    TurnResponse,
    images_in,
)
from tests.bus import strategies as S

KIND_STRATEGIES = {
    "turn_request": S.turn_requests,
    "turn_response": S.turn_responses,
    "transcript_event": S.transcript_events,
    "state_update": S.state_updates,
    "episode_started": S.episode_started,
    "episode_finished": S.episode_finished,
    "control": S.controls,
    "run_status": S.run_statuses,
    "job": S.jobs,
    "job_result": S.job_results,
    "worker_heartbeat": S.worker_heartbeats,
}


@dataclasses.dataclass
class Point:
    x: int
    y: int


FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_every_kind_has_a_strategy() -> None:
    assert set(KIND_STRATEGIES) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(KIND_STRATEGIES))
@FAST
@given(data=st.data())
def test_round_trip_inline(kind: str, data: st.DataObject) -> None:
    message = data.draw(KIND_STRATEGIES[kind])
    payload = encode(message)
    assert isinstance(payload, bytes)
    back = decode(payload)
    assert type(back) is type(message)
    assert back == message
    assert encode(back) == payload  # stable: re-encoding gives the same bytes


@FAST
@given(message=S.messages)
def test_round_trip_by_reference_resolves_from_a_store(message) -> None:
    store = {img.sha256: img.data for img in images_in(message)}
    payload = encode(message, inline_images=False)
    for img in images_in(message):
        if img.size >= 8:  # short byte strings could occur by chance in a payload
            assert base64.b64encode(img.data) not in payload
    assert decode(payload, resolve_image=store.get) == message


@FAST
@given(message=S.messages)
def test_by_reference_without_a_store_keeps_references(message) -> None:
    back = decode(encode(message, inline_images=False))
    assert [i.data for i in images_in(back)] == [None] * len(images_in(message))
    assert [i.sha256 for i in images_in(back)] == [i.sha256 for i in images_in(message)]


def test_by_reference_payload_is_small_for_a_large_image() -> None:
    image = ImagePart.from_bytes(bytes(range(256)) * 4096)  # 1 MB
    message = StateUpdate(run="r", sender="gm", content=[TextPart(text="board"), image])
    inline, by_ref = encode(message), encode(message, inline_images=False)
    assert len(inline) > 1_300_000  # base64
    assert len(by_ref) < 1_000
    assert decode(inline) == message


def _error(payload: bytes | str, **kwargs) -> CodecError:
    with pytest.raises(CodecError) as info:
        decode(payload, **kwargs)
    return info.value


@pytest.mark.parametrize("payload", [b"\xff\xfe garbage", b"{not json", b"", "\u2603"])
def test_not_json_is_malformed(payload: bytes | str) -> None:
    err = _error(payload)
    assert type(err) is MalformedPayload
    assert err.reason == "malformed"
    assert "not JSON" in str(err)


@pytest.mark.parametrize("payload", [b"[1, 2]", b'"text"', b"42", b"null"])
def test_json_that_is_not_an_object_is_malformed(payload: bytes) -> None:
    err = _error(payload)
    assert type(err) is MalformedPayload
    assert "expected an object" in str(err)


def test_schema_violation_names_the_field() -> None:
    raw = json.loads(encode(StateUpdate(run="r", sender="gm")))
    raw["turn"] = "seven"
    err = _error(json.dumps(raw))
    assert type(err) is MalformedPayload
    assert "state_update" in str(err) and "turn" in str(err)


def test_unknown_field_is_malformed() -> None:
    raw = json.loads(encode(StateUpdate(run="r", sender="gm")))
    raw["surprise"] = 1
    assert type(_error(json.dumps(raw))) is MalformedPayload


def test_unknown_kind() -> None:
    raw = json.loads(encode(StateUpdate(run="r", sender="gm")))
    raw["kind"] = "telepathy"
    err = _error(json.dumps(raw))
    assert type(err) is UnknownKind
    assert err.reason == "unknown_kind"
    assert "telepathy" in str(err)


def test_missing_kind_is_unknown_kind() -> None:
    err = _error(b'{"run": "r", "sender": "gm"}')
    assert type(err) is UnknownKind


def test_unsupported_version() -> None:
    raw = json.loads(encode(StateUpdate(run="r", sender="gm")))
    raw["v"] = 2
    err = _error(json.dumps(raw))
    assert type(err) is UnsupportedVersion
    assert err.reason == "wrong_version"
    assert "2" in str(err)


def test_payload_too_large_on_decode_and_encode() -> None:
    message = StateUpdate(run="r", sender="gm", content=[TextPart(text="x" * 5000)])
    payload = encode(message)
    err = _error(payload, max_bytes=1000)
    assert type(err) is PayloadTooLarge
    assert err.reason == "too_large"
    with pytest.raises(PayloadTooLarge):
        encode(message, max_bytes=1000)
    assert decode(payload, max_bytes=len(payload)) == message


def test_missing_image() -> None:
    image = ImagePart.from_bytes(b"\x89PNG fake")
    payload = encode(StateUpdate(run="r", sender="gm", content=[image]), inline_images=False)
    err = _error(payload, resolve_image=lambda sha: None)
    assert type(err) is MissingImage
    assert err.reason == "missing_image"
    assert image.sha256 in str(err)


def test_tampered_image_bytes_are_malformed() -> None:
    raw = json.loads(
        encode(StateUpdate(run="r", sender="gm", content=[ImagePart.from_bytes(b"abc")]))
    )
    raw["content"][0]["data"] = "eHl6"  # base64 of "xyz": same size, other sha256
    assert type(_error(json.dumps(raw))) is MalformedPayload


def test_every_error_type_is_a_codec_error_with_a_distinct_reason() -> None:
    kinds = [MalformedPayload, UnknownKind, UnsupportedVersion, PayloadTooLarge, MissingImage]
    assert all(issubclass(k, CodecError) and issubclass(k, ValueError) for k in kinds)
    assert len({k.reason for k in kinds}) == len(kinds)
    assert codec.CONTENT_TYPE.startswith("application/")


def _pydantic_json(message, inline_images: bool) -> object:
    """What pydantic itself writes for ``message``, parsed."""
    context = None if inline_images else {"images": "ref"}
    return json.loads(type(message).__pydantic_serializer__.to_json(message, context=context))


@FAST
@given(message=S.messages, inline_images=st.booleans())
def test_the_fast_encoder_reads_as_pydantics_own_json(message, inline_images: bool) -> None:
    """``encode`` writes through orjson where it can; what it writes reads as pydantic's own
    JSON of the message, field for field, images inline or by reference."""
    payload = encode(message, inline_images=inline_images)
    assert json.loads(payload) == _pydantic_json(message, inline_images)


@pytest.mark.parametrize(
    "data",
    [
        {"big": 2**70},  # beyond orjson's 64 bits
        {"nested": {1: "a key that is not a string"}},
        {"when": datetime.datetime(2026, 11, 27, 1, 2, 3, tzinfo=datetime.UTC)},
        {"tags": {"b", "a"}},
        {"raw": b"bytes"},
        {"point": Point(1, 2)},
        {"nan": float("nan"), "inf": float("inf")},
        {"text": 'ünïcödé \u2028 \x00 \n\t "quoted"'},
    ],
)
def test_values_orjson_writes_otherwise_go_through_pydantic(data: dict) -> None:
    event = TranscriptEvent(run="r", sender="gm", event="note", from_role="gm", data=data)
    for inline_images in (True, False):
        payload = encode(event, inline_images=inline_images)
        assert json.loads(payload) == _pydantic_json(event, inline_images)
    assert codec.encode_transcript([event]) == encode(event, inline_images=False) + b"\n"
    # A response with a recorded prompt goes the transcript's own way: its fields without the
    # prompt, then the prompt's messages spliced in.
    prompt = [PromptMessage(role="user", content=[TextPart(text="hi")])]
    response = TurnResponse(run="r", sender="a", role="a", text="t", raw=data, prompt=prompt)
    line = codec.encode_transcript([response])
    assert line.endswith(b"\n") and json.loads(line) == _pydantic_json(response, False)


def test_a_message_that_cannot_be_written_still_says_why() -> None:
    event = TranscriptEvent(
        run="r", sender="gm", event="note", from_role="gm", data={"s": "\ud800"}
    )
    with pytest.raises(ValueError, match="surrogate"):
        encode(event)
