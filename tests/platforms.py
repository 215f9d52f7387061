"""Fake chat platforms on loopback: Slack, Telegram and a generic webhook receiver.

Test adapters for the channel transports and delivery: each is a real HTTP
server (uvicorn on 127.0.0.1, port 0) answering in the shapes the real APIs
use (Slack Web API ``{"ok": false, "error": ...}`` with HTTP 200, HTTP 429
with ``Retry-After``; the Telegram Bot API ``{"ok", "error_code",
"description", "parameters": {"retry_after"}}``), so a mapping mistake in an
adapter fails here. Every request is recorded; failures are scripted with
``fail_next`` and slow answers with ``slow_next``; ``compress_answers`` sends
every answer in a content-coding whatever the client asked for (a proxy that
ignores ``accept-encoding``)::

    async with FakeSlack.running(token="xoxb-test") as slack:
        slack.fail_next(2, status=500)
        ...  # point a channel's api_base at slack.api_base
        assert slack.messages[-1].body["channel"] == "C123"
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import parse_qsl

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

__all__ = [
    "FakeSlack",
    "FakeTelegram",
    "Recorded",
    "Scripted",
    "WebhookReceiver",
    "slack_channel_config",
    "telegram_callback",
    "telegram_message",
]

SHUTDOWN_GRACE_S = 2
# A long poll never outlives the test: the fake caps getUpdates' timeout.
MAX_LONG_POLL_S = 5.0
# Slack refuses longer texts (msg_too_long) far below its documented 40,000.
SLACK_MAX_TEXT = 4_000


class _BrokenOff(Exception):
    """Ends an answer before its declared length: uvicorn then drops the connection."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """One request as the fake received it: ``body`` parsed (JSON or form), ``raw`` as sent."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    raw: bytes
    at: float


@dataclass(frozen=True, slots=True)
class Scripted:
    """One scripted answer for the next request: a failure, or a success after ``delay_s``."""

    status: int = 200
    retry_after: float | None = None
    ok_false: str | None = None
    description: str | None = None
    delay_s: float = 0.0


