"""The operator's view of delivery: outbox intents by status, and retrying a dead letter.

Built from ``RuntimeStore.delivery`` (the ``DeliveryStore`` group) only, so
it reads the same on every adapter. A row is its ids, route channel, status,
attempts, next attempt time and last error (redacted and bounded when it was
recorded); never the payload, which is the answer a user was sent. The
intents belong to no owner query (delivery reads them unscoped), so the
front ends showing them get an audited operator scope first, and a retry
acts only with one: it is audited as ``delivery.retry`` with that operator
and the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, ScopeError, bounded
from hostkit.inspect._source import Source, store_of
from hostkit.inspect._source import bounded as bounded_int
from hostkit.store import MAX_DELIVERY_LIST, MAX_REASON, audit_reason
from hostkit.types import (
    DELIVERY_STATUSES,
    DeliveryCounts,
    DeliveryIntent,
    DeliveryStatus,
    PrincipalScope,
)

__all__ = [
    "MAX_INTENT_ID",
    "DeliveryRows",
    "DeliveryView",
    "delivery_counts",
    "delivery_intent",
    "delivery_rows",
    "delivery_status",
    "delivery_view",
    "intent_id",
    "retry_delivery",
]

# An intent id is ``out_`` and a few dozen characters; anything longer is not one.
MAX_INTENT_ID = 80


@dataclass(frozen=True, slots=True)
class DeliveryRows:
    """Intents, newest first, as filtered; ``truncated`` when there are more."""

    intents: tuple[DeliveryIntent, ...]
    status: DeliveryStatus | None
    truncated: bool


@dataclass(frozen=True, slots=True)
class DeliveryView:
    """Counts per status and the newest dead letters (the notebook's status widget)."""

    counts: DeliveryCounts
    dead_letters: DeliveryRows


def delivery_status(value: object) -> DeliveryStatus:
    """``value`` if it names a delivery status, else ``InvalidValue`` listing them."""
    if value not in DELIVERY_STATUSES:
        raise InvalidValue(f"status must be one of {', '.join(DELIVERY_STATUSES)}")
    return value  # type: ignore[return-value]


def intent_id(value: object) -> str:
    """``value`` if it can be an intent id (1 to ``MAX_INTENT_ID`` characters), never echoed."""
    if not isinstance(value, str) or not value or len(value) > MAX_INTENT_ID:
        raise InvalidValue(f"an intent id has 1 to {MAX_INTENT_ID} characters")
    return value


async def delivery_counts(source: Source) -> DeliveryCounts:
    """Through ``store.delivery.counts()``."""
    return await store_of(source).delivery.counts()


async def delivery_rows(
    source: Source, *, status: str | None = None, limit: int = 50
) -> DeliveryRows:
    """Through ``store.delivery.intents()`` (``limit`` below ``MAX_DELIVERY_LIST``)."""
    bounded_int("limit", limit, MAX_DELIVERY_LIST - 1)
    chosen = None if status is None else delivery_status(status)
    found = await store_of(source).delivery.intents(status=chosen, limit=limit + 1)
    return DeliveryRows(tuple(found[:limit]), chosen, len(found) > limit)


async def delivery_view(source: Source, *, dead_letters: int = 20) -> DeliveryView:
    """The counts and the ``dead_letters`` newest dead-lettered intents."""
    return DeliveryView(
        await delivery_counts(source),
        await delivery_rows(source, status="dead_lettered", limit=dead_letters),
    )


async def delivery_intent(source: Source, intent: str) -> DeliveryIntent:
    """One intent, or ``NotFoundOrUnauthorized`` (``delivery intent not found``)."""
    found = await store_of(source).delivery.intent(intent_id(intent))
    if found is None:
        raise NotFoundOrUnauthorized("delivery intent")
    return found


async def retry_delivery(
    source: Source,
    scope: PrincipalScope,
    intent: str,
    *,
    reason: str,
    clock: Callable[[], float] | None = None,
) -> DeliveryIntent:
    """An operator sends a dead-lettered intent again: pending now (``clock``: the
    store's by default, ``RuntimeStore.now``), attempts from zero.

    Checked first for a clear error (unknown, not a dead letter, no operator
    scope, empty reason); the store re-checks atomically and writes the
    ``delivery.retry`` audit row with the retry itself.
    """
    store = store_of(source)
    scope = store.verify_scope(scope)
    if scope.authority != "operator":
        raise ScopeError("retrying a delivery needs an operator scope")
    said = bounded(audit_reason(reason), MAX_REASON)
    found = await delivery_intent(store, intent)
    if found.status != "dead_lettered":
        raise InvalidValue(
            f"delivery {found.intent_id} is {found.status}, not dead_lettered: "
            "only a dead letter can be retried"
        )
    return await store.delivery.retry(
        found.intent_id, reason=said, actor=scope.principal_id, now=(clock or store.now)()
    )
