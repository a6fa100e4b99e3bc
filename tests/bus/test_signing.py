"""Signed results and control messages (parley.bus.signing): a signature survives the wire and what a bus rewrites,
breaks on any change, and only the run's key makes one; the key lives in the run folder."""

from __future__ import annotations

import base64
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parley.bus import topics
from parley.bus.codec import decode, encode
from parley.bus.messages import (
    Control,
    EpisodeFinished,
    ImagePart,
    Job,
    JobResult,
    Outcome,
    RunStatus,
)
from parley.bus.signing import (
    CONTROL_MAX_AGE_S,
    KEY_FILE,
    PUBLIC_FILE,
    SIGNED_KINDS,
    Gate,
    RunKey,
    SigningError,
    canonical,
    read_public_key,
    verify,
)
from tests.bus.strategies import episode_finished, json_objects, texts
from tests.fixtures.broker import MqttBroker

KEY = RunKey.generate()
OTHER = RunKey.generate()


def result(**fields: object) -> EpisodeFinished:
    base: dict[str, object] = {
        "run": "r1",
        "episode": "e1",
        "sender": "gm",
        "game": "comma.atm",
        "outcome": "success",
        "scores": {"psr": 1.0, "mistakes": 0.0},
        "main_score": 100.0,
        "turns": 4,
        "reason": "puzzle solved",
        "role_results": {},
    }
    return EpisodeFinished.model_validate({**base, **fields})


def over_the_wire(message: EpisodeFinished | JobResult) -> EpisodeFinished | JobResult:
    decoded = decode(encode(message))
    assert isinstance(decoded, EpisodeFinished | JobResult)
    return decoded


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    message=episode_finished,
    traceparent=st.none() | st.just("00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"),
)
def test_a_signature_survives_the_codec_and_a_traceparent_set_after_signing(
    message: EpisodeFinished, traceparent: str | None
) -> None:
    message.signature = KEY.sign(message)
    message.traceparent = traceparent  # what a traced bus does after the sender signed
    received = over_the_wire(message)
    assert verify(received, KEY.public_b64)
    assert not verify(received, OTHER.public_b64)


@pytest.mark.parametrize(
    "change",
    [
        {"outcome": Outcome.LOST},
        {"main_score": 0.0},
        {"scores": {"psr": 0.0, "mistakes": 0.0}},
        {"episode": "e2"},
        {"run": "another-run"},  # a result of one run cannot pass for another's
        {"turns": 5},
        {"reason": "puzzle solved "},
        {"sender": "w0"},
    ],
)
def test_any_change_to_a_signed_result_breaks_its_signature(change: dict[str, object]) -> None:
    signed = KEY.signed(result())
    assert verify(signed, KEY.public_b64)
    changed = signed.model_copy(update=change)
    assert changed.signature == signed.signature
    assert not verify(over_the_wire(changed), KEY.public_b64)


def test_missing_or_malformed_signatures_and_keys_are_false_not_errors() -> None:
    unsigned = result()
    assert not verify(unsigned, KEY.public_b64)
    garbage = [
        "",
        "not base64!",
        base64.b64encode(b"x" * 64).decode(),
        base64.b64encode(b"short").decode(),
    ]
    for signature in garbage:
        assert not verify(result(signature=signature), KEY.public_b64)
    signed = KEY.signed(result())
    for key in ["", "???", base64.b64encode(b"k" * 31).decode(), OTHER.public_b64]:
        assert not verify(signed, key)
    # Another key's signature, on the same bytes: not the run's.
    assert not verify(OTHER.signed(result()), KEY.public_b64)


def test_signing_covers_the_message_without_its_signature_and_traceparent() -> None:
    plain = result()
    dressed = result(
        id=plain.id, sent_at=plain.sent_at, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    )
    dressed.signature = "anything"
    assert canonical(plain) == canonical(dressed)
    assert b"signature" not in canonical(dressed) and b"traceparent" not in canonical(dressed)


