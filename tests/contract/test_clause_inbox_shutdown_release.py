"""ChannelInbox clause: worker shutdown releases its leases without spending an attempt.

``release`` (one claim) and ``release_all`` (every claim this inbox still
holds) make the inbound due at once, with its attempt count as it was before
the claim, and fence the released token out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.errors import StoreError
from hostkit.inbox import RetryPolicy
from hostkit.types import InboundResult
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=2, lease_s=600.0)


async def test_shutdown_release_makes_it_due_at_once_without_an_attempt(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        sut.clock.advance(5)
        assert await sut.inbox.release(claimed)
        assert sut.inbox.held == 0
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert (record.state, record.attempt, record.due_at) == ("ready", 0, sut.clock.now)
        again = await sut.another(owner="worker.b", policy=POLICY).claim()
        assert again is not None
        assert again.attempt == 1
        # The released token is fenced out.
        assert not await sut.inbox.release(claimed)
        stale = await sut.inbox.complete(claimed, InboundResult("ignored"))
        assert stale.disposition == "stale_claim"


async def test_shutdown_release_all_gives_back_every_held_claim(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept_batch([envelope(f"evt-{i}") for i in range(4)])
        claimed = await sut.inbox.claim_batch(4)
        assert len(claimed) == 4
        await sut.inbox.complete(claimed[0], InboundResult("ignored"))
        assert sut.inbox.held == 3
        assert await sut.inbox.release_all() == 3
        assert sut.inbox.held == 0
        (counts,) = await sut.inbox.counts()
        assert (counts.ready, counts.claimed, counts.completed) == (3, 0, 1)
        # Released many times over, a message never runs out of attempts.
        for _ in range(5):
            again = await sut.inbox.claim_batch(3)
            assert [c.attempt for c in again] == [1, 1, 1]
            assert await sut.inbox.release_all() == 3
        dead = await sut.inbox.records(state="dead_lettered")
        assert dead == ()


async def test_shutdown_release_all_skips_claims_lost_meanwhile(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        sut.clock.advance(601)
        other = sut.another(owner="worker.b", policy=POLICY)
        taken = await other.claim()
        assert taken is not None
        assert await sut.inbox.release_all() == 0
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert (record.state, record.attempt) == ("claimed", 2)


async def test_a_claim_whose_end_could_not_be_recorded_is_not_held_past_its_lease(
    adapter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It used to stay held for good: a worker gives such a claim up (its lease expires and
    # the inbound comes back, or is dead-lettered), so a long-running inbox kept one entry
    # per inbound whose end a store outage lost.
    async def down(*args: object, **kwargs: object) -> object:
        raise StoreError("disk I/O error", retryable=True)

    once = RetryPolicy(max_attempts=1, lease_s=600.0)
    async with open_inbox(adapter, tmp_path, policy=once) as sut:
        await sut.inbox.accept_batch([envelope(f"evt-{i}") for i in range(20)])
        claimed = await sut.inbox.claim_batch(20)
        assert len(claimed) == 20
        with monkeypatch.context() as outage:
            outage.setattr(sut.store, "complete", down)
            for item in claimed:
                with pytest.raises(StoreError):
                    await sut.inbox.complete(item, InboundResult("ignored"))
        assert sut.inbox.held == 20  # still this inbox's while their leases run
        sut.clock.advance(601)
        assert await sut.inbox.claim_batch(20) == ()  # out of attempts: dead-lettered
        assert sut.inbox.held == 0
        assert len(await sut.inbox.records(state="dead_lettered")) == 20


async def test_a_lapsed_claim_renewed_after_a_later_claim_is_still_released(
    adapter: str, tmp_path: Path
) -> None:
    # A renewal that failed until the lease lapsed, then succeeded (nobody had claimed it
    # meanwhile): the claim is this inbox's again, and shutdown gives it back unspent.
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        first = await sut.inbox.accept(envelope("evt-1"))
        await sut.inbox.accept(envelope("evt-2"))
        lapsing = await sut.inbox.claim()
        assert lapsing is not None
        assert lapsing.inbound_id == first.inbound_id
        sut.clock.advance(601)
        other = await sut.inbox.claim()  # forgets the lapsed claim
        assert other is not None
        assert other.inbound_id != first.inbound_id
        assert sut.inbox.held == 1
        renewed = await sut.inbox.extend(lapsing)
        assert renewed.lease_expires_at > sut.clock.now
        assert sut.inbox.held == 2
        assert await sut.inbox.release_all() == 2
        record = await sut.inbox.record(first.inbound_id)
        assert record is not None
        assert (record.state, record.attempt) == ("ready", 0)
