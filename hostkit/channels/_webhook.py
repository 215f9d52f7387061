"""The generic signed JSON webhook: any sender that can compute an HMAC.

A request carries ``X-Hostkit-Timestamp`` (unix seconds) and
``X-Hostkit-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + body)>``.
Signing the timestamp with the body lets the receiver refuse a captured
request replayed outside the channel's replay window. The body is
``{"event_id", "sender", "conversation", "text", "kind"?}``; ``event_id`` is
the dedup key, so a sender retries with the same one.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from hostkit.channels._commands import classify, parse_command
from hostkit.channels._parsed import (
    Parsed,
    build_envelope,
    conversation_key_of,
    field_id,
    json_object,
    malformed,
    signed_header_check,
    verify_signature,
)
from hostkit.channels._settings import ChannelSettings
from hostkit.errors import InvalidValue
from hostkit.types import is_seconds

__all__ = ["AUTHENTICATED_BY", "check_webhook_headers", "parse_webhook", "sign_webhook"]

AUTHENTICATED_BY = "hmac-sha256"
_TIMESTAMP = "x-hostkit-timestamp"
_SIGNATURE = "x-hostkit-signature"
_MAX_EVENT_ID = 200
# With a sender (a platform id, at most 128) the key '<conversation>:<sender>' is at most
# 249 characters, inside MAX_KEY_CHARS: an event within the field limits always has a turn.
_MAX_CONVERSATION = 120


def _mac(secret: str, timestamp: str, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign_webhook(secret: str, body: bytes, *, timestamp: int) -> dict[str, str]:
    """The headers that sign ``body`` for a generic webhook channel at ``timestamp``.

    Senders add them to their POST; the delivery side signs outbound webhooks
    the same way, so one receiver check covers both directions.
    """
    if not is_seconds(timestamp):  # NaN and inf have no int(); a stamp is a time
        raise InvalidValue("timestamp must be a finite, positive number of seconds")
    stamp = str(int(timestamp))
    return {
        "X-Hostkit-Timestamp": stamp,
        "X-Hostkit-Signature": f"sha256={_mac(secret, stamp, body)}",
    }


# 401 for a request without a fresh timestamp or a signature: before its body is read.
check_webhook_headers = signed_header_check(
    timestamp_header=_TIMESTAMP, signature_header=_SIGNATURE
)


def parse_webhook(
    body: bytes,
    headers: Mapping[str, str],
    *,
    channel_id: str,
    config: ChannelSettings,
    secret: str,
    now: float,
) -> Parsed:
    """Verify the signature and freshness, then parse the event (``ChannelRefused`` if not)."""
    verify_signature(
        headers,
        timestamp_header=_TIMESTAMP,
        signature_header=_SIGNATURE,
        expected=lambda stamp: f"sha256={_mac(secret, stamp, body)}",
        window_s=config.replay_window_s,
        now=now,
    )
    event = json_object(body)
    event_id = _text(event, "event_id", _MAX_EVENT_ID)
    sender = field_id(event.get("sender"), "sender")
    conversation = _text(event, "conversation", _MAX_CONVERSATION)
    text = event.get("text")
    if not isinstance(text, str) or not text.strip():
        raise malformed("text must be a non-empty string")
    kind, payload = _kind(event.get("kind", None), text)
    return build_envelope(
        channel_instance_id=channel_id,
        platform_event_key=event_id,
        conversation_key=conversation_key_of(("conversation", conversation), ("sender", sender)),
        principal_key=sender,
        authenticated_by=AUTHENTICATED_BY,
        received_at=now,
        kind=kind,
        payload=payload,
        metadata={"reply": {"conversation": conversation}},
    )


def _text(event: dict[str, Any], name: str, limit: int) -> str:
    value = event.get(name)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise malformed(f"{name} must be a non-empty string of at most {limit} characters")
    if not value.isprintable():
        raise malformed(f"{name} must not contain control characters")
    return value


def _kind(declared: object, text: str) -> tuple[str, str]:
    """No ``kind``: a typed ``approve CODE`` is a command. ``command``: it must be one.
    ``message``: the text is a message whatever it says."""
    if declared is None:
        return classify(text)
    if declared == "message":
        return "message", text
    if declared == "command":
        command = parse_command(text)
        if command is None:
            raise malformed("a command is 'approve <CODE>' or 'deny <CODE>'")
        return "command", command
    raise malformed("kind must be 'message' or 'command'")
