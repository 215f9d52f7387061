"""SqlInboxStore: the SQLite adapter of ``InboxStore`` (tables of migration 12).

Every write is one job of the store's group-commit writer: concurrent accepts
(and claims, completes) share one ``COMMIT``, and each job runs inside the
writer's ``BEGIN IMMEDIATE`` transaction, so a claim's select and update are
atomic for every process on the database file. Arguments are checked and
encoded here, on the caller's side, before a job is queued; bad input raises
``InvalidValue`` and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from hostkit.errors import InboxFull
from hostkit.store import _inbox_checks as checks
from hostkit.store import _inbox_rows as rows
from hostkit.store._checks import MAX_CLAIM_OWNERS
from hostkit.store._inbox import (
    INBOX_FULL_RETRY_AFTER_S,
    MAX_CLAIM_BATCH,
    InboxLimits,
    InboxRoom,
    InboxStore,
)
from hostkit.types import (
    ChannelCounts,
    ClaimedInbound,
    CompletionDecision,
    InboundEnvelope,
    InboundFailure,
    InboundRecord,
    InboundResult,
    InboundState,
    InboxBacklog,
    InboxReceipt,
    PruneReport,
    RetryDecision,
    SourceCheckpoint,
)

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = ["SqlInboxStore"]


class SqlInboxStore(InboxStore):
    """The ``inbox``, ``inbox_channels`` and ``inbox_checkpoints`` tables of one RowStore."""

    def __init__(self, db: RowStore) -> None:
        self._db = db
        # Channel instances whose inbox_channels row is known committed (rows are never
        # deleted): an accept for one of them skips that statement.
        self._channels: set[str] = set()

    def now(self) -> float:
        return self._db.now()

    async def accept(
        self,
        envelopes: Sequence[InboundEnvelope],
        checkpoint: SourceCheckpoint | None,
        *,
        now: float,
        limits: InboxLimits | None = None,
    ) -> tuple[InboxReceipt, ...]:
        at = checks.check_instant("now", now)
        batch, source = checks.check_batch(envelopes, checkpoint)
        room = None
        limits = checks.check_limits(limits)
        if limits is not None:
            # No reserve is kept on a server's disk (PostgreSQL): only the backlog counts.
            directory = self._db.local_directory if limits.reserve_bytes else None
            room = rows.Room(limits.max_queued, limits.reserve_bytes, directory)
        encoded = [(envelope.dedup_key, rows.envelope_params(envelope, at)) for envelope in batch]
        cursor = None if source is None else (source.source_id, source.cursor, at)
        # Only instances this store has not yet seen may lack their fairness row: the
        # job gets those few, never a copy of every known instance.
        unseen = frozenset(key[0] for key, _ in encoded).difference(self._channels)
        receipts = await self._db.write(
            lambda raw: rows.accept_rows(raw, encoded, cursor, unseen, room)
        )
        if isinstance(receipts, str):
            raise InboxFull(receipts, retry_after=INBOX_FULL_RETRY_AFTER_S)
        self._channels.update(unseen)
        return receipts

    async def room(self, limits: InboxLimits) -> InboxRoom:
        limits = checks.check_room_limits(limits)
        # As accept: no reserve is kept on a server's disk (PostgreSQL).
        directory = self._db.local_directory if limits.reserve_bytes else None
        return await self._db.read(lambda raw: rows.room_now(raw, limits, directory))

    async def watch(self, wake: Callable[[], None]) -> None:
        await self._db.watch_inbox(wake)

    async def checkpoint(self, source_id: str) -> str | None:
        source = checks.check_ref("source_id", source_id)
        return await self._db.read(lambda raw: rows.read_checkpoint(raw, source))

    async def claim(
        self, *, owner: str, now: float, lease_s: float, limit: int, max_attempts: int
    ) -> tuple[ClaimedInbound, ...]:
        args = rows.ClaimArgs(
            owner=checks.check_ref("owner", owner),
            now=checks.check_instant("now", now),
            lease_s=checks.check_duration("lease_s", lease_s),
            limit=checks.check_count("limit", limit, MAX_CLAIM_BATCH),
            max_attempts=checks.check_count("max_attempts", max_attempts, checks.MAX_ATTEMPTS),
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

    async def bring_forward(self, inbound_ids: Sequence[str], *, due_at: float, now: float) -> int:
        named = checks.check_inbound_ids(inbound_ids)
        due = checks.check_instant("due_at", due_at)
        at = checks.check_instant("now", now)
        return await self._db.write(lambda raw: rows.bring_forward(raw, named, due, at))

    async def reserve_turn(self, inbound_id: str, claim_token: str, *, now: float) -> bool:
        inbound, token, at = _fenced(inbound_id, claim_token, now)
        return await self._db.write(lambda raw: rows.reserve_row(raw, inbound, token, at))

    async def extend(
        self, inbound_id: str, claim_token: str, *, now: float, lease_s: float
    ) -> float | None:
        inbound, token, at = _fenced(inbound_id, claim_token, now)
        lease = at + checks.check_duration("lease_s", lease_s)
        return await self._db.write(lambda raw: rows.extend_row(raw, inbound, token, at, lease))

    async def complete(
        self, inbound_id: str, claim_token: str, result: InboundResult, *, now: float
    ) -> CompletionDecision:
        inbound, token, at = _fenced(inbound_id, claim_token, now)
        checks.check_result(result)
        args = rows.EndArgs(inbound, token, "r:" + result.digest(), at)
        return await self._db.write(
            lambda raw: rows.complete_row(raw, args, result.kind, result.turn_id)
        )

    async def fail(
        self,
        inbound_id: str,
        claim_token: str,
        failure: InboundFailure,
        *,
        retry_at: float | None,
        now: float,
    ) -> RetryDecision:
        inbound, token, at = _fenced(inbound_id, claim_token, now)
        checks.check_failure(failure)
        retry = None if retry_at is None else checks.check_instant("retry_at", retry_at)
        args = rows.EndArgs(inbound, token, "f:" + failure.digest(), at)
        recorded = (failure.kind, failure.code, failure.message)
        return await self._db.write(lambda raw: rows.fail_row(raw, args, recorded, retry))

    async def release(
        self, inbound_id: str, claim_token: str, *, now: float, due_at: float | None = None
    ) -> bool:
        inbound, token, at = _fenced(inbound_id, claim_token, now)
        due = at if due_at is None else max(checks.check_instant("due_at", due_at), at)
        return await self._db.write(lambda raw: rows.release_row(raw, inbound, token, at, due))

    async def requeue(
        self, inbound_id: str, *, reason: str, actor: str, now: float
    ) -> InboundRecord:
        inbound = checks.check_ref("inbound_id", inbound_id)
        why = checks.check_reason(reason)
        who = checks.check_ref("actor", actor)
        at = checks.check_instant("now", now)
        return await self._db.write(
            lambda raw: rows.requeue_row(raw, inbound, reason=why, actor=who, now=at)
        )

    async def prune(
        self, *, payload_before: float, tombstone_before: float, limit: int
    ) -> PruneReport:
        payloads = checks.check_finite("payload_before", payload_before)
        tombstones = checks.check_finite("tombstone_before", tombstone_before)
        most = checks.check_count("limit", limit, checks.MAX_PRUNE)
        report = await self._db.write(lambda raw: rows.prune_rows(raw, payloads, tombstones, most))
        if report.tombstones_removed:
            await self._db.fold_after_retention()
        return report

    async def counts(self) -> tuple[ChannelCounts, ...]:
        return await self._db.read(rows.channel_counts)

    async def backlog(self) -> InboxBacklog:
        return await self._db.read(rows.backlog_counts)

    async def records(
        self,
        *,
        state: InboundState | None = None,
        channel_instance_id: str | None = None,
        limit: int = 100,
    ) -> tuple[InboundRecord, ...]:
        checks.check_list(state, channel_instance_id, limit)
        return await self._db.read(
            lambda raw: rows.list_records(raw, state, channel_instance_id, limit)
        )

    async def record(self, inbound_id: str) -> InboundRecord | None:
        inbound = checks.check_ref("inbound_id", inbound_id)
        return await self._db.read(lambda raw: rows.one_record(raw, inbound))


def _fenced(inbound_id: object, claim_token: object, now: object) -> tuple[str, str, float]:
    return (
        checks.check_ref("inbound_id", inbound_id),
        checks.check_ref("claim_token", claim_token),
        checks.check_instant("now", now),
    )
