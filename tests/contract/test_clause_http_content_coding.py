"""Clause: a compressed HTTP body is decoded within the caller's byte cap, never refused
for being compressed and never inflated past the cap.

Every HTTP client of hostkit asks for ``accept-encoding: identity``; a proxy may
compress the answer anyway. ``hostkit._content_coding`` decodes the *raw* bytes
(gzip, deflate zlib-wrapped or raw, stacked two deep) a bounded step at a time,
so the decoded size never passes the cap and the work stops there; a coding it
does not decode (br, zstd, unknown) is refused before a byte is read. Bodies come
from a real loopback HTTP server, read raw with httpx as every caller reads them.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import threading
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import httpx
import pytest

from hostkit._content_coding import (
    MAX_GZIP_MEMBERS,
    STEP_BYTES,
    BodyOverCap,
    CorruptBody,
    CutShort,
    Decoded,
    UnsupportedCoding,
    decoded,
    raw_body,
    read_decoded,
)

pytestmark = pytest.mark.anyio

TEXT = b'{"ok":true,"result":"' + b"lorem ipsum " * 20_000 + b'"}'


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@functools.cache
def _gzip_bomb(inflated: int) -> bytes:
    """``inflated`` zero bytes gzipped (about a thousandth of that)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    return b"".join([*(packer.compress(block) for _ in range(inflated >> 20)), packer.flush()])


class _Raw(http.server.BaseHTTPRequestHandler):
    """Answers every GET with ``body`` under ``content-encoding: encoding``, as it is."""

    body = b""
    encoding = ""
    asked: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.asked.append(self.headers.get("accept-encoding", ""))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        if self.encoding:
            self.send_header("content-encoding", self.encoding)
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client stopped reading at its cap
            self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Any]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Raw)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()

    def answer(encoding: str, body: bytes) -> str:
        _Raw.encoding, _Raw.body = encoding, body
        return f"http://127.0.0.1:{server.server_port}/"

    try:
        yield answer
    finally:
        server.shutdown()
        server.server_close()


