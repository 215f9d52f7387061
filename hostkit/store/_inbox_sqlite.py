"""SqliteInboxStore: the SQLite adapter of ``InboxStore`` (tables of migration 12).

Every write is one job of the store's group-commit writer: concurrent accepts
(and claims, completes) share one ``COMMIT``, and each job runs inside the
writer's ``BEGIN IMMEDIATE`` transaction, so a claim's select and update are
atomic for every process on the database file. Arguments are checked and
encoded here, on the caller's side, before a job is queued; bad input raises
``InvalidValue`` and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, get_args

from hostkit.errors import InvalidValue
from hostkit.store import _inbox_rows as rows
from hostkit.store._inbox import MAX_CLAIM_BATCH, MAX_INBOX_LIST, InboxStore
from hostkit.types import (
    MAX_BATCH,
    ChannelCounts,
    ClaimedInbound,
    CompletionDecision,
    InboundEnvelope,
    InboundFailure,
    InboundRecord,
    InboundResult,
    InboundState,
    InboxReceipt,
    PruneReport,
    RetryDecision,
    SourceCheckpoint,
    finite_seconds,
)

if TYPE_CHECKING:
    from hostkit.store._sqlite import SqliteStore

__all__ = ["SqliteInboxStore"]

_MAX_ID = 256
_MAX_REASON = 500
_MAX_PRUNE = 1_000_000
_MAX_ATTEMPTS = 100
_STATES: tuple[str, ...] = get_args(InboundState)


def _id(name: str, value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_ID:
        raise InvalidValue(f"{name} must be a non-empty string of at most {_MAX_ID} characters")
    return value


def _finite(name: str, value: object) -> float:
    return finite_seconds(name, value)


def _time(name: str, value: object) -> float:
    seconds = _finite(name, value)
    if seconds < 0:
        raise InvalidValue(f"{name} must not be negative")
    return seconds


def _positive(name: str, value: object) -> float:
    seconds = _finite(name, value)
    if seconds <= 0:
        raise InvalidValue(f"{name} must be positive")
    return seconds


def _count(name: str, value: object, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InvalidValue(f"{name} must be an integer between 1 and {high}")
    return value


class SqliteInboxStore(InboxStore):
    """The ``inbox``, ``inbox_channels`` and ``inbox_checkpoints`` tables of one SqliteStore."""

    def __init__(self, db: SqliteStore) -> None:
        self._db = db
        # Channel instances whose inbox_channels row is known committed (rows are never
        # deleted): an accept for one of them skips that statement.
        self._channels: set[str] = set()

    async def accept(
        self,
        envelopes: Sequence[InboundEnvelope],
        checkpoint: SourceCheckpoint | None,
        *,
        now: float,
    ) -> tuple[InboxReceipt, ...]:
        at = _time("now", now)
        if isinstance(envelopes, InboundEnvelope | str | bytes) or not isinstance(
            envelopes, Sequence
        ):
            raise InvalidValue("accept takes a sequence of InboundEnvelope")
        batch = tuple(envelopes)
        if not 1 <= len(batch) <= MAX_BATCH:
            raise InvalidValue(f"a batch holds 1 to {MAX_BATCH} envelopes")
        encoded: list[tuple[tuple[str, str], list[Any]]] = []
        for envelope in batch:
            if not isinstance(envelope, InboundEnvelope):
                raise InvalidValue("accept takes InboundEnvelope values")
            encoded.append((envelope.dedup_key, rows.envelope_params(envelope, at)))
        cursor: tuple[str, str, float] | None = None
        if checkpoint is not None:
            if not isinstance(checkpoint, SourceCheckpoint):
                raise InvalidValue("checkpoint must be a SourceCheckpoint")
            cursor = (checkpoint.source_id, checkpoint.cursor, at)
        known = frozenset(self._channels)
        receipts = await self._db.write(lambda raw: rows.accept_rows(raw, encoded, cursor, known))
        self._channels.update(key[0] for key, _ in encoded)
        return receipts

    async def checkpoint(self, source_id: str) -> str | None:
        source = _id("source_id", source_id)
        return await self._db.read(lambda raw: rows.read_checkpoint(raw, source))

    async def claim(
        self, *, owner: str, now: float, lease_s: float, limit: int, max_attempts: int
    ) -> tuple[ClaimedInbound, ...]:
        args = rows.ClaimArgs(
            owner=_id("owner", owner),
            now=_time("now", now),
            lease_s=_positive("lease_s", lease_s),
            limit=_count("limit", limit, MAX_CLAIM_BATCH),
            max_attempts=_count("max_attempts", max_attempts, _MAX_ATTEMPTS),
        )
        return await self._db.write(lambda raw: rows.claim_rows(raw, args))

    async def reserve_turn(self, inbound_id: str, claim_token: str, *, now: float) -> bool:
        inbound, token, at = _fenced(inbound_id, claim_token, now)
        return await self._db.write(lambda raw: rows.reserve_row(raw, inbound, token, at))

    async def extend(
        self, inbound_id: str, claim_token: str, *, now: float, lease_s: float
    ) -> float | None:
        inbound, token, at = _fenced(inbound_id, claim_token, now)
        lease = at + _positive("lease_s", lease_s)
        return await self._db.write(lambda raw: rows.extend_row(raw, inbound, token, at, lease))

    async def complete(
        self, inbound_id: str, claim_token: str, result: InboundResult, *, now: float
    ) -> CompletionDecision:
        inbound, token, at = _fenced(inbound_id, claim_token, now)
        if not isinstance(result, InboundResult):
            raise InvalidValue("complete takes an InboundResult")
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
        if not isinstance(failure, InboundFailure):
            raise InvalidValue("fail takes an InboundFailure")
        retry = None if retry_at is None else _time("retry_at", retry_at)
        args = rows.EndArgs(inbound, token, "f:" + failure.digest(), at)
        recorded = (failure.kind, failure.code, failure.message)
        return await self._db.write(lambda raw: rows.fail_row(raw, args, recorded, retry))

    async def release(self, inbound_id: str, claim_token: str, *, now: float) -> bool:
        inbound, token, at = _fenced(inbound_id, claim_token, now)
        return await self._db.write(lambda raw: rows.release_row(raw, inbound, token, at))

    async def requeue(
        self, inbound_id: str, *, reason: str, actor: str, now: float
    ) -> InboundRecord:
        inbound = _id("inbound_id", inbound_id)
        who = _id("actor", actor)
        at = _time("now", now)
        if not isinstance(reason, str) or not reason.strip() or len(reason) > _MAX_REASON:
            raise InvalidValue(f"a requeue needs a reason of 1 to {_MAX_REASON} characters")
        why = reason.strip()
        return await self._db.write(
            lambda raw: rows.requeue_row(raw, inbound, reason=why, actor=who, now=at)
        )

    async def prune(
        self, *, payload_before: float, tombstone_before: float, limit: int
    ) -> PruneReport:
        payloads = _finite("payload_before", payload_before)
        tombstones = _finite("tombstone_before", tombstone_before)
        most = _count("limit", limit, _MAX_PRUNE)
        return await self._db.write(lambda raw: rows.prune_rows(raw, payloads, tombstones, most))

    async def counts(self) -> tuple[ChannelCounts, ...]:
        return await self._db.read(rows.channel_counts)

    async def records(
        self,
        *,
        state: InboundState | None = None,
        channel_instance_id: str | None = None,
        limit: int = 100,
    ) -> tuple[InboundRecord, ...]:
        if state is not None and state not in _STATES:
            raise InvalidValue(f"state must be one of {', '.join(_STATES)}")
        channel = None if channel_instance_id is None else _id("channel", channel_instance_id)
        most = _count("limit", limit, MAX_INBOX_LIST)
        return await self._db.read(lambda raw: rows.list_records(raw, state, channel, most))

    async def record(self, inbound_id: str) -> InboundRecord | None:
        inbound = _id("inbound_id", inbound_id)
        return await self._db.read(lambda raw: rows.one_record(raw, inbound))


def _fenced(inbound_id: object, claim_token: object, now: object) -> tuple[str, str, float]:
    return _id("inbound_id", inbound_id), _id("claim_token", claim_token), _time("now", now)
