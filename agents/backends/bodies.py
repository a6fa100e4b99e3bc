"""What a model server's reply may cost the client, on every transport: at most
``max_response_bytes`` of body, counted while it is read, on the bytes that come over the wire
and on those they decompress to, and no redirect but one to the same server.

Compressed bodies are decompressed here (gzip, deflate), in bounded pieces, rather than by the
HTTP client: a client's own decoder turns one small chunk of a gzip bomb into gigabytes in a
single call, before any count could stop it."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import yarl

from parley.agents.backends.retry import Failure

# The most a decompressor gives back per call: a bomb is cut off after this much, and the
# event loop is never held by one large piece.
PIECE = 64 * 1024
# What requests say they take: only what BodyLimit can decode in bounded pieces.
ACCEPT_ENCODING = "gzip, deflate"
REDIRECTS = frozenset({301, 302, 303, 307, 308})


def too_large(limit: int, raw: int, decoded: int, what: str) -> Failure:
    """The failure of a reply over ``max_response_bytes``: not retried, as a server that sent
    one will most likely send another."""
    return Failure(
        "too_large",
        f"{what} over max_response_bytes ({limit} bytes); read {raw} bytes, {decoded} decoded, "
        "and stopped",
        retryable=False,
        details={"bytes_read": raw, "bytes_decoded": decoded, "max_response_bytes": limit},
    )


class BodyLimit:
    """One response body, fed as it arrives: decoded (its ``Content-Encoding``) in bounded
    pieces, with the bytes read and decoded counted; a :class:`Failure` (``too_large``) as soon
    as either passes ``limit``, or at once where ``Content-Length`` says it will."""

    def __init__(self, limit: int, headers: Mapping[str, str]) -> None:
        self.limit = limit
        self.raw = 0
        self.decoded = 0
        length = headers.get("content-length", "").strip()
        if length.isdigit() and int(length) > limit:
            raise too_large(limit, 0, 0, f"a reply of {int(length)} bytes (Content-Length)")
        encoding = headers.get("content-encoding", "").strip().lower()
        self._inflate: Any = None
        self._deflate = False
        self._pending = b""
        if encoding in ("gzip", "x-gzip"):
            self._inflate = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif encoding == "deflate":
            # zlib-wrapped as the standard says, or raw as some servers send it: told apart
            # by the first bytes.
            self._deflate = True
        elif encoding not in ("", "identity"):
            raise Failure(
                "bad_response",
                f"a reply in Content-Encoding {encoding[:40]!r}, which was not asked for",
                retryable=False,
            )

    def feed(self, data: bytes) -> list[bytes]:
        """The decoded pieces of the next bytes of the body."""
        self.raw += len(data)
        if self.raw > self.limit:
            raise too_large(self.limit, self.raw, self.decoded, "a reply")
        if self._deflate and self._inflate is None:
            data = self._pending + data
            if len(data) < 2:
                self._pending = data  # too little yet to tell zlib's header from raw deflate
                return []
            self._pending = b""
            zlib_header = (data[0] & 0x0F) == 8 and (data[0] * 256 + data[1]) % 31 == 0
            self._inflate = zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
        if self._inflate is None:
            self.decoded += len(data)
            return [data] if data else []
        pieces = []
        try:
            while data:
                piece = self._inflate.decompress(data, PIECE)
                data = self._inflate.unconsumed_tail
                self._count(piece)
                if piece:
                    pieces.append(piece)
        except zlib.error as exc:
            raise Failure("bad_response", f"a reply that does not decompress: {exc}") from None
        return pieces

    def flush(self) -> list[bytes]:
        """What is left in the decompressor at the end of the body."""
        if self._inflate is None:
            return []
        try:
            piece = self._inflate.flush(PIECE)
        except zlib.error as exc:
            raise Failure("bad_response", f"a reply that does not decompress: {exc}") from None
        self._count(piece)
        return [piece] if piece else []

    def _count(self, piece: bytes) -> None:
        self.decoded += len(piece)
        if self.decoded > self.limit:
            raise too_large(self.limit, self.raw, self.decoded, "a decompressed reply")


async def limited(
    chunks: AsyncIterator[bytes], limit: int, headers: Mapping[str, str]
) -> AsyncIterator[bytes]:
    """``chunks`` (a body's bytes as they come) decoded and held to ``limit``."""
    body = BodyLimit(limit, headers)
    async for chunk in chunks:
        for piece in body.feed(chunk):
            yield piece
    for piece in body.flush():
        yield piece


def public(url: yarl.URL) -> str:
    """``url`` as a record may show it: no credentials, query or fragment."""
    return str(url.with_user(None).with_query(None).with_fragment(None))


class Redirected(Exception):
    """A redirect to the same server, which the request may follow once: to ``target``."""

    def __init__(self, status: int, target: yarl.URL) -> None:
        super().__init__(f"HTTP {status} to {public(target)}")
        self.status = status
        self.target = target


def redirect_target(source: yarl.URL, status: int, location: str | None) -> yarl.URL:
    """Where a redirect of a model request points, where it may be followed: a URL of the
    same scheme, host and port; any other is a :class:`Failure` (``redirect``) naming it."""
    if not location:
        raise Failure("redirect", f"HTTP {status} without a Location", status, retryable=False)
    try:
        target = source.join(yarl.URL(location))
        same = target.origin() == source.origin()
    except ValueError:
        raise Failure(
            "redirect", f"HTTP {status} to an unreadable Location", status, retryable=False
        ) from None
    if not same:
        raise Failure(
            "redirect",
            f"HTTP {status} to {public(target)}, another host or scheme: not followed (a model "
            "request goes only to its base URL's server; set base_url to where it should go)",
            status,
            retryable=False,
        )
    return target


def redirected_again(status: int, target: yarl.URL) -> Failure:
    """A second redirect of one request: not followed."""
    return Failure(
        "redirect",
        f"HTTP {status} to {public(target)} after a redirect already followed: not followed",
        status,
        retryable=False,
    )
