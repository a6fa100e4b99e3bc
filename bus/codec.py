"""The versioned JSON wire codec, with images inline (base64) or by reference (sha256 only).

A payload is one message, a JSON object, or a *batch*: a JSON array of messages, in the order
they were published on its topic (:func:`encode_batch`, :func:`decode_batch`). The MQTT
transport sends a batch as one PUBLISH with the content type :data:`BATCH_CONTENT_TYPE`; the
first byte tells the two apart too (``{`` or ``[``), for brokers and clients without MQTT 5
properties.
"""

from __future__ import annotations

import json
import operator
import reprlib
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from parley.bus import messages as _messages
from parley.bus import pydantic_fast
from parley.bus.messages import (
    KINDS,
    MESSAGE_ADAPTER,
    WIRE_VERSION,
    ImagePart,
    Message,
    TurnResponse,
    image_json,
)

CONTENT_TYPE = "application/vnd.parley+json"
BATCH_CONTENT_TYPE = "application/vnd.parley.batch+json"
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
_BY_REFERENCE = {"images": "ref"}  # serialisation context: images by sha256 only


class CodecError(ValueError):
    """A payload that cannot become a message; ``reason`` is a short machine-readable tag."""

    reason = "malformed"


class MalformedPayload(CodecError):
    """Not JSON, or JSON that does not fit the message schema."""


class UnknownKind(CodecError):
    """A ``kind`` this version of parley does not know."""

    reason = "unknown_kind"


class UnsupportedVersion(CodecError):
    """A wire version other than the one this codec speaks."""

    reason = "wrong_version"


class PayloadTooLarge(CodecError):
    """A payload over the size limit."""

    reason = "too_large"


class MissingImage(CodecError):
    """An image sent by reference that the receiver's store does not hold."""

    reason = "missing_image"


class _Sent(weakref.ref[BaseModel]):
    """A published message (weakly: its entry goes with it) and its payload."""

    __slots__ = ("by_reference", "key", "payload")
    key: int
    payload: bytes
    by_reference: bool  # encoded with images by reference


# The payloads :func:`encode` made with ``remember=True`` (a transport publishing), by the id
# of their message, while the message lives: an episode's transcript encodes the same events
# again when the episode ends (images by reference, which is the same JSON when there are
# none), and takes these instead. Messages are immutable once published (docs/bus.md).
_sent: dict[int, _Sent] = {}
# A message whose JSON has this holds an image: its two encodings differ. (Inside a JSON string
# the quotes are escaped; a ``data`` dict with this very pair only costs the reuse.)
_IMAGE = b'"type":"image"'


# orjson's encoding of the plain messages, where the installed pydantic is one it was tested
# on (bus/pydantic_fast.py); None: every message goes through pydantic.
_FAST = pydantic_fast.Encoder(_messages, ImagePart, image_json) if pydantic_fast.ACTIVE else None


def _json(value: Any, inline_images: bool) -> bytes | None:
    """``value`` (a message, or a dict of a plain message's fields) as pydantic would write
    it, through the accelerator; None where it is off or cannot: the caller asks pydantic."""
    return None if _FAST is None else _FAST.json(value, inline_images)


def _pydantic_json(
    message: BaseModel, inline_images: bool, exclude: set[str] | None = None
) -> bytes:
    """``message``'s JSON as pydantic writes it (the public path)."""
    context = None if inline_images else _BY_REFERENCE
    return message.model_dump_json(exclude=exclude, context=context).encode()


def _forget(ref: weakref.ref[BaseModel]) -> None:
    key = ref.key  # type: ignore[attr-defined]  # a _Sent
    if _sent.get(key) is ref:
        del _sent[key]


def sent_by_reference(message: BaseModel) -> bytes | None:
    """What :func:`encode` with ``inline_images=False`` would return for ``message``, if a
    transport encoded it with ``remember=True`` and it lives yet (None otherwise): an episode's
    transcript encodes its events again at the end, and may take these."""
    kept = _sent.get(id(message)) if _sent else None
    if kept is None or kept() is not message:
        return None
    if kept.by_reference or _IMAGE not in kept.payload:
        return kept.payload
    return None


