"""Telegram bot updates: the webhook's secret-token check and the Update shape.

``setWebhook(secret_token=...)`` makes Telegram send
``X-Telegram-Bot-Api-Secret-Token`` with every update; it is compared in
constant time. An Update's ``update_id`` is the dedup key (Telegram resends an
unacknowledged update with the same id). A ``message`` with text from a
person is a message (or a typed command); a ``callback_query`` whose data is
``approve CODE`` / ``deny CODE`` (an inline button) is a command whose
``metadata["press"]`` keeps the query's id, so its outcome is told to the
person who pressed (``answerCallbackQuery``), not the chat; every other update
is acknowledged and ignored. The polling transport uses the same
``envelope_from_update``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hostkit.channels._commands import classify, parse_command
from hostkit.channels._parsed import (
    Ignored,
    Parsed,
    build_envelope,
    conversation_key_of,
    field_id,
    file_refs,
    json_object,
    malformed,
    same_secret,
    unauthorized,
)
from hostkit.channels._settings import ChannelSettings
from hostkit.types import InboundEnvelope

__all__ = [
    "WEBHOOK_AUTHENTICATED_BY",
    "check_telegram_headers",
    "envelope_from_update",
    "parse_telegram",
    "update_id",
]

WEBHOOK_AUTHENTICATED_BY = "telegram-secret-token"
_SECRET_HEADER = "x-telegram-bot-api-secret-token"
_MAX_QUERY_ID = 64


def check_telegram_headers(
    headers: Mapping[str, str], *, config: ChannelSettings, secret: str, now: float
) -> None:
    """401 unless the secret token header matches: the whole check, before the body is read."""
    given = headers.get(_SECRET_HEADER)
    if given is None:
        raise unauthorized("missing_secret_token", "the request carries no Telegram secret token")
    if not same_secret(secret, given):
        raise unauthorized("bad_secret_token", "the Telegram secret token does not match")


def parse_telegram(
    body: bytes,
    headers: Mapping[str, str],
    *,
    channel_id: str,
    config: ChannelSettings,
    secret: str,
    now: float,
) -> Parsed:
    """Check the secret token header, then parse one Update."""
    check_telegram_headers(headers, config=config, secret=secret, now=now)
    return envelope_from_update(
        json_object(body), channel_id=channel_id, authenticated_by=WEBHOOK_AUTHENTICATED_BY, now=now
    )


def update_id(update: Mapping[str, Any]) -> int:
    """The Update's id (a non-negative integer), or 400."""
    value = update.get("update_id")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
        raise malformed("an Update needs an integer update_id")
    return value


def envelope_from_update(
    update: Mapping[str, Any],
    *,
    channel_id: str,
    authenticated_by: str,
    now: float,
    numbering: int = 0,
) -> InboundEnvelope | Ignored:
    """The envelope one Telegram Update carries, ``Ignored``, or ``ChannelRefused`` (400).

    ``numbering`` counts the times the poller saw Telegram number updates afresh
    (after a quiet week): from the first, the dedup key carries it, so a new
    update never repeats the key of an old one with the same id.
    """
    key = f"{numbering}:{update_id(update)}" if numbering else str(update_id(update))
    message = update.get("message")
    if isinstance(message, dict):
        # A photo or a file carries its words as a caption.
        text = message.get("text", message.get("caption"))
        sender = _obj(message, "from")
        files = _files(message)
        if (not isinstance(text, str) or not text.strip()) and not files:
            return Ignored("telegram message without text")
        if sender.get("is_bot") is True:
            return Ignored("telegram message from a bot")
        kind, payload = classify(text) if isinstance(text, str) else ("message", "")
        chat = _obj(message, "chat").get("id")
        topic = _topic(message)
        extra: dict[str, Any] = {}
    elif isinstance(update.get("callback_query"), dict):
        query = update["callback_query"]
        data = query.get("data")
        command = parse_command(data) if isinstance(data, str) else None
        if command is None:
            return Ignored("telegram button that is not an approval answer")
        sender = _obj(query, "from")
        kind, payload = "command", command
        chat = _obj(_obj(query, "message"), "chat").get("id")
        topic = _topic(_obj(query, "message"))
        if chat is None:
            return Ignored("telegram callback without its chat (inline mode)")
        # The press is answered to its presser only (answerCallbackQuery), never the chat.
        extra = {"press": {"callback_query_id": _query_id(query.get("id"))}}
        files = ()
    else:
        return Ignored("telegram update of another type")
    user = field_id(sender.get("id"), "from.id")
    chat_id = _chat_id(chat)
    return build_envelope(
        channel_instance_id=channel_id,
        platform_event_key=key,
        conversation_key=conversation_key_of(("chat.id", str(chat_id)), ("from.id", user)),
        principal_key=user,
        authenticated_by=authenticated_by,
        received_at=now,
        kind=kind,
        payload=payload,
        artifacts=files,
        metadata={"reply": _reply(chat_id, topic), **extra},
    )


def _topic(message: Mapping[str, Any]) -> int | None:
    """The forum topic a message was written in (a supergroup with topics), or None: the
    answer goes back to that topic, not to the group's General one."""
    if message.get("is_topic_message") is not True:
        return None
    thread = message.get("message_thread_id")
    if isinstance(thread, bool) or not isinstance(thread, int) or not 0 < thread < 2**31:
        raise malformed("a Telegram topic message needs its message_thread_id")
    return thread


def _reply(chat_id: int, topic: int | None) -> dict[str, int]:
    """Where the answer goes: the chat, and the topic the message came from."""
    return (
        {"chat_id": chat_id} if topic is None else {"chat_id": chat_id, "message_thread_id": topic}
    )


def _query_id(value: Any) -> str:
    """A callback query's id (Telegram's opaque string), or 400: without it the press
    could only be answered to the whole chat."""
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_QUERY_ID or not value.isprintable():
        raise malformed("a callback_query needs its id")
    return value


def _chat_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**53:
        raise malformed("a Telegram chat id is an integer")
    return value


# The message fields that carry a file (``photo`` is a list of sizes of one picture).
_FILE_FIELDS = (
    "animation",
    "audio",
    "document",
    "sticker",
    "video",
    "video_note",
    "voice",
)


def _files(message: Mapping[str, Any]) -> tuple[str, ...]:
    """The files ``message`` carries, by their ``file_id`` (a photo by its largest size)."""
    ids = [_obj(message, name).get("file_id") for name in _FILE_FIELDS if name in message]
    sizes = message.get("photo")
    if isinstance(sizes, list) and sizes:
        largest = sizes[-1]
        ids.append(largest.get("file_id") if isinstance(largest, dict) else None)
    return file_refs("telegram", ids)


def _obj(value: Mapping[str, Any], name: str) -> dict[str, Any]:
    inner = value.get(name)
    return inner if isinstance(inner, dict) else {}
