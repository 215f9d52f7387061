"""The outbound channel seam: how the DeliveryRuntime hands one intent to a platform.

An adapter sends one payload to the reply target of one captured route and
either returns (the platform accepted it) or raises ``DeliveryRefused`` with
a classified ``DeliveryFailure``: ``transient`` ones are retried with
backoff, ``permanent`` ones dead-letter the intent at once. The runtime
looks the adapter up by the route's channel alias at every attempt, so a
configuration change reaches the next attempt while the route stays fixed.

A lookup (or a send) whose channels are going away with their owner (a
closing Host) raises ``ChannelsClosing``: nothing was sent, so the runtime
gives the claim back with its attempt refunded and stops claiming, where a
missing alias (None) would have dead-lettered an answer that is still
configured.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

from hostkit.errors import DeliveryRefused
from hostkit.types import EMPTY_NOTICE, PRESS_ANSWER, DeliveryFailure, has_visible

__all__ = [
    "ChannelLookup",
    "ChannelsClosing",
    "OutboundChannel",
    "payload_text",
    "permanent",
    "reply_target",
    "transient",
]


@runtime_checkable
class OutboundChannel(Protocol):
    """Sends one delivery intent; the same ``idempotency_key`` on every attempt of one intent."""

    async def send(
        self, route: Mapping[str, Any], payload: Mapping[str, Any], *, idempotency_key: str
    ) -> None: ...


# Channel alias (the route's "channel") -> its adapter in the current generation, or None
# (not configured); ChannelsClosing while its owner closes.
ChannelLookup = Callable[[str], OutboundChannel | None]


class ChannelsClosing(DeliveryRefused):
    """The channels' owner is closing and nothing was sent: not an attempt at all.

    A ``DeliveryRefused`` (transient ``channel_closed``) for a caller that only
    knows refusals; the ``DeliveryRuntime`` releases the claim instead (pending
    again, attempt not spent) and stops claiming, as at its own shutdown.
    """

    def __init__(self, message: str = "the Host is closing") -> None:
        super().__init__(DeliveryFailure("transient", "channel_closed", message))


def _refused(
    kind: Literal["transient", "permanent"],
    code: str,
    message: str,
    retry_after_s: float | None,
) -> DeliveryRefused:
    return DeliveryRefused(DeliveryFailure(kind, code, message, retry_after_s))


def transient(
    code: str, message: str = "", *, retry_after_s: float | None = None
) -> DeliveryRefused:
    """A failure worth retrying (rate limit, 5xx, connection trouble)."""
    return _refused("transient", code, message, retry_after_s)


def permanent(code: str, message: str = "") -> DeliveryRefused:
    """A failure no retry can fix until someone changes something (route, token, config)."""
    return _refused("permanent", code, message, None)


def reply_target(route: Mapping[str, Any]) -> Mapping[str, Any]:
    """The route's ``reply`` mapping (the platform's reply target); ``bad_route`` if missing."""
    reply = route.get("reply")
    if not isinstance(reply, Mapping) or not reply:
        raise permanent("bad_route", "the route has no reply target")
    return reply


def payload_text(payload: Mapping[str, Any]) -> str:
    """The payload's text; ``bad_payload`` when it shows nothing (no platform posts it).

    A plain answer that shows nothing (written before answers were checked when the
    turn ended, by an older Host) is sent as ``EMPTY_NOTICE``: the conversation is
    told, not left in silence behind a dead letter no retry could mend.
    """
    text = payload.get("text")
    if isinstance(text, str) and has_visible(text):
        return text
    if isinstance(text, str) and "approval" not in payload and PRESS_ANSWER not in payload:
        return EMPTY_NOTICE
    raise permanent("bad_payload", "the payload has no text")
