"""Streamable HTTP under the shared URL policy: the SDK's transport on a pinned pool.

The SDK's ``streamable_http_client`` takes an ``httpx2.AsyncClient``; this
module gives it one whose transport sends every request through
``hostkit.builtins.web.PinnedConnections``: each request's origin is admitted
by the agent's ``UrlPolicy`` before it is sent (a new host is resolved once
and every answer checked, a known one re-checked against its pins) and the
connection goes only to validated addresses. A JSON body is capped at
``MAX_MCP_MESSAGE_BYTES`` while it streams; an SSE event is capped by the
SDK's ``max_sse_event_size``. Passing the cap breaks the connection. Bodies
are asked for uncompressed; one compressed anyway is decoded here from its raw
bytes by ``hostkit._content_coding`` (each step's output bounded, the cap
counting decoded bytes), never by httpx, for which a 1 MB gzip body can
inflate to gigabytes in one read. A coding not decoded (br, zstd) is refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import httpcore
import httpx2
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client._transport import ReadStream, TransportStreams
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from hostkit._content_coding import (
    BodyOverCap,
    ContentCodingError,
    UnsupportedCoding,
    codings,
    decoded,
)
from hostkit.builtins.mcp._errors import MAX_MCP_MESSAGE_BYTES
from hostkit.builtins.web import PinnedConnections, UrlDenied
from hostkit.errors import bounded

__all__ = ["HttpLink"]

_MIB = MAX_MCP_MESSAGE_BYTES // (1024 * 1024)
_CONNECT_TIMEOUT_S = 10.0
# What the SDK (mcp 2.x) says when it resolves a request no response will come for:
# its dispatcher's "Connection closed", and its streamable-HTTP client's "SSE stream
# failed: ...", "SSE stream ended without a response", "SSE stream ended and
# reconnection attempts were exhausted".
_SDK_CLOSED = "Connection closed"
_SDK_STREAM = "SSE stream "
# A call's own deadline is the runtime's; this only stops a silent socket forever.
_READ_TIMEOUT_S = 600.0
_CORE_ERRORS: tuple[tuple[type[Exception], type[httpx2.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx2.ConnectTimeout),
    (httpcore.ReadTimeout, httpx2.ReadTimeout),
    (httpcore.WriteTimeout, httpx2.WriteTimeout),
    (httpcore.PoolTimeout, httpx2.PoolTimeout),
    (httpcore.ConnectError, httpx2.ConnectError),
    (httpcore.ReadError, httpx2.ReadError),
    (httpcore.WriteError, httpx2.WriteError),
    (httpcore.RemoteProtocolError, httpx2.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx2.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx2.UnsupportedProtocol),
    (OSError, httpx2.NetworkError),
)


def _as_httpx2(exc: Exception) -> Exception:
    for core, mapped in _CORE_ERRORS:
        if isinstance(exc, core):
            return mapped(bounded(str(exc) or type(exc).__name__, 200))
    return exc


class HttpLink:
    """One streamable-HTTP session's transport and the state the connection reads."""

    transport = "http"

    def __init__(self, url: str, connections: PinnedConnections) -> None:
        self._url = url
        self._connections = connections
        self._ended = False
        self._broken: str | None = None

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def broken(self) -> str | None:
        return self._broken

    def diagnostics(self) -> str:
        origins = ", ".join(t.origin for t in self._connections.targets)
        return f" ({origins})" if origins else ""

    def _break(self, reason: str) -> None:
        self._broken = self._broken or reason

    def closed_by(self, message: str) -> bool:
        """Whether the SDK made this error up for a request whose response stream broke
        or ended unanswered (or the session closed): one of its own messages. Any other
        -32000 error came in a response, from the server."""
        return self._ended or message == _SDK_CLOSED or message.startswith(_SDK_STREAM)

    @asynccontextmanager
    async def streams(self) -> AsyncIterator[TransportStreams]:
        client = httpx2.AsyncClient(
            transport=_PinnedTransport(self._connections, self._break),
            timeout=httpx2.Timeout(_READ_TIMEOUT_S, connect=_CONNECT_TIMEOUT_S),
            follow_redirects=False,
            trust_env=False,
        )
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        try:
            async with (
                client,
                streamable_http_client(
                    self._url, http_client=client, max_sse_event_size=MAX_MCP_MESSAGE_BYTES
                ) as (read, write),
                anyio.create_task_group() as group,
            ):
                group.start_soon(self._pump, read, send)
                try:
                    yield receive, write
                finally:
                    group.cancel_scope.cancel()
        finally:
            self._ended = True
            with anyio.CancelScope(shield=True):
                await send.aclose()
                await receive.aclose()
                await self._connections.aclose()

    async def _pump(
        self,
        read: ReadStream[SessionMessage | Exception],
        send: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        """Forward the SDK's read side, noting when it ends (the server is gone)."""
        try:
            async with send:
                async for item in read:
                    await send.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            self._ended = True


class _PinnedTransport(httpx2.AsyncBaseTransport):
    """httpx2 requests sent through the pinned pool, each origin admitted first."""

    def __init__(self, connections: PinnedConnections, on_oversize: Callable[[str], None]) -> None:
        self._connections = connections
        self._on_oversize = on_oversize

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        host = url.raw_host.decode("ascii")
        netloc = f"[{host}]" if ":" in host else host
        origin = f"{url.scheme}://{netloc}" + (f":{url.port}" if url.port else "") + "/"
        try:
            await self._connections.admit(origin)
        except UrlDenied as exc:
            raise httpx2.ConnectError(f"refused by the URL policy: {exc.message}") from exc
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"accept-encoding"]
        headers.append((b"accept-encoding", b"identity"))
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=headers,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._connections.handle(core)
        except Exception as exc:
            raise _as_httpx2(exc) from exc
        encoding = _header(response.headers, b"content-encoding")
        try:
            codings(encoding)
        except UnsupportedCoding as exc:
            await response.aclose()
            reason = f"the server sent a body that cannot be read ({exc}), asked for none"
            self._on_oversize(reason)
            raise httpx2.DecodingError(reason) from None
        content_type = _header(response.headers, b"content-type")
        cap = None if content_type.startswith("text/event-stream") else MAX_MCP_MESSAGE_BYTES
        assert isinstance(response.stream, AsyncIterable)  # the async pool's streams are
        # Decoded here: httpx must not decode it again.
        headers = [(k, v) for k, v in response.headers if k.lower() != b"content-encoding"]
        body = decoded(response.stream, encoding, cap=cap)
        return httpx2.Response(
            status_code=response.status,
            headers=headers,
            stream=_CappedStream(response.stream, body, cap, self._on_oversize),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._connections.aclose()


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1").strip().lower()
    return ""


class _CappedStream(httpx2.AsyncByteStream):
    """A decoded response body that fails once it passes ``cap`` bytes, holding no more
    than that; ``stream`` is the raw one, closed with it."""

    def __init__(
        self,
        stream: AsyncIterable[bytes],
        body: AsyncIterator[bytes],
        cap: int | None,
        on_oversize: Callable[[str], None],
    ) -> None:
        self._stream = stream
        self._body = body
        self._cap = cap
        self._on_oversize = on_oversize

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._body:
                yield chunk
        except BodyOverCap:
            reason = f"a message from the server exceeded {_MIB} MiB"
            self._on_oversize(reason)
            raise httpx2.ReadError(reason) from None
        except ContentCodingError as exc:
            reason = f"the server sent a body that cannot be read ({exc})"
            self._on_oversize(reason)
            raise httpx2.DecodingError(reason) from None
        except httpx2.HTTPError:
            raise
        except Exception as exc:
            raise _as_httpx2(exc) from exc

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()
