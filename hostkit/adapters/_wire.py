"""The HTTP client the SDK adapters hand their SDK: a response's body bounded on the wire.

``Draft`` counts a response as the SDK hands it over, but the SDK hands over
whole server-sent events and whole bodies: one 256 MiB event was buffered and
parsed (over a gigabyte) before a byte of it was counted, and one SDK's event
decoder copies its buffer for every chunk, so one large event also costs time
quadratic in its size. So the body is counted below the SDK too, as it comes
off the socket: one event (or a whole body that is no event stream) past
``MAX_EVENT_BYTES``, or a whole response past ``MAX_WIRE_BYTES``, fails the
read with ``OverBound``. The adapters map that to ``refused``'s
``ProviderError`` like every other bound, and the connection is dropped.

The count is a response hook on the SDK's own default client, not a transport
of ours: the SDK's transport keeps its keep-alive socket options and httpx its
proxies from the environment, which a replaced transport would lose. The
client asks for uncompressed bodies; one that comes compressed anyway is
decoded here from its raw bytes by ``hostkit._content_coding``, whose output
is what the bounds count, and its ``content-encoding`` is dropped before httpx
builds a decoder: httpx inflates a whole chunk before any count sees it (64 KiB
of deflate were 64 MiB). A coding that is not decoded (br, zstd) is refused.

An error status's body is cut at ``MAX_ERROR_BYTES`` rather than refused, so
the status and its ``Retry-After`` still reach the adapter; a compressed one is
decoded to that bound too, so its message is read. One in a coding that is not
decoded, or corrupt before a byte of it decoded, is a fixed note saying so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx2

from hostkit._content_coding import (
    BodyOverCap,
    ContentCodingError,
    UnsupportedCoding,
    codings,
    decoded,
)
from hostkit.adapters._bounds import OverBound
from hostkit.errors import bounded
from hostkit.types import MAX_RESPONSE_BYTES

__all__ = ["MAX_EVENT_BYTES", "MAX_WIRE_BYTES", "bounded_client"]

# One event, or one whole body: the most text and arguments a response may carry, sent in
# a single piece (some servers send a whole tool call in one chunk) and JSON-escaped (an
# emoji's four bytes are twelve as a \\u surrogate pair).
MAX_EVENT_BYTES = 4 * MAX_RESPONSE_BYTES
# A whole streamed response. Its framing costs far more than its text: an OpenAI chunk is
# some 300 bytes of JSON around a token or two, so 100k tokens are some 30 MiB on the wire.
MAX_WIRE_BYTES = 16 * MAX_RESPONSE_BYTES
# What ends a server-sent event: a blank line, in any of the three line endings.
_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")
# The encodings httpx decodes: counted compressed, such a body could inflate past any bound.
# Any other (``none``, which some proxies add to event streams) arrives as it is, counted.
_DECODED = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd"})
# An error status's body (its message, which the SDK reads whole): it is cut here, never
# refused, so the status, and whether to try again, still reach the adapter.
MAX_ERROR_BYTES = 64 * 1024
# What the SDK reads in place of an error body it cannot decode (``{}`` is the encoding).
_UNREAD_ERROR = "the server sent its error compressed ({}), asked not to, and it cannot be read"


def bounded_client(
    client_class: Callable[..., httpx2.AsyncClient],
    *,
    max_bytes: int = MAX_WIRE_BYTES,
    max_event_bytes: int = MAX_EVENT_BYTES,
) -> httpx2.AsyncClient:
    """An SDK's default client (``client_class``) whose response bodies are counted."""

    async def count(response: httpx2.Response) -> None:
        stream = response.stream
        if not isinstance(stream, httpx2.AsyncByteStream):
            return
        encoding = response.headers.get("content-encoding", "")
        if not _decoded(encoding):
            encoding = ""  # none httpx decodes (``none``): the body arrives as it is
        readable = _decodable(encoding)
        if encoding and (readable or response.status_code >= 400):
            del response.headers["content-encoding"]  # decoded here, or not read at all
        if response.status_code >= 400:
            note = _UNREAD_ERROR.format(bounded(encoding, 40)).encode()
            if readable:
                response.stream = _CutBody(stream, MAX_ERROR_BYTES, encoding, note)
            else:
                response.stream = _Note(stream, note)
            return
        response.stream = _CountedBody(
            stream,
            max_bytes=max_bytes,
            max_event_bytes=max_event_bytes,
            events=response.headers.get("content-type", "").startswith("text/event-stream"),
            encoding=encoding,
        )

    return client_class(headers={"accept-encoding": "identity"}, event_hooks={"response": [count]})


