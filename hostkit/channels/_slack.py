"""The Slack Events API and interactivity (button) requests.

Slack signs every request with the app's signing secret:
``X-Slack-Signature: v0=<hex HMAC-SHA256(secret, "v0:<ts>:" + body)>`` with
``X-Slack-Request-Timestamp: <ts>``. ``url_verification`` is answered with its
challenge only after that check. A ``message`` event from a person becomes an
envelope keyed by its ``event_id``; Slack retries an unacknowledged event
with the same ``event_id`` (and ``X-Slack-Retry-Num``), which dedup absorbs.
Interactivity posts ``payload=<json>`` form-encoded; a ``block_actions``
button whose value is ``approve CODE`` / ``deny CODE`` is a command whose
``metadata["press"]`` names the presser, so its outcome is told to them
alone (an ephemeral message), not the channel.

Both key a conversation ``<team>:<channel>:<user>`` by the *sender's own* workspace,
which both payloads name for the same person. In a Slack Connect (shared) channel the
envelope's ``team_id`` is the channel's or the dispatching install's workspace and an
interaction's ``team.id`` that of the app that posted the message: keyed by those, the
asker's own press would name another conversation than her message did.

Which of the two a request is comes from the signed body, never from the
unsigned ``Content-Type``: otherwise one signed JSON event could be replayed
as a form and a ``payload=`` field smuggled inside its text read as a button
press by someone else.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_plus

from hostkit.channels._commands import classify, parse_command
from hostkit.channels._parsed import (
    Challenge,
    Ignored,
    Parsed,
    build_envelope,
    conversation_key_of,
    field_id,
    file_refs,
    json_object,
    malformed,
    signed_header_check,
    verify_signature,
)
from hostkit.channels._settings import ChannelSettings
from hostkit.errors import InvalidValue
from hostkit.types import APPROVAL_BLOCK, is_seconds

__all__ = ["AUTHENTICATED_BY", "check_slack_headers", "parse_slack", "sign_slack"]

AUTHENTICATED_BY = "slack-signature"
_TIMESTAMP = "x-slack-request-timestamp"
_SIGNATURE = "x-slack-signature"
_RETRY_NUM = "x-slack-retry-num"
_RETRY_REASON = "x-slack-retry-reason"
_MAX_CHALLENGE = 256
_MAX_EVENT_ID = 200
# The message subtypes a person sends (no subtype: a plain message). Every other one is an
# edit, a deletion, a join, a bot's post or another change the Host does not answer.
_PERSON_SUBTYPES = frozenset({"thread_broadcast", "file_share", "me_message"})
# Interactivity bodies are exactly this one form field.
_FORM_FIELD = b"payload="


def _mac(secret: str, timestamp: str, body: bytes) -> str:
    base = f"v0:{timestamp}:".encode() + body
    return hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def sign_slack(secret: str, body: bytes, *, timestamp: int) -> dict[str, str]:
    """The headers Slack would send with ``body`` at ``timestamp`` (tests, relays)."""
    if not is_seconds(timestamp):  # NaN and inf have no int(); a stamp is a time
        raise InvalidValue("timestamp must be a finite, positive number of seconds")
    stamp = str(int(timestamp))
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={_mac(secret, stamp, body)}",
    }


# 401 for a request without a fresh timestamp or a signature: before its body is read.
check_slack_headers = signed_header_check(
    timestamp_header=_TIMESTAMP, signature_header=_SIGNATURE, platform="Slack"
)


def parse_slack(
    body: bytes,
    headers: Mapping[str, str],
    *,
    channel_id: str,
    config: ChannelSettings,
    secret: str,
    now: float,
) -> Parsed:
    """Verify Slack's signature, then parse an Events API or interactivity request."""
    verify_signature(
        headers,
        timestamp_header=_TIMESTAMP,
        signature_header=_SIGNATURE,
        expected=lambda stamp: f"v0={_mac(secret, stamp, body)}",
        window_s=config.replay_window_s,
        now=now,
        platform="Slack",
    )
    if body.startswith(b"{"):
        return _event(json_object(body), headers, channel_id=channel_id, now=now)
    if body.startswith(_FORM_FIELD) and b"&" not in body and b";" not in body:
        return _interaction(body[len(_FORM_FIELD) :], channel_id=channel_id, now=now)
    raise malformed("a Slack request is an Events API JSON object or one payload= form field")


