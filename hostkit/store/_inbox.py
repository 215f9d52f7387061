"""The store's inbox group: durable inbound envelopes, dedup, claims, retries, dead letters.

``InboxStore`` is the storage half of the ChannelInbox seam. It holds no
policy: ``hostkit.inbox.ChannelInbox`` decides backoff, the maximum number of
attempts, lease length and retention, and passes the resulting times in.
Every method here is one atomic, conditional step, so the same rules hold for
workers in one event loop, in several processes on one database, and (later)
on several hosts sharing PostgreSQL:

- accept: every new envelope, its unique ``(channel_instance_id,
  platform_event_key)`` dedup key and the batch's source checkpoint commit in
  one transaction, or nothing does. A duplicate returns the first inbound id.
- claim: due rows (``ready`` past their next attempt, or ``claimed`` with an
  expired lease) come from an index on (channel instance, due time), one row
  per channel instance per round, channel instances least recently served
  first, so a noisy channel cannot starve a quiet one. Each claim gets a fresh
  fencing token and attempt + 1. A row whose lease expired after its last
  allowed attempt is dead-lettered (``attempts_exhausted``) instead.
- complete / fail / release / reserve_turn / extend are fenced by the claim
  token: only the current claimant changes the row.
- room: what a new inbound would find at accept now (the backlog counted up
  to its limit, the disk's free space), read only, for readiness.
- bring_forward: named ``ready`` rows due later than a time become due at
  it (a worker wakes the inbounds it deferred for a provider outage).
- expire_claims: the claims of owners the caller proved dead are due now, as
  if their leases had run out (token kept, attempt spent), so a restarted
  Host need not wait out the lease of a killed one. Terminal rows never change
  again except by an operator's audited ``requeue`` of a dead letter.

Times are epoch seconds chosen by the caller (``now``), so one clock drives
every adapter and tests can move it: by default the store's (``now()``,
``RuntimeStore.now``), the one every Host sharing the store reads.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from hostkit.errors import InvalidValue
from hostkit.store._checks import MAX_CLAIM_OWNERS
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
    is_count,
)

__all__ = [
    "ATTEMPTS_EXHAUSTED",
    "COMMAND_ALLOWANCE",
    "INBOX_FULL_RETRY_AFTER_S",
    "MAX_BRING_FORWARD",
    "MAX_CLAIM_BATCH",
    "MAX_INBOX_LIST",
    "InboxLimits",
    "InboxRoom",
    "InboxStore",
]

# Rows one claim call may lease; rows one list call returns.
MAX_CLAIM_BATCH = 64
# Inbounds one bring_forward call names (a worker wakes an outage's deferrals in one call).
MAX_BRING_FORWARD = 500
MAX_INBOX_LIST = 500
# The failure code of a row whose lease expired after its last allowed attempt
# (its worker died or hung every time: a poison message).
ATTEMPTS_EXHAUSTED = "attempts_exhausted"
# What a full inbox asks the sender to wait before it sends again (``InboxFull``).
INBOX_FULL_RETRY_AFTER_S = 5.0
# Commands (an approval's answer, ``approve K7QX2M``) past the backlog limit: each ends
# work rather than adding it (the answer to a turn waiting in that backlog), and is a few
# hundred bytes; this many beyond ``max_queued`` are still taken (and on a short disk,
# down to half its reserve).
COMMAND_ALLOWANCE = 1_000
# The largest backlog limit and disk reserve an ``InboxLimits`` takes.
MAX_QUEUED_LIMIT = 100_000_000
MAX_RESERVE_BYTES = 1 << 40


@dataclass(frozen=True, slots=True)
class InboxLimits:
    """When ``accept`` refuses new inbounds (``InboxFull``) instead of storing them.

    ``max_queued``: inbounds ``ready`` or ``claimed`` at most, so a flood
    waits at its sender instead of filling the disk. ``reserve_bytes``: free
    space kept on the database's disk (SQLite: turn results, delivery records
    and the WAL must still fit; on PostgreSQL the disk is the server's).
    """

    max_queued: int
    reserve_bytes: int = 0

    def __post_init__(self) -> None:
        if not is_count(self.max_queued, high=MAX_QUEUED_LIMIT):
            raise InvalidValue(f"max_queued must be a whole number from 1 to {MAX_QUEUED_LIMIT}")
        if not is_count(self.reserve_bytes, low=0, high=MAX_RESERVE_BYTES):
            raise InvalidValue(
                f"reserve_bytes must be a whole number from 0 to {MAX_RESERVE_BYTES}"
            )


@dataclass(frozen=True, slots=True)
class InboxRoom:
    """What a new inbound (not a command) would find at ``accept`` under ``limits`` now.

    ``queued``: inbounds ``ready`` or ``claimed``, counted up to ``limits.max_queued``
    (a look costs the limit at most, however long the backlog). ``free_bytes``: free
    on the database's disk, None where no reserve is kept (``reserve_bytes`` 0, a
    server's disk, the in-memory inbox).
    """

    limits: InboxLimits
    queued: int
    free_bytes: int | None = None

    @property
    def refusal(self) -> Literal["backlog", "disk"] | None:
        """Why ``accept`` would refuse that inbound (``InboxFull.reason``), or None: it fits."""
        if self.free_bytes is not None and self.free_bytes < self.limits.reserve_bytes:
            return "disk"
        return "backlog" if self.queued >= self.limits.max_queued else None


class InboxStore(ABC):
    """Durable inbox rows; every adapter (SQLite, in-memory, PostgreSQL) implements this.

    Bad input raises ``InvalidValue`` and writes nothing; a storage failure
    raises ``StoreError`` and commits nothing of the call (an accept that
    raised acknowledged nothing, and can be retried as is).
    """

    def now(self) -> float:
        """The store's clock (epoch seconds; ``RuntimeStore.now``): pass its time as ``now``."""
        return time.time()

    @abstractmethod
    async def accept(
        self,
        envelopes: Sequence[InboundEnvelope],
        checkpoint: SourceCheckpoint | None,
        *,
        now: float,
        limits: InboxLimits | None = None,
    ) -> tuple[InboxReceipt, ...]:
        """Store each new envelope (``ready``, due ``now``, attempt 0) and the checkpoint.

        One transaction for the whole batch (1..``MAX_BATCH`` envelopes). A
        key already stored, or repeated earlier in the same batch, gives
        ``duplicate`` with the first inbound id. The checkpoint (if any)
        replaces the source's cursor in the same transaction. Each new row
        reserves its turn-request id (``inbound:<inbound id>``) here.

        With ``limits``, a batch whose new envelopes would take the queued
        backlog past ``max_queued``, or any new envelope while the database's
        disk has less than ``reserve_bytes`` free, raises ``InboxFull`` and
        stores nothing; duplicates are answered first, so a batch of only
        duplicates is never refused.
        """

    @abstractmethod
    async def room(self, limits: InboxLimits) -> InboxRoom:
        """What a new inbound (not a command) would find at ``accept`` with ``limits`` now.

        Read only, for readiness while the inbox refuses: the queued backlog
        counted up to ``limits.max_queued``, and the disk's free space where
        ``accept`` keeps ``limits.reserve_bytes`` of it.
        """

    async def watch(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` whenever another process may have made an inbound ready; until cancelled.

        An adapter that can be told (PostgreSQL: LISTEN/NOTIFY) runs until the
        caller cancels it; one that cannot (SQLite, in memory) returns at once,
        and its workers find work by polling. Workers poll either way, so a
        missed notification delays an inbound by one poll interval at most.
        """
        return

    @abstractmethod
    async def checkpoint(self, source_id: str) -> str | None:
        """The cursor last committed for ``source_id``, or None."""

    @abstractmethod
    async def claim(
        self, *, owner: str, now: float, lease_s: float, limit: int, max_attempts: int
    ) -> tuple[ClaimedInbound, ...]:
        """Lease up to ``limit`` (1..``MAX_CLAIM_BATCH``) due rows, fairly across channels.

        Round-robin: each round takes the oldest due row of every channel
        instance that has one, least recently served instance first, until
        ``limit`` rows are leased or nothing is due. Each leased row gets a new
        claim token, ``attempt + 1``, ``lease_expires_at = now + lease_s`` and
        ``owner``. A due row whose previous claim's lease expired and whose
        attempt is already ``max_attempts`` is dead-lettered with
        ``ATTEMPTS_EXHAUSTED`` instead of being claimed.
        """

    @abstractmethod
    async def claimed_owners(
        self, *, after: str | None = None, limit: int = MAX_CLAIM_OWNERS
    ) -> tuple[str, ...]:
        """The distinct owners of ``claimed`` rows, in text order, after ``after``.

        At most ``limit`` (1..``MAX_CLAIM_OWNERS``); page on with the last one.
        """

    @abstractmethod
    async def expire_claims(self, owners: Sequence[str], *, now: float) -> int:
        """End the leases of ``owners``' claims now (1..``MAX_CLAIM_OWNERS`` owners).

        For a caller that proved those owners dead: each of their ``claimed``
        rows is due at ``now`` (if it was due later), exactly as if its lease
        had expired. The claim token stays, so the dead owner's late calls are
        fenced once the row is claimed again; the attempt stays spent, so a
        message that kills its Host every time still reaches ``max_attempts``
        and its dead letter. How many rows were made due.
        """

    @abstractmethod
    async def bring_forward(self, inbound_ids: Sequence[str], *, due_at: float, now: float) -> int:
        """Make those of ``inbound_ids`` (1..``MAX_BRING_FORWARD``) still ``ready`` and
        due later than ``due_at`` due at it; how many rows changed.

        For a worker that deferred them for a provider outage whose verdict came:
        due at the next probe, or, the provider answering again, at the opening's
        time, so they are claimed before anything accepted since, in their order.
        A claimed or ended row is not touched; unknown ids are skipped.
        """

    @abstractmethod
    async def reserve_turn(self, inbound_id: str, claim_token: str, *, now: float) -> bool:
        """Mark that this claim is about to start the turn; False if the claim is not current."""

    @abstractmethod
    async def extend(
        self, inbound_id: str, claim_token: str, *, now: float, lease_s: float
    ) -> float | None:
        """Move the current claim's lease to ``now + lease_s``; None if the claim is lost."""

    @abstractmethod
    async def complete(
        self, inbound_id: str, claim_token: str, result: InboundResult, *, now: float
    ) -> CompletionDecision:
        """End the row ``completed`` with ``result`` if ``claim_token`` holds it.

        Same token and same result again: ``completed`` (idempotent). Same
        token, different terminal payload, or a token that already failed this
        row: ``conflict``. Another token on a terminal row:
        ``already_terminal``. Any other token: ``stale_claim``. Only the first
        case changes the row.
        """

    @abstractmethod
    async def fail(
        self,
        inbound_id: str,
        claim_token: str,
        failure: InboundFailure,
        *,
        retry_at: float | None,
        now: float,
    ) -> RetryDecision:
        """Record ``failure``; ``ready`` again at ``retry_at``, or dead-lettered when None.

        Fenced and idempotent like ``complete``: the same token and failure
        again returns the first decision; a different one is ``conflict``;
        another token gets ``already_terminal`` or ``stale_claim``.
        """

    @abstractmethod
    async def release(
        self, inbound_id: str, claim_token: str, *, now: float, due_at: float | None = None
    ) -> bool:
        """Give a claim back without a result: ``ready`` at ``due_at`` (now when None),
        the attempt not spent. A shutdown gives it back due now; a worker defers an
        inbound whose earlier turn still runs under a live holder until later."""

    @abstractmethod
    async def requeue(
        self, inbound_id: str, *, reason: str, actor: str, now: float
    ) -> InboundRecord:
        """An operator's explicit retry of a dead letter: ``ready`` now, attempt 0.

        Writes an ``inbox.requeue`` audit row (actor, reason) in the same
        transaction. ``NotFoundOrUnauthorized`` for an unknown id;
        ``InvalidValue`` when the row is not dead-lettered.
        """

    @abstractmethod
    async def prune(
        self, *, payload_before: float, tombstone_before: float, limit: int
    ) -> PruneReport:
        """Retention, at most ``limit`` rows of each kind per call.

        Completed rows last updated before ``payload_before`` lose their
        payload, payload ref, artifacts and metadata (the row stays as the
        dedup tombstone). Completed rows last updated before
        ``tombstone_before`` are deleted, and so are dead letters the channel
        accepted without their text (kind and failure ``unprocessable``:
        nothing to requeue). Ready, claimed and other dead-lettered rows are never pruned.
        """

    @abstractmethod
    async def counts(self) -> tuple[ChannelCounts, ...]:
        """Rows per state for every channel instance, ordered by channel instance id.

        Counts the live rows from their partial index and reads the finished ones'
        tallies, kept with every change (schema v28): its cost never follows the
        completed history.
        """

    @abstractmethod
    async def backlog(self) -> InboxBacklog:
        """The ``ready`` and ``dead_lettered`` rows of every channel instance.

        What a live status polls: read from the partial indexes of those
        states, so its cost follows them and never the completed history.
        """

    @abstractmethod
    async def records(
        self,
        *,
        state: InboundState | None = None,
        channel_instance_id: str | None = None,
        limit: int = 100,
    ) -> tuple[InboundRecord, ...]:
        """Rows (newest accepted first), optionally of one state and channel; at most ``limit``."""

    @abstractmethod
    async def record(self, inbound_id: str) -> InboundRecord | None:
        """One row as operators see it, or None."""
