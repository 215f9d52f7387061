"""Fetching under the URL policy: pinned connections, validated hops, a capped body.

``UrlPolicy`` decides which addresses a URL may reach; this module makes the
request go only there. A pinning network backend maps the URL host to the
addresses the policy validated, so the URL, Host header, TLS SNI and
certificate check keep the real name while nothing resolves it a second time.
Each redirect hop is validated by the policy before it is requested, and the
body is capped while it streams, compressed or not.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpcore
import httpx

from hostkit._content_coding import ContentCodingError, CutShort, raw_body, read_decoded
from hostkit.builtins.web._errors import FetchError, UrlDenied
from hostkit.builtins.web._urlpolicy import UrlPolicy, ValidatedTarget
from hostkit.errors import bounded
from hostkit.freeze import FrozenMap
from hostkit.types import bounded_metadata

__all__ = ["FetchResult", "PinnedConnections", "fetch"]

_USER_AGENT = "hostkit-web/0.1"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# gzip is decoded with a bounded output per step (``hostkit._content_coding``); deflate
# is too when a server sends it anyway, brotli and zstd are refused.
_ACCEPT_ENCODING = "identity, gzip"
_MAX_CONTENT_TYPE = 200


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A bounded response: ``body`` holds at most the policy's ``max_body_bytes``."""

    url: str
    status: int
    content_type: str
    body: bytes = field(repr=False)
    bytes_read: int
    truncated: bool
    hops: tuple[ValidatedTarget, ...]

    def audit_view(self) -> FrozenMap:
        """Every hop's origin and validated addresses, for events and the durable record."""
        return bounded_metadata({**_hops_view(self.hops), "status": self.status})


def _hops_view(hops: Sequence[ValidatedTarget]) -> FrozenMap:
    return bounded_metadata({"hops": [dict(hop.audit_view()) for hop in hops]})


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects a URL host only to the addresses the policy validated for it.

    httpcore hands the backend the URL host; this maps it to the pinned
    addresses, so DNS is never consulted again while TLS still uses the name
    for SNI and certificate checks. A host with no pin is refused.
    """

    def __init__(self, pins: Mapping[str, tuple[str, ...]], inner: httpcore.AsyncNetworkBackend):
        self._pins = pins
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = self._pins.get(host)
        if not addresses:
            raise httpcore.ConnectError("host was not validated by the URL policy")
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout, OSError) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not reachable through the URL policy")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _CoreStream(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            await self._stream.aclose()


class _PinnedTransport(httpx.AsyncBaseTransport):
    """httpx on an httpcore pool whose only way out is the pinning backend."""

    def __init__(self, pool: httpcore.AsyncConnectionPool) -> None:
        self._pool = pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        response = await self._pool.handle_async_request(core)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_CoreStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    return httpcore.default_ssl_context()


class PinnedConnections:
    """Connections for a long-lived client (MCP over HTTP) that go only where the policy allows.

    ``fetch`` owns one request and its redirects; a protocol client sends
    many requests, following redirects itself. Each request is first passed
    to ``admit``: a new origin is validated (DNS once, every answer checked)
    and pinned, a known one is checked again against its pinned answers, so
    a hop to another host is validated before it is requested and nothing
    resolves a name twice. ``handle`` sends an httpcore request over a pool
    whose only way out is the pinning backend. Build it with ``open``.
    """

    def __init__(
        self,
        policy: UrlPolicy,
        *,
        ssl_context: ssl.SSLContext,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
        max_connections: int = 4,
    ) -> None:
        self.policy = policy
        self._pins: dict[str, tuple[str, ...]] = {}
        self._targets: dict[str, ValidatedTarget] = {}
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            network_backend=_PinnedBackend(self._pins, network_backend or httpcore.AnyIOBackend()),
            max_connections=max_connections,
            retries=0,
        )

    @classmethod
    async def open(
        cls,
        policy: UrlPolicy,
        *,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> PinnedConnections:
        """The default TLS context is built off the event loop (it reads the CA bundle)."""
        if ssl_context is None:
            ssl_context = await anyio.to_thread.run_sync(_default_ssl_context)
        return cls(policy, ssl_context=ssl_context, network_backend=network_backend)

    async def admit(self, url: str) -> ValidatedTarget:
        """Validate ``url`` under the policy and pin its host; ``UrlDenied`` refuses it."""
        target = await self.policy._validate(url, pins=self._pins)
        self._targets.setdefault(target.origin, target)
        return target

    @property
    def targets(self) -> tuple[ValidatedTarget, ...]:
        """Every origin admitted so far, first one first (for audit views)."""
        return tuple(self._targets.values())

    async def handle(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` (its host must have been admitted) with its body unread."""
        return await self._pool.handle_async_request(request)

    async def aclose(self) -> None:
        await self._pool.aclose()