def _event(
    request: dict[str, Any], headers: Mapping[str, str], *, channel_id: str, now: float
) -> Parsed:
    kind = request.get("type")
    if kind == "url_verification":
        challenge = request.get("challenge")
        if not isinstance(challenge, str) or not 0 < len(challenge) <= _MAX_CHALLENGE:
            raise malformed("url_verification needs a challenge string")
        return Challenge(challenge)
    if kind != "event_callback":
        return Ignored(f"slack request type {str(kind)[:40]!r}")
    event = request.get("event")
    if not isinstance(event, dict):
        raise malformed("event_callback needs an event object")
    if event.get("type") != "message":
        return Ignored(f"slack event type {str(event.get('type'))[:40]!r}")
    subtype = event.get("subtype")
    person = subtype is None or (isinstance(subtype, str) and subtype in _PERSON_SUBTYPES)
    if not person or event.get("bot_id") is not None:
        # Edits, deletions, joins and bot messages (the Host's own answers among them)
        # start no turn; a person's reply broadcast to the channel, a file shared with
        # text and a /me message are messages like any other.
        return Ignored("slack message with a subtype or from a bot")
    event_id = request.get("event_id")
    if not isinstance(event_id, str) or not 0 < len(event_id) <= _MAX_EVENT_ID:
        raise malformed("event_callback needs an event_id")
    team = field_id(request.get("team_id", event.get("team")), "team_id")
    channel = field_id(event.get("channel"), "event.channel")
    user = field_id(event.get("user"), "event.user")
    text = event.get("text")
    if not isinstance(text, str):
        raise malformed("a message event needs its text")
    files = event.get("files")
    listed = files if isinstance(files, list) else []
    shared = file_refs("slack", [f.get("id") for f in listed if isinstance(f, dict)])
    if not text.strip() and not shared:
        return Ignored("slack message without text")
    reply: dict[str, Any] = {"channel": channel}
    thread = event.get("thread_ts")
    if isinstance(thread, str) and thread:
        reply["thread_ts"] = thread[:64]
    metadata: dict[str, Any] = {"reply": reply}
    if isinstance(event.get("ts"), str):
        metadata["ts"] = event["ts"][:64]
    retry = headers.get(_RETRY_NUM)
    # ASCII digits only: str.isdigit() is also true of "²", which int() refuses (and the
    # retry headers are not covered by the signature).
    if retry is not None and retry.isascii() and retry.isdigit() and len(retry) <= 6:
        metadata["retry_num"] = int(retry)
        metadata["retry_reason"] = (headers.get(_RETRY_REASON) or "")[:64]
    kind_of, payload = classify(text)
    return build_envelope(
        channel_instance_id=channel_id,
        platform_event_key=event_id,
        conversation_key=conversation_key_of(
            ("team_id", team), ("event.channel", channel), ("event.user", user)
        ),
        principal_key=user,
        authenticated_by=AUTHENTICATED_BY,
        received_at=now,
        kind=kind_of,
        payload=payload,
        artifacts=shared,
        metadata=metadata,
    )


def _interaction(field: bytes, *, channel_id: str, now: float) -> Parsed:
    """The ``block_actions`` command in the form field's value (URL-encoded JSON)."""
    try:
        payload = json.loads(unquote_plus(field.decode("ascii"), errors="strict"))
    except (ValueError, RecursionError):
        raise malformed("the interaction payload is not JSON") from None
    if not isinstance(payload, dict):
        raise malformed("the interaction payload is not a JSON object")
    if payload.get("type") != "block_actions":
        return Ignored(f"slack interaction type {str(payload.get('type'))[:40]!r}")
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise malformed("block_actions needs actions")
    value = actions[0].get("value")
    command = parse_command(value) if isinstance(value, str) else None
    if command is None:
        return Ignored("slack button that is not an approval answer")
    user_obj = _obj(payload, "user")
    team = _asked_team(actions[0]) or field_id(
        _obj(payload, "team").get("id", user_obj.get("team_id")), "team.id"
    )
    user = field_id(user_obj.get("id"), "user.id")
    container = _obj(payload, "container")
    channel = field_id(
        _obj(payload, "channel").get("id", container.get("channel_id")), "channel.id"
    )
    key = payload.get("trigger_id") or actions[0].get("action_ts")
    if not isinstance(key, str) or not 0 < len(key) <= _MAX_EVENT_ID:
        raise malformed("block_actions needs a trigger_id or action_ts")
    reply: dict[str, Any] = {"channel": channel}
    thread = _obj(payload, "message").get("thread_ts", container.get("thread_ts"))
    if isinstance(thread, str) and thread:
        reply["thread_ts"] = thread[:64]
    return build_envelope(
        channel_instance_id=channel_id,
        platform_event_key=f"block_actions:{key}",
        conversation_key=conversation_key_of(
            ("team.id", team), ("channel.id", channel), ("user.id", user)
        ),
        principal_key=user,
        authenticated_by=AUTHENTICATED_BY,
        received_at=now,
        kind="command",
        payload=command,
        # The press is answered to its presser only (chat.postEphemeral), never the channel.
        metadata={"reply": reply, "press": {"user": user}},
    )


def _asked_team(action: dict[str, Any]) -> str | None:
    """The workspace of the conversation a prompt's button was posted for (its block id,
    ``APPROVAL_BLOCK/<team>``), or None for a prompt without one.

    A press is keyed as the message that asked was: in a Slack Connect channel the
    event's ``team_id`` and the press's ``team.id`` can name different workspaces, and
    Enterprise Grid payloads name workspaces and the organisation in varying places.
    The block id is the Host's own (a person cannot edit a button's block), and only
    the workspace part of the key comes from it: the channel and the presser are
    Slack's signed fields, so a press still answers only its presser's own approval.
    """
    block = action.get("block_id")
    if not isinstance(block, str) or not block.startswith(f"{APPROVAL_BLOCK}/"):
        return None
    return field_id(block.removeprefix(f"{APPROVAL_BLOCK}/"), "actions.0.block_id")


def _obj(payload: dict[str, Any], name: str) -> dict[str, Any]:
    value = payload.get(name)
    return value if isinstance(value, dict) else {}
