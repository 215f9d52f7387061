"""ChannelInbox: the one owner of inbound messages between a transport and a turn.

A transport adapter authenticates and parses an event, then ``accept``s it;
it acknowledges the platform only after the receipt (accepted or duplicate)
came back. Workers ``claim`` due inbounds under a lease with a fencing token,
reserve the inbound's stable turn-request id, run the turn, and ``complete``
or ``fail`` the claim. The storage adapter (``InboxStore``: SQLite through
the RuntimeStore, or the strict in-memory one) makes every step atomic and
conditional; this class owns the policy: backoff, attempts, lease length,
retention, and which leases this process still holds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace

import anyio

from hostkit._cancellation import uninterrupted
from hostkit._dead_claims import expire_dead_claims
from hostkit.authority import RESERVED_CHANNELS
from hostkit.errors import InboxFull, InvalidValue, ScopeError, StaleClaim, bounded
from hostkit.inbox._admission import Admission
from hostkit.inbox._policy import RetentionPolicy, RetryPolicy
from hostkit.store import (
    MAX_CLAIM_BATCH,
    MAX_REASON,
    InboxLimits,
    InboxStore,
    LeaseOwner,
    RuntimeStore,
    audit_reason,
)
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
    InboxBacklog,
    InboxReceipt,
    PrincipalScope,
    PruneReport,
    RetryDecision,
    SourceCheckpoint,
    is_text,
    new_id,
)

__all__ = ["FRONT_END_CHANNELS", "RESERVED_INBOUND_CHANNELS", "ChannelInbox"]

# The channels of the Host's own front ends (the CLI, notebooks, ``Host.run_turn``):
# their conversations run as the local user, so no transport may speak in them.
FRONT_END_CHANNELS = frozenset({"cli", "notebook", "embedder"})
# What no inbound channel instance may be named: the Host's bindings and its front ends.
RESERVED_INBOUND_CHANNELS = RESERVED_CHANNELS | FRONT_END_CHANNELS
# A deferred inbound comes back this long after its turn's holder's lease would run out,
# so the lease has expired by the time the next attempt looks.
_LEASE_SLACK_S = 0.5

Clock = Callable[[], float]
ScopeCheck = Callable[[object], PrincipalScope]


class ChannelInbox:
    """accept / claim / complete / fail over one ``InboxStore``, with one retry policy.

    ``ChannelInbox.on_store(store)`` is the production inbox (the store's
    ``inbox`` group; claims hold across processes sharing the database).
    ``ChannelInbox.in_memory()`` is the strict in-memory adapter for tests of
    code built on the inbox. ``clock`` and ``rng`` drive retry times, so a test
    can move time instead of sleeping; ``clock`` is the store's by default
    (``InboxStore.now``: on PostgreSQL the server's, which every Host reads).
    ``limits`` is the back-pressure: a new inbound past them is refused with
    ``InboxFull`` (none: every inbound is stored while the store can).
    """

    def __init__(
        self,
        store: InboxStore,
        *,
        policy: RetryPolicy | None = None,
        retention: RetentionPolicy | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        owner: str | None = None,
        verify_scope: ScopeCheck | None = None,
        limits: InboxLimits | None = None,
    ) -> None:
        if not isinstance(store, InboxStore):
            raise InvalidValue("ChannelInbox needs an InboxStore")
        # Wrong types here would fail only at the first claim or prune, mid-service.
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise InvalidValue("ChannelInbox policy must be a RetryPolicy")
        if retention is not None and not isinstance(retention, RetentionPolicy):
            raise InvalidValue("ChannelInbox retention must be a RetentionPolicy")
        if rng is not None and not isinstance(rng, random.Random):
            raise InvalidValue("ChannelInbox rng must be a random.Random")
        if owner is not None and not is_text(owner, limit=256):
            raise InvalidValue("ChannelInbox owner must be 1 to 256 characters of valid text")
        if limits is not None and not isinstance(limits, InboxLimits):
            raise InvalidValue("ChannelInbox limits must be an InboxLimits")
        self._store = store
        self.policy = policy or RetryPolicy()
        self.retention = retention or RetentionPolicy()
        self._clock = store.now if clock is None else clock
        self._rng = rng or random.Random()
        self._owner = owner
        self._verify_scope = verify_scope
        self.limits = limits
        # Whether accepts are refused now (``refusing``): readiness reads it.
        self._admission = Admission()
        # Claims this inbox handed out and that have not ended: released on shutdown. Each
        # with its token and lease expiry: one whose lease lapsed is no longer this inbox's
        # (its end may never be recorded: a store outage), forgotten at the next claim,
        # and held again should a renewal (``extend``) still succeed.
        self._held: dict[str, tuple[str, float]] = {}

    @classmethod
    def on_store(cls, store: RuntimeStore, **options: object) -> ChannelInbox:
        """The inbox kept in ``store`` (its ``inbox`` group); operator scopes verify against it."""
        return cls(store.inbox, verify_scope=store.verify_scope, **options)  # type: ignore[arg-type]

    @classmethod
    def in_memory(cls, **options: object) -> ChannelInbox:
        """A strict in-memory inbox: the same contract, nothing survives the process."""
        from hostkit.inbox._memory import MemoryInboxStore

        return cls(MemoryInboxStore(), **options)  # type: ignore[arg-type]

    def now(self) -> float:
        """The inbox's clock (epoch seconds): the one its lease and due times are in."""
        return self._clock()

    @property
    def held(self) -> int:
        """Claims this inbox holds now (handed out, not yet completed, failed or released;
        one whose lease lapsed is dropped at the next claim)."""
        return len(self._held)

    # -- accept ------------------------------------------------------------------------

    async def watch(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` when another process may have made an inbound ready (see
        ``InboxStore.watch``); returns at once where the store cannot tell."""
        await self._store.watch(wake)

    async def accept(self, envelope: InboundEnvelope) -> InboxReceipt:
        """Durably store one envelope and its source checkpoint, or raise (``accept_batch``)."""
        if not isinstance(envelope, InboundEnvelope):
            raise InvalidValue("accept takes an InboundEnvelope")
        receipts = await self.accept_batch((envelope,), envelope.source_checkpoint)
        return receipts[0]

    async def accept_batch(
        self,
        envelopes: Sequence[InboundEnvelope],
        checkpoint: SourceCheckpoint | None = None,
    ) -> tuple[InboxReceipt, ...]:
        """Store every new envelope and advance ``checkpoint``, all in one transaction.

        Acknowledge the transport (2xx, mark Seen, advance a cursor) only after
        this returns. On ``StoreError`` nothing was stored and the checkpoint
        did not move: the transport must retry or keep the old cursor. The same
        holds for ``InboxFull`` (past ``limits``: the backlog, or the disk's
        reserve), which a duplicate never gets: it is answered as before.
        """
        batch = _checked_batch(envelopes)
        if checkpoint is not None and not isinstance(checkpoint, SourceCheckpoint):
            raise InvalidValue("checkpoint must be a SourceCheckpoint")
        limits = self.limits
        try:
            receipts = await self._store.accept(batch, checkpoint, now=self._clock(), limits=limits)
        except InboxFull as exc:
            if limits is not None:
                self._admission.refused(exc.reason, limits)
            raise
        self._admission.stored(batch, receipts)
        return receipts

    async def refusing(self) -> str | None:
        """Why a new inbound would be refused now (``inbox full: 10000 queued (max 10000)``,
        ``disk reserve: ...``), or None: for readiness, which probes often.

        No store call while accepts are stored: an inbound stored (not a command)
        proves room, an ``InboxFull`` starts a refusal. While one lasts, the store
        is asked (``InboxStore.room``: the backlog counted up to the limit, the
        disk) at most once a second, so None comes back once the workers made
        room, with no accept tried; a stored inbound ends it too. With neither,
        the store is asked at the first call and then at most every 5 seconds:
        a backlog full before this inbox opened, or filled by another Host's,
        shows. ``StoreError`` when that look fails (the last answer stays).
        """
        limits = self.limits
        if limits is None:
            return None
        return await self._admission.check(lambda: self._store.room(limits))

    async def checkpoint(self, source_id: str) -> str | None:
        """The cursor a polling transport resumes from (None: from the start)."""
        return await self._store.checkpoint(source_id)

    # -- claim -------------------------------------------------------------------------

    async def claim(self) -> ClaimedInbound | None:
        """Lease the next due inbound (fair across channel instances), or None."""
        claimed = await self.claim_batch(1)
        return claimed[0] if claimed else None

    async def claim_batch(self, limit: int) -> tuple[ClaimedInbound, ...]:
        """Lease up to ``limit`` due inbounds, round-robin across channel instances."""
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise InvalidValue("limit must be an integer")
        if not 1 <= limit <= MAX_CLAIM_BATCH:
            raise InvalidValue(f"limit must be between 1 and {MAX_CLAIM_BATCH}")
        owner = await self._owner_text()
        now = self._clock()
        claimed = await self._store.claim(
            owner=owner,
            now=now,
            lease_s=self.policy.lease_s,
            limit=limit,
            max_attempts=self.policy.max_attempts,
        )
        for inbound_id in [i for i, (_, expires) in self._held.items() if expires <= now]:
            del self._held[inbound_id]
        for item in claimed:
            self._held[item.inbound_id] = (item.claim_token, item.lease_expires_at)
        return claimed

    async def recover_dead_claims(self) -> int:
        """Make the claims of provably dead owners due now; how many inbounds were.

        A Host killed mid-claim (SIGKILL, OOM) leaves its claims ``claimed``
        until their leases run out. Its successor calls this when it starts
        serving: an owner whose process is gone from this machine (or whose
        pid now names another process) gives its claims up at once, exactly as
        a turn lease does (``owner_is_dead``). A live owner, one on another
        machine, or text that names no process keeps its lease. The claims
        keep their token and spent attempt (see ``InboxStore.expire_claims``).
        """
        return await expire_dead_claims(self._store, now=self._clock())

    async def reserve_turn(self, claimed: ClaimedInbound) -> ClaimedInbound:
        """Durably record that this claim starts its turn; ``StaleClaim`` if it is not current.

        Call it before the turn starts: a later attempt then knows a turn may
        exist for ``claimed.turn_request_id`` and reconciles with it first.
        """
        _check_claim(claimed)
        if not await self._store.reserve_turn(
            claimed.inbound_id, claimed.claim_token, now=self._clock()
        ):
            self._forget(claimed)
            raise StaleClaim(claimed.inbound_id)
        if claimed.turn_reserved:
            return claimed
        return replace(claimed, turn_reserved=True)

    async def extend(self, claimed: ClaimedInbound) -> ClaimedInbound:
        """Renew the lease of a claim still being worked on; ``StaleClaim`` if it was lost."""
        _check_claim(claimed)
        expires = await self._store.extend(
            claimed.inbound_id, claimed.claim_token, now=self._clock(), lease_s=self.policy.lease_s
        )
        if expires is None:
            self._forget(claimed)
            raise StaleClaim(claimed.inbound_id)
        # This inbox's again, also when a claim since forgot it for its lapsed lease (the
        # store renews a lapsed claim nobody took): shutdown must give it back unspent.
        # One that ended meanwhile is refused by ``release`` and forgotten at its lapse.
        self._held[claimed.inbound_id] = (claimed.claim_token, expires)
        return replace(claimed, lease_expires_at=expires)

    # -- end a claim -------------------------------------------------------------------

    async def complete(self, claimed: ClaimedInbound, result: InboundResult) -> CompletionDecision:
        """End the inbound with its business result (idempotent for the same token and result)."""
        _check_claim(claimed)
        if not isinstance(result, InboundResult):
            raise InvalidValue("complete takes an InboundResult")
        decision = await self._store.complete(
            claimed.inbound_id, claimed.claim_token, result, now=self._clock()
        )
        self._forget(claimed)
        return decision

    async def fail(self, claimed: ClaimedInbound, failure: InboundFailure) -> RetryDecision:
        """Record a failed attempt: retried after backoff, or dead-lettered when none is left.

        A ``permanent`` failure is dead-lettered at once.
        """
        _check_claim(claimed)
        if not isinstance(failure, InboundFailure):
            raise InvalidValue("fail takes an InboundFailure")
        now = self._clock()
        retry_at = (
            None
            if failure.kind == "permanent"
            else self.policy.retry_at(claimed.attempt, now, self._rng)
        )
        decision = await self._store.fail(
            claimed.inbound_id, claimed.claim_token, failure, retry_at=retry_at, now=now
        )
        self._forget(claimed)
        return decision

    async def release(self, claimed: ClaimedInbound) -> bool:
        """Give a claim back unfinished (shutdown): due again now, the attempt not counted."""
        _check_claim(claimed)
        released = await self._store.release(
            claimed.inbound_id, claimed.claim_token, now=self._clock()
        )
        self._forget(claimed)
        return released

    def waits(self, claimed: ClaimedInbound, *, since: float | None) -> bool:
        """Whether ``claimed``, whose earlier turn (running ``since``, else since the
        inbound was received) still runs under a live holder, may be deferred for it
        (``defer``): for ``policy.turn_wait_s`` of that turn's run."""
        start = claimed.envelope.received_at if since is None else since
        return self._clock() < start + self.policy.turn_wait_s

    async def defer(
        self, claimed: ClaimedInbound, *, since: float | None, until: float | None
    ) -> bool:
        """Give a claim back unfinished, the attempt not spent: the turn an earlier
        attempt started still runs under a live holder (another Host), whose lease
        ends with that turn's deadline, or with the holder, at the latest.

        Due after a quarter of the time the turn has run so far (``since``), so a
        long wait asks ever less often, and at the latest when that holder's
        lease runs out unless renewed (``until``), when asking again can tell
        whether it still holds: a short turn's end is found soon, and the
        conversation's next message is not held for a whole lease. Either way
        within the policy's base and longest delay.
        """
        _check_claim(claimed)
        now = self._clock()
        start = claimed.envelope.received_at if since is None else since
        wait = (now - start) / 4
        if until is not None:
            wait = min(wait, until + _LEASE_SLACK_S - now)
        wait = min(max(wait, self.policy.base_delay_s), self.policy.max_delay_s)
        deferred = await self._store.release(
            claimed.inbound_id, claimed.claim_token, now=now, due_at=now + wait
        )
        self._forget(claimed)
        return deferred

    def outwaits(self, claimed: ClaimedInbound) -> bool:
        """Whether ``claimed``, whose agent's provider is unreachable, may still be
        deferred for it (``postpone``): for ``policy.provider_wait_s`` after it was received."""
        return self._clock() < claimed.envelope.received_at + self.policy.provider_wait_s

    async def postpone(self, claimed: ClaimedInbound, *, until: float) -> bool:
        """Give a claim back unfinished, the attempt not spent, due again at ``until``
        (a provider outage's next probe), held to the policy's base and longest delay."""
        _check_claim(claimed)
        now = self._clock()
        wait = min(max(until - now, self.policy.base_delay_s), self.policy.max_delay_s)
        deferred = await self._store.release(
            claimed.inbound_id, claimed.claim_token, now=now, due_at=now + wait
        )
        self._forget(claimed)
        return deferred

    async def bring_forward(self, inbound_ids: Sequence[str], *, due_at: float) -> int:
        """Make those of ``inbound_ids`` still waiting due at ``due_at`` if due later (a
        provider outage's verdict wakes the inbounds deferred for it); how many were."""
        return await self._store.bring_forward(inbound_ids, due_at=due_at, now=self._clock())

    async def release_all(self) -> int:
        """Release every claim this inbox still holds (worker shutdown); how many were."""
        return await uninterrupted(self._release_held())

    async def _release_held(self) -> int:
        released = 0
        for inbound_id, (token, _) in list(self._held.items()):
            if await self._store.release(inbound_id, token, now=self._clock()):
                released += 1
            self._held.pop(inbound_id, None)
        return released

    # -- operators ---------------------------------------------------------------------

    async def requeue(
        self, scope: PrincipalScope, inbound_id: str, *, reason: str
    ) -> InboundRecord:
        """An operator sends a dead letter round again; the reason is audited.

        A dead letter accepted without its text (``InboundRecord.unprocessable``)
        is refused with ``InvalidValue``: no turn can answer it, so it would
        dead-letter again at once. Checked here, so every front end refuses it.
        """
        if self._verify_scope is not None:
            scope = self._verify_scope(scope)
        if not isinstance(scope, PrincipalScope) or scope.authority != "operator":
            raise ScopeError("requeueing a dead letter needs an operator scope")
        why = bounded(audit_reason(reason), MAX_REASON)
        found = await self._store.record(inbound_id)
        # Its kind never changes, so this check cannot go stale before the requeue.
        if found is not None and found.state == "dead_lettered" and found.unprocessable:
            raise InvalidValue(
                f"inbound {found.inbound_id} cannot be requeued: the channel accepted it "
                "without its text (too long, or a NUL), so no turn can answer it and it "
                "would be dead-lettered again at once"
            )
        return await self._store.requeue(
            inbound_id, reason=why, actor=scope.principal_id, now=self._clock()
        )

    async def prune(self) -> PruneReport:
        """One retention pass: old completed payloads cleared, tombstones past the horizon gone."""
        now = self._clock()
        return await self._store.prune(
            payload_before=now - self.retention.payload_s,
            tombstone_before=now - self.retention.dedup_horizon_s,
            limit=self.retention.batch,
        )

    async def counts(self) -> tuple[ChannelCounts, ...]:
        return await self._store.counts()

    async def backlog(self) -> InboxBacklog:
        """Ready and dead-lettered inbounds in all: cheap to poll (``InboxStore.backlog``)."""
        return await self._store.backlog()

    async def records(
        self,
        *,
        state: InboundState | None = None,
        channel_instance_id: str | None = None,
        limit: int = 100,
    ) -> tuple[InboundRecord, ...]:
        return await self._store.records(
            state=state, channel_instance_id=channel_instance_id, limit=limit
        )

    async def record(self, inbound_id: str) -> InboundRecord | None:
        return await self._store.record(inbound_id)

    # -- internals ---------------------------------------------------------------------

    async def _owner_text(self) -> str:
        if self._owner is None:
            owner = await anyio.to_thread.run_sync(LeaseOwner.current, new_id("inbox"))
            self._owner = owner.encode()
        return self._owner

    def _holds(self, claimed: ClaimedInbound) -> bool:
        held = self._held.get(claimed.inbound_id)
        return held is not None and held[0] == claimed.claim_token

    def _forget(self, claimed: ClaimedInbound) -> None:
        if self._holds(claimed):
            del self._held[claimed.inbound_id]


def _checked_batch(envelopes: Sequence[InboundEnvelope]) -> tuple[InboundEnvelope, ...]:
    if type(envelopes) is not tuple and (  # a tuple skips the costlier ABC check
        isinstance(envelopes, InboundEnvelope | str | bytes) or not isinstance(envelopes, Sequence)
    ):
        raise InvalidValue("accept_batch takes a sequence of InboundEnvelope")
    batch = tuple(envelopes)
    if not 1 <= len(batch) <= MAX_BATCH:
        raise InvalidValue(f"a batch holds 1 to {MAX_BATCH} envelopes")
    for envelope in batch:
        if not isinstance(envelope, InboundEnvelope):
            raise InvalidValue("accept takes InboundEnvelope values")
        if envelope.channel_instance_id in RESERVED_INBOUND_CHANNELS:
            raise InvalidValue(
                f"channel instance {envelope.channel_instance_id!r} is reserved for the Host"
            )
    return batch


def _check_claim(claimed: ClaimedInbound) -> None:
    if not isinstance(claimed, ClaimedInbound):
        raise InvalidValue("a ClaimedInbound from claim() is required")
