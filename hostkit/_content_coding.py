"""A compressed HTTP body decoded within a byte cap, whatever client read it.

hostkit asks every server for bodies uncompressed (``accept-encoding:
identity``), but a proxy or platform may compress one anyway. Refusing such a
body turned a platform's accepted delivery into a retry (a duplicate message);
letting httpx decode it inflated each raw chunk whole before any count saw it
(64 KiB of deflate were 64 MiB). So callers hand over the *raw* bytes and this
module decodes them: each zlib step gets at most ``STEP_BYTES`` of output room
(``max_length``), the input it did not reach waits in ``unconsumed_tail``, and
every stage's output counts against the caller's cap. A bomb therefore costs
at most the cap in memory and the work of producing it; raw bytes are capped
too (input that decodes to nothing is still work).

gzip (one or more members), deflate (zlib-wrapped or raw: servers send both),
and identity are decoded, stacked up to ``MAX_CODINGS`` deep (``gzip, gzip``).
br, zstd and any other coding raise ``UnsupportedCoding`` before a byte is read.
It imports only the standard library and ``hostkit.errors``, so every layer may use it.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterable, AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from hostkit.errors import bounded

__all__ = [
    "MAX_CODINGS",
    "MAX_GZIP_MEMBERS",
    "STEP_BYTES",
    "BodyOverCap",
    "ContentCodingError",
    "CorruptBody",
    "CutShort",
    "Decoded",
    "Decoder",
    "UnsupportedCoding",
    "decoded",
    "raw_body",
    "read_decoded",
]

# The most output one zlib step may make: a bomb is decoded in pieces of this size.
STEP_BYTES = 64 * 1024
# Codings one body may stack; a deeper stack is refused (nobody sends one by accident).
MAX_CODINGS = 2
# gzip members one body may hold: each costs a new decompressor whatever it holds, so
# millions of empty ones (20 bytes each) would be seconds of CPU on the event loop.
MAX_GZIP_MEMBERS = 1024
_GZIP = frozenset({"gzip", "x-gzip"})
_DEFLATE = "deflate"
_IDENTITY = frozenset({"", "identity"})


class ContentCodingError(Exception):
    """A body that cannot be decoded; the message is bounded and quotes no body bytes."""


class UnsupportedCoding(ContentCodingError):
    """A ``content-encoding`` this module does not decode (br, zstd, unknown, too deep)."""


class CorruptBody(ContentCodingError):
    """A compressed body that is not valid, or ended before its end."""


class CutShort(CorruptBody):
    """A compressed body that ended before its end (the connection, not the coding, failed)."""


class BodyOverCap(Exception):
    """The decoded body (or the raw bytes behind it) went on past the caller's cap."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"the body is over {cap} bytes")
        self.cap = cap


def codings(encoding: str | None) -> tuple[str, ...]:
    """The codings of a ``content-encoding`` value in the order they are undone.

    The header lists them in the order they were applied, so the last is undone
    first; identity entries are no coding.
    """
    named = [part.strip().lower() for part in (encoding or "").split(",")]
    found = tuple(reversed([name for name in named if name not in _IDENTITY]))
    for name in found:
        if name not in _GZIP and name != _DEFLATE:
            raise UnsupportedCoding(f"unsupported content-encoding {bounded(name, 40)!r}")
    if len(found) > MAX_CODINGS:
        raise UnsupportedCoding(f"{len(found)} stacked content-encodings, over {MAX_CODINGS}")
    return found


class _Stage:
    """One coding undone: gzip members in a row, or one deflate stream of either framing."""

    def __init__(self, coding: str) -> None:
        self._gzip = coding in _GZIP
        self._z: zlib._Decompress | None = None
        self._held = b""  # a raw deflate's opening, while its framing is not yet known
        self._members = 0
        self.started = False

    @property
    def ended(self) -> bool:
        """Whether the stream read so far is complete (the body may end here)."""
        return self._z is not None and self._z.eof and not self._held

    def steps(self, data: bytes) -> Iterator[bytes]:
        """``data`` decoded, in pieces of at most ``STEP_BYTES`` made one at a time.

        A step that filled its room may leave output inside zlib with no input
        left, so steps go on until one makes less than the room.
        """
        if data:
            self.started = True
        try:
            while True:
                if data and (self._z is None or self._z.eof):
                    if self._z is not None and not self._gzip:
                        raise CorruptBody("data after the end of a deflate stream")
                    data = self._open(data)
                if self._z is None or (self._z.eof and not data):
                    return
                out = self._z.decompress(data, STEP_BYTES)
                data = self._z.unconsumed_tail or self._z.unused_data
                if out:
                    yield out
                if not data and len(out) < STEP_BYTES:
                    return
        except zlib.error as exc:
            raise CorruptBody("the compressed body is corrupt") from exc

    def _open(self, data: bytes) -> bytes:
        """Start the next stream; deflate's framing is told by its first two bytes."""
        if self._gzip:
            self._members += 1
            if self._members > MAX_GZIP_MEMBERS:
                raise CorruptBody(f"more than {MAX_GZIP_MEMBERS} gzip members")
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
            return data
        data, self._held = self._held + data, b""
        if len(data) < 2:
            self._held = data
            return b""
        cmf, flg = data[0], data[1]
        wrapped = cmf & 0x0F == 8 and cmf >> 4 <= 7 and (cmf << 8 | flg) % 31 == 0
        self._z = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        return data


