"""Whether an inbox refuses new inbounds now, for readiness, without a store call per probe.

A serve whose inbox is full answers every new webhook 503: readiness must say
so, or a load balancer keeps sending here. The accepts tell when refusing
starts, and an inbound stored proves room (nothing is read while they are
stored); while a refusal lasts, the backlog and the disk are looked at again at
most every ``RECHECK_S`` (probes come many times a second, and each look reads
up to ``max_queued`` index entries), so readiness comes back once the workers
drained the backlog or space returned, though no accept is tried (a load
balancer sends none to a Host not ready). With no accept to tell, they are
looked at on the first probe and then at most every ``IDLE_RECHECK_S``: a Host
started over a full backlog, or one whose PostgreSQL inbox other Hosts filled,
is not ready before its first refusal.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence

from hostkit.store import InboxLimits, InboxRoom
from hostkit.types import InboundEnvelope, InboxReceipt

__all__ = ["IDLE_RECHECK_S", "RECHECK_S", "Admission"]

# While the inbox refuses, how long one look at its backlog and disk answers readiness.
RECHECK_S = 1.0
# While it does not and no inbound is stored, how long one look (or a stored one) does.
IDLE_RECHECK_S = 5.0
_MIB = 1 << 20


class Admission:
    """What the accepts and the last look found (monotonic clock: no wall steps)."""

    def __init__(self) -> None:
        self._refusing: str | None = None
        self._looked_at = -math.inf
        # Moves with every change the accepts make: a look that began before one is stale.
        self._changes = 0

    def refused(self, reason: str, limits: InboxLimits) -> None:
        """An accept was refused (``InboxFull.reason``); a new streak's next check looks.

        Every refusal is a change: a look begun before it (which may have found room
        another producer then took) must not end the streak.
        """
        self._changes += 1
        if self._refusing is None:
            self._refusing = _words(reason, limits)
            self._looked_at = -math.inf

    def stored(self, batch: Sequence[InboundEnvelope], receipts: Sequence[InboxReceipt]) -> None:
        """An accept returned: one new inbound that is not a command proves there is room
        (a command passes within ``COMMAND_ALLOWANCE`` of a full backlog, a duplicate
        needs none): as good as a look, and a look begun before it is stale."""
        if any(
            receipt.disposition == "accepted" and envelope.kind != "command"
            for envelope, receipt in zip(batch, receipts, strict=True)
        ):
            self._refusing = None
            self._changes += 1
            self._looked_at = time.monotonic()

    async def check(self, look: Callable[[], Awaitable[InboxRoom]]) -> str | None:
        """``refusing``, looked at again (``look``) if the last look (or stored inbound) is
        older than ``RECHECK_S`` while refusing, ``IDLE_RECHECK_S`` while not. Concurrent
        checks share one look: the others answer the last one."""
        now = time.monotonic()
        every = IDLE_RECHECK_S if self._refusing is None else RECHECK_S
        if now - self._looked_at < every:
            return self._refusing
        self._looked_at, changes = now, self._changes
        room = await look()
        if changes == self._changes:
            self._refusing = None if room.refusal is None else _described(room)
        return self._refusing


def _words(reason: str, limits: InboxLimits) -> str:
    """A refusal before any look: what the accept said (a batch may have been refused
    with fewer than ``max_queued`` queued)."""
    if reason == "disk":
        return f"disk reserve: under {_size(limits.reserve_bytes)} free"
    return f"inbox full (max {limits.max_queued} queued)"


def _described(room: InboxRoom) -> str:
    if room.refusal == "disk" and room.free_bytes is not None:
        kept = _size(room.limits.reserve_bytes)
        return f"disk reserve: {_size(room.free_bytes)} free (keeps {kept})"
    return f"inbox full: {room.queued} queued (max {room.limits.max_queued})"


def _size(size: int) -> str:
    """Whole MiB, rounded down (``[serve] inbox_disk_reserve_mb`` is in MiB); bytes below one."""
    return f"{size // _MIB} MiB" if size >= _MIB else f"{size} bytes"