class _Fake:
    """Shared machinery: the recorded requests, the script, and the loopback server."""

    def __init__(self) -> None:
        self.url = ""
        self.requests: list[Recorded] = []
        self._script: deque[Scripted] = deque()
        self._arrived_any = anyio.Event()
        self._coding: tuple[str, Callable[[bytes], bytes]] | None = None
        self._break: tuple[Callable[[bytes], int], float] | None = None
        self.app = Starlette(routes=self._routes())

    def compress_answers(self, encoding: str, encode: Callable[[bytes], bytes]) -> None:
        """Every later answer's body is ``encode(body)`` sent as ``content-encoding: encoding``."""
        self._coding = (encoding, encode)

    def break_answers(self, keep: Callable[[bytes], int], *, stall_s: float = 0.0) -> None:
        """Every later answer declares its whole Content-Length, sends only the first
        ``keep(body)`` bytes of it (as sent: compressed, if so), waits ``stall_s``, and
        then the connection drops: the request was taken, the reply broke off."""
        self._break = (keep, stall_s)

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app, its answers compressed (``compress_answers``) and broken off
        (``break_answers``) once asked."""
        coding, broken = self._coding, self._break
        if (coding is None and broken is None) or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        body = bytearray()

        async def changed(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            body.extend(message.get("body", b""))
            if message.get("more_body"):
                return
            data = bytes(body) if coding is None else coding[1](bytes(body))
            kept = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
            if coding is not None:
                kept.append((b"content-encoding", coding[0].encode()))
            headers = [*kept, (b"content-length", str(len(data)).encode())]
            await send({**start, "headers": headers})
            if broken is None:
                await send({"type": "http.response.body", "body": data})
                return
            await send(
                {"type": "http.response.body", "body": data[: broken[0](data)], "more_body": True}
            )
            await anyio.sleep(broken[1])
            raise _BrokenOff

        with suppress(_BrokenOff):
            await self.app(scope, receive, changed)

    def _routes(self) -> list[Route]:
        raise NotImplementedError

    def fail_next(
        self,
        n: int = 1,
        *,
        status: int = 500,
        retry_after: float | None = None,
        ok_false: str | None = None,
        description: str | None = None,
    ) -> None:
        """The next ``n`` API calls fail this way (``ok_false``: HTTP 200 with ``ok: false``)."""
        self._script.extend(
            Scripted(
                status=200 if ok_false else status,
                retry_after=retry_after,
                ok_false=ok_false,
                description=description,
            )
            for _ in range(n)
        )

    def slow_next(self, n: int = 1, *, delay_s: float) -> None:
        """The next ``n`` API calls succeed, each after ``delay_s`` seconds."""
        self._script.extend(Scripted(delay_s=delay_s) for _ in range(n))

    def _next(self) -> Scripted | None:
        return self._script.popleft() if self._script else None

    async def _record(self, request: Request) -> Recorded:
        raw = await request.body()
        content_type = request.headers.get("content-type", "")
        body: Any
        if content_type.startswith("application/x-www-form-urlencoded"):
            body = dict(parse_qsl(raw.decode(), keep_blank_values=True))
        elif raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw
        else:
            body = dict(request.query_params)
        seen = Recorded(
            request.method, request.url.path, dict(request.headers), body, raw, time.time()
        )
        self.requests.append(seen)
        self._arrived_any.set()
        self._arrived_any = anyio.Event()
        return seen

    async def wait_for_requests(self, count: int, *, timeout_s: float = 10.0) -> None:
        """Until ``count`` requests have arrived (a send is in flight at the fake)."""
        with anyio.fail_after(timeout_s):
            while len(self.requests) < count:
                await self._arrived_any.wait()

    @classmethod
    @asynccontextmanager
    async def _serving(cls, fake: Self) -> AsyncIterator[Self]:
        """Serve ``fake`` until the block exits (the socket listens before uvicorn starts)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        fake.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        server = uvicorn.Server(
            uvicorn.Config(
                fake._asgi,
                interface="asgi3",
                http="h11",
                ws="none",
                lifespan="off",
                log_config=None,
                access_log=False,
                timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            )
        )
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(server.serve, [sock])
            try:
                yield fake
            finally:
                server.should_exit = True


# -- Slack ------------------------------------------------------------------------------