def job_result(images: list[bytes]) -> JobResult:
    parts = [ImagePart.from_bytes(data) for data in images]
    return JobResult(
        run="r1",
        episode="e1",
        sender="worker-a",
        record={"episode": "e1", "outcome": "success", "main_score": 100.0, "turns": 3},
        transcript='{"kind":"transcript_event"}\n',
        images={p.sha256: base64.b64encode(d).decode() for p, d in zip(parts, images, strict=True)},
        worker="worker-a",
    )


@settings(max_examples=50)
@given(
    images=st.lists(st.binary(min_size=1, max_size=256), max_size=3, unique=True),
    record=json_objects,
    transcript=texts,
)
def test_job_results_are_signed_with_their_images_by_hash(
    images: list[bytes], record: dict[str, object], transcript: str
) -> None:
    message = job_result(images)
    message.record = {**record, "main_score": 1.5}
    message.transcript = transcript
    KEY.signed(message)
    assert verify(over_the_wire(message), KEY.public_b64)


def test_a_job_result_with_swapped_image_bytes_fails() -> None:
    message = KEY.signed(job_result([b"first picture", b"second picture"]))
    assert verify(message, KEY.public_b64)
    sha = next(iter(message.images))
    forged = message.model_copy(
        update={"images": {**message.images, sha: base64.b64encode(b"evil").decode()}}
    )
    # The hashes the signature covers are the same; the bytes filed under one are not its own.
    assert canonical(forged) == canonical(message)
    assert not verify(forged, KEY.public_b64)
    swapped_record = message.model_copy(update={"record": {**message.record, "outcome": "lost"}})
    assert not verify(swapped_record, KEY.public_b64)


def test_the_key_in_a_run_folder_is_private_and_kept(tmp_path: Path) -> None:
    key = RunKey.load_or_create(tmp_path)
    mode = stat.S_IMODE(os.stat(tmp_path / KEY_FILE).st_mode)
    assert mode == 0o600
    assert read_public_key(tmp_path) == key.public_b64
    again = RunKey.load_or_create(tmp_path)  # a resumed run: the same key
    assert again.public_b64 == key.public_b64
    assert verify(again.signed(result()), key.public_b64)
    # A lost run.pub is written again from the key.
    (tmp_path / PUBLIC_FILE).unlink()
    assert RunKey.load(tmp_path).public_b64 == key.public_b64
    assert read_public_key(tmp_path) == key.public_b64
    # The private half travels to workers as base64 and signs the same.
    carried = RunKey.from_b64(key.private_b64())
    assert verify(carried.signed(result()), key.public_b64)
    assert key.private_b64() not in repr(key)


def test_unreadable_keys_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / KEY_FILE).write_bytes(b"-----BEGIN PRIVATE KEY-----\ngarbage\n")
    with pytest.raises(SigningError, match="not a PEM private key"):
        RunKey.load(tmp_path)
    with pytest.raises(SigningError, match="base64 Ed25519"):
        RunKey.from_b64("not a key")
    with pytest.raises(SigningError, match="base64 Ed25519"):
        RunKey.from_b64(base64.b64encode(b"too short").decode())
    assert read_public_key(tmp_path / "nowhere") is None
    (tmp_path / PUBLIC_FILE).write_text("not a key\n")
    assert read_public_key(tmp_path) is None


@pytest.mark.anyio
async def test_a_signed_result_verifies_after_crossing_mosquitto(mqtt5_broker: MqttBroker) -> None:
    publisher, receiver = mqtt5_broker.bus(), mqtt5_broker.bus()
    async with publisher, receiver:
        sub = receiver.subscribe(topics.results("r1"))
        await sub.ready()
        sent = KEY.signed(
            result(scores={"psr": 0.1 + 0.2, "tiny": 5e-324, "big": 1.7976931348623157e308})
        )
        sent.traceparent = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
        await publisher.publish(topics.results("r1"), sent)
        got = (await sub.get()).message
    assert isinstance(got, EpisodeFinished) and got.id == sent.id
    assert verify(got, KEY.public_b64) and not verify(got, OTHER.public_b64)


