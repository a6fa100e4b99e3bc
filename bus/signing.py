"""Signatures on a run's messages: how a receiver tells the run's own from forged ones.

Anyone who may publish on a run's results topic could claim an episode's outcome: on the
anonymous broker ``parley broker`` starts, that is anyone on the host. A broker's ACLs keep
strangers off the topic, but an observer also wants to know that a result came from *this*
run's processes. So each run has a key pair, the :class:`RunKey` (Ed25519): the private half
stays in the run folder (``run.key``, readable by its owner only) and with the run's own
processes (local worker processes get it in their job, remote ones in the ``Job``'s setup); the
public half travels in the run's ``main`` :class:`~parley.bus.messages.RunStatus`
(``run_key``) and lies beside it in the folder (``run.pub``). Results
(:class:`~parley.bus.messages.EpisodeFinished` on ``parley/{run}/results``, and
:class:`~parley.bus.messages.JobResult` from remote workers) carry a ``signature`` over their
canonical bytes (:func:`canonical`); an observer that knows the run's public key checks it
with :func:`verify` and drops what does not verify.

The control plane is signed the same way: every :class:`~parley.bus.messages.RunStatus`, every
:class:`~parley.bus.messages.Control` (pause, resume, abort) and every
:class:`~parley.bus.messages.Job` the run's processes publish carries a ``signature`` too. A
receiver that knows the run's key acts only on what verifies, and counts the rest
(:class:`Gate`): a forged "run finished" status, pause or abort changes nothing. A Control is
also refused when it is older than the latest one its receiver obeyed for the same target, or
older than :data:`CONTROL_MAX_AGE_S`: a recorded genuine pause cannot be replayed after the
resume that followed it (``sent_at`` is signed, so it cannot be moved).

What is signed is the message as JSON with sorted keys, without its ``signature`` and without
what a bus may rewrite on the way (``traceparent``, set by a traced bus after the message was
signed). Images count by their sha256: an :class:`~parley.bus.messages.ImagePart`'s bytes may
be left out on the wire, and a ``JobResult``'s images are signed as the list of their hashes
(:func:`verify` checks each image's bytes against its hash). The ``run`` field is signed too,
so a result of one run cannot be replayed as another's.

Example::

    key = RunKey.generate()
    finished.signature = key.sign(finished)
    assert verify(finished, key.public_b64)
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import logging
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel

# Fields left out of what is signed: the signature itself, and what a bus may set or rewrite
# after the sender signed (a traced bus adds the publish span's traceparent).
UNSIGNED_FIELDS = frozenset({"signature", "traceparent"})
SIGNED_KINDS = frozenset({"episode_finished", "job_result", "run_status", "control", "job"})
# A signed Control older than this (by its ``sent_at``, on the receiver's clock) is a replay: the
# run's machines' clocks must agree to within it.
CONTROL_MAX_AGE_S = 300.0
KEY_FILE = "run.key"  # the private key, PEM (PKCS#8), mode 0600
PUBLIC_FILE = "run.pub"  # the public key, raw base64: what observers read
log = logging.getLogger("parley.bus.signing")


class SigningError(ValueError):
    """A key that cannot be read, or a message that cannot be signed."""


def canonical(message: BaseModel) -> bytes:
    """The bytes a signature covers: ``message`` as JSON, keys sorted, no spaces, without
    :data:`UNSIGNED_FIELDS`, images by their sha256 only.

    The same on every process and after any number of trips through the wire codec (JSON
    numbers keep their shortest form both ways)."""
    data = message.model_dump(mode="json", exclude=set(UNSIGNED_FIELDS), context={"images": "ref"})
    if data.get("kind") == "job_result" and isinstance(data.get("images"), dict):
        # A worker's images go as base64 beside the record: sign their hashes, not their
        # bytes (verify() checks that each image's bytes have the hash it is filed under).
        data["images"] = sorted(data["images"])
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        # What orjson refuses (an integer beyond 64 bits) the standard library writes.
        return json.dumps(
            data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()


class RunKey:
    """A run's Ed25519 key pair: signs the run's results.

    ``generate()`` makes one; ``load_or_create(folder)`` keeps it in a run folder, so a resumed
    run signs with the key its observers already trust; ``from_b64``/``private_b64`` carry the
    private half to the run's worker processes. ``public_b64`` is what observers verify with.
    """

    __slots__ = ("_private", "public_b64")

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        raw = private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.public_b64: str = base64.b64encode(raw).decode("ascii")

    def __repr__(self) -> str:  # never the private half
        return f"RunKey(public={self.public_b64})"

    @classmethod
    def generate(cls) -> RunKey:
        return cls(Ed25519PrivateKey.generate())

    # --- carrying the key ------------------------------------------------------------------

    def private_b64(self) -> str:
        """The private key's 32 raw bytes, base64: for a worker's job (a secret)."""
        raw = self._private.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        return base64.b64encode(raw).decode("ascii")

    @classmethod
    def from_b64(cls, text: str) -> RunKey:
        """The key :meth:`private_b64` wrote."""
        try:
            raw = base64.b64decode(text, validate=True)
            return cls(Ed25519PrivateKey.from_private_bytes(raw))
        except (binascii.Error, ValueError, TypeError) as exc:
            raise SigningError(f"not a base64 Ed25519 private key: {exc}") from None

    def to_pem(self) -> bytes:
        return self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @classmethod
    def from_pem(cls, data: bytes) -> RunKey:
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise SigningError(f"not a PEM private key: {exc}") from None
        if not isinstance(private, Ed25519PrivateKey):
            raise SigningError(f"the run key must be Ed25519, not {type(private).__name__}")
        return cls(private)

    # --- in a run folder ---------------------------------------------------------------------

    def save(self, folder: str | Path) -> None:
        """Write ``run.key`` (mode 0600, created so: never readable by others, not even
        briefly) and ``run.pub`` into ``folder``."""
        path = Path(folder)
        tmp = path / f".{KEY_FILE}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(self.to_pem())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path / KEY_FILE)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        (path / PUBLIC_FILE).write_text(self.public_b64 + "\n", encoding="ascii")

    @classmethod
    def load(cls, folder: str | Path) -> RunKey:
        path = Path(folder) / KEY_FILE
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise SigningError(f"cannot read the run key {path}: {exc.strerror or exc}") from None
        key = cls.from_pem(data)
        public = Path(folder) / PUBLIC_FILE
        try:
            kept = public.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            kept = None
        if kept != key.public_b64:  # lost, stale or damaged: the private key says what it is
            public.write_text(key.public_b64 + "\n", encoding="ascii")
        return key

    @classmethod
    def load_or_create(cls, folder: str | Path) -> RunKey:
        """The key kept in ``folder``, or a new one saved there (a new run, or a folder an
        older version wrote)."""
        if (Path(folder) / KEY_FILE).exists():
            return cls.load(folder)
        key = cls.generate()
        key.save(folder)
        return key

    # --- signing -------------------------------------------------------------------------------

    def sign(self, message: BaseModel) -> str:
        """The signature of ``message`` (base64), over :func:`canonical` bytes."""
        try:
            data = canonical(message)
        except (TypeError, ValueError) as exc:
            raise SigningError(f"cannot sign a {type(message).__name__}: {exc}") from None
        return base64.b64encode(self._private.sign(data)).decode("ascii")

    def signed(self, message: Any) -> Any:
        """``message`` with its ``signature`` set (the same object)."""
        message.signature = self.sign(message)
        return message


def read_public_key(folder: str | Path) -> str | None:
    """The public key a run folder holds (``run.pub``), or None when it has none."""
    try:
        text = (Path(folder) / PUBLIC_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if _public_key(text) is not None else None


@lru_cache(maxsize=256)
def _public_key(public_b64: str) -> Ed25519PublicKey | None:
    try:
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(public_b64, validate=True))
    except (binascii.Error, ValueError, TypeError):
        return None


def verify(message: BaseModel, public_b64: str) -> bool:
    """Whether ``message`` carries a valid signature by the key ``public_b64``; False for a
    missing or malformed signature or key, never an exception. A ``JobResult``'s images must
    also match the hashes they are filed under."""
    signature = getattr(message, "signature", None)
    key = _public_key(public_b64) if isinstance(public_b64, str) else None
    if not signature or key is None:
        return False
    try:
        raw = base64.b64decode(signature, validate=True)
        data = canonical(message)
    except (binascii.Error, ValueError, TypeError):
        return False
    try:
        key.verify(raw, data)
    except InvalidSignature:
        return False
    if getattr(message, "kind", None) == "job_result":
        return _images_match(getattr(message, "images", {}) or {})
    return True


def _images_match(images: dict[str, str]) -> bool:
    for sha, data in images.items():
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError, TypeError):
            return False
        if hashlib.sha256(raw).hexdigest() != sha:
            return False
    return True


class Gate:
    """What one receiver lets through of a run's signed messages, and how much it refused.

    ``public_b64`` is the run's public key from a source the receiver trusts (its own run key,
    the run folder's ``run.pub``, the first job of the run on a broker where only the
    coordinator may publish jobs); with None the run signs nothing and everything passes.
    ``refused`` counts what failed, by message kind; ``what`` names the receiver in the one
    log line its first refusal (and every hundredth) writes.

    Example::

        gate = Gate(key.public_b64, "worker w1")
        if gate.control(message, target=episode or "run"):
            scheduler.obey(message, episode)
    """

    __slots__ = ("_latest", "public_b64", "refused", "what")

    def __init__(self, public_b64: str | None, what: str = "") -> None:
        self.public_b64 = public_b64
        self.what = what
        self.refused: dict[str, int] = {}
        self._latest: dict[str, float] = {}  # target -> sent_at of the latest Control obeyed

    def check(self, message: BaseModel, run: str | None = None) -> bool:
        """Whether ``message`` is the run's own (signed with its key, of ``run`` when given);
        counts it when not."""
        if run is not None and getattr(message, "run", None) != run:
            return self._refuse(message, "it is of another run")
        if self.public_b64 is None:
            return True
        if not verify(message, self.public_b64):
            return self._refuse(message, "the run's key does not sign it")
        return True

    def control(self, message: BaseModel, target: str, run: str | None = None) -> bool:
        """Whether to obey the Control ``message`` for ``target`` (``run``, or an episode): signed,
        fresh, and newer than the latest one obeyed for ``target``."""
        if not self.check(message, run):
            return False
        if self.public_b64 is None:
            return True
        sent_at = float(getattr(message, "sent_at", 0.0))
        if sent_at < time.time() - CONTROL_MAX_AGE_S:
            return self._refuse(message, "it is older than a control may be (a replay)")
        if sent_at < self._latest.get(target, float("-inf")):
            return self._refuse(message, "a later control was obeyed already (a replay)")
        self._latest[target] = sent_at
        return True

    @property
    def total(self) -> int:
        return sum(self.refused.values())

    def _refuse(self, message: BaseModel, why: str) -> bool:
        kind = str(getattr(message, "kind", type(message).__name__))
        self.refused[kind] = self.refused.get(kind, 0) + 1
        total = self.total
        if total == 1 or total % 100 == 0:  # a flood must not flood the log
            log.warning(
                "%s: refused a %s from %r for run %s: %s (%d refused so far)",
                self.what or "parley",
                kind,
                getattr(message, "sender", ""),
                getattr(message, "run", ""),
                why,
                total,
            )
        return False