class FakeSlack(_Fake):
    """The Slack Web API's ``chat.postMessage`` and ``chat.postEphemeral``
    (``api_base`` is ``<url>/api``).

    Like Slack, errors are HTTP 200 with ``{"ok": false, "error": ...}``
    (``not_authed``, ``invalid_auth``, ``channel_not_found``, ``no_text``,
    ``invalid_blocks`` (also a section text past 3,000 characters),
    ``msg_too_long`` past the 4,000 characters Slack asks a text to keep to,
    ``user_not_in_channel`` for an ephemeral message without its ``user``),
    rate limits HTTP 429 with ``Retry-After``.
    ``messages`` are the channel posts it accepted (``body`` is the JSON
    posted), ``ephemerals`` the messages only their ``user`` sees.
    """

    def __init__(self, token: str) -> None:
        self.token = token
        self.messages: list[Recorded] = []
        self.ephemerals: list[Recorded] = []
        self._ts = itertools.count(1)
        super().__init__()

    @classmethod
    def running(cls, *, token: str = "xoxb-fake-token") -> AbstractAsyncContextManager[FakeSlack]:
        """``async with FakeSlack.running(token=...) as slack``."""
        return cls._serving(cls(token))

    @property
    def api_base(self) -> str:
        return f"{self.url}/api"

    def _routes(self) -> list[Route]:
        return [
            Route("/api/chat.postMessage", self._post_message, methods=["POST"]),
            Route("/api/chat.postEphemeral", self._post_ephemeral, methods=["POST"]),
        ]

    def texts(self) -> list[str]:
        """The text of every accepted message, in order."""
        return [m.body.get("text", "") for m in self.messages]

    async def _refused(self, request: Request) -> Response | None:
        """Slack's answer to a call it refuses (auth, a scripted failure), else None."""
        auth = request.headers.get("authorization", "")
        if not auth.startswith("Bearer "):
            return JSONResponse({"ok": False, "error": "not_authed"})
        if not hmac.compare_digest(auth.removeprefix("Bearer "), self.token):
            return JSONResponse({"ok": False, "error": "invalid_auth"})
        scripted = self._next()
        return None if scripted is None else await _slack_failure(scripted)

    async def _post_ephemeral(self, request: Request) -> Response:
        seen = await self._record(request)
        refused = await self._refused(request)
        if refused is not None:
            return refused
        body = seen.body if isinstance(seen.body, dict) else {}
        if not isinstance(body.get("channel"), str) or not body["channel"]:
            return JSONResponse({"ok": False, "error": "channel_not_found"})
        if not isinstance(body.get("user"), str) or not body["user"]:
            return JSONResponse({"ok": False, "error": "user_not_in_channel"})
        if not body.get("text") and not body.get("blocks"):
            return JSONResponse({"ok": False, "error": "no_text"})
        if len(body.get("text") or "") > SLACK_MAX_TEXT:
            return JSONResponse({"ok": False, "error": "msg_too_long"})
        self.ephemerals.append(seen)
        return JSONResponse({"ok": True, "message_ts": f"{int(time.time())}.{next(self._ts):06d}"})

    async def _post_message(self, request: Request) -> Response:
        seen = await self._record(request)
        refused = await self._refused(request)
        if refused is not None:
            return refused
        body = seen.body if isinstance(seen.body, dict) else {}
        channel = body.get("channel")
        if not isinstance(channel, str) or not channel:
            return JSONResponse({"ok": False, "error": "channel_not_found"})
        text, blocks = body.get("text"), body.get("blocks")
        if not text and not blocks:
            return JSONResponse({"ok": False, "error": "no_text"})
        if blocks is not None and not (
            isinstance(blocks, list) and all(isinstance(b, dict) and "type" in b for b in blocks)
        ):
            return JSONResponse({"ok": False, "error": "invalid_blocks"})
        if blocks is not None and any(len(_section_text(b)) > 3_000 for b in blocks):
            return JSONResponse({"ok": False, "error": "invalid_blocks"})
        if len(text or "") > SLACK_MAX_TEXT:
            return JSONResponse({"ok": False, "error": "msg_too_long"})
        self.messages.append(seen)
        ts = f"{int(time.time())}.{next(self._ts):06d}"
        return JSONResponse(
            {
                "ok": True,
                "channel": channel,
                "ts": ts,
                "message": {"type": "message", "text": text or "", "ts": ts, "bot_id": "B0FAKE"},
            }
        )


def _section_text(block: Mapping[str, Any]) -> str:
    text = block.get("text") if block.get("type") == "section" else None
    value = text.get("text") if isinstance(text, dict) else None
    return value if isinstance(value, str) else ""


async def _slack_failure(scripted: Scripted) -> Response | None:
    if scripted.delay_s:
        await anyio.sleep(scripted.delay_s)
    if scripted.ok_false:
        return JSONResponse({"ok": False, "error": scripted.ok_false})
    if scripted.status == 429:
        headers = {"Retry-After": _seconds(scripted.retry_after or 1)}
        return JSONResponse({"ok": False, "error": "ratelimited"}, 429, headers=headers)
    if scripted.status >= 400:
        return Response("upstream error", scripted.status, media_type="text/plain")
    return None


# -- Telegram ---------------------------------------------------------------------------


