"""What a format's verify+parse function returns, and the checks they share.

A format function takes the raw body, the request headers (case-insensitive
lookups on lower-case names), the channel's settings, its secret and the time,
and returns an ``InboundEnvelope`` to accept, a ``Challenge`` to echo (Slack's
``url_verification``) or ``Ignored`` (an event the Host does not act on), or
raises ``ChannelRefused`` with the HTTP status to answer. Signatures are
checked before a byte of the body is parsed. Each format also has a check of
the headers alone, which the app runs before it reads the body.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from hostkit.channels._settings import ChannelSettings
from hostkit.errors import ChannelRefused, InvalidValue
from hostkit.types import MAX_ARTIFACTS, UNPROCESSABLE, InboundEnvelope, joined_key

__all__ = [
    "Challenge",
    "HeaderCheck",
    "Ignored",
    "Parsed",
    "build_envelope",
    "check_fresh",
    "conversation_key_of",
    "field_id",
    "file_refs",
    "json_object",
    "same_secret",
    "signed_header_check",
    "signed_headers",
    "verify_signature",
]

# Platform ids that become parts of a conversation key: no ':' (the key's separator).
_ID = re.compile(r"[A-Za-z0-9_.@+-]{1,128}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")


@dataclass(frozen=True, slots=True)
class Challenge:
    """A URL-verification handshake: answer 200 with this value, accept nothing."""

    value: str


@dataclass(frozen=True, slots=True)
class Ignored:
    """An authenticated event the Host does not act on (a bot's message, an edit)."""

    reason: str


Parsed = InboundEnvelope | Challenge | Ignored


def unauthorized(code: str, message: str) -> ChannelRefused:
    return ChannelRefused(message, status=401, code=code)


def malformed(message: str) -> ChannelRefused:
    return ChannelRefused(message, status=400, code="malformed")


def same_secret(expected: str, given: str) -> bool:
    """Constant-time equality of two header values (no early exit on the first difference)."""
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def check_fresh(header: str | None, *, now: float, window_s: float) -> str:
    """The signed timestamp header, if it is within ``window_s`` of ``now``; else 401."""
    if header is None:
        raise unauthorized("missing_timestamp", "the request carries no signature timestamp")
    if not _TIMESTAMP.fullmatch(header):
        raise unauthorized("bad_timestamp", "the signature timestamp is not unix seconds")
    if abs(now - int(header)) > window_s:
        raise unauthorized(
            "stale_timestamp", "the signature timestamp is outside the replay window"
        )
    return header


def signed_headers(
    headers: Mapping[str, str],
    *,
    timestamp_header: str,
    signature_header: str,
    window_s: float,
    now: float,
    platform: str = "",
) -> tuple[str, str]:
    """The fresh timestamp and the signature a request carries, or 401.

    What the headers alone can refuse, checked before the body is read: a
    sender without a signature or with a stale timestamp makes the server
    hold nothing.
    """
    stamp = check_fresh(headers.get(timestamp_header), now=now, window_s=window_s)
    given = headers.get(signature_header)
    if given is None:
        raise unauthorized("missing_signature", f"the request carries no {_named(platform)}")
    return stamp, given


class HeaderCheck(Protocol):
    """What a format refuses from the headers alone (401), before the body is read."""

    def __call__(
        self, headers: Mapping[str, str], *, config: ChannelSettings, secret: str, now: float
    ) -> None: ...


def signed_header_check(
    *, timestamp_header: str, signature_header: str, platform: str = ""
) -> HeaderCheck:
    """The header check of a format signed over its body: a fresh timestamp and a signature
    must be there (``signed_headers``); whether the signature holds needs the body."""

    def check(
        headers: Mapping[str, str], *, config: ChannelSettings, secret: str, now: float
    ) -> None:
        signed_headers(
            headers,
            timestamp_header=timestamp_header,
            signature_header=signature_header,
            window_s=config.replay_window_s,
            now=now,
            platform=platform,
        )

    return check


def verify_signature(
    headers: Mapping[str, str],
    *,
    timestamp_header: str,
    signature_header: str,
    expected: Callable[[str], str],
    window_s: float,
    now: float,
    platform: str = "",
) -> str:
    """The fresh, signed timestamp of a request whose signature header equals
    ``expected(timestamp)`` (compared in constant time); else 401."""
    stamp, given = signed_headers(
        headers,
        timestamp_header=timestamp_header,
        signature_header=signature_header,
        window_s=window_s,
        now=now,
        platform=platform,
    )
    if not same_secret(expected(stamp), given):
        raise unauthorized("bad_signature", f"the {_named(platform)} does not match the body")
    return stamp


def _named(platform: str) -> str:
    return f"{platform} signature" if platform else "signature"


def json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or 400."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise malformed("the body is not JSON") from None
    if not isinstance(value, dict):
        raise malformed("the body is not a JSON object")
    return value


def field_id(value: Any, name: str) -> str:
    """A platform id (a sender, a team, a channel) as text without ':', or 400."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise malformed(f"{name} must be an id of 1 to 128 letters, digits or _.@+-")
    return value


def conversation_key_of(*fields: tuple[str, str]) -> str:
    """The ``(field, value)`` parts of an event joined by ':' into its conversation key.

    Checked whole against ``MAX_KEY_CHARS`` here, at parse time: an event whose
    fields each fit but whose key does not is answered 400 naming those fields,
    never accepted and then dead-lettered at turn admission. Only the first part
    may contain ':' (the others are platform ids), so the key splits from its end.
    """
    try:
        return joined_key(":", *fields)
    except InvalidValue as exc:
        raise malformed(exc.message) from None


def file_refs(platform: str, ids: list[Any]) -> tuple[str, ...]:
    """The files a message carries, as the envelope's ``artifacts`` (``<platform>-file:<id>``).

    The worker cannot give a turn files yet: an envelope with any is a dead letter
    (``unsupported_content``) an operator sees, never a turn that answers only the
    text and never ``ignored``. Ids that are not platform ids are kept as one
    ``unnamed`` reference each; at most ``MAX_ARTIFACTS``.
    """
    refs = [
        f"{platform}-file:{value if isinstance(value, str) and _ID.fullmatch(value) else 'unnamed'}"
        for value in ids[:MAX_ARTIFACTS]
    ]
    return tuple(refs)


def build_envelope(**fields: Any) -> InboundEnvelope:
    """An ``InboundEnvelope`` of an authenticated event.

    An event whose identity holds but whose text the inbox cannot keep (too
    long, a NUL) is accepted as kind ``unprocessable`` without its text: the
    platform gets its acknowledgement, and the worker dead-letters it where
    an operator sees it, instead of a 400 that leaves no record. Any other
    refused value is answered as 400.
    """
    try:
        return InboundEnvelope(**fields)
    except InvalidValue as exc:
        try:
            return InboundEnvelope(
                **{
                    **fields,
                    "kind": UNPROCESSABLE,
                    "payload": "",
                    "metadata": {**fields.get("metadata", {}), UNPROCESSABLE: exc.message},
                }
            )
        except InvalidValue:
            raise malformed(f"the event is not a valid inbound: {exc.message}") from None
