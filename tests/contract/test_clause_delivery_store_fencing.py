"""DeliveryStore clause: outcomes are fenced by the claim token.

``delivered``, ``failed`` and ``extend`` by a holder whose claim is no longer current raise
``StaleClaim`` and change nothing; the same token's repeat of ``delivered`` is a no-op that
returns the row; ``release`` gives the intent back due now without spending the attempt, and
is a no-op for a claim no longer held.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hostkit.errors import StaleClaim
from hostkit.types import DeliveryFailure
from tests.contract._delivery_adapters import ADAPTERS, open_delivery

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

FAILURE = DeliveryFailure("transient", "http_503", "service unavailable")


async def test_a_stale_token_is_refused_and_nothing_changes(adapter: str, tmp_path: Path) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        (intent_id,) = await sut.seed(1)
        now = sut.later()
        (claim,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=3, now=now
        )
        forged = dataclasses.replace(claim, claim_token="dlc_not_the_holder")
        before = await sut.delivery.intent(intent_id)
        for attempt in (
            sut.delivery.delivered(forged, now=now + 1),
            sut.delivery.failed(forged, FAILURE, retry_at=None, now=now + 1),
            sut.delivery.failed(forged, FAILURE, retry_at=now + 5, now=now + 1),
            sut.delivery.extend(forged, lease_s=60.0, now=now + 1),
        ):
            with pytest.raises(StaleClaim) as caught:
                await attempt
            assert intent_id in str(caught.value)
        await sut.delivery.release(forged, now=now + 1)
        assert await sut.delivery.intent(intent_id) == before
        # The real holder still owns it.
        done = await sut.delivery.delivered(claim, now=now + 2)
    assert done.status == "delivered"


async def test_delivered_repeated_by_the_same_token_is_a_no_op(
    adapter: str, tmp_path: Path
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        (intent_id,) = await sut.seed(1)
        now = sut.later()
        (claim,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=3, now=now
        )
        first = await sut.delivery.delivered(claim, now=now + 1)
        again = await sut.delivery.delivered(claim, now=now + 50)
        # Terminal: no other outcome by the same token, no new claim.
        with pytest.raises(StaleClaim):
            await sut.delivery.failed(claim, FAILURE, retry_at=None, now=now + 51)
        assert (
            await sut.delivery.claim(
                owner="suite", limit=1, lease_s=30.0, max_attempts=3, now=now + 99
            )
            == ()
        )
        stored = await sut.delivery.intent(intent_id)
    assert first == again == stored
    assert (first.status, first.delivered_at, first.next_attempt_at) == ("delivered", now + 1, None)


async def test_release_gives_it_back_due_now_without_spending_the_attempt(
    adapter: str, tmp_path: Path
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        (intent_id,) = await sut.seed(1)
        now = sut.later()
        (claim,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=3, now=now
        )
        await sut.delivery.release(claim, now=now + 1)
        released = await sut.delivery.intent(intent_id)
        assert released is not None
        assert (released.status, released.attempts, released.next_attempt_at) == (
            "pending",
            0,
            now + 1,
        )
        assert await sut.delivery.next_due() == now + 1
        # Released means no longer held: the old token changes nothing any more.
        with pytest.raises(StaleClaim):
            await sut.delivery.delivered(claim, now=now + 2)
        await sut.delivery.release(claim, now=now + 2)
        (again,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=3, now=now + 2
        )
    assert (again.intent.intent_id, again.attempt) == (intent_id, 1)


async def test_extend_renews_the_holders_lease(adapter: str, tmp_path: Path) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        (intent_id,) = await sut.seed(1)
        now = sut.later()
        (claim,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=10.0, max_attempts=3, now=now
        )
        renewed = await sut.delivery.extend(claim, lease_s=60.0, now=now + 5)
        assert (renewed.claim_token, renewed.attempt) == (claim.claim_token, 1)
        assert renewed.lease_expires_at == renewed.intent.next_attempt_at == now + 65
        # Past the first lease but inside the renewed one: not claimable.
        assert (
            await sut.delivery.claim(
                owner="suite", limit=1, lease_s=10.0, max_attempts=3, now=now + 30
            )
            == ()
        )
        done = await sut.delivery.delivered(renewed, now=now + 31)
    assert (done.intent_id, done.status) == (intent_id, "delivered")
