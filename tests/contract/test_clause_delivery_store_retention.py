"""DeliveryStore clause: delivered intents are pruned as completed inbounds are.

A delivered intent loses its payload (the answer's text) after the payload retention and its
row after the tombstone horizon, at most ``limit`` of each per pass; pending, sending and
dead-lettered intents are never pruned. The serving Host's ``RetentionSweeper`` runs it with
the inbox's ``RetentionPolicy``, and a pruned payload shows as pruned.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from hostkit.errors import DeliveryInProgress
from hostkit.inbox import ChannelInbox, RetentionPolicy, RetentionSweeper
from hostkit.types import ClaimedDelivery, DeliveryFailure
from tests.contract._delivery_adapters import ADAPTERS, DeliveryUnderTest, open_delivery

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

DAY_S = 86_400.0


async def deliver_all(sut: DeliveryUnderTest, n: int, *, at: float) -> tuple[str, ...]:
    """Seed ``n`` intents and mark each delivered at ``at``; their ids, oldest first."""
    ids = await sut.seed(n)
    claims = await sut.delivery.claim(
        owner="suite", limit=n, lease_s=30.0, max_attempts=5, now=sut.later()
    )
    for claim in claims:
        await sut.delivery.delivered(claim, now=at)
    return ids


async def test_delivered_payloads_go_after_the_retention_rows_after_the_horizon(
    adapter: str, tmp_path: Path
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        now = sut.later()
        first, second = await deliver_all(sut, 2, at=now)
        (dead,) = await sut.seed(1)
        (claim,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=5, now=sut.later()
        )
        await sut.delivery.failed(
            claim, DeliveryFailure("permanent", "http_401"), retry_at=None, now=now
        )
        (pending,) = await sut.seed(1)

        report = await sut.delivery.prune(
            payload_before=now + 1, tombstone_before=now - DAY_S, limit=1
        )
        assert (report.payloads_cleared, report.tombstones_removed) == (1, 0)
        report = await sut.delivery.prune(
            payload_before=now + 1, tombstone_before=now - DAY_S, limit=10
        )
        assert (report.payloads_cleared, report.tombstones_removed) == (1, 0)
        pruned = await sut.delivery.intent(first)
        assert pruned is not None
        assert (pruned.status, pruned.payload, pruned.payload_pruned) == ("delivered", {}, True)
        for kept in (dead, pending):
            intent = await sut.delivery.intent(kept)
            assert intent is not None
            assert (intent.payload_pruned, "text" in intent.payload) == (False, True)

        report = await sut.delivery.prune(
            payload_before=now + 1, tombstone_before=now + 1, limit=10
        )
        assert (report.payloads_cleared, report.tombstones_removed) == (0, 2)
        remaining = {intent.intent_id for intent in await sut.delivery.intents()}
    assert remaining == {dead, pending}
    assert second not in remaining


async def test_the_sweeper_prunes_the_outbox_with_the_inbox_retention(
    adapter: str, tmp_path: Path
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        now = sut.later()
        (old,) = await deliver_all(sut, 1, at=now - 2 * DAY_S)
        (recent,) = await deliver_all(sut, 1, at=now)
        policy = RetentionPolicy(payload_s=DAY_S, dedup_horizon_s=7 * DAY_S)
        inbox = ChannelInbox.on_store(sut.store, retention=policy)
        sweeper = RetentionSweeper(inbox, interval_s=3_600, outbox=sut.delivery)
        await sweeper.sweep()
        assert (sweeper.outbox_cleared, sweeper.outbox_removed) == (1, 0)
        swept = await sut.delivery.intent(old)
        kept = await sut.delivery.intent(recent)
    assert swept is not None
    assert swept.payload_pruned
    assert kept is not None
    assert not kept.payload_pruned
    assert kept.payload


async def test_an_erased_sessions_intents_lose_their_payload_and_are_never_sent(
    adapter: str, tmp_path: Path
) -> None:
    """Never-delivered intents go with the erase (a pending one would send an empty message,
    a dead letter could never be retried nor cleared from the serve's count); a delivered
    one stays, without its payload; one being sent refuses the erase until the send ends."""
    async with open_delivery(adapter, tmp_path) as sut:
        session_id = await sut.store.create_session(owner_kind="system", principal_id="suite")
        sent, dead, pending = await sut.seed(3, session=session_id)

        async def claim_one() -> ClaimedDelivery:
            (claim,) = await sut.delivery.claim(
                owner="suite", limit=1, lease_s=30.0, max_attempts=5, now=sut.later()
            )
            return claim

        await sut.delivery.delivered(await claim_one(), now=sut.later())
        await sut.delivery.failed(
            await claim_one(),
            DeliveryFailure("permanent", "http_401"),
            retry_at=None,
            now=sut.later(),
        )
        sending = await claim_one()
        with pytest.raises(DeliveryInProgress):
            await sut.store.erase_session(sut.operator, session_id, "asked to")
        assert (await sut.delivery.intent(sending.intent.intent_id)) is not None
        await sut.delivery.failed(
            sending, DeliveryFailure("transient", "http_503"), retry_at=sut.later(), now=sut.later()
        )
        erased = await sut.store.erase_session(sut.operator, session_id, "asked to")
        assert erased.intents == 3
        assert await sut.delivery.intent(dead) is None
        assert await sut.delivery.intent(pending) is None
        row = await sut.delivery.intent(sent)
        assert row is not None
        assert (row.status, row.payload, row.payload_pruned) == ("delivered", {}, True)
        assert await sut.delivery.next_due() is None
        assert await sut.delivery.dead_letters() == 0


async def test_a_send_whose_claim_lapsed_does_not_keep_the_erase_waiting(
    adapter: str, tmp_path: Path
) -> None:
    """A sender that died leaves its intent 'sending' until a delivery worker claims it
    again, which may never come (no serve running): only a live claim holds the erase."""
    async with open_delivery(adapter, tmp_path) as sut:
        session_id = await sut.store.create_session(owner_kind="system", principal_id="suite")
        (stuck,) = await sut.seed(1, session=session_id)
        due = sut.later()
        (claim,) = await sut.delivery.claim(
            owner="gone", limit=1, lease_s=1.0, max_attempts=5, now=due
        )
        assert claim.intent.intent_id == stuck
        await anyio.sleep(max(0.0, due + 1.2 - time.time()))  # its lease ends by the store's clock
        erased = await sut.store.erase_session(sut.operator, session_id, "asked to")
        assert erased.intents == 1
        assert await sut.delivery.intent(stuck) is None
