"""The strict in-memory InboxStore: the SQLite adapter's contract, nothing durable.

For embedders' tests of code built on ``ChannelInbox`` (``ChannelInbox.in_memory()``).
"Strict" means it refuses every argument the SQLite adapter refuses, with the
same limits, and keeps the same states, dedup keys, fencing tokens and
dispositions, so a test that passes here does not pass only because the fake
was lenient. Rows are frozen values replaced whole; no method awaits between
reading and writing them, so every step is atomic with respect to other tasks,
and a batch accept checks everything before it stores anything.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import anyio

from hostkit.errors import InboxFull, InvalidValue, NotFoundOrUnauthorized
from hostkit.freeze import FrozenMap
from hostkit.inbox._memory_index import ConversationIndex, DueEntry, DueIndex, OwnerIndex
from hostkit.store import (
    ATTEMPTS_EXHAUSTED,
    COMMAND_ALLOWANCE,
    INBOX_FULL_RETRY_AFTER_S,
    MAX_CLAIM_OWNERS,
    InboxLimits,
    InboxRoom,
    InboxStore,
    inbox_checks,
)
from hostkit.types import (
    UNANSWERED_OUTCOMES,
    UNPROCESSABLE,
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
    new_id,
)

__all__ = ["MemoryInboxStore", "RequeueAudit"]

_ACTIVE = ("ready", "claimed")
Refusal = Literal["stale_claim", "already_terminal", "conflict"]


@dataclass(frozen=True, slots=True)
class RequeueAudit:
    """One operator requeue, as the SQLite adapter's ``inbox.requeue`` audit row holds it."""

    inbound_id: str
    actor: str
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class _Row:
    """One inbound; replaced whole on every change (``version`` moves with ``due_at``)."""

    inbound_id: str
    seq: int
    envelope: InboundEnvelope
    state: InboundState
    attempt: int
    accepted_at: float
    updated_at: float
    due_at: float | None
    version: int = 0
    claim_token: str | None = None
    owner: str | None = None
    turn_reserved: bool = False
    # What ``claim_token`` did to end its attempt ("complete:<digest>" or "fail:<digest>").
    ended: str | None = None
    # The first answer to that fail, repeated for the same token and failure.
    decision: RetryDecision | None = None
    result: InboundResult | None = None
    failure: InboundFailure | None = None
    payload_pruned: bool = False
    requeues: int = 0


