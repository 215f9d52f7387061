"""A scripted loopback HTTP server: real sockets and real HTTP, never the network.

Provider adapters are tested against the bytes a real API would send, through
the real SDK and its real HTTP client, so that a mapping mistake (a header
name, an SSE framing detail, a status the SDK retries on its own) fails here
rather than in production. Each test scripts the replies in order and then
inspects what the server saw.
"""

from __future__ import annotations

import json
import math
import socket
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

__all__ = ["Reply", "Seen", "WireServer", "json_reply", "serve_wire", "sse_reply", "text_reply"]

# A request nobody scripted gets a status no adapter retries, so the test fails loudly.
UNSCRIPTED_STATUS = 418
SHUTDOWN_GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted HTTP answer, sent as a sequence of body chunks.

    ``complete=False`` drops the connection after the last chunk without
    finishing the body: the client sees a response that broke off mid-way.
    ``hold=True`` neither finishes nor drops it: the server waits, as a slow
    model would, until the client goes away (``WireServer.released``),
    sending ``keep_alive`` (when set) every ``pause_s`` meanwhile, as a server
    or gateway keeping an idle stream open does. ``pause_s`` is also the pause
    before each chunk after the first: a slow but steady answer.
    """

    status: int = 200
    chunks: tuple[bytes, ...] = ()
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)
    complete: bool = True
    hold: bool = False
    pause_s: float = 0.0
    keep_alive: bytes = b""


@dataclass(frozen=True, slots=True)
class Seen:
    """One request as the server received it (``body`` is parsed JSON when it was JSON)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


def json_reply(body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> Reply:
    """A JSON answer, like every non-streamed API response and error."""
    return Reply(status=status, chunks=(json.dumps(body).encode(),), headers=headers or {})


def text_reply(
    text: str,
    *,
    status: int = 200,
    content_type: str = "application/json",
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """Arbitrary bytes under any content type (malformed bodies, proxy error pages)."""
    return Reply(
        status=status, chunks=(text.encode(),), content_type=content_type, headers=headers or {}
    )


def sse_reply(
    events: Sequence[bytes],
    *,
    headers: Mapping[str, str] | None = None,
    complete: bool = True,
    hold: bool = False,
    pause_s: float = 0.0,
    keep_alive: bytes = b"",
) -> Reply:
    """A ``text/event-stream`` answer, one chunk per event (see ``Reply`` for the rest)."""
    return Reply(
        chunks=tuple(events),
        content_type="text/event-stream",
        headers=headers or {},
        complete=complete,
        hold=hold,
        pause_s=pause_s,
        keep_alive=keep_alive,
    )


class _Scripted(Response):
    """Sends a Reply chunk by chunk, and can stop without finishing the body."""

    def __init__(self, reply: Reply, wire: WireServer) -> None:
        # Not Response.__init__: it would declare a Content-Length for an empty body.
        self.status_code = reply.status
        self.background = None
        self.reply = reply
        self.wire = wire
        self.raw_headers = [(k.lower().encode(), v.encode()) for k, v in reply.headers.items()]
        self.raw_headers.append((b"content-type", reply.content_type.encode()))
        finished = reply.complete and not reply.hold
        if finished and reply.content_type != "text/event-stream":
            # Like the real APIs: JSON bodies carry a length, event streams are chunked.
            length = sum(len(chunk) for chunk in reply.chunks)
            self.raw_headers.append((b"content-length", str(length).encode()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        for position, chunk in enumerate(self.reply.chunks):
            if position and self.reply.pause_s:
                await anyio.sleep(self.reply.pause_s)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if self.reply.hold:
            self.wire.holding.set()
            await self._hold(receive, send)
            self.wire.released.set()
        elif self.reply.complete:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _hold(self, receive: Receive, send: Send) -> None:
        """Return once the client has gone, sending the keep-alive every pause meanwhile."""
        every = self.reply.pause_s if self.reply.keep_alive else math.inf
        while True:
            with anyio.move_on_after(every):
                # The request body was read already: what arrives now is the client going away.
                while (await receive())["type"] != "http.disconnect":
                    pass
                return
            body = self.reply.keep_alive
            await send({"type": "http.response.body", "body": body, "more_body": True})


class WireServer:
    """The scripted app: replies are served in order and every request is recorded.

    ``holding`` is set once a ``hold`` reply has sent what it had, and
    ``released`` once its client has disconnected. ``respond``, when set,
    answers each request once the script is spent (a model that is down for a
    while, then back), instead of ``UNSCRIPTED_STATUS``.
    """

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self.respond: Callable[[Seen], Reply] | None = None
        self.base_url = ""
        self.holding = anyio.Event()
        self.released = anyio.Event()
        self._replies: deque[Reply] = deque()
        self.app = Starlette(routes=[Route("/{path:path}", self._answer, methods=["GET", "POST"])])

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        return int(self.base_url.rsplit(":", 1)[1])

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order."""
        self._replies.extend(replies)

    async def _answer(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        seen = Seen(request.method, request.url.path, dict(request.headers.items()), body)
        self.requests.append(seen)
        if not self._replies and self.respond is not None:
            return _Scripted(self.respond(seen), self)
        if not self._replies:
            return _Scripted(
                json_reply({"error": "no scripted reply"}, status=UNSCRIPTED_STATUS), self
            )
        return _Scripted(self._replies.popleft(), self)


@asynccontextmanager
async def serve_wire(*, backlog: int = 16) -> AsyncIterator[WireServer]:
    """Serve a WireServer on 127.0.0.1 on a free port until the block exits.

    The socket is bound and listening before uvicorn starts, so requests may
    be sent at once: they wait in the backlog instead of racing startup.
    """
    wire = WireServer()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(backlog)
    wire.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(
        wire.app,
        http="h11",
        ws="none",
        lifespan="off",
        log_config=None,
        access_log=False,
        # A held reply whose client never left must not keep the test from ending.
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve, [sock])
        try:
            yield wire
        finally:
            server.should_exit = True