def encode(
    message: BaseModel,
    *,
    inline_images: bool = True,
    max_bytes: int = DEFAULT_MAX_BYTES,
    remember: bool = False,
) -> bytes:
    """Serialise a message; with ``inline_images=False`` image bytes are left out.

    ``remember=True`` (a transport sending ``message``): keep the payload while the message
    lives, for a later ``inline_images=False`` encoding of the same message (its transcript
    line, :func:`sent_by_reference`), which then costs nothing. Published messages must not
    change (docs/bus.md)."""
    if not inline_images and _sent:
        payload = sent_by_reference(message)
        if payload is not None:
            return _within(payload, max_bytes)
    payload = _json(message, inline_images)
    if payload is None:
        payload = _pydantic_json(message, inline_images)
    if remember:
        kept = _Sent(message, _forget)
        kept.key = id(message)
        kept.payload = payload
        kept.by_reference = not inline_images
        _sent[kept.key] = kept
    return _within(payload, max_bytes)


def _within(payload: bytes, max_bytes: int) -> bytes:
    """``payload``, or :class:`PayloadTooLarge` when it is over ``max_bytes``."""
    if len(payload) > max_bytes:
        raise PayloadTooLarge(f"encoded message is {len(payload)} bytes; the limit is {max_bytes}")
    return payload


_PROMPT = {"prompt"}


def encode_transcript(messages: Sequence[Message]) -> bytes:
    """An episode's transcript as JSON lines (a run folder's ``transcripts.jsonl``, a span's
    ``parley.transcript``), images by reference, as :func:`encode` writes each message (and
    with its size limit).

    A turn's recorded prompt repeats the messages of the role's earlier prompts (its history,
    the system text): the agent shares those message objects between its turns' records, and
    each is encoded here once per episode rather than once per turn that shows it (a long
    episode's prompts are otherwise encoded in time quadratic in its turns). Only the order of
    keys differs from :func:`encode`: ``prompt`` comes last in a response's object.
    """
    encoded: dict[int, bytes] = {}  # id of a prompt message -> its JSON (alive all along)
    # Per role (the id of its prompts' first message), its latest prompt and the JSON of all
    # of that prompt but its last message (the observation, new each turn): the next prompt
    # that starts with the same message objects takes that JSON whole, so a turn costs the
    # messages it adds, not its whole history again.
    latest: dict[int, tuple[Sequence[Any], bytes]] = {}
    lines: list[bytes] = []
    for message in messages:
        prompt = message.prompt if isinstance(message, TurnResponse) else None
        if not prompt:
            # What a transport sent to the broker is reused (:func:`sent_by_reference`).
            lines.append(encode(message, inline_images=False))
            continue
        parts: list[bytes] = []
        start = 0
        before = latest.get(id(prompt[0]))
        if before is not None:
            shared = len(before[0]) - 1
            if 0 < shared < len(prompt) and all(map(operator.is_, prompt[:shared], before[0])):
                parts.append(before[1])
                start = shared
        for item in prompt[start:]:
            done = encoded.get(id(item))
            if done is None:
                done = _json(item, False) or _pydantic_json(item, False)
                encoded[id(item)] = done
            parts.append(done)
        head = b",".join(parts[:-1])
        latest[id(prompt[0])] = (prompt, head)
        body = b",".join((head, parts[-1])) if head else parts[-1]
        rest = None
        fields = _FAST.fields(message) if _FAST is not None else None
        if fields is not None:  # (a subclass with a serializer of its own: pydantic's)
            del fields["prompt"]
            rest = _json(fields, False)
        if rest is None:
            rest = _pydantic_json(message, False, exclude=_PROMPT)
        line = b"".join((rest[:-1], b',"prompt":[', body, b"]}"))
        lines.append(_within(line, DEFAULT_MAX_BYTES))
    lines.append(b"")
    return b"\n".join(lines)


def decode(
    payload: bytes | str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    resolve_image: Callable[[str], bytes | None] | None = None,
) -> Message:
    """Parse a payload into a message, or raise a :class:`CodecError` saying why not —
    whatever the payload holds, nothing else.

    ``resolve_image`` fills in images that were sent by reference.
    """
    if len(payload) > max_bytes:
        raise PayloadTooLarge(f"payload is {len(payload)} bytes; the limit is {max_bytes}")
    try:
        message = MESSAGE_ADAPTER.validate_json(payload)
    except ValidationError as exc:
        raise _explain(payload, exc) from None
    except (ValueError, TypeError, RecursionError) as exc:
        raise MalformedPayload(f"payload cannot be read: {type(exc).__name__}") from None
    if resolve_image is not None:
        message = _resolve_images(message, resolve_image)
    return message


_BATCH_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
_RAW_LIST: TypeAdapter[list[object]] = TypeAdapter(list[object])
_WHITESPACE = b" \t\r\n"


