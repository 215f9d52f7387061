"""The webhook daemon: uvicorn serving the ingress app in-process, behind a drain gate.

uvicorn runs on the caller's event loop (``hostkit serve``'s, a notebook
kernel's) with none of its own process behaviour: no signal handlers (the
CLI owns SIGTERM/SIGINT), no lifespan, no logging configuration (its
records go to the ``uvicorn.*`` loggers and from there into ours). The
listening socket is bound once, before anything starts, so the port is known
(``port = 0``) and a restart after a crash listens on the same one; each run
serves a duplicate of it.

Stopping is two steps: ``stop()`` closes the gate (``POST /channels/...``
answers 503 with ``Retry-After``, so the platform retries later or
elsewhere) and waits for the channel requests in flight to finish their
accept; the server keeps answering ``/healthz`` and ``/readyz`` (503 while
the rest drains) until the supervisor ends it.

The listener is bounded against slow or many clients: at most
``MAX_CONNECTIONS`` connections or requests at once (more get 503), an idle
keep-alive connection is closed after ``KEEP_ALIVE_S``, and a connection
that has not sent a whole request head within ``HEADER_TIMEOUT_S`` of
opening (or of its previous response) is closed. A connection that arrives
at the limit closes the one that has waited longest without sending a request
head (it holds nothing yet): connections opened only to sit idle cannot fill
the limit and turn every platform event, and ``/healthz``, into a 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import socket
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskStatus
from uvicorn.protocols.http.h11_impl import H11Protocol

from hostkit.errors import ConfigError

__all__ = ["DrainGate", "WebhookServer", "bind_listener"]

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]
ASGIApp = Callable[[Scope, Receive, Send], Any]

# Seconds a platform is told to wait before retrying a webhook refused while draining.
RETRY_AFTER_S = 5
# How long a connection still open when the server ends gets to finish its response.
_SHUTDOWN_GRACE_S = 5
# Connections waiting to be accepted. Also how many accepts asyncio tries per readiness:
# at the file-descriptor limit it fails (and logs) that many times a second, not 2,048
# (uvicorn's default, which would replace this socket's backlog at its listen()).
_BACKLOG = 128
MAX_CONNECTIONS = 512
KEEP_ALIVE_S = 5
HEADER_TIMEOUT_S = 10.0
_DRAINING = json.dumps({"error": "the server is shutting down; retry later"}).encode()


def bind_listener(listen: str, port: int) -> socket.socket:
    """A listening TCP socket on ``listen:port`` (``port = 0``: a free one).

    ``ConfigError`` naming ``serve.listen`` when the address cannot be bound
    (in use, not local, not an address or a name that resolves).
    """
    family = socket.AF_INET6 if ":" in listen else socket.AF_INET
    try:
        return socket.create_server((listen, port), family=family, backlog=_BACKLOG)
    except (OSError, OverflowError) as exc:
        code = getattr(exc, "errno", None)
        # create_server's own text repeats the address as a Python tuple: the errno's words.
        reason = os.strerror(code) if isinstance(code, int) else type(exc).__name__
        if code == errno.EADDRINUSE:
            reason += ": another process listens there (stop it, or choose another --port)"
        elif isinstance(code, int) and code < 0:
            # getaddrinfo's codes are negative (create_server keeps only the number):
            # os.strerror reads them as "Unknown error -2".
            reason = (
                f"{listen!r} is not an address or a name this machine resolves (127.0.0.1 "
                "for this machine only, 0.0.0.0 or :: for every interface)"
            )
        raise ConfigError(
            f"cannot listen on {listen}:{port}: {reason}", key="serve.listen"
        ) from exc


def listening_url(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket (IPv6 hosts bracketed)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class DrainGate:
    """ASGI middleware: refuses channel requests once closed, and counts those in flight."""

    def __init__(self, app: ASGIApp, *, prefix: str = "/channels/") -> None:
        self._app = app
        self._prefix = prefix
        self._closed = False
        self._in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()

    @property
    def closed(self) -> bool:
        return self._closed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self._prefix):
            await self._app(scope, receive, send)
            return
        if self._closed:
            await _refuse(send)
            return
        with self._tracked():
            await self._app(scope, receive, send)

    @contextlib.contextmanager
    def _tracked(self) -> Iterator[None]:
        self._in_flight += 1
        self._idle = anyio.Event()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def close(self) -> None:
        """Refuse new channel requests; return once those in flight have answered."""
        self._closed = True
        await self._idle.wait()


async def _refuse(send: Send) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(_DRAINING)).encode()),
                (b"retry-after", str(RETRY_AFTER_S).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": _DRAINING})


# Per server: its connections waiting for a request head, the longest-waiting first.
_WAITING: weakref.WeakKeyDictionary[Any, dict[_HeadTimeout, None]] = weakref.WeakKeyDictionary()


class _HeadTimeout(H11Protocol):
    """h11 with a deadline on each request head: a client that trickles (or never sends)
    its request line and headers loses the connection after ``HEADER_TIMEOUT_S``; and at
    the connection limit, the one waiting longest for its head makes room for a new one."""

    header_timeout_s = HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()
        limit = self.limit_concurrency
        if limit is not None:
            # uvicorn answers 503 to a request while ``limit`` connections are counted; one
            # closed here leaves the count at once, not when its loss is reported (a later
            # callback: under a flood of idle connections, hundreds are still closing).
            closing = sum(1 for c in self.connections if c.transport.is_closing())
            waiting = self._waiting()
            for _ in range(len(self.connections) - closing - limit + 1):
                oldest = self._oldest(waiting)
                if oldest is None:
                    break
                oldest._disarm()
                oldest.transport.close()
                self.connections.discard(oldest)

    def on_response_complete(self) -> None:
        # Armed first: a pipelined request whose head was already read starts its cycle
        # inside super(), and must not look like a connection still waiting for one.
        self._arm()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _waiting(self) -> dict[_HeadTimeout, None]:
        return _WAITING.setdefault(self.server_state, {})

    def _oldest(self, waiting: dict[_HeadTimeout, None]) -> _HeadTimeout | None:
        """The other connection waiting longest for a request head (closing: skipped)."""
        for connection in list(waiting):
            if connection is self:
                continue
            if connection.cycle is not connection._head_of or connection.transport.is_closing():
                waiting.pop(connection, None)  # its head arrived, or it is going anyway
                continue
            return connection
        return None

    def _arm(self) -> None:
        self._disarm()
        self._head_of = self.cycle
        self._head_timer: asyncio.TimerHandle | None = self.loop.call_later(
            self.header_timeout_s, self._expire
        )
        self._waiting()[self] = None

    def _disarm(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None
        self._waiting().pop(self, None)

    def _expire(self) -> None:
        self._head_timer = None
        self._waiting().pop(self, None)
        # A new cycle means a whole request head arrived since the timer was armed.
        if self.cycle is self._head_of and not self.transport.is_closing():
            self.transport.close()


class _Server(uvicorn.Server):
    """uvicorn's server without its process-level signal handling, reporting its start."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_started = on_started

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The embedding process (hostkit serve, a notebook kernel) owns its signals.
        yield

    def install_signal_handlers(self) -> None:
        """uvicorn < 0.29 installs its handlers here instead; the embedder owns them."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._on_started()


class WebhookServer:
    """The "webhooks" daemon: ``app`` (behind ``gate``) on an already bound ``sock``."""

    def __init__(self, gate: DrainGate, sock: socket.socket) -> None:
        self.gate = gate
        self._socket = sock
        self.url = listening_url(sock)

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        config = uvicorn.Config(
            self.gate,
            lifespan="off",
            # Webhooks and probes are plain HTTP: no websocket protocol is loaded (on the
            # loop, at start) or offered to a peer.
            ws="none",
            log_config=None,
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=_SHUTDOWN_GRACE_S,
            http=_HeadTimeout,
            limit_concurrency=MAX_CONNECTIONS,
            timeout_keep_alive=KEEP_ALIVE_S,
            backlog=_BACKLOG,
        )
        server = _Server(config, task_status.started)
        try:
            await server.serve(sockets=[self._socket.dup()])
        finally:
            # Cancelled (the supervisor ended it): close what serve() did not get to.
            server.should_exit = server.force_exit = True
            for connection in list(server.server_state.connections):
                connection.shutdown()
            for listener in getattr(server, "servers", ()):
                listener.close()

    async def stop(self) -> None:
        await self.gate.close()

    def close(self) -> None:
        """Close the listening socket itself (the daemon is over for good)."""
        self._socket.close()
