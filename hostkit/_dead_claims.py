"""Taking over the queue claims a provably dead owner left (inbox and delivery claims alike).

A Host killed mid-claim (SIGKILL, OOM) leaves its claims held until their
leases run out. Its successor, or a peer serving the same database, asks
the store which owners hold claims, proves some of them dead on this
machine (``owner_is_dead``: the pid is gone or now names another process)
and makes their claims due at once, as a turn lease is freed. A live owner,
one on another machine, or text that names no process keeps its lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import anyio

from hostkit.store import MAX_CLAIM_OWNERS, owner_is_dead

__all__ = ["DEAD_CLAIMS_EVERY_S", "ClaimOwners", "expire_dead_claims"]

# How often a serving worker looks again for claims a provably dead owner left: a peer
# on this machine killed while this one serves (several daemons on one database) frees
# its claims within this, not at the end of their leases.
DEAD_CLAIMS_EVERY_S = 10.0


class ClaimOwners(Protocol):
    """The two steps of a store group whose claims name their owner."""

    async def claimed_owners(
        self, *, after: str | None = None, limit: int = MAX_CLAIM_OWNERS
    ) -> tuple[str, ...]: ...

    async def expire_claims(self, owners: Sequence[str], *, now: float) -> int: ...


async def expire_dead_claims(store: ClaimOwners, *, now: float) -> int:
    """Make the claims of every provably dead owner due at ``now``; how many were."""
    expired = 0
    after: str | None = None
    while True:
        owners = await store.claimed_owners(after=after, limit=MAX_CLAIM_OWNERS)
        if not owners:
            return expired
        dead = await anyio.to_thread.run_sync(_dead_among, owners)
        if dead:
            expired += await store.expire_claims(dead, now=now)
        if len(owners) < MAX_CLAIM_OWNERS:
            return expired
        after = owners[-1]


def _dead_among(owners: Sequence[str]) -> tuple[str, ...]:
    """The provably dead ones of ``owners`` (reads ``/proc``: run off the event loop)."""
    return tuple(owner for owner in owners if owner_is_dead(owner))