class _Counted:
    """A response's raw bytes, counted as the decoder takes them."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.raw = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.response.aiter_raw():
            self.raw += len(chunk)
            yield chunk


async def _read(url: str, *, cap: int) -> tuple[bytes, bool, int]:
    async with (
        httpx.AsyncClient() as client,
        client.stream("GET", url, headers={"accept-encoding": "identity"}) as response,
    ):
        counted = _Counted(response)
        read = await read_decoded(counted, response.headers.get("content-encoding"), cap=cap)
        return read.body, read.cut, counted.raw


CODINGS = {
    "identity": ("identity", lambda body: body),
    "none-sent": ("", lambda body: body),
    "gzip": ("gzip", gzip.compress),
    "x-gzip": ("X-GZIP", gzip.compress),
    "gzip-two-members": ("gzip", lambda body: gzip.compress(body[:99]) + gzip.compress(body[99:])),
    "deflate-zlib": ("deflate", zlib.compress),
    "deflate-raw": ("deflate", _raw_deflate),
    "gzip-gzip": ("gzip, gzip", lambda body: gzip.compress(gzip.compress(body))),
    "deflate-then-gzip": ("deflate, gzip", lambda body: gzip.compress(zlib.compress(body))),
    "identity-listed": ("identity, gzip", gzip.compress),
}


@pytest.mark.parametrize("coding", sorted(CODINGS))
async def test_a_compressed_body_is_decoded_whole(serve: Any, coding: str) -> None:
    encoding, encode = CODINGS[coding]
    body, cut, _ = await _read(serve(encoding, encode(TEXT)), cap=len(TEXT))
    assert (body, cut) == (TEXT, False)
    assert _Raw.asked[-1] == "identity"


@pytest.mark.parametrize("coding", ["gzip", "deflate-raw", "gzip-gzip", "identity"])
async def test_a_body_past_the_cap_is_its_first_cap_bytes_marked_cut(
    serve: Any, coding: str
) -> None:
    encoding, encode = CODINGS[coding]
    body, cut, _ = await _read(serve(encoding, encode(TEXT)), cap=1000)
    assert (body, cut) == (TEXT[:1000], True)


@pytest.mark.parametrize("encoding", ["gzip", "gzip, gzip"])
async def test_a_bomb_is_decoded_only_to_the_cap_and_the_read_stops_there(
    serve: Any, encoding: str
) -> None:
    """512 MiB of zeros gzipped (about 512 KiB; stacked, a few KiB) under a 64 KiB cap: the
    output is exactly the cap, and the raw read stops after a small part of the body."""
    bomb = _gzip_bomb(512 << 20)
    if encoding == "gzip, gzip":
        bomb = gzip.compress(bomb)
    cap = 64 * 1024
    body, cut, raw = await _read(serve(encoding, bomb), cap=cap)
    assert (len(body), cut) == (cap, True)
    assert raw < max(len(bomb) // 4, 128 * 1024)


async def test_every_step_of_a_bomb_is_bounded() -> None:
    """One raw chunk that inflates to 512 MiB is decoded in pieces of at most STEP_BYTES, and
    the decoder stops making them once the cap is passed: memory and work end at the cap."""
    bomb = _gzip_bomb(512 << 20)

    async def one_chunk() -> AsyncIterator[bytes]:
        yield bomb

    pieces: list[int] = []

    async def read() -> None:
        async for piece in decoded(one_chunk(), "gzip", cap=10 * STEP_BYTES):
            pieces.append(len(piece))

    with pytest.raises(BodyOverCap):
        await read()
    assert max(pieces) <= STEP_BYTES
    assert sum(pieces) == 10 * STEP_BYTES


async def test_a_flood_of_gzip_members_is_refused_past_the_bound() -> None:
    """Each gzip member costs a new decompressor whatever it holds: millions of empty ones
    (20 bytes each, within any raw cap) would be seconds of CPU, so a body has at most
    MAX_GZIP_MEMBERS; as many as that still decode whole."""
    empty = gzip.compress(b"")

    async def members(count: int) -> AsyncIterator[bytes]:
        yield empty * (count - 1) + gzip.compress(b"end")

    kept = [piece async for piece in decoded(members(MAX_GZIP_MEMBERS), "gzip", cap=None)]
    assert b"".join(kept) == b"end"
    with pytest.raises(CorruptBody, match=f"more than {MAX_GZIP_MEMBERS} gzip members"):
        async for _ in decoded(members(100_000), "gzip", cap=None):
            pass


@pytest.mark.parametrize(
    ("encoding", "body", "error", "said"),
    [
        ("gzip", gzip.compress(TEXT)[:-12], CutShort, "ended before its end"),
        ("deflate", zlib.compress(TEXT)[:100], CutShort, "ended before its end"),
        ("gzip", b"\x1f\x8b not really gzip", CorruptBody, "corrupt"),
        ("gzip", gzip.compress(b"x") + b"trailing", CorruptBody, "corrupt"),
        ("deflate", zlib.compress(b"x") + b"trailing", CorruptBody, "after the end"),
        ("br", b"\x0b\x02\x80", UnsupportedCoding, "unsupported content-encoding 'br'"),
        ("zstd", b"(\xb5/\xfd", UnsupportedCoding, "unsupported content-encoding 'zstd'"),
        ("compress", b"x", UnsupportedCoding, "'compress'"),
        ("gzip, gzip, gzip", b"x", UnsupportedCoding, "3 stacked content-encodings, over 2"),
        ("x" * 500, b"x", UnsupportedCoding, "unsupported content-encoding"),
    ],
    ids=[
        "gzip-cut",
        "deflate-cut",
        "corrupt",
        "trailing",
        "deflate-trailing",
        "br",
        "zstd",
        "unknown",
        "three-stacked",
        "long-name",
    ],
)
async def test_a_body_that_cannot_be_decoded_is_a_typed_bounded_error(
    serve: Any, encoding: str, body: bytes, error: type[Exception], said: str
) -> None:
    with pytest.raises(error) as raised:
        await _read(serve(encoding, body), cap=1 << 20)
    assert said in str(raised.value)
    assert len(str(raised.value)) < 120


async def test_an_empty_body_under_a_coding_is_an_empty_body(serve: Any) -> None:
    assert await _read(serve("gzip", b""), cap=10) == (b"", False, 0)


async def test_a_response_read_already_is_read_as_it_holds_within_the_cap() -> None:
    """A response built with its body (a mock transport's) has no raw bytes left to read:
    its body is taken as it is, still cut at the cap; a streamed one is read raw."""
    held = httpx.Response(200, content=TEXT)
    raw, encoding = raw_body(held)
    assert (await read_decoded(raw, encoding, cap=len(TEXT)), encoding) == (
        Decoded(TEXT, False),
        None,
    )
    raw, encoding = raw_body(httpx.Response(200, content=TEXT))
    assert await read_decoded(raw, encoding, cap=10) == Decoded(TEXT[:10], True)

    async def chunks() -> AsyncIterator[bytes]:
        yield gzip.compress(TEXT)

    streamed = httpx.Response(200, headers={"content-encoding": "gzip"}, stream=_Stream(chunks))
    raw, encoding = raw_body(streamed)
    assert encoding == "gzip"
    assert await read_decoded(raw, encoding, cap=len(TEXT)) == Decoded(TEXT, False)


class _Stream(httpx.AsyncByteStream):
    def __init__(self, chunks: Any) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks():
            yield chunk
