"""The retention sweeper: ``ChannelInbox.prune`` on a timer, for a serving Host.

Completed inbounds lose their payload after ``RetentionPolicy.payload_s`` and
their dedup tombstone after the horizon only when something prunes: a
daemon that never did would keep every message's text forever. Each round
runs bounded passes until one removes less than a batch (at most
``MAX_PASSES``), each under a deadline; a failed round is logged and the
next one tries again. Given the ``outbox``, it prunes delivered intents the
same way with the inbox's ``RetentionPolicy`` (an answer's text is kept no
longer than the message it answered). A round then runs the Host's other
retention jobs the same way, when given them (``reclaim``: attachments no
turn took; ``artifacts``: terminal output files past their retention).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from hostkit.errors import HostkitError, InvalidValue
from hostkit.inbox._inbox import ChannelInbox
from hostkit.store import RECLAIM_BATCH, DeliveryStore
from hostkit.types import PruneReport, is_seconds

__all__ = ["Reclaim", "RetentionSweeper"]

_log = logging.getLogger("hostkit.inbox")

# Passes per round: a backlog larger than this many batches waits for the next round.
MAX_PASSES = 20
# One pass is one bounded transaction; past this it is counted as failed.
PASS_TIMEOUT_S = 60.0

# One bounded pass of another retention job: removes at most its argument's rows, says how
# many it did.
Reclaim = Callable[[int], Awaitable[int]]


class RetentionSweeper:
    """``await sweeper.run()`` prunes ``inbox`` now and every ``interval_s``; ``stop()`` ends it."""

    def __init__(
        self,
        inbox: ChannelInbox,
        *,
        interval_s: float,
        reclaim: Reclaim | None = None,
        artifacts: Reclaim | None = None,
        outbox: DeliveryStore | None = None,
    ) -> None:
        if not is_seconds(interval_s):
            raise InvalidValue("interval_s must be a positive number of seconds")
        self._inbox = inbox
        self._interval_s = interval_s
        self._reclaim = reclaim
        self._artifacts = artifacts
        self._outbox = outbox
        # Delivered intents whose payload was cleared, and deleted, since the start.
        self.outbox_cleared = 0
        self.outbox_removed = 0
        self.reclaimed = 0
        self.artifacts_removed = 0
        self._stopped = anyio.Event()
        self._round: anyio.CancelScope | None = None
        self.rounds = 0

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while not self._stopped.is_set():
            # A stop cancels the round in progress: each pass is one transaction, and a
            # shutdown's drain deadline belongs to the turns in flight, not to pruning.
            with anyio.CancelScope() as self._round:
                await self.sweep()
            self._round = None
            with anyio.move_on_after(self._interval_s):
                await self._stopped.wait()

    async def sweep(self) -> tuple[int, int]:
        """One round: (payloads cleared, tombstones removed); a failure is logged, not raised."""
        cleared, removed = await self._prune_round(self._inbox.prune, "inbox")
        if cleared or removed:
            _log.info(
                "inbox retention: %d payloads cleared, %d dedup tombstones removed",
                cleared,
                removed,
            )
        if self._outbox is not None:
            sent, gone = await self._prune_round(self._prune_outbox, "outbox")
            self.outbox_cleared += sent
            self.outbox_removed += gone
            if sent or gone:
                _log.info(
                    "outbox retention: %d delivered payloads cleared, %d delivered intents removed",
                    sent,
                    gone,
                )
        self.reclaimed += await self._job_round(self._reclaim, "attachments no turn took")
        self.artifacts_removed += await self._job_round(
            self._artifacts, "terminal output files past their retention"
        )
        self.rounds += 1
        return cleared, removed

    async def _prune_outbox(self) -> PruneReport:
        """One pass over delivered intents, on the inbox's retention and the store's clock."""
        assert self._outbox is not None  # only called when given
        policy, now = self._inbox.retention, self._outbox.now()
        return await self._outbox.prune(
            payload_before=now - policy.payload_s,
            tombstone_before=now - policy.dedup_horizon_s,
            limit=policy.batch,
        )

    async def _prune_round(
        self, prune: Callable[[], Awaitable[PruneReport]], what: str
    ) -> tuple[int, int]:
        """``prune``'s passes until one prunes less than a batch; a failure is logged."""
        cleared = removed = 0
        try:
            for _ in range(MAX_PASSES):
                with anyio.fail_after(PASS_TIMEOUT_S):
                    report = await prune()
                cleared += report.payloads_cleared
                removed += report.tombstones_removed
                batch = self._inbox.retention.batch
                if report.payloads_cleared < batch and report.tombstones_removed < batch:
                    break
        except (HostkitError, TimeoutError) as exc:
            reason = exc.message if isinstance(exc, HostkitError) else "a pass timed out"
            _log.warning("%s retention: pruning failed, retrying next round: %s", what, reason)
        return cleared, removed

    async def _job_round(self, job: Reclaim | None, what: str) -> int:
        """``job``'s passes until one removes less than a batch; a failure is logged."""
        if job is None:
            return 0
        removed = 0
        try:
            for _ in range(MAX_PASSES):
                with anyio.fail_after(PASS_TIMEOUT_S):
                    done = await job(RECLAIM_BATCH)
                removed += done
                if done < RECLAIM_BATCH:
                    break
        except (HostkitError, TimeoutError) as exc:
            reason = exc.message if isinstance(exc, HostkitError) else "a pass timed out"
            _log.warning("retention: removing %s failed, retrying next round: %s", what, reason)
        if removed:
            _log.info("retention: %d %s were removed", removed, what)
        return removed

    def stop(self) -> None:
        self._stopped.set()
        if self._round is not None:
            self._round.cancel()