class MemoryInboxStore(InboxStore):
    """Every ``InboxStore`` rule in one process's memory (see ``hostkit.store.InboxStore``)."""

    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}  # accept order (dicts keep insertion order)
        self._keys: dict[tuple[str, str], str] = {}
        self._checkpoints: dict[str, str] = {}
        self._counts: dict[str, dict[str, int]] = {}
        self._due = DueIndex(self._is_live)
        self._owners = OwnerIndex()
        self._conversations = ConversationIndex(self._is_active)
        # Completed rows by completion time: still holding a payload, and all of them.
        self._payloads: list[tuple[float, int, str]] = []
        self._tombstones: list[tuple[float, int, str]] = []
        # Dead letters accepted without their text, by when they were dead-lettered.
        self._unprocessable: list[tuple[float, int, str]] = []
        self._audit: list[RequeueAudit] = []
        self._seq = 0

    @property
    def audit(self) -> tuple[RequeueAudit, ...]:
        """Every requeue so far, oldest first (read-only)."""
        return tuple(self._audit)

    # -- accept ------------------------------------------------------------------------

    async def accept(
        self,
        envelopes: Sequence[InboundEnvelope],
        checkpoint: SourceCheckpoint | None,
        *,
        now: float,
        limits: InboxLimits | None = None,
    ) -> tuple[InboxReceipt, ...]:
        await anyio.lowlevel.checkpoint()
        batch, cursor = inbox_checks.check_batch(envelopes, checkpoint)
        at = inbox_checks.check_instant("now", now)
        limits = inbox_checks.check_limits(limits)
        # Plan first (nothing can fail after this), then apply: all or nothing.
        fresh: dict[tuple[str, str], str] = {}
        by_id = {envelope.dedup_key: envelope for envelope in reversed(batch)}
        receipts: list[InboxReceipt] = []
        for envelope in batch:
            known = self._keys.get(envelope.dedup_key) or fresh.get(envelope.dedup_key)
            if known is not None:
                receipts.append(InboxReceipt(known, "duplicate"))
                continue
            inbound_id = new_id("inb")
            fresh[envelope.dedup_key] = inbound_id
            receipts.append(InboxReceipt(inbound_id, "accepted"))
        if limits is not None and fresh:
            queued = self._queued()
            others = sum(by_id[key].kind != "command" for key in fresh)
            if (others and queued + others > limits.max_queued) or queued + len(
                fresh
            ) > limits.max_queued + COMMAND_ALLOWANCE:
                raise InboxFull("backlog", retry_after=INBOX_FULL_RETRY_AFTER_S)
        for key, inbound_id in fresh.items():
            self._seq += 1
            row = _Row(
                inbound_id=inbound_id,
                seq=self._seq,
                envelope=by_id[key],
                state="ready",
                attempt=0,
                accepted_at=at,
                updated_at=at,
                due_at=at,
            )
            self._keys[key] = inbound_id
            self._put(None, row)
        if cursor is not None:
            self._checkpoints[cursor.source_id] = cursor.cursor
        return tuple(receipts)

    async def room(self, limits: InboxLimits) -> InboxRoom:
        await anyio.lowlevel.checkpoint()
        limits = inbox_checks.check_room_limits(limits)
        # No disk of its own: only the backlog counts, as at accept.
        return InboxRoom(limits, min(self._queued(), limits.max_queued))

    async def checkpoint(self, source_id: str) -> str | None:
        await anyio.lowlevel.checkpoint()
        return self._checkpoints.get(inbox_checks.check_ref("source_id", source_id))

    # -- claim -------------------------------------------------------------------------

    async def claim(
        self, *, owner: str, now: float, lease_s: float, limit: int, max_attempts: int
    ) -> tuple[ClaimedInbound, ...]:
        await anyio.lowlevel.checkpoint()
        inbox_checks.check_claim_args(owner, now, lease_s, limit, max_attempts)
        claimed: list[ClaimedInbound] = []
        for channel in self._due.rounds(now):
            entry = self._due.head(channel)
            assert entry is not None  # rounds() offers only instances with a due row
            row = self._rows[entry[2]]
            last = inbox_checks.reconcile_limit(max_attempts, turn_reserved=row.turn_reserved)
            if row.state == "claimed" and row.attempt >= last:
                self._put(row, _exhausted(row, now, max_attempts))
                continue
            token = new_id("claim")
            expires = now + lease_s
            self._put(
                row,
                replace(
                    row,
                    state="claimed",
                    attempt=row.attempt + 1,
                    due_at=expires,
                    claim_token=token,
                    owner=owner,
                    ended=None,
                    decision=None,
                    updated_at=now,
                ),
            )
            self._due.serve(channel)
            claimed.append(
                ClaimedInbound(
                    inbound_id=row.inbound_id,
                    envelope=row.envelope,
                    claim_token=token,
                    attempt=row.attempt + 1,
                    lease_expires_at=expires,
                    turn_request_id=f"inbound:{row.inbound_id}",
                    turn_reserved=row.turn_reserved,
                )
            )
            if len(claimed) == limit:
                break
        return tuple(claimed)

    async def claimed_owners(
        self, *, after: str | None = None, limit: int = MAX_CLAIM_OWNERS
    ) -> tuple[str, ...]:
        await anyio.lowlevel.checkpoint()
        start, most = inbox_checks.check_owner_page(after, limit)
        return self._owners.owners(start, most)

    async def expire_claims(self, owners: Sequence[str], *, now: float) -> int:
        await anyio.lowlevel.checkpoint()
        named = inbox_checks.check_owners(owners)
        at = inbox_checks.check_instant("now", now)
        expired = 0
        for owner in named:
            for inbound_id in self._owners.claims(owner):
                row = self._rows[inbound_id]
                if row.due_at is not None and row.due_at > at:
                    self._put(row, replace(row, due_at=at, updated_at=at))
                    expired += 1
        return expired

    async def bring_forward(self, inbound_ids: Sequence[str], *, due_at: float, now: float) -> int:
        await anyio.lowlevel.checkpoint()
        named = inbox_checks.check_inbound_ids(inbound_ids)
        due = inbox_checks.check_instant("due_at", due_at)
        at = inbox_checks.check_instant("now", now)
        moved = 0
        for inbound_id in named:
            row = self._rows.get(inbound_id)
            if row is not None and row.state == "ready" and (row.due_at or 0.0) > due:
                self._put(row, replace(row, due_at=due, updated_at=at))
                moved += 1
        return moved

    async def reserve_turn(self, inbound_id: str, claim_token: str, *, now: float) -> bool:
        await anyio.lowlevel.checkpoint()
        row = self._holding(inbound_id, claim_token, now)
        if row is None:
            return False
        self._put(row, replace(row, turn_reserved=True, updated_at=now))
        return True

    async def extend(
        self, inbound_id: str, claim_token: str, *, now: float, lease_s: float
    ) -> float | None:
        await anyio.lowlevel.checkpoint()
        inbox_checks.check_duration("lease_s", lease_s)
        row = self._holding(inbound_id, claim_token, now)
        if row is None:
            return None
        expires = now + lease_s
        self._put(row, replace(row, due_at=expires, updated_at=now))
        return expires

    # -- end a claim -------------------------------------------------------------------

    async def complete(
        self, inbound_id: str, claim_token: str, result: InboundResult, *, now: float
    ) -> CompletionDecision:
        await anyio.lowlevel.checkpoint()
        inbox_checks.check_result(result)
        row = self._known(inbound_id, claim_token, now)
        outcome = f"complete:{result.digest()}"
        if row.claim_token == claim_token and row.state == "claimed":
            done = replace(
                row, state="completed", due_at=None, result=result, ended=outcome, updated_at=now
            )
            self._put(row, done)
            return CompletionDecision(inbound_id, "completed", "completed")
        refusal = _fenced(row, claim_token, outcome)
        if refusal is None:
            return CompletionDecision(inbound_id, "completed", row.state)
        return CompletionDecision(inbound_id, refusal, row.state)

    async def fail(
        self,
        inbound_id: str,
        claim_token: str,
        failure: InboundFailure,
        *,
        retry_at: float | None,
        now: float,
    ) -> RetryDecision:
        await anyio.lowlevel.checkpoint()
        inbox_checks.check_failure(failure)
        if retry_at is not None:
            inbox_checks.check_instant("retry_at", retry_at)
        row = self._known(inbound_id, claim_token, now)
        outcome = f"fail:{failure.digest()}"
        if row.claim_token == claim_token and row.state == "claimed":
            if retry_at is None:
                decision = RetryDecision(inbound_id, "dead_lettered", "dead_lettered", row.attempt)
            else:
                decision = RetryDecision(inbound_id, "retry", "ready", row.attempt, retry_at)
            self._put(
                row,
                replace(
                    row,
                    state=decision.state,
                    due_at=retry_at,
                    failure=failure,
                    ended=outcome,
                    decision=decision,
                    updated_at=now,
                ),
            )
            return decision
        refusal = _fenced(row, claim_token, outcome)
        if refusal is None and row.decision is not None:
            return row.decision
        return RetryDecision(inbound_id, refusal or "conflict", row.state, row.attempt)

    async def release(
        self, inbound_id: str, claim_token: str, *, now: float, due_at: float | None = None
    ) -> bool:
        await anyio.lowlevel.checkpoint()
        row = self._holding(inbound_id, claim_token, now)
        if row is None:
            return False
        released = replace(
            row,
            state="ready",
            due_at=now
            if due_at is None
            else max(inbox_checks.check_instant("due_at", due_at), now),
            attempt=max(row.attempt - 1, 0),
            claim_token=None,
            owner=None,
            ended=None,
            decision=None,
            updated_at=now,
        )
        self._put(row, released)
        return True

    # -- operators ---------------------------------------------------------------------

    async def requeue(
        self, inbound_id: str, *, reason: str, actor: str, now: float
    ) -> InboundRecord:
        await anyio.lowlevel.checkpoint()
        inbox_checks.check_ref("inbound_id", inbound_id)
        text = inbox_checks.check_reason(reason)
        inbox_checks.check_ref("actor", actor)
        at = inbox_checks.check_instant("now", now)
        row = self._rows.get(inbound_id)
        if row is None:
            raise NotFoundOrUnauthorized("inbound")
        if row.state != "dead_lettered":
            raise InvalidValue("only a dead-lettered inbound can be requeued")
        again = replace(
            row,
            state="ready",
            due_at=at,
            attempt=0,
            claim_token=None,
            owner=None,
            ended=None,
            decision=None,
            requeues=row.requeues + 1,
            updated_at=at,
        )
        self._put(row, again)
        self._audit.append(RequeueAudit(inbound_id, actor, text, at))
        return _record(again)

    async def prune(
        self, *, payload_before: float, tombstone_before: float, limit: int
    ) -> PruneReport:
        await anyio.lowlevel.checkpoint()
        inbox_checks.check_finite("payload_before", payload_before)
        inbox_checks.check_finite("tombstone_before", tombstone_before)
        inbox_checks.check_count("limit", limit, inbox_checks.MAX_PRUNE)
        # Tombstones past the horizon go first; then the rows that stay lose their payload.
        removed = 0
        while self._tombstones and self._tombstones[0][0] < tombstone_before and removed < limit:
            _, _, inbound_id = heapq.heappop(self._tombstones)
            row = self._rows.get(inbound_id)
            if row is not None:
                self._delete(row)
                removed += 1
        unprocessable = 0
        while (
            self._unprocessable
            and self._unprocessable[0][0] < tombstone_before
            and unprocessable < limit
        ):
            at, _, inbound_id = heapq.heappop(self._unprocessable)
            row = self._rows.get(inbound_id)
            # Requeued since (and maybe dead-lettered again, under a later entry): not this one.
            if row is not None and _unprocessable(row) and row.updated_at == at:
                self._delete(row)
                unprocessable += 1
        cleared = 0
        while self._payloads and self._payloads[0][0] < payload_before and cleared < limit:
            at, _, inbound_id = heapq.heappop(self._payloads)
            row = self._rows.get(inbound_id)
            # One old enough to be deleted is left whole for the pass that deletes it.
            if row is not None and not row.payload_pruned and at >= tombstone_before:
                self._rows[inbound_id] = replace(
                    row, envelope=_without_payload(row.envelope), payload_pruned=True
                )
                cleared += 1
        return PruneReport(payloads_cleared=cleared, tombstones_removed=removed + unprocessable)

    async def counts(self) -> tuple[ChannelCounts, ...]:
        await anyio.lowlevel.checkpoint()
        return tuple(
            ChannelCounts(channel, **by_state) for channel, by_state in sorted(self._counts.items())
        )

    async def backlog(self) -> InboxBacklog:
        await anyio.lowlevel.checkpoint()
        by_channel = self._counts.values()
        return InboxBacklog(
            ready=sum(by_state.get("ready", 0) for by_state in by_channel),
            dead_lettered=sum(by_state.get("dead_lettered", 0) for by_state in by_channel),
        )

    async def records(
        self,
        *,
        state: InboundState | None = None,
        channel_instance_id: str | None = None,
        limit: int = 100,
    ) -> tuple[InboundRecord, ...]:
        await anyio.lowlevel.checkpoint()
        inbox_checks.check_list(state, channel_instance_id, limit)
        found: list[InboundRecord] = []
        for row in reversed(self._rows.values()):
            if state is not None and row.state != state:
                continue
            if channel_instance_id is not None and (
                row.envelope.channel_instance_id != channel_instance_id
            ):
                continue
            found.append(_record(row))
            if len(found) == limit:
                break
        return tuple(found)

    async def record(self, inbound_id: str) -> InboundRecord | None:
        await anyio.lowlevel.checkpoint()
        row = self._rows.get(inbox_checks.check_ref("inbound_id", inbound_id))
        return None if row is None else _record(row)

    # -- internals ---------------------------------------------------------------------

    def _queued(self) -> int:
        """Rows ready or claimed (a scan: this adapter holds a test's few rows)."""
        return sum(row.state in ("ready", "claimed") for row in self._rows.values())

    def _is_live(self, entry: DueEntry) -> bool:
        """A due entry counts while it is its row's latest and the row is the first
        active one of its conversation: a conversation's messages are claimed in order."""
        row = self._rows.get(entry[2])
        return (
            row is not None
            and row.version == entry[3]
            and row.state in _ACTIVE
            and self._conversations.first(_conversation(row)) == row.inbound_id
        )

    def _is_active(self, inbound_id: str) -> bool:
        row = self._rows.get(inbound_id)
        return row is not None and row.state in _ACTIVE

    def _known(self, inbound_id: str, claim_token: str, now: float) -> _Row:
        inbox_checks.check_ref("inbound_id", inbound_id)
        inbox_checks.check_ref("claim_token", claim_token)
        inbox_checks.check_instant("now", now)
        row = self._rows.get(inbound_id)
        if row is None:
            raise NotFoundOrUnauthorized("inbound")
        return row

    def _holding(self, inbound_id: str, claim_token: str, now: float) -> _Row | None:
        """The row if ``claim_token`` is its current claim (expired or not), else None."""
        inbox_checks.check_ref("inbound_id", inbound_id)
        inbox_checks.check_ref("claim_token", claim_token)
        inbox_checks.check_instant("now", now)
        row = self._rows.get(inbound_id)
        if row is None or row.state != "claimed" or row.claim_token != claim_token:
            return None
        return row

    def _put(self, old: _Row | None, new: _Row) -> None:
        """Store ``new`` (built by the caller, not yet shared) in place of ``old``.

        Counts, the due index and retention follow. The version is stamped on
        ``new`` before anyone else can see it, which saves copying the row twice.
        """
        channel = new.envelope.channel_instance_id
        if old is not None and (old.due_at != new.due_at or old.state != new.state):
            object.__setattr__(new, "version", old.version + 1)
        self._rows[new.inbound_id] = new
        self._owners.move(new.inbound_id, _claim_owner(old), _claim_owner(new))
        if old is None or old.state != new.state:
            if old is not None:
                self._count(channel, old.state, -1)
            self._count(channel, new.state, +1)
        was_active = old is not None and old.state in _ACTIVE
        if new.state in _ACTIVE and not was_active:
            self._conversations.join(_conversation(new), new.seq, new.inbound_id)
        if new.due_at is not None and (old is None or old.version != new.version):
            self._push_due(new)
        if was_active and new.state not in _ACTIVE:
            # The conversation's next message (if any) may be claimed now, and takes its
            # turn from now: due no earlier than this end (a later due_at stays).
            following = self._conversations.first(_conversation(new))
            if following is not None:
                self._next_in_turn(self._rows[following], new.updated_at)
        if _unanswered(new) != (old is not None and _unanswered(old)):
            self._count(channel, "unanswered", +1 if _unanswered(new) else -1)
        if new.state == "completed" and (old is None or old.state != "completed"):
            heapq.heappush(self._payloads, (new.updated_at, new.seq, new.inbound_id))
            heapq.heappush(self._tombstones, (new.updated_at, new.seq, new.inbound_id))
        if _unprocessable(new) and (old is None or not _unprocessable(old)):
            heapq.heappush(self._unprocessable, (new.updated_at, new.seq, new.inbound_id))

    def _next_in_turn(self, row: _Row, now: float) -> None:
        """``row`` is its conversation's first active one since ``now``: a waiting row due
        earlier becomes due at ``now``, so a backlog goes behind messages accepted since."""
        if row.state == "ready" and row.due_at is not None and row.due_at < now:
            self._put(row, replace(row, due_at=now))
        else:
            self._push_due(row)

    def _push_due(self, row: _Row) -> None:
        assert row.due_at is not None  # an active row is always due some time
        channel = row.envelope.channel_instance_id
        by_state = self._counts[channel]
        active = by_state.get("ready", 0) + by_state.get("claimed", 0)
        self._due.push(channel, (row.due_at, row.seq, row.inbound_id, row.version), active=active)

    def _delete(self, row: _Row) -> None:
        """Forget ``row`` and its dedup key (retention: the event may be accepted again)."""
        del self._rows[row.inbound_id]
        del self._keys[row.envelope.dedup_key]
        self._count(row.envelope.channel_instance_id, row.state, -1)
        if _unanswered(row):
            self._count(row.envelope.channel_instance_id, "unanswered", -1)

    def _count(self, channel: str, state: str, delta: int) -> None:
        by_state = self._counts.setdefault(channel, {})
        by_state[state] = by_state.get(state, 0) + delta
        if not by_state[state]:
            del by_state[state]
        if not by_state:
            del self._counts[channel]


