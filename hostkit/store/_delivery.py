"""The store's delivery group: the outbox as the DeliveryRuntime drains it.

Outbox rows are written by ``TurnStore.finish`` (one transaction with the
terminal turn) and, for a channel command that ran no turn, by ``reply``
(one per command inbound). This group leases them to delivery workers and records
how each attempt went. Like the inbox group it holds no policy: the
``DeliveryRuntime`` decides backoff, the maximum number of attempts and
the lease length and passes the resulting times in. Every method is one
atomic, conditional step, so the same rules hold for workers in one event
loop, in several processes on one database, and (later) on several hosts:

- claim: due rows (``pending`` past ``next_attempt_at``, or ``sending``
  with an expired lease) oldest first, each with a fresh fencing token,
  attempts + 1 and its owner. A ``sending`` row whose lease expired after
  its last allowed attempt is dead-lettered (``attempts_exhausted``) instead
  of returned.
- expire_claims: the claims of owners the caller proved dead are due now, as
  if their leases had run out (token kept, attempt spent), so a restarted
  Host need not wait out the leases of a killed one (as for inbox claims).
- delivered / failed / extend / release are fenced by the claim token: a
  stale holder's call raises ``StaleClaim`` and changes nothing. A repeat of
  the same ``delivered`` by the same token is a no-op that returns the row.
- retry: an operator's audited move of a dead letter back to pending.
- prune: retention of delivered intents, as the inbox prunes completed inbounds:
  their payload (the answer's text) goes after the payload retention, the row
  after the tombstone horizon. Pending, sending and dead-lettered intents stay.

Times are epoch seconds chosen by the caller (``now``), on the store's clock
(``now()``, ``RuntimeStore.now``): the one new intents are due by, and the
one every Host sharing the store reads.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from hostkit.store._checks import MAX_CLAIM_OWNERS
from hostkit.types import (
    ClaimedDelivery,
    DeliveryCounts,
    DeliveryFailure,
    DeliveryIntent,
    DeliveryStatus,
    PruneReport,
)

__all__ = [
    "DELIVERY_ATTEMPTS_EXHAUSTED",
    "MAX_DELIVERY_CLAIM",
    "MAX_DELIVERY_LIST",
    "MAX_REPLY_CHARS",
    "PRUNED_PAYLOAD",
    "DeliveryStore",
]

MAX_DELIVERY_CLAIM = 64
MAX_DELIVERY_LIST = 1_000
# A command's reply is one sentence of the Host's, never a model's answer.
MAX_REPLY_CHARS = 1_000
DELIVERY_ATTEMPTS_EXHAUSTED = "attempts_exhausted"
# A pruned (or erased) intent's payload: every payload written holds its text or prompt,
# so an empty one is never a real answer (the column is NOT NULL).
PRUNED_PAYLOAD = "{}"


class DeliveryStore(ABC):
    """Outbox leases and outcomes; every adapter implements this group.

    Bad input (a non-positive limit, a time that is not finite, an empty
    reason) raises ``InvalidValue`` and writes nothing.
    """

    def now(self) -> float:
        """The store's clock (epoch seconds; ``RuntimeStore.now``): pass its time as ``now``."""
        return time.time()

    @abstractmethod
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
        """Lease up to ``limit`` due intents (oldest first) to ``owner`` until ``now + lease_s``.

        ``owner`` is the claimant's ``LeaseOwner`` text, so a successor can
        tell a dead claimant's claims (``claimed_owners``, ``expire_claims``).
        ``per_channel`` (1..``MAX_DELIVERY_CLAIM``) bounds the intents of one
        channel alias the claimant has out, counting ``sending`` (its sends
        still under way, per alias): an alias already at the bound is skipped
        in the query, never claimed and handed back, and the next due intents
        of other aliases are claimed instead. ``holding`` (at most
        ``MAX_DELIVERY_CLAIM`` intent ids) are the claimant's own sends under
        way: never claimed again by it, whatever their lease says at ``now``
        (it renews them; a clock that stepped must not hand it its own send).
        """

    @abstractmethod
    async def claimed_owners(
        self, *, after: str | None = None, limit: int = MAX_CLAIM_OWNERS
    ) -> tuple[str, ...]:
        """The distinct owners of ``sending`` intents, in text order, after ``after``.

        At most ``limit`` (1..``MAX_CLAIM_OWNERS``); page on with the last one.
        """

    @abstractmethod
    async def expire_claims(self, owners: Sequence[str], *, now: float) -> int:
        """End the leases of ``owners``' claims now (1..``MAX_CLAIM_OWNERS`` owners).

        For a caller that proved those owners dead: each of their ``sending``
        intents is due at ``now`` (if it was due later), exactly as if its
        lease had expired. The claim token stays, so the dead owner's late
        calls are fenced once the intent is claimed again; the attempt stays
        spent, so an intent whose send kills its Host every time still reaches
        ``max_attempts`` and its dead letter. How many intents were made due.
        """

    @abstractmethod
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
        """The reply to a command inbound, pending and due now.

        One per inbound: its intent id is derived from ``inbound_id``, so the
        same command handled again (a crash before its inbound was recorded)
        returns the intent written the first time and writes nothing.
        ``text`` is at most ``MAX_REPLY_CHARS`` characters. ``press`` makes it
        the answer to a button press (payload ``{"press_answer": {"alert":
        alert}}``), which the channel tells the presser alone; its route's
        reply target must then say who pressed.
        """

    @abstractmethod
    async def delivered(self, claim: ClaimedDelivery, *, now: float) -> DeliveryIntent:
        """The channel accepted it: ``delivered`` (terminal). ``StaleClaim`` if not the holder."""

    @abstractmethod
    async def failed(
        self,
        claim: ClaimedDelivery,
        failure: DeliveryFailure,
        *,
        retry_at: float | None,
        now: float,
    ) -> DeliveryIntent:
        """Record a failed attempt: ``pending`` until ``retry_at``, or ``dead_lettered``
        when ``retry_at`` is None. ``StaleClaim`` if not the holder."""

    @abstractmethod
    async def extend(
        self, claim: ClaimedDelivery, *, lease_s: float, now: float
    ) -> ClaimedDelivery:
        """Renew the lease (a slow channel). ``StaleClaim`` if not the holder."""

    @abstractmethod
    async def release(self, claim: ClaimedDelivery, *, now: float) -> None:
        """Give the intent back unsent (shutdown): pending, due now, attempt not spent.

        A no-op when the claim is no longer held."""

    @abstractmethod
    async def retry(self, intent_id: str, *, reason: str, actor: str, now: float) -> DeliveryIntent:
        """An operator's explicit retry of a dead letter: pending now, attempts 0, requeues+1.

        Writes a ``delivery.retry`` audit row (actor, reason) in the same
        transaction. ``NotFoundOrUnauthorized`` for an unknown id;
        ``InvalidValue`` when the intent is not dead-lettered.
        """

    @abstractmethod
    async def prune(
        self, *, payload_before: float, tombstone_before: float, limit: int
    ) -> PruneReport:
        """Retention of delivered intents, at most ``limit`` rows of each kind per call.

        Delivered intents delivered before ``payload_before`` lose their payload
        (``DeliveryIntent.payload_pruned``; the row stays, id, route and outcome);
        those delivered before ``tombstone_before`` are deleted. Pending,
        sending and dead-lettered intents (an operator may retry one) are never
        pruned.
        """

    @abstractmethod
    async def intents(
        self, *, status: DeliveryStatus | None = None, limit: int = 100
    ) -> tuple[DeliveryIntent, ...]:
        """Intents newest first, optionally of one status; at most ``limit``."""

    @abstractmethod
    async def intent(self, intent_id: str) -> DeliveryIntent | None:
        """One intent as operators see it, or None."""

    @abstractmethod
    async def counts(self) -> DeliveryCounts:
        """Intents per status: the due ones counted from their partial index, the finished
        ones' tallies read, kept with every change (schema v28), never the history."""

    @abstractmethod
    async def dead_letters(self) -> int:
        """How many intents are dead-lettered: what a live status polls.

        Read from the index of dead letters alone, so its cost never follows
        the delivered history.
        """

    @abstractmethod
    async def next_due(self) -> float | None:
        """The earliest time an intent becomes due (the idle worker's sleep), or None."""
