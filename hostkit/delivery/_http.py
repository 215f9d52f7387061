"""One bounded HTTP POST for the adapters, and the httpx client they share.

Every request has a deadline (connect and total) and reads at most
``MAX_RESPONSE_BYTES`` of the answer. It asks for the answer uncompressed; one
that comes compressed anyway (a proxy that ignores the ask) is read raw and
decoded by ``hostkit._content_coding`` within the same bound, so a platform's
``200 {"ok":true}`` in gzip is an accepted delivery, not a retry (a duplicate).
httpx is never let to inflate it: it inflates a whole chunk before a count sees
it, so 64 KiB of deflate were 64 MiB. A coding that cannot be decoded (br,
zstd) leaves the body empty; a corrupt one, and one that breaks off or stalls
once the answer began (its body read ends a little before the total deadline),
keeps what decoded as a cut answer's opening. Transport failures before the
answer began become transient
``DeliveryRefused`` errors named by the exception's type only (the URL of a
Telegram call carries the bot token, so no httpx message is ever kept).
"""

from __future__ import annotations

import datetime
import email.utils
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from hostkit._content_coding import (
    BodyOverCap,
    CorruptBody,
    UnsupportedCoding,
    decoded,
    raw_body,
)
from hostkit.delivery._channel import transient
from hostkit.errors import InvalidValue
from hostkit.types import is_seconds, is_text

__all__ = ["MAX_RESPONSE_BYTES", "Answer", "SharedClient", "post", "retry_after"]

MAX_RESPONSE_BYTES = 64 * 1024
_OK_OPENING = re.compile(rb'\s*\{\s*"ok"\s*:\s*(true|false)\s*[,}]')
CONNECT_TIMEOUT_S = 10.0
_MAX_RETRY_AFTER_S = 86_400.0
# Of a request's deadline, kept after the body's read for closing the cut connection.
_CLOSE_MARGIN_S = 1.0


@dataclass(frozen=True, slots=True)
class Answer:
    """A platform's answer: status, headers, and at most ``MAX_RESPONSE_BYTES`` of body,
    decoded (none when it came in a coding that is not decoded, like br)."""

    status: int
    headers: httpx.Headers
    body: bytes
    cut: bool = False  # only the opening was read: past MAX_RESPONSE_BYTES, corrupt or broken off

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON (a proxy's error page)."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def ok(self) -> bool | None:
        """A Web API answer's ``ok`` (Slack, Telegram), None when it has none.

        Both APIs echo the posted message back, so a long one's answer can pass
        the read bound: a cut answer's ``ok`` is read from its opening
        ``{"ok":true``, where both put it. Taking it for unreadable would post
        an accepted message again at every retry.
        """
        data = self.json()
        if isinstance(data, dict):
            flag = data.get("ok")
            return flag if isinstance(flag, bool) else None
        if self.cut and (opening := _OK_OPENING.match(self.body)) is not None:
            return opening.group(1) == b"true"
        return None


class SharedClient:
    """An ``httpx.AsyncClient`` made on first use, in a worker thread (its TLS setup reads
    certificate files), shared by a generation's channels and closed with them."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None
        self._lock = anyio.Lock()
        self._closed = False

    async def get(self) -> httpx.AsyncClient:
        async with self._lock:
            if self._closed:
                raise transient("channel_closed", "the channel was closed (a new configuration)")
            if self._client is None:
                self._client = await anyio.to_thread.run_sync(_new_client)
            return self._client

    async def aclose(self) -> None:
        async with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def _new_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(follow_redirects=False, trust_env=False)


def check_channel(target: object, secret: object, timeout_s: object) -> float:
    """A channel's target URL, token or secret, and send timeout, checked when it is built.

    A NaN timeout failed every send with a raw ValueError, 0 timed every one out,
    and a target that is not text failed only at the first send.
    """
    if not is_text(target, limit=4_096):
        raise InvalidValue("a delivery channel needs its target URL as text")
    if not is_text(secret, limit=4_096):
        raise InvalidValue("a delivery channel needs its token or secret as text")
    if not is_seconds(timeout_s, high=600.0):
        raise InvalidValue("a delivery channel's timeout_s must be in (0, 600] seconds")
    return float(timeout_s)


async def post(
    client: httpx.AsyncClient | SharedClient,
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    timeout_s: float,
) -> Answer:
    """POST ``content`` and read a bounded answer; transport failures are transient refusals."""
    http = await client.get() if isinstance(client, SharedClient) else client
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S))
    # The body's read ends a little before the total deadline: what it read is kept.
    read_by = anyio.current_time() + timeout_s - min(_CLOSE_MARGIN_S, timeout_s / 10)
    answer: Answer | None = None
    try:
        with anyio.fail_after(timeout_s):
            async with http.stream(
                "POST", url, content=content, headers=_uncompressed(headers), timeout=timeout
            ) as response:
                body, cut = await _read(response, read_by)
                answer = Answer(response.status_code, response.headers, body, cut)
    except TimeoutError as exc:
        if answer is not None:
            return answer  # closing the cut connection ran late: the answer was read
        raise transient("timeout", f"no answer within {timeout_s:g}s") from exc
    except httpx.TimeoutException as exc:
        if answer is not None:
            return answer
        raise transient("timeout", type(exc).__name__) from exc
    except httpx.TransportError as exc:
        if answer is not None:
            return answer
        raise transient("connect_error", type(exc).__name__) from exc
    except RuntimeError as exc:
        # httpx: "Cannot send a request, as the client has been closed" (a retired generation).
        raise transient("channel_closed", type(exc).__name__) from exc
    assert answer is not None
    return answer


def _uncompressed(headers: Mapping[str, str]) -> dict[str, str]:
    kept = {name: value for name, value in headers.items() if name.lower() != "accept-encoding"}
    return {**kept, "accept-encoding": "identity"}


async def _read(response: httpx.Response, read_by: float) -> tuple[bytes, bool]:
    """At most ``MAX_RESPONSE_BYTES`` of the decoded body, and whether it was cut.

    The status and headers came: the platform has the post. A body that is
    corrupt, breaks off (the connection dropped before its Content-Length) or
    stalls past ``read_by`` keeps the opening that arrived, marked cut: Slack
    and Telegram put ``"ok"`` first, so an accepted post is not posted again.
    """
    body = bytearray()
    raw, encoding = raw_body(response)
    try:
        with anyio.move_on_after(max(0.0, read_by - anyio.current_time())) as reading:
            async for piece in decoded(raw, encoding, cap=MAX_RESPONSE_BYTES):
                body += piece
    except UnsupportedCoding:
        return b"", False
    except (BodyOverCap, CorruptBody, httpx.TransportError):
        return bytes(body), True
    return bytes(body), reading.cancelled_caught


def retry_after(value: object, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` value (delta seconds or an HTTP date), bounded; else None."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > _MAX_RETRY_AFTER_S:
        return _MAX_RETRY_AFTER_S  # float() of an int past the float range would raise
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError):
                return None
            if when.tzinfo is None:
                when = when.replace(tzinfo=datetime.UTC)
            seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER_S)