def _conversation(row: _Row) -> tuple[str, str]:
    return row.envelope.channel_instance_id, row.envelope.conversation_key


def _unanswered(row: _Row) -> bool:
    """A completed row whose turn answered nothing (``ChannelCounts.unanswered``)."""
    result = row.result
    return (
        row.state == "completed"
        and result is not None
        and result.kind == "turn"
        and result.outcome in UNANSWERED_OUTCOMES
    )


def _unprocessable(row: _Row) -> bool:
    """A dead letter the channel accepted without its text (pruned after the horizon)."""
    return (
        row.state == "dead_lettered"
        and row.envelope.kind == UNPROCESSABLE
        and row.failure is not None
        and row.failure.code == UNPROCESSABLE
    )


def _claim_owner(row: _Row | None) -> str | None:
    """Who holds ``row``'s claim now (None: no row, or not claimed)."""
    return row.owner if row is not None and row.state == "claimed" else None


def _fenced(row: _Row, claim_token: str, outcome: str) -> Refusal | None:
    """Why a token that does not hold the claim now is refused; None: it repeats its end."""
    if row.claim_token == claim_token and row.ended is not None:
        return None if row.ended == outcome else "conflict"
    if row.state in ("completed", "dead_lettered"):
        return "already_terminal"
    return "stale_claim"