def telegram_message(
    chat_id: int, from_id: int, text: str, *, message_id: int = 1
) -> dict[str, Any]:
    """A Telegram ``Update`` body without its ``update_id`` (the fake assigns it)."""
    return {
        "message": {
            "message_id": message_id,
            "from": {"id": from_id, "is_bot": False, "first_name": "User"},
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
            "date": int(time.time()),
            "text": text,
        }
    }


def telegram_callback(
    chat_id: int, from_id: int, data: str, *, query_id: str = "1"
) -> dict[str, Any]:
    """A ``callback_query`` Update (an inline button pressed) without its ``update_id``."""
    return {
        "callback_query": {
            "id": query_id,
            "from": {"id": from_id, "is_bot": False, "first_name": "User"},
            "message": {
                "message_id": 1,
                "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
                "date": int(time.time()),
                "text": "approval",
            },
            "chat_instance": "1",
            "data": data,
        }
    }


# How far above an update's id an offset still confirms it: more than any batch, less than
# the jump of a renumbering (restart_ids).
_RENUMBERED_GAP = 1 << 20


class FakeTelegram(_Fake):
    """The Telegram Bot API's ``sendMessage`` and ``getUpdates`` (``api_base`` is ``url``).

    ``/bot<token>/...`` with another token is 401 ``Unauthorized``; bad input
    is 400 with a ``Bad Request: ...`` description; a scripted 429 carries
    ``parameters.retry_after``. ``getUpdates`` honours ``offset`` (updates
    below it are confirmed and forgotten, as Telegram does) and long-polls up
    to ``timeout`` seconds (capped at ``MAX_LONG_POLL_S``) for new ones.
    ``restart_ids(first)`` numbers the next updates from ``first``, as
    Telegram does after a week without updates ("chosen randomly"): an
    offset left far above them by the old numbering confirms none of them,
    so Telegram keeps returning them until an offset just above them comes.
    ``messages`` are the accepted ``sendMessage`` calls; ``polls`` every
    ``getUpdates`` call; ``callback_answers`` the accepted
    ``answerCallbackQuery`` calls (a query answered twice is 400, as Telegram
    answers a query it no longer knows).
    """

    def __init__(self, token: str) -> None:
        self.token = token
        self.messages: list[Recorded] = []
        self.callback_answers: list[Recorded] = []
        self.polls: list[Recorded] = []
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1000)
        self._arrived = anyio.Event()
        super().__init__()

    @classmethod
    def running(
        cls, *, token: str = "123456:fake-telegram-token"
    ) -> AbstractAsyncContextManager[FakeTelegram]:
        """``async with FakeTelegram.running(token=...) as telegram``."""
        return cls._serving(cls(token))

    @property
    def api_base(self) -> str:
        return self.url

    def _routes(self) -> list[Route]:
        return [
            Route("/bot{token}/sendMessage", self._send_message, methods=["GET", "POST"]),
            Route("/bot{token}/getUpdates", self._get_updates, methods=["GET", "POST"]),
            Route(
                "/bot{token}/answerCallbackQuery",
                self._answer_callback_query,
                methods=["GET", "POST"],
            ),
        ]

    def restart_ids(self, first: int) -> None:
        """Number the next updates from ``first`` (Telegram's renumbering after a quiet week)."""
        self._update_ids = itertools.count(first)

    def push_update(self, update: Mapping[str, Any]) -> int:
        """Queue an Update (``telegram_message`` / ``telegram_callback``); its ``update_id``."""
        update_id = next(self._update_ids)
        self._updates.append({"update_id": update_id, **update})
        self._arrived.set()
        self._arrived = anyio.Event()
        return update_id

    @property
    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates not yet confirmed by an ``offset`` beyond them."""
        return list(self._updates)

    def texts(self) -> list[str]:
        return [m.body.get("text", "") for m in self.messages]

    def _authorized(self, request: Request) -> bool:
        return hmac.compare_digest(str(request.path_params["token"]), self.token)

    async def _refused(self, request: Request) -> Response | None:
        """Telegram's answer to a call it refuses (a bad token, a scripted failure), else
        None."""
        if not self._authorized(request):
            return _tg_error(401, "Unauthorized")
        scripted = self._next()
        return None if scripted is None else await _telegram_failure(scripted)

    async def _send_message(self, request: Request) -> Response:
        seen = await self._record(request)
        refused = await self._refused(request)
        if refused is not None:
            return refused
        body = seen.body if isinstance(seen.body, dict) else {}
        chat_id, text = body.get("chat_id"), body.get("text")
        if chat_id is None or chat_id == "":
            return _tg_error(400, "Bad Request: chat_id is empty")
        if not isinstance(text, str) or not text.strip():
            return _tg_error(400, "Bad Request: message text is empty")
        if _utf16_units(text) > 4096:  # Telegram counts UTF-16 code units
            return _tg_error(400, "Bad Request: message is too long")
        markup = body.get("reply_markup")
        if markup is not None and not _valid_markup(markup):
            return _tg_error(400, "Bad Request: BUTTON_DATA_INVALID")
        self.messages.append(seen)
        return JSONResponse(
            {
                "ok": True,
                "result": {
                    "message_id": next(self._message_ids),
                    "from": {"id": 1, "is_bot": True, "first_name": "hostkit"},
                    "chat": {"id": chat_id, "type": "private"},
                    "date": int(time.time()),
                    "text": text,
                },
            }
        )

    async def _answer_callback_query(self, request: Request) -> Response:
        seen = await self._record(request)
        refused = await self._refused(request)
        if refused is not None:
            return refused
        body = seen.body if isinstance(seen.body, dict) else {}
        query_id, text = body.get("callback_query_id"), body.get("text", "")
        answered = {a.body.get("callback_query_id") for a in self.callback_answers}
        if not isinstance(query_id, str) or not query_id or query_id in answered:
            return _tg_error(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        if not isinstance(text, str) or _utf16_units(text) > 200:
            return _tg_error(400, "Bad Request: MESSAGE_TOO_LONG")
        if not isinstance(body.get("show_alert", False), bool):
            return _tg_error(400, "Bad Request: wrong show_alert")
        self.callback_answers.append(seen)
        return JSONResponse({"ok": True, "result": True})

    async def _get_updates(self, request: Request) -> Response:
        seen = await self._record(request)
        self.polls.append(seen)
        refused = await self._refused(request)
        if refused is not None:
            return refused
        params = seen.body if isinstance(seen.body, dict) else {}
        try:
            offset = int(params.get("offset") or 0)
            limit = max(1, min(100, int(params.get("limit") or 100)))
            timeout = max(0.0, min(MAX_LONG_POLL_S, float(params.get("timeout") or 0)))
        except (TypeError, ValueError):
            return _tg_error(400, "Bad Request: wrong parameter")
        if offset:
            # Telegram forgets every update below the offset: they are confirmed. An offset
            # from before a renumbering, far above an update's id, confirms nothing.
            self._updates = [
                u
                for u in self._updates
                if not u["update_id"] < offset <= u["update_id"] + _RENUMBERED_GAP
            ]
        if not self._updates and timeout:
            with anyio.move_on_after(timeout):
                await self._arrived.wait()
        # ASCII-escaped JSON (as json.dumps writes it), so an update can carry any
        # text a JSON escape can, a lone surrogate among them.
        answer = json.dumps({"ok": True, "result": self._updates[:limit]})
        return Response(answer, media_type="application/json")


def _valid_markup(markup: Any) -> bool:
    keyboard = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(keyboard, list):
        return False
    for row in keyboard:
        if not isinstance(row, list):
            return False
        for button in row:
            data = button.get("callback_data") if isinstance(button, dict) else None
            if not isinstance(button, dict) or not button.get("text"):
                return False
            if data is not None and not 1 <= len(str(data).encode()) <= 64:
                return False
    return True


def _utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _tg_error(code: int, description: str, **parameters: Any) -> JSONResponse:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return JSONResponse(body, code)


async def _telegram_failure(scripted: Scripted) -> Response | None:
    if scripted.delay_s:
        await anyio.sleep(scripted.delay_s)
    if scripted.status == 429:
        retry_after = int(scripted.retry_after or 1)
        return _tg_error(
            429, f"Too Many Requests: retry after {retry_after}", retry_after=retry_after
        )
    if scripted.status >= 500:
        return Response("Bad Gateway", scripted.status, media_type="text/html")
    if scripted.status >= 400:
        return _tg_error(scripted.status, scripted.description or "Bad Request: chat not found")
    return None


# -- generic webhook --------------------------------------------------------------------


def _signature(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class WebhookReceiver(_Fake):
    """Where a generic webhook channel's answers are POSTed (``deliver_url`` is ``url``).

    Checks ``X-Hostkit-Timestamp`` / ``X-Hostkit-Signature`` (``sha256=`` hex
    HMAC-SHA256 of ``"<timestamp>." + body`` with ``secret``) within
    ``window_s``: a bad one is 401 and not recorded as delivered. A delivery
    without ``Idempotency-Key`` is 400. ``deliveries`` maps each key to the
    bodies received under it (a retry of a delivered intent appends).
    """

    def __init__(self, secret: str, window_s: float = 300.0) -> None:
        self.secret = secret
        self.window_s = window_s
        self.deliveries: dict[str, list[Any]] = {}
        self.refused: list[Recorded] = []
        super().__init__()

    @classmethod
    def running(
        cls, *, secret: str = "webhook-secret", window_s: float = 300.0
    ) -> AbstractAsyncContextManager[WebhookReceiver]:
        """``async with WebhookReceiver.running(secret=...) as receiver``."""
        return cls._serving(cls(secret, window_s))

    @property
    def deliver_url(self) -> str:
        return f"{self.url}/deliver"

    def _routes(self) -> list[Route]:
        return [Route("/deliver", self._deliver, methods=["POST"])]

    def bodies(self) -> list[Any]:
        """Every accepted body, first per key (what a deduplicating receiver keeps)."""
        return [bodies[0] for bodies in self.deliveries.values()]

    async def _deliver(self, request: Request) -> Response:
        seen = await self._record(request)
        timestamp = request.headers.get("x-hostkit-timestamp", "")
        signature = request.headers.get("x-hostkit-signature", "")
        try:
            fresh = abs(time.time() - int(timestamp)) <= self.window_s
        except ValueError:
            fresh = False
        expected = _signature(self.secret, timestamp, seen.raw)
        if not fresh or not hmac.compare_digest(signature, expected):
            self.refused.append(seen)
            return JSONResponse({"error": "bad signature"}, 401)
        key = request.headers.get("idempotency-key")
        if not key:
            self.refused.append(seen)
            return JSONResponse({"error": "Idempotency-Key is required"}, 400)
        scripted = self._next()
        if scripted is not None:
            if scripted.delay_s:
                await anyio.sleep(scripted.delay_s)
            if scripted.status >= 400:
                headers = {}
                if scripted.retry_after is not None:
                    headers["Retry-After"] = _seconds(scripted.retry_after)
                return JSONResponse({"error": "scripted"}, scripted.status, headers=headers)
        self.deliveries.setdefault(key, []).append(seen.body)
        return JSONResponse({"received": key}, 200)


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def slack_channel_config(
    slack: FakeSlack, *, token_env: str = "SLACK_BOT_TOKEN", secret_env: str = "SLACK_SECRET"
) -> dict[str, Any]:
    """A ``[channels.<id>]`` table for a slack channel talking to ``slack``."""
    return {
        "kind": "slack",
        "api_base": slack.api_base,
        "token_env": token_env,
        "secret_env": secret_env,
        "allow": ["*"],
    }
