"""SqlDeliveryStore: the SQLite adapter of ``DeliveryStore`` (the outbox of migration 13).

Every write is one job of the store's group-commit writer: concurrent claims
and outcomes share one ``COMMIT``, and each job runs inside the writer's
``BEGIN IMMEDIATE`` transaction, so a claim's select and update are atomic for
every process on the database file. Arguments are checked on the caller's
side, before a job is queued; bad input raises ``InvalidValue`` and nothing is
written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostkit.errors import InvalidValue
from hostkit.store import _checks as checks
from hostkit.store import _delivery_rows as rows
from hostkit.store._delivery import MAX_DELIVERY_CLAIM, MAX_DELIVERY_LIST, DeliveryStore
from hostkit.types import (
    DELIVERY_STATUSES,
    ClaimedDelivery,
    DeliveryCounts,
    DeliveryFailure,
    DeliveryIntent,
    DeliveryStatus,
)

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = ["SqlDeliveryStore"]


class SqlDeliveryStore(DeliveryStore):
    """The ``outbox`` table of one RowStore, as the DeliveryRuntime drains it."""

    def __init__(self, db: RowStore) -> None:
        self._db = db

    async def claim(
        self,
        *,
        limit: int,
        lease_s: float,
        max_attempts: int,
        now: float,
    ) -> tuple[ClaimedDelivery, ...]:
        args = rows.ClaimArgs(
            limit=checks.check_count("limit", limit, MAX_DELIVERY_CLAIM),
            lease_s=checks.check_duration("lease_s", lease_s),
            max_attempts=checks.check_count("max_attempts", max_attempts, checks.MAX_ATTEMPTS),
            now=checks.check_instant("now", now),
        )
        return await self._db.write(lambda raw: rows.claim_rows(raw, args))

    async def delivered(self, claim: ClaimedDelivery, *, now: float) -> DeliveryIntent:
        held, at = _check_claim(claim), checks.check_instant("now", now)
        return await self._db.write(lambda raw: rows.delivered_row(raw, held, at))

    async def failed(
        self,
        claim: ClaimedDelivery,
        failure: DeliveryFailure,
        *,
        retry_at: float | None,
        now: float,
    ) -> DeliveryIntent:
        held, at = _check_claim(claim), checks.check_instant("now", now)
        if not isinstance(failure, DeliveryFailure):
            raise InvalidValue("failed takes a DeliveryFailure")
        retry = None if retry_at is None else checks.check_instant("retry_at", retry_at)
        error = failure.text()
        return await self._db.write(lambda raw: rows.failed_row(raw, held, error, retry, at))

    async def extend(
        self, claim: ClaimedDelivery, *, lease_s: float, now: float
    ) -> ClaimedDelivery:
        held, at = _check_claim(claim), checks.check_instant("now", now)
        lease = at + checks.check_duration("lease_s", lease_s)
        return await self._db.write(lambda raw: rows.extend_row(raw, held, lease, at))

    async def release(self, claim: ClaimedDelivery, *, now: float) -> None:
        held, at = _check_claim(claim), checks.check_instant("now", now)
        await self._db.write(lambda raw: rows.release_row(raw, held, at))

    async def retry(self, intent_id: str, *, reason: str, actor: str, now: float) -> DeliveryIntent:
        intent = checks.check_ref("intent_id", intent_id)
        why = checks.check_reason(reason, "a retry")
        who = checks.check_ref("actor", actor)
        at = checks.check_instant("now", now)
        return await self._db.write(
            lambda raw: rows.retry_row(raw, intent, reason=why, actor=who, now=at)
        )

    async def intents(
        self, *, status: DeliveryStatus | None = None, limit: int = 100
    ) -> tuple[DeliveryIntent, ...]:
        if status is not None and status not in DELIVERY_STATUSES:
            raise InvalidValue(f"status must be one of {', '.join(DELIVERY_STATUSES)}")
        most = checks.check_count("limit", limit, MAX_DELIVERY_LIST)
        return await self._db.read(lambda raw: rows.list_intents(raw, status, most))

    async def intent(self, intent_id: str) -> DeliveryIntent | None:
        intent = checks.check_ref("intent_id", intent_id)
        return await self._db.read(lambda raw: rows.one_intent(raw, intent))

    async def counts(self) -> DeliveryCounts:
        return await self._db.read(rows.count_rows)

    async def next_due(self) -> float | None:
        return await self._db.read(rows.next_due_row)


def _check_claim(claim: object) -> ClaimedDelivery:
    if not isinstance(claim, ClaimedDelivery):
        raise InvalidValue("a delivery outcome takes the ClaimedDelivery that claim returned")
    return claim