def _exhausted(row: _Row, now: float, max_attempts: int) -> _Row:
    """A row whose worker died on its last allowed attempt: a poison message."""
    return replace(
        row,
        state="dead_lettered",
        due_at=None,
        claim_token=None,
        owner=None,
        ended=None,
        decision=None,
        failure=InboundFailure(
            "transient",
            ATTEMPTS_EXHAUSTED,
            f"the lease of attempt {row.attempt} of {max_attempts} expired without a result",
        ),
        updated_at=now,
    )


def _without_payload(envelope: InboundEnvelope) -> InboundEnvelope:
    """The envelope as a dedup tombstone keeps it: identity and routing, no content."""
    return replace(envelope, payload="", payload_ref=None, artifacts=(), metadata=FrozenMap())


def _record(row: _Row) -> InboundRecord:
    envelope = row.envelope
    return InboundRecord(
        inbound_id=row.inbound_id,
        channel_instance_id=envelope.channel_instance_id,
        platform_event_key=envelope.platform_event_key,
        kind=envelope.kind,
        conversation_key=envelope.conversation_key,
        state=row.state,
        attempt=row.attempt,
        received_at=envelope.received_at,
        accepted_at=row.accepted_at,
        updated_at=row.updated_at,
        due_at=row.due_at,
        result_kind=row.result.kind if row.result is not None else None,
        turn_id=row.result.turn_id if row.result is not None else None,
        failure_code=row.failure.code if row.failure is not None else "",
        failure_message=row.failure.message if row.failure is not None else "",
        payload_pruned=row.payload_pruned,
        requeues=row.requeues,
    )