def _decoded(encoding: str) -> bool:
    """Whether httpx would decode a body sent with this ``content-encoding`` (any of its
    codings, in any case: httpx reads them that way)."""
    return any(part.strip().lower() in _DECODED for part in encoding.split(","))


def _decodable(encoding: str) -> bool:
    """Whether ``hostkit._content_coding`` decodes this ``content-encoding`` itself."""
    try:
        codings(encoding)
    except UnsupportedCoding:
        return False
    return True


class _CountedBody(httpx2.AsyncByteStream):
    """A body that raises ``OverBound`` past its bounds (see the module docstring)."""

    def __init__(
        self,
        stream: httpx2.AsyncByteStream,
        *,
        max_bytes: int,
        max_event_bytes: int,
        events: bool,
        encoding: str,
    ) -> None:
        self._stream = stream
        self._max_bytes = max_bytes if events else max_event_bytes
        self._max_event_bytes = max_event_bytes
        self._events = events
        self._encoding = encoding

    @property
    def elapsed(self) -> object:
        """What httpx reads from its own stream once the body is closed (``Response.elapsed``)."""
        return self._stream.elapsed  # type: ignore[attr-defined]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._counted():
                yield chunk
        except BodyOverCap:
            what = "bytes on the wire" if self._events else "bytes in one body"
            raise OverBound(f"more than {self._max_bytes} {what}") from None
        except ContentCodingError as exc:
            raise OverBound(f"a compressed body that cannot be read: {exc}") from None

    async def _counted(self) -> AsyncIterator[bytes]:
        """The decoded body, its bounds counted on what was decoded (the whole body's by
        the decoder's cap: ``BodyOverCap``)."""
        # Bytes since the last event ended, and the end of what came before (an event's
        # end may straddle two chunks).
        pending, tail = 0, b""
        async for chunk in decoded(self._stream, self._encoding, cap=self._max_bytes):
            if self._events:
                window = tail + chunk
                end = max(
                    window.rfind(sep) + len(sep) if sep in window else 0 for sep in _EVENT_ENDS
                )
                pending = len(window) - end if end else pending + len(chunk)
                if pending > self._max_event_bytes:
                    raise OverBound(f"an event of more than {self._max_event_bytes} bytes")
                tail = window[-3:]
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class _CutBody(httpx2.AsyncByteStream):
    """An error body decoded and ended after ``limit`` bytes: a few kilobytes say what
    went wrong; the rest is not read (nor inflated). One corrupt before a byte of it
    decoded is ``note``."""

    def __init__(
        self, stream: httpx2.AsyncByteStream, limit: int, encoding: str, note: bytes
    ) -> None:
        self._stream = stream
        self._limit = limit
        self._encoding = encoding
        self._note = note

    @property
    def elapsed(self) -> object:
        return self._stream.elapsed  # type: ignore[attr-defined]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        said = False
        try:
            async for piece in decoded(self._stream, self._encoding, cap=self._limit):
                said = True
                yield piece
        except BodyOverCap:
            return
        except ContentCodingError:
            if not said:
                yield self._note

    async def aclose(self) -> None:
        await self._stream.aclose()


class _Note(httpx2.AsyncByteStream):
    """An error body in a coding not decoded, not read: ``note`` stands for it;
    closing it drops the connection, whose body was left on the wire."""

    def __init__(self, stream: httpx2.AsyncByteStream, note: bytes) -> None:
        self._stream = stream
        self._note = note

    @property
    def elapsed(self) -> object:
        return self._stream.elapsed  # type: ignore[attr-defined]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._note

    async def aclose(self) -> None:
        await self._stream.aclose()
