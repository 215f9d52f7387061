"""ChannelInbox clause: claims hold a lease and a fencing token; only the current claimant ends it.

A claim gets a fresh token, attempt + 1 and a lease. When the lease expires
another worker may reclaim the inbound; from then on the first worker's
token is stale: its complete/fail is refused with ``stale_claim`` and
changes nothing, and its extend/reserve raise ``StaleClaim``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.errors import StaleClaim
from hostkit.inbox import RetryPolicy
from hostkit.types import InboundFailure, InboundResult
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=5, lease_s=30.0)


async def test_claim_lease_and_fencing_token(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        assert claimed.inbound_id == receipt.inbound_id
        assert claimed.attempt == 1
        assert claimed.lease_expires_at == sut.clock.now + 30.0
        assert claimed.claim_token
        assert sut.inbox.held == 1
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert (record.state, record.attempt, record.due_at) == (
            "claimed",
            1,
            claimed.lease_expires_at,
        )
        # A claimed row is not due again while its lease holds.
        other = sut.another(owner="worker.b", policy=POLICY)
        assert await other.claim() is None
        sut.clock.advance(29)
        assert await other.claim() is None


async def test_claim_stale_complete_after_a_reclaim_is_refused(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        first = await sut.inbox.claim()
        assert first is not None
        sut.clock.advance(31)
        other = sut.another(owner="worker.b", policy=POLICY)
        second = await other.claim()
        assert second is not None
        assert second.inbound_id == receipt.inbound_id
        assert second.claim_token != first.claim_token
        assert second.attempt == 2
        before = await sut.inbox.record(receipt.inbound_id)
        stale = await sut.inbox.complete(first, InboundResult("ignored"))
        assert (stale.disposition, stale.state) == ("stale_claim", "claimed")
        failed = await sut.inbox.fail(first, InboundFailure("transient", "boom"))
        assert (failed.disposition, failed.state) == ("stale_claim", "claimed")
        assert await sut.inbox.record(receipt.inbound_id) == before
        assert sut.inbox.held == 0
        with pytest.raises(StaleClaim):
            await sut.inbox.extend(first)
        with pytest.raises(StaleClaim):
            await sut.inbox.reserve_turn(first)
        assert not await sut.inbox.release(first)
        assert await sut.inbox.record(receipt.inbound_id) == before
        # The current claimant still ends it.
        done = await other.complete(second, InboundResult("command", outcome="ok"))
        assert (done.disposition, done.state) == ("completed", "completed")


async def test_claim_expired_but_not_reclaimed_may_still_complete(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        sut.clock.advance(45)
        extended = await sut.inbox.extend(claimed)
        assert extended.lease_expires_at == sut.clock.now + 30.0
        sut.clock.advance(40)
        done = await sut.inbox.complete(claimed, InboundResult("ignored"))
        assert done.disposition == "completed"
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert (record.state, record.attempt) == ("completed", 1)


async def test_claim_extend_keeps_the_lease_from_a_reclaim(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        other = sut.another(owner="worker.b", policy=POLICY)
        for _ in range(3):
            sut.clock.advance(20)
            claimed = await sut.inbox.extend(claimed)
            assert await other.claim() is None
        assert claimed.attempt == 1


async def test_claim_a_forged_token_is_a_stale_claim(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        forged = type(claimed)(
            inbound_id=claimed.inbound_id,
            envelope=claimed.envelope,
            claim_token="claim_forged",
            attempt=claimed.attempt,
            lease_expires_at=claimed.lease_expires_at,
            turn_request_id=claimed.turn_request_id,
        )
        decision = await sut.inbox.complete(forged, InboundResult("ignored"))
        assert decision.disposition == "stale_claim"
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert record.state == "claimed"