_TIMEOUTS = (TimeoutError, httpx.TimeoutException, httpcore.TimeoutException)
_NETWORK = (
    httpx.TransportError,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    ssl.SSLError,
    OSError,
)


async def fetch(
    url: str,
    *,
    policy: UrlPolicy,
    network_backend: httpcore.AsyncNetworkBackend | None = None,
    ssl_context: ssl.SSLContext | None = None,
    target: ValidatedTarget | None = None,
) -> FetchResult:
    """GET ``url`` under ``policy``: pinned connections, validated hops, a capped body.

    ``target`` is ``url`` as ``policy.resolve`` already validated it (a caller
    that resolved it itself): the first request then goes to exactly those
    addresses, never to a second DNS answer. ``web.extract`` passes none: it
    resolves only here, after its approval. ``network_backend`` is the raw
    connector under the pinning layer (tests pass a loopback-only or
    scripted one). Raises ``UrlDenied`` before any
    connection to a refused URL or hop, ``FetchError`` for network failures
    and deadlines (``timed_out``). Cancellation propagates.
    """
    context = ssl_context or await anyio.to_thread.run_sync(_default_ssl_context)
    pins: dict[str, tuple[str, ...]] = {}
    pool = httpcore.AsyncConnectionPool(
        ssl_context=context,
        network_backend=_PinnedBackend(pins, network_backend or httpcore.AnyIOBackend()),
        max_connections=2,
        retries=0,
    )
    client = httpx.AsyncClient(
        transport=_PinnedTransport(pool),
        timeout=httpx.Timeout(
            policy.read_timeout_s, connect=policy.connect_timeout_s, pool=policy.connect_timeout_s
        ),
        follow_redirects=False,
        trust_env=False,
        headers={"user-agent": _USER_AGENT, "accept-encoding": _ACCEPT_ENCODING},
    )
    hops: list[ValidatedTarget] = []
    try:
        try:
            async with client:
                with anyio.fail_after(policy.total_timeout_s):
                    response = await _follow(client, policy, url, pins, hops, target)
                    try:
                        body, truncated = await _read_capped(response, policy.max_body_bytes)
                    finally:
                        await response.aclose()
        except _TIMEOUTS as exc:
            raise FetchError(f"fetching {_where(hops)} timed out", timed_out=True) from exc
        except _NETWORK as exc:
            raise FetchError(f"fetching {_where(hops)} failed: {type(exc).__name__}") from exc
    except (UrlDenied, FetchError) as exc:
        # The hops validated (and requested) before the failure are still what was done.
        exc.audit = _hops_view(hops)
        raise
    return FetchResult(
        url=str(hops[-1].url),
        status=response.status_code,
        content_type=bounded(response.headers.get("content-type", ""), _MAX_CONTENT_TYPE),
        body=body,
        bytes_read=len(body),
        truncated=truncated,
        hops=tuple(hops),
    )


async def _follow(
    client: httpx.AsyncClient,
    policy: UrlPolicy,
    url: str,
    pins: dict[str, tuple[str, ...]],
    hops: list[ValidatedTarget],
    first: ValidatedTarget | None = None,
) -> httpx.Response:
    """Request ``url`` and its redirects, validating each hop before it is requested.

    ``first`` is ``url`` already validated (its addresses are pinned as they
    are). Appends every validated hop to ``hops`` and returns the final
    response with its body still unread.
    """
    if first is None:
        target = await policy._validate(url, pins=pins)
    else:
        target = policy._pinned(url, first, pins=pins)
    hops.append(target)
    while True:
        try:
            response = await client.send(client.build_request("GET", target.url), stream=True)
        except httpx.InvalidURL:
            # httpx reads a redirect's Location as it answers, even when not following.
            raise UrlDenied("a redirect's Location is not a valid URL", reason="invalid") from None
        location = response.headers.get("location")
        if response.status_code not in _REDIRECTS or not location:
            return response
        await response.aclose()
        target = await policy._redirect(target, location, hops=len(hops), pins=pins)
        hops.append(target)


def _where(hops: Sequence[ValidatedTarget]) -> str:
    return hops[-1].origin if hops else "the URL"


async def _read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """At most ``cap`` decoded bytes, stopping the read as soon as the cap is passed.

    ``hostkit._content_coding`` decodes the raw bytes with a bounded output per
    step, so a gzip bomb stops at ``cap``, and caps the raw bytes too, so a
    compressed stream of nothing cannot run forever.
    """
    raw, encoding = raw_body(response)
    try:
        read = await read_decoded(raw, encoding, cap=cap)
    except CutShort as exc:
        # Cut off in the middle: what arrived is not the body the server sent.
        raise FetchError(str(exc)) from None
    except ContentCodingError as exc:
        raise FetchError(str(exc), retryable=False) from None
    return read.body, read.cut
