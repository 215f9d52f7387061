"""SqlDeliveryStore: the SQLite adapter of ``DeliveryStore`` (the outbox of migration 13).

Every write is one job of the store's group-commit writer: concurrent claims
and outcomes share one ``COMMIT``, and each job runs inside the writer's
``BEGIN IMMEDIATE`` transaction, so a claim's select and update are atomic for
every process on the database file. Arguments are checked on the caller's
side, before a job is queued; bad input raises ``InvalidValue`` and nothing is
written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hostkit.errors import InvalidValue
from hostkit.store import _checks as checks
from hostkit.store import _delivery_rows as rows
from hostkit.store._checks import MAX_CLAIM_OWNERS
from hostkit.store._delivery import (
    MAX_DELIVERY_CLAIM,
    MAX_DELIVERY_LIST,
    MAX_REPLY_CHARS,
    DeliveryStore,
)
from hostkit.store._inbox_checks import MAX_PRUNE
from hostkit.store._owned import now as now_text
from hostkit.types import (
    DELIVERY_STATUSES,
    MAX_METADATA_CHARS,
    PRESS_ANSWER,
    ClaimedDelivery,
    DeliveryCounts,
    DeliveryFailure,
    DeliveryIntent,
    DeliveryStatus,
    PruneReport,
    bounded_metadata,
    check_route,
    is_text,
)

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = ["SqlDeliveryStore"]


class SqlDeliveryStore(DeliveryStore):
    """The ``outbox`` table of one RowStore, as the DeliveryRuntime drains it."""

    def __init__(self, db: RowStore) -> None:
        self._db = db

    def now(self) -> float:
        return self._db.now()

    async def claim(
        self,
        *,
        owner: str,
        limit: int,
        lease_s: float,
        max_attempts: int,
        now: float,
        per_channel: int | None = None,
        sending: Mapping[str, int] | None = None,
        holding: Collection[str] | None = None,
    ) -> tuple[ClaimedDelivery, ...]:
        args = rows.ClaimArgs(
            owner=checks.check_ref("owner", owner),
            limit=checks.check_count("limit", limit, MAX_DELIVERY_CLAIM),
            lease_s=checks.check_duration("lease_s", lease_s),
            max_attempts=checks.check_count("max_attempts", max_attempts, checks.MAX_ATTEMPTS),
            now=checks.check_instant("now", now),
            per_channel=(
                None
                if per_channel is None
                else checks.check_count("per_channel", per_channel, MAX_DELIVERY_CLAIM)
            ),
            sending=_check_sending(sending),
            holding=_check_holding(holding),
        )
        return await self._db.write(lambda raw: rows.claim_rows(raw, args))

    async def claimed_owners(
        self, *, after: str | None = None, limit: int = MAX_CLAIM_OWNERS
    ) -> tuple[str, ...]:
        start, most = checks.check_owner_page(after, limit)
        return await self._db.read(lambda raw: rows.claimed_owners(raw, start, most))

    async def expire_claims(self, owners: Sequence[str], *, now: float) -> int:
        named = checks.check_owners(owners)
        at = checks.check_instant("now", now)
        return await self._db.write(lambda raw: rows.expire_claims(raw, named, at))

    async def reply(
        self,
        *,
        inbound_id: str,
        session_id: str,
        route: Mapping[str, Any],
        text: str,
        press: bool = False,
        alert: bool = False,
    ) -> DeliveryIntent:
        inbound = checks.check_ref("inbound_id", inbound_id)
        session = checks.check_ref("session_id", session_id)
        if not isinstance(route, Mapping) or not isinstance(route.get("channel"), str):
            raise InvalidValue("a reply's route is a mapping that names its channel")
        if press and not isinstance(route.get("reply"), Mapping):
            raise InvalidValue("the answer to a press needs the press in its reply target")
        check_route(route)
        where = bounded_metadata(route)  # bounded as a turn's captured route is
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_REPLY_CHARS:
            raise InvalidValue(f"a reply's text has 1 to {MAX_REPLY_CHARS} characters")
        payload: dict[str, Any] = {"text": text}
        if press:
            payload[PRESS_ANSWER] = {"alert": alert is True}
        intent_id = _reply_intent_id(inbound)
        return await self._db.write(
            lambda raw: rows.insert_reply(
                raw,
                intent_id=intent_id,
                inbound_id=inbound,
                session_id=session,
                route=where,
                payload=payload,
                created_at=now_text(raw),
            )
        )

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

    async def prune(
        self, *, payload_before: float, tombstone_before: float, limit: int
    ) -> PruneReport:
        payloads = checks.check_finite("payload_before", payload_before)
        tombstones = checks.check_finite("tombstone_before", tombstone_before)
        most = checks.check_count("limit", limit, MAX_PRUNE)
        report = await self._db.write(lambda raw: rows.prune_rows(raw, payloads, tombstones, most))
        if report.tombstones_removed:
            await self._db.fold_after_retention()
        return report

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

    async def dead_letters(self) -> int:
        return await self._db.read(rows.dead_letter_count)

    async def next_due(self) -> float | None:
        return await self._db.read(rows.next_due_row)


def _reply_intent_id(inbound_id: str) -> str:
    """The intent id of the reply to ``inbound_id``: the same for every attempt at it."""
    return "out_" + hashlib.sha256(f"reply:{inbound_id}".encode()).hexdigest()[:28]


def _check_claim(claim: object) -> ClaimedDelivery:
    if not isinstance(claim, ClaimedDelivery):
        raise InvalidValue("a delivery outcome takes the ClaimedDelivery that claim returned")
    return claim


def _check_holding(holding: object) -> tuple[str, ...]:
    """A claimant's own sends under way: at most ``MAX_DELIVERY_CLAIM`` intent ids."""
    if holding is None:
        return ()
    if isinstance(holding, str | bytes) or not isinstance(holding, Collection):
        raise InvalidValue("holding must be a collection of intent ids")
    if len(holding) > MAX_DELIVERY_CLAIM:
        raise InvalidValue(f"holding names at most {MAX_DELIVERY_CLAIM} intents")
    return tuple(sorted({checks.check_ref("holding", intent_id) for intent_id in holding}))


def _check_sending(sending: object) -> dict[str, int]:
    """A claimant's sends under way per channel alias: at most ``MAX_DELIVERY_CLAIM``
    aliases (as many as it can have sends), each a count from 0 to that bound."""
    if sending is None:
        return {}
    if not isinstance(sending, Mapping) or len(sending) > MAX_DELIVERY_CLAIM:
        raise InvalidValue(f"sending must map at most {MAX_DELIVERY_CLAIM} aliases to counts")
    checked: dict[str, int] = {}
    for alias, count in sending.items():
        # A route's alias is bounded with its metadata, not as a ref.
        if not is_text(alias, limit=MAX_METADATA_CHARS):
            raise InvalidValue("sending aliases must be text")
        name = str.__str__(alias)
        if isinstance(count, bool) or not isinstance(count, int):
            raise InvalidValue("sending counts must be integers")
        if not 0 <= count <= MAX_DELIVERY_CLAIM:
            raise InvalidValue(f"sending counts must be between 0 and {MAX_DELIVERY_CLAIM}")
        checked[name] = count
    return checked