# --- the control plane: statuses, controls and jobs ---------------------------------------------


def status(**fields: object) -> RunStatus:
    base: dict[str, object] = {
        "run": "r1",
        "sender": "main",
        "process": "main",
        "pid": 1,
        "name": "n",
        "started_at": 1.0,
        "updated_at": 2.0,
        "planned": 200,
        "done": {"success": 3},
        "final": False,
        "run_key": KEY.public_b64,
    }
    return RunStatus.model_validate({**base, **fields})


def control(**fields: object) -> Control:
    return Control.model_validate(
        {"run": "r1", "sender": "dashboard", "command": "pause", **fields}
    )


def job(**fields: object) -> Job:
    base: dict[str, object] = {
        "run": "r1",
        "episode": "e1",
        "sender": "main",
        "spec": {"id": "e1", "game": "test.counter", "seed": 0},
        "setup": {"config": {"name": "n", "models": {}}, "run_key": KEY.private_b64()},
        "version": "1.0",
    }
    return Job.model_validate({**base, **fields})


CONTROL_PLANE = [
    (status, {"final": True}),
    (status, {"run": "r2"}),
    (status, {"sent_at": 1e12}),  # a status moved into the future cannot pass for a later one
    (control, {"command": "abort"}),
    (control, {"episode": "e9"}),
    (control, {"sent_at": 1e12}),
    (job, {"spec": {"id": "e2", "game": "test.counter", "seed": 0}}),
    (job, {"attempt": 2}),
    (job, {"setup": {"config": {"name": "x"}, "run_key": OTHER.private_b64()}}),
]


@pytest.mark.parametrize(("make", "change"), CONTROL_PLANE)
def test_statuses_controls_and_jobs_are_signed_over_every_field(
    make: Any, change: dict[str, object]
) -> None:
    signed = KEY.signed(make())
    assert signed.kind in SIGNED_KINDS
    signed.traceparent = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    assert verify(decode(encode(signed)), KEY.public_b64)
    assert not verify(signed, OTHER.public_b64)
    changed = signed.model_copy(update=change)
    assert not verify(decode(encode(changed)), KEY.public_b64)


def test_a_gate_counts_what_the_run_key_does_not_sign() -> None:
    gate = Gate(KEY.public_b64, "test")
    assert gate.check(KEY.signed(status()), "r1")
    assert not gate.check(status(), "r1")  # unsigned
    assert not gate.check(OTHER.signed(status(final=True)), "r1")  # another key
    assert not gate.check(KEY.signed(status(run="r2")), "r1")  # another run's, though genuine
    assert not gate.check(KEY.signed(job(signature=None)).model_copy(update={"attempt": 9}))
    assert gate.refused == {"run_status": 3, "job": 1}
    assert gate.total == 4


def test_a_gate_without_a_key_lets_everything_through() -> None:
    """A run that signs nothing (an older run's folder, a scheduler made without a key)."""
    gate = Gate(None)
    assert gate.check(status(run_key=None)) and gate.control(control(), "run")
    assert not gate.check(status(run="r2"), "r1")  # still: only the run's own
    assert gate.refused == {"run_status": 1}


def test_a_replayed_control_is_refused_once_a_later_one_was_obeyed() -> None:
    gate = Gate(KEY.public_b64)
    now = time.time()
    pause = KEY.signed(control(command="pause", sent_at=now - 2))
    resume = KEY.signed(control(command="resume", sent_at=now - 1))
    assert gate.control(pause, "run", "r1")
    assert gate.control(resume, "run", "r1")
    assert not gate.control(pause, "run", "r1")  # the genuine pause again, after the resume
    # Another target keeps its own order; an old control is refused whatever its target.
    assert gate.control(KEY.signed(control(command="abort", sent_at=now - 5)), "e1", "r1")
    stale = KEY.signed(control(sent_at=now - CONTROL_MAX_AGE_S - 60))
    assert not gate.control(stale, "e2", "r1")
    assert not gate.control(control(sent_at=now), "run", "r1")  # unsigned
    assert gate.refused == {"control": 3}