class Decoder:
    """A body's ``content-encoding`` undone chunk by chunk, its output held to ``cap`` bytes.

    ``cap`` None bounds only each step (a stream read as it goes, like server-sent
    events). ``feed`` raises ``BodyOverCap`` once the output would pass the cap,
    after yielding exactly the first ``cap`` bytes.
    """

    def __init__(self, encoding: str | None, cap: int | None) -> None:
        self._stages = [_Stage(coding) for coding in codings(encoding)]
        self._cap = cap
        self._raw_cap = None if cap is None else 2 * cap + STEP_BYTES
        self._raw = 0
        self._made = [0] * (len(self._stages) + 1)  # output of each stage, then of the body

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The decoded pieces of one raw ``chunk``."""
        self._raw += len(chunk)
        if self._raw_cap is not None and self._raw > self._raw_cap:
            raise BodyOverCap(self._cap or 0)
        yield from self._through(0, chunk)

    def finish(self) -> None:
        """The raw body ended: every stream that started must have reached its end."""
        if any(stage.started and not stage.ended for stage in self._stages):
            raise CutShort("the compressed body ended before its end")

    def _through(self, index: int, data: bytes) -> Iterator[bytes]:
        if index == len(self._stages):
            yield from self._out(data)
            return
        for piece in self._stages[index].steps(data):
            if index + 1 < len(self._stages):
                self._made[index] += len(piece)
                if self._cap is not None and self._made[index] > self._cap:
                    raise BodyOverCap(self._cap)
            yield from self._through(index + 1, piece)

    def _out(self, data: bytes) -> Iterator[bytes]:
        if not data:
            return
        made = self._made[-1]
        if self._cap is not None and made + len(data) > self._cap:
            self._made[-1] = self._cap
            if made < self._cap:
                yield data[: self._cap - made]
            raise BodyOverCap(self._cap)
        self._made[-1] = made + len(data)
        yield data


async def decoded(
    raw: AsyncIterable[bytes], encoding: str | None, *, cap: int | None
) -> AsyncIterator[bytes]:
    """The decoded body of ``raw`` (a response's undecoded bytes), at most ``cap`` bytes.

    Raises ``UnsupportedCoding`` before reading, ``BodyOverCap`` after the first
    ``cap`` bytes, ``CorruptBody`` where the body stops making sense.
    """
    decoder = Decoder(encoding, cap)
    async for chunk in raw:
        for piece in decoder.feed(chunk):
            yield piece
    decoder.finish()


@dataclass(frozen=True, slots=True)
class Decoded:
    """A body read whole: at most the cap's bytes, ``cut`` when it went on past them."""

    body: bytes
    cut: bool


async def read_decoded(raw: AsyncIterable[bytes], encoding: str | None, *, cap: int) -> Decoded:
    """The whole decoded body, or its first ``cap`` bytes marked ``cut``; it stops reading
    there. ``ContentCodingError`` for a body it cannot decode."""
    body = bytearray()
    try:
        async for piece in decoded(raw, encoding, cap=cap):
            body += piece
    except BodyOverCap:
        return Decoded(bytes(body), True)
    return Decoded(bytes(body), False)


class Response(Protocol):
    """What ``raw_body`` reads of a response (an ``httpx.Response``'s own members)."""

    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def content(self) -> bytes: ...

    is_stream_consumed: bool

    def aiter_raw(self) -> AsyncIterator[bytes]: ...


def raw_body(response: Response) -> tuple[AsyncIterable[bytes], str | None]:
    """A response's undecoded bytes and the ``content-encoding`` they are in.

    A response read already (one built with its body, as a mock transport's is)
    has no raw bytes left: its body is the one it holds, decoded when it was
    read, so it is read as it is (``identity``), still within the caller's cap.
    """
    if response.is_stream_consumed:
        return _once(response.content), None
    return response.aiter_raw(), response.headers.get("content-encoding")


async def _once(body: bytes) -> AsyncIterator[bytes]:
    """``body`` in pieces a stream would bring: the raw cap counts each as it comes."""
    for start in range(0, len(body), STEP_BYTES):
        yield body[start : start + STEP_BYTES]
