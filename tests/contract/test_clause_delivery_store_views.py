"""DeliveryStore clause: operators and the idle worker read the outbox without changing it —
``counts`` per status, ``dead_letters`` (the live status line's figure), ``intents``
newest first (optionally of one status, bounded), ``intent`` by id (None when unknown)
and ``next_due``, the earliest time an intent is due.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.types import DeliveryCounts, DeliveryFailure
from tests.contract._delivery_adapters import ADAPTERS, ROUTE, open_delivery

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]


async def test_counts_listings_and_next_due(adapter: str, tmp_path: Path) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        assert await sut.delivery.counts() == DeliveryCounts()
        assert await sut.delivery.dead_letters() == 0
        assert await sut.delivery.next_due() is None
        assert await sut.delivery.intents() == ()
        ids = await sut.seed(4)
        due = await sut.delivery.next_due()
        assert due is not None
        oldest = await sut.delivery.intent(ids[0])
        assert oldest is not None
        assert due == oldest.next_attempt_at
        assert oldest.created_at
        assert (oldest.route, oldest.channel) == (ROUTE, "slack.main")
        assert oldest.approval is None

        now = sut.later()
        a, b, c = await sut.delivery.claim(
            owner="suite", limit=3, lease_s=30.0, max_attempts=3, now=now
        )
        await sut.delivery.delivered(a, now=now)
        await sut.delivery.failed(b, DeliveryFailure("permanent", "gone"), retry_at=None, now=now)
        assert await sut.delivery.counts() == DeliveryCounts(
            pending=1, sending=1, delivered=1, dead_lettered=1
        )
        assert await sut.delivery.dead_letters() == 1
        # The pending one (never claimed) is due first; the sending one at its lease expiry.
        pending = await sut.delivery.intent(ids[3])
        assert pending is not None
        assert await sut.delivery.next_due() == pending.next_attempt_at
        assert [i.intent_id for i in await sut.delivery.intents()] == list(reversed(ids))
        assert [i.intent_id for i in await sut.delivery.intents(limit=2)] == [ids[3], ids[2]]
        by_status = {
            status: [i.intent_id for i in await sut.delivery.intents(status=status)]
            for status in ("pending", "sending", "delivered", "dead_lettered")
        }
        assert by_status == {
            "pending": [ids[3]],
            "sending": [c.intent.intent_id],
            "delivered": [a.intent.intent_id],
            "dead_lettered": [b.intent.intent_id],
        }
        assert await sut.delivery.intent("out_unknown") is None
        # Reading changed nothing.
        assert await sut.delivery.counts() == DeliveryCounts(
            pending=1, sending=1, delivered=1, dead_lettered=1
        )
