"""Telegram ``getUpdates`` polling with a durable cursor.

The cursor (the next ``offset``) is stored by the inbox as the source
checkpoint ``telegram-poll:<channel id>``, in the same transaction as the
batch it follows, so it never moves past an update that was not stored. A
failed poll or a failed accept keeps the old cursor: the same updates come
back and dedup (``update_id``) absorbs any that were stored. A batch of only
ignored updates (edits, bots, senders not allowed) has nothing to store; the
cursor then advances in memory, and after a restart those updates are read
(and ignored) again at most once more.

After a week without updates Telegram numbers the next ones afresh, possibly
below the cursor and onto ids it gave before. A batch below the cursor starts
a new *numbering*: it is stored with the cursor (``<numbering>:<cursor>``;
plain ``<cursor>`` for the first) and is part of each later update's dedup
key, so a new update is never taken for an old one with the same id.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import httpx

from hostkit._content_coding import BodyOverCap, ContentCodingError, decoded, raw_body
from hostkit._store_health import StoreHealth
from hostkit.channels._parsed import Ignored
from hostkit.channels._redact_logs import hide_url_tokens
from hostkit.channels._settings import ChannelSettings, sender_allowed
from hostkit.channels._telegram import envelope_from_update, update_id
from hostkit.errors import (
    ChannelRefused,
    ConfigError,
    InboxFull,
    PollError,
    StoreError,
    bounded,
    scrub_secret,
)
from hostkit.inbox import ChannelInbox
from hostkit.types import InboundEnvelope, SourceCheckpoint, is_count, is_seconds

__all__ = ["POLLING_AUTHENTICATED_BY", "TelegramPoller"]

POLLING_AUTHENTICATED_BY = "telegram-bot-token"
_log = logging.getLogger("hostkit.channels")
_ALLOWED_UPDATES = ("message", "callback_query")
# Extra seconds the HTTP read may take beyond the long-poll timeout Telegram honours.
_READ_MARGIN_S = 10.0
# The answer asked for uncompressed; one compressed anyway is decoded within the bound (``_read``).
_IDENTITY = {"accept-encoding": "identity"}


class TelegramPoller:
    """Reads one Telegram bot's updates with ``getUpdates`` into the inbox.

    ``run`` polls until cancelled; ``poll_once`` is one round (for tests and
    for callers with their own loop). ``client`` is an injected httpx client
    (its owner closes it); without one the poller opens its own. The token
    appears only in request URLs and never in a log line or an error.
    ``store_health`` hears of each store call's outcome (a serve's readiness
    reads it: a polling-only deployment has no webhook to notice a failing store).
    """

    def __init__(
        self,
        channel_id: str,
        config: ChannelSettings,
        inbox: ChannelInbox,
        *,
        token: str,
        client: httpx.AsyncClient | None = None,
        on_accept: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.time,
        limit: int = 100,
        max_response_bytes: int = 4 * 1_048_576,
        accept_timeout_s: float = 10.0,
        store_health: StoreHealth | None = None,
    ) -> None:
        if config.kind != "telegram" or config.api_origin is None:
            raise ConfigError("polling is the telegram transport", key=f"channels.{channel_id}")
        if not token or not isinstance(token, str):
            raise ConfigError(
                "the bot token is unset or empty", key=f"channels.{channel_id}.token_env"
            )
        if not is_count(limit, high=100):
            raise ConfigError("getUpdates takes 1 to 100 updates per call", key="limit")
        # NaN would compare false with every size and read any response whole.
        if not is_count(max_response_bytes, high=1 << 30):
            raise ConfigError("must be a positive integer (bytes)", key="max_response_bytes")
        if not is_seconds(accept_timeout_s, high=86_400):
            raise ConfigError(
                "must be a positive, finite number of seconds", key="accept_timeout_s"
            )
        self.channel_id = channel_id
        self.source_id = f"telegram-poll:{channel_id}"
        self._config = config
        self._inbox = inbox
        self._token = token
        self._url = f"{config.api_origin}/bot{token}/getUpdates"
        self._client = client
        self._on_accept = on_accept
        self._clock = clock
        self._limit = limit
        self._max_bytes = max_response_bytes
        self._accept_timeout_s = accept_timeout_s
        self._store_health = StoreHealth() if store_health is None else store_health
        self._cursor: int | None = None
        self._numbering = 0
        self._loaded = False
        hide_url_tokens()

    @property
    def cursor(self) -> int | None:
        """The next ``offset`` this poller asks for (None: Telegram's oldest pending update)."""
        return self._cursor

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Poll until cancelled, backing off after failures; a refused token raises PollError."""
        async with self._session() as client:
            await self._load()
            task_status.started()
            while True:
                try:
                    await self._poll(client)
                except PollError as exc:
                    if not exc.retryable:
                        _log.error(
                            "telegram channel %s stops polling: %s", self.channel_id, exc.message
                        )
                        raise
                    await self._back_off(exc.message)
                except (StoreError, InboxFull, TimeoutError) as exc:
                    await self._back_off(
                        getattr(exc, "message", "the inbox did not answer in time")
                    )

    async def poll_once(self) -> int:
        """One ``getUpdates`` round; how many new envelopes the inbox accepted.

        Raises ``PollError`` (the platform failed; the cursor did not move) or
        the inbox's ``StoreError`` or ``InboxFull`` (nothing stored; the cursor did
        not move).
        """
        async with self._session() as client:
            await self._load()
            return await self._poll(client)

    # -- internals ---------------------------------------------------------------------

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[httpx.AsyncClient]:
        if self._client is not None:
            yield self._client
            return
        # Its first build imports httpcore and h11, and every build reads the certificate
        # store (tens of ms each): in a worker thread, not on the loop the daemon serves on.
        client = await anyio.to_thread.run_sync(httpx.AsyncClient)
        async with client:
            yield client

    async def _load(self) -> None:
        if self._loaded:
            return
        try:
            stored = await self._inbox.checkpoint(self.source_id)
        except StoreError as exc:
            self._store_health.failed(exc)
            raise
        self._store_health.worked()
        self._numbering, self._cursor = _read_checkpoint(stored)
        self._loaded = True

    async def _back_off(self, why: str) -> None:
        _log.warning(
            "telegram channel %s: poll failed (%s); retrying in %.1fs",
            self.channel_id,
            why,
            self._config.poll_backoff_s,
        )
        await anyio.sleep(self._config.poll_backoff_s)

    async def _poll(self, client: httpx.AsyncClient) -> int:
        updates = await self._get_updates(client)
        if not updates:
            return 0
        now = self._clock()
        envelopes: list[InboundEnvelope] = []
        numbering = self._numbering + self._renumbered(updates)
        # The next offset is this batch's highest id + 1, not the highest ever seen: after a
        # week without updates Telegram numbers them afresh, possibly below the old cursor,
        # and only an offset just above them confirms them.
        cursor: int | None = None
        for update in updates:
            if not isinstance(update, dict):
                _log.warning(
                    "telegram channel %s skipped an update: not an object", self.channel_id
                )
                continue
            try:
                cursor = max(cursor or 0, update_id(update) + 1)
                parsed = self._envelope(update, now, numbering)
            except ChannelRefused as refused:
                _log.warning(
                    "telegram channel %s skipped an update: %s", self.channel_id, refused.code
                )
                continue
            if parsed is not None:
                envelopes.append(parsed)
        if cursor is None:
            return 0  # no update had an id: nothing to confirm, the cursor stays
        accepted = 0
        if envelopes:
            position = f"{numbering}:{cursor}" if numbering else str(cursor)
            checkpoint = SourceCheckpoint(self.source_id, position)
            try:
                with anyio.fail_after(self._accept_timeout_s):
                    receipts = await self._inbox.accept_batch(envelopes, checkpoint)
            except InboxFull:
                await self._answers_first(envelopes)
                raise
            except (StoreError, TimeoutError) as exc:
                self._store_health.failed(exc)
                raise
            self._store_health.worked()
            accepted = sum(1 for receipt in receipts if receipt.disposition == "accepted")
        self._cursor, self._numbering = cursor, numbering
        if accepted and self._on_accept is not None:
            self._on_accept()
        return accepted

    async def _answers_first(self, envelopes: list[InboundEnvelope]) -> None:
        """A full inbox refused the batch: store its approval answers alone (the inbox
        takes them past its limits), so a press is not refused for as long as a message
        shares its batch. The cursor stays: the batch comes again whole, and dedup
        answers these as duplicates then."""
        answers = [envelope for envelope in envelopes if envelope.kind == "command"]
        if not answers or len(answers) == len(envelopes):
            return
        try:
            with anyio.fail_after(self._accept_timeout_s):
                await self._inbox.accept_batch(answers)
        except (InboxFull, StoreError, TimeoutError):
            return  # the batch's refusal is what the caller reports

    def _renumbered(self, updates: list[Any]) -> bool:
        """Whether Telegram numbered this batch afresh: an id below the cursor it was asked
        for (Telegram returns none of the ids it numbered before below the offset)."""
        if self._cursor is None:
            return False
        ids = (update.get("update_id") for update in updates if isinstance(update, dict))
        return any(
            isinstance(value, int) and not isinstance(value, bool) and value < self._cursor
            for value in ids
        )

    def _envelope(
        self, update: dict[str, Any], now: float, numbering: int
    ) -> InboundEnvelope | None:
        """The update's envelope, None to skip it, or ``ChannelRefused`` (unreadable).

        An update that cannot become an envelope is stepped past, never
        retried: it would come back in every batch and hold the cursor (and
        every later update) forever.
        """
        try:
            parsed = envelope_from_update(
                update,
                channel_id=self.channel_id,
                authenticated_by=POLLING_AUTHENTICATED_BY,
                now=now,
                numbering=numbering,
            )
        except ChannelRefused:
            raise
        except Exception as exc:
            # A bug or an unforeseen shape in one update must not stop the bot.
            raise ChannelRefused(
                f"the update could not be read: {type(exc).__name__}", status=400, code="unreadable"
            ) from None
        if isinstance(parsed, Ignored):
            return None
        if not sender_allowed(self._config, parsed.principal_key):
            _log.warning("telegram channel %s refused an update: sender", self.channel_id)
            return None
        return parsed

    async def _get_updates(self, client: httpx.AsyncClient) -> list[Any]:
        params: dict[str, Any] = {
            "timeout": int(self._config.poll_timeout_s),
            "limit": self._limit,
            "allowed_updates": list(_ALLOWED_UPDATES),
        }
        if self._cursor is not None:
            params["offset"] = self._cursor
        timeout = httpx.Timeout(10.0, read=self._config.poll_timeout_s + _READ_MARGIN_S)
        try:
            async with client.stream(
                "POST", self._url, json=params, headers=_IDENTITY, timeout=timeout
            ) as response:
                body = await self._read(response)
                status = response.status_code
        except httpx.HTTPError as exc:
            raise PollError(f"getUpdates failed: {type(exc).__name__}") from None
        if status == 401:
            raise PollError(
                f"the bot token of channel {self.channel_id!r} was refused (401 Unauthorized); "
                "check its token_env",
                status=401,
                retryable=False,
            )
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            raise PollError(f"getUpdates answered {status} without JSON", status=status) from None
        if status != 200 or not isinstance(answer, dict) or answer.get("ok") is not True:
            description = answer.get("description") if isinstance(answer, dict) else None
            # Redact before cutting: a token straddling the cut would survive in part.
            shown = scrub_secret(str(description), self._token) if description else ""
            text = bounded(shown, 120) if shown else ""
            raise PollError(f"getUpdates answered {status}: {text or 'not ok'}", status=status)
        result = answer.get("result")
        if not isinstance(result, list):
            raise PollError("getUpdates returned no result list", status=status)
        return result

    async def _read(self, response: httpx.Response) -> bytes:
        """The answer, decoded from its raw bytes (never by httpx, which inflates a whole
        chunk before a count sees it), at most ``max_response_bytes`` of it."""
        body = bytearray()
        raw, encoding = raw_body(response)
        try:
            async for piece in decoded(raw, encoding, cap=self._max_bytes):
                body += piece
        except BodyOverCap:
            raise PollError(f"getUpdates answered more than {self._max_bytes} bytes") from None
        except ContentCodingError as exc:
            raise PollError(f"getUpdates answered a body it cannot read: {exc}") from None
        return bytes(body)


def _read_checkpoint(stored: str | None) -> tuple[int, int | None]:
    """``(numbering, cursor)`` from ``<numbering>:<cursor>`` or ``<cursor>``; (0, None) for
    none or anything else (then Telegram's oldest pending update is read first)."""
    if stored is None:
        return 0, None
    numbering, _, cursor = stored.rpartition(":")
    if not (cursor.isascii() and cursor.isdigit()):
        return 0, None
    if not numbering:
        return 0, int(cursor)
    if not (numbering.isascii() and numbering.isdigit()):
        return 0, None
    return int(numbering), int(cursor)