def encode_batch(payloads: Sequence[bytes]) -> bytes:
    """Join encoded messages (from :func:`encode`) into one batch payload, a JSON array."""
    return b"[" + b",".join(payloads) + b"]"


def is_batch(payload: bytes | bytearray | memoryview) -> bool:
    """Whether ``payload`` is a batch (a JSON array) rather than one message (an object)."""
    view = bytes(payload[:64]).lstrip(_WHITESPACE)
    return view[:1] == b"["


def decode_batch(
    payload: bytes,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    resolve_image: Callable[[str], bytes | None] | None = None,
) -> list[Message | CodecError]:
    """The messages of a batch, in order; an item that cannot become a message is a
    :class:`CodecError` in its place (the others still count). A payload that is not a JSON
    array at all raises one."""
    if len(payload) > max_bytes:
        raise PayloadTooLarge(f"payload is {len(payload)} bytes; the limit is {max_bytes}")
    try:
        messages: list[Message | CodecError] = list(_BATCH_ADAPTER.validate_json(payload))
    except ValidationError:
        messages = _decode_items(payload, max_bytes)  # some item is bad: one at a time
    except (ValueError, TypeError, RecursionError) as exc:
        raise MalformedPayload(f"batch cannot be read: {type(exc).__name__}") from None
    if resolve_image is None:
        return messages
    out: list[Message | CodecError] = []
    for item in messages:
        if isinstance(item, CodecError):
            out.append(item)
            continue
        try:
            out.append(_resolve_images(item, resolve_image))
        except CodecError as exc:
            out.append(exc)
    return out


def _decode_items(payload: bytes, max_bytes: int) -> list[Message | CodecError]:
    try:
        items = _RAW_LIST.validate_json(payload)
    except ValidationError:
        raise MalformedPayload("batch is not a JSON array") from None
    except (ValueError, RecursionError) as exc:
        raise MalformedPayload(f"batch cannot be read: {type(exc).__name__}") from None
    out: list[Message | CodecError] = []
    for item in items:
        try:
            out.append(decode(json.dumps(item).encode(), max_bytes=max_bytes))
        except CodecError as exc:
            out.append(exc)
        except (TypeError, ValueError, RecursionError) as exc:
            out.append(MalformedPayload(f"batch item cannot be read: {type(exc).__name__}"))
    return out


# Values of a payload shown in errors: short, and safe however deep they nest.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 2, 60, 60


def _explain(payload: bytes | str, exc: ValidationError) -> CodecError:
    try:
        raw = json.loads(payload)
    except RecursionError:
        return MalformedPayload("payload nests too deep to read")
    except ValueError as err:  # UnicodeDecodeError is one too
        return MalformedPayload(f"payload is not JSON: {str(err)[:200]}")
    if not isinstance(raw, dict):
        return MalformedPayload(f"payload is JSON {type(raw).__name__}, expected an object")
    if raw.get("v", WIRE_VERSION) != WIRE_VERSION:
        return UnsupportedVersion(
            f"wire version {_SHOWN.repr(raw.get('v'))}; this parley speaks version {WIRE_VERSION}"
        )
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        return UnknownKind(
            f"unknown message kind {_SHOWN.repr(kind)}; known kinds: {', '.join(sorted(KINDS))}"
        )
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"][1:]) or "message"
    return MalformedPayload(f"{kind} message: {where}: {first['msg']}")


def _map_images(message: BaseModel, fn: Callable[[ImagePart], ImagePart]) -> BaseModel:
    """A copy of ``message`` with ``fn`` applied to every image part (untouched when none)."""

    def walk(value: object) -> object:
        if isinstance(value, ImagePart):
            return fn(value)
        if isinstance(value, BaseModel):
            changes = {}
            for name in type(value).model_fields:
                old = getattr(value, name)
                new = walk(old)
                if new is not old:
                    changes[name] = new
            return value.model_copy(update=changes) if changes else value
        if isinstance(value, list):
            items = [walk(v) for v in value]
            return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
        return value

    return walk(message)  # type: ignore[return-value]


def _resolve_images(message: Message, resolve: Callable[[str], bytes | None]) -> Message:
    def fill(image: ImagePart) -> ImagePart:
        if image.data is not None:
            return image
        data = resolve(image.sha256)
        if data is None:
            raise MissingImage(
                f"image {image.sha256} was sent by reference and is not in the store"
            )
        return ImagePart(
            sha256=image.sha256, media_type=image.media_type, size=image.size, data=data
        )

    return _map_images(message, fill)  # type: ignore[return-value]
