"""Delivery values: the durable outbox intents a terminal turn commits, as delivery sees them.

A turn's answer (or its approval prompt) is written to the outbox in the
same transaction as the terminal turn record; the ``DeliveryRuntime`` then
sends it through the outbound channel its captured route names. Delivery has
its own states, attempts and dead letters: an inbound's completion never
says its answer arrived. Every value is frozen and checked on construction;
an error text is redacted and bounded before it can reach a row or a table.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from hostkit.errors import InvalidValue, bounded
from hostkit.freeze import FrozenMap, freeze
from hostkit.types._bounds import is_seconds, storable

__all__ = [
    "APPROVAL_BLOCK",
    "DELIVERY_STATUSES",
    "EMPTY_NOTICE",
    "MAX_DELIVERY_ERROR",
    "PRESS_ANSWER",
    "ClaimedDelivery",
    "DeliveryCounts",
    "DeliveryFailure",
    "DeliveryIntent",
    "DeliveryStatus",
    "approval_code",
]

# pending: waiting for its next attempt; sending: a delivery worker holds the lease;
# delivered: the channel accepted it (terminal); dead_lettered: given up (terminal until
# an operator retries it).
DeliveryStatus = Literal["pending", "sending", "delivered", "dead_lettered"]
DELIVERY_STATUSES: tuple[str, ...] = get_args(DeliveryStatus)
MAX_DELIVERY_ERROR = 500
_MAX_KEY = 256
# The payload key of the answer to a button press (``{"alert": bool}``): it goes to the
# person who pressed only, never the conversation (docs/delivery.md).
PRESS_ANSWER = "press_answer"
# What a conversation is told when its turn completed with nothing to show (an empty answer,
# or only spaces or invisible characters), which no platform would post: silence would look
# lost. Written in its place when the turn ends, and sent in place of an answer intent
# written before that (an older Host's) that shows nothing.
EMPTY_NOTICE = "I finished with your last message, but I had no reply to show for it."
# A Slack approval prompt's button block id, ``APPROVAL_BLOCK/<team>``: the workspace of
# the conversation it asks in, so a press is keyed as the message that asked was.
APPROVAL_BLOCK = "hostkit_approval"


def approval_code(approval_id: str) -> str:
    """The short code a channel user types to answer an approval (``approve K7QX2M``).

    Derived from the approval id (six base32 characters of its sha256), so no
    table maps codes: the answering path lists the replier's own pending
    approvals and matches the code among them, which keeps the authority
    check exactly that of every other answer. 30 bits make a collision among
    one principal's pending approvals negligible.
    """
    if not isinstance(approval_id, str) or not approval_id:
        raise InvalidValue("approval_id must be a non-empty string")
    digest = hashlib.sha256(approval_id.encode()).digest()
    return base64.b32encode(digest).decode()[:6]


def _text(name: str, value: object, limit: int = _MAX_KEY) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidValue(f"{name} must be a non-empty string of at most {limit} characters")
    return value


@dataclass(frozen=True, slots=True)
class DeliveryIntent:
    """One outbox row: what to send (``payload``), where (``route``), and how it went.

    ``route`` is the route the turn captured at admission (``{"channel":
    <outbound alias>, ...target facts}``), never re-resolved: a rebinding
    affects later turns only. ``payload`` is ``{"text": ...}``, plus
    ``{"turn_id", "part", "parts", "added"?}`` for a part of a turn's answer
    (``hostkit.types.chat_parts``: where it goes in the answer, and what the
    split added around the answer's own text),
    ``{"approval": {"approval_id", "code", "tool", "summary"}}`` for an
    approval prompt, or ``{"press_answer": {"alert": bool}}`` for the answer to
    a button press, which goes to the presser only (its route's reply target
    holds the press: a Telegram ``callback_query_id``, a Slack ``user``).
    ``attempts`` counts claims; ``next_attempt_at`` is the next attempt time
    while pending, the lease expiry while sending, None when terminal. An
    intent is a turn's (``turn_id``) or, for the reply to a channel command
    (a code that matched nothing, a refused answer, any answer to a button
    press), its inbound's (``inbound_id``): exactly one is set.
    ``payload_pruned`` says retention (or an erased session) removed the
    payload of a delivered intent: ``payload`` is then empty.
    """

    intent_id: str
    turn_id: str | None
    session_id: str
    route: Mapping[str, Any]
    payload: Mapping[str, Any]
    status: DeliveryStatus
    attempts: int = 0
    next_attempt_at: float | None = None
    created_at: str = ""
    last_error: str | None = None
    delivered_at: float | None = None
    requeues: int = 0
    inbound_id: str | None = None
    payload_pruned: bool = False

    def __post_init__(self) -> None:
        for name in ("intent_id", "session_id"):
            _text(name, getattr(self, name))
        if (self.turn_id is None) == (self.inbound_id is None):
            raise InvalidValue("an intent is a turn's or a command inbound's: exactly one id")
        for name in ("turn_id", "inbound_id"):
            if getattr(self, name) is not None:
                _text(name, getattr(self, name))
        if self.status not in DELIVERY_STATUSES:
            raise InvalidValue(f"status must be one of {', '.join(DELIVERY_STATUSES)}")
        if not isinstance(self.route, Mapping) or not isinstance(self.payload, Mapping):
            raise InvalidValue("route and payload must be mappings")
        object.__setattr__(self, "route", freeze(dict(self.route)))
        object.__setattr__(self, "payload", freeze(dict(self.payload)))
        if self.last_error is not None:
            object.__setattr__(self, "last_error", bounded(self.last_error, MAX_DELIVERY_ERROR))

    @property
    def channel(self) -> str | None:
        """The outbound channel alias the captured route names, if any."""
        value = self.route.get("channel")
        return value if isinstance(value, str) else None

    @property
    def approval(self) -> Mapping[str, Any] | None:
        """The approval this intent prompts for, if it is an approval prompt."""
        value = self.payload.get("approval")
        return value if isinstance(value, FrozenMap) else None

    @property
    def press_answer(self) -> bool:
        """True for the answer to a button press, told to the person who pressed only."""
        return isinstance(self.payload.get(PRESS_ANSWER), FrozenMap)


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    """A leased intent: only the holder of ``claim_token`` records how its attempt went."""

    intent: DeliveryIntent
    claim_token: str
    attempt: int
    lease_expires_at: float

    def __post_init__(self) -> None:
        if not isinstance(self.intent, DeliveryIntent):
            raise InvalidValue("intent must be a DeliveryIntent")
        _text("claim_token", self.claim_token)
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int) or self.attempt < 1:
            raise InvalidValue("attempt must be a positive integer")

    @property
    def idempotency_key(self) -> str:
        """Stable across attempts and processes: the receiver's dedup key for this intent."""
        return self.intent.intent_id


@dataclass(frozen=True, slots=True)
class DeliveryFailure:
    """Why an attempt failed: ``transient`` is retried with backoff, ``permanent`` is not.

    ``retry_after_s`` is what the channel asked for (HTTP 429 ``Retry-After``,
    Telegram's ``retry_after``); the runtime waits at least that long.
    """

    kind: Literal["transient", "permanent"]
    code: str
    message: str = ""
    retry_after_s: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("transient", "permanent"):
            raise InvalidValue("kind must be transient or permanent")
        _text("code", self.code, 64)
        if not isinstance(self.message, str):
            raise InvalidValue("message must be text")
        # A platform's error text may decode to a lone surrogate: kept as "?", or the
        # failure could not be recorded and the intent would be sent again and again.
        object.__setattr__(self, "message", bounded(storable(self.message), MAX_DELIVERY_ERROR))
        if self.retry_after_s is not None and not is_seconds(
            self.retry_after_s, high=86_400, zero=True
        ):
            raise InvalidValue("retry_after_s must be a number of seconds from 0 to 86400")

    def text(self) -> str:
        """One line for the row's ``last_error``."""
        return f"{self.code}: {self.message}" if self.message else self.code


@dataclass(frozen=True, slots=True)
class DeliveryCounts:
    """Outbox rows per status (the live status line and ``hostkit delivery list``)."""

    pending: int = 0
    sending: int = 0
    delivered: int = 0
    dead_lettered: int = 0
