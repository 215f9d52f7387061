"""ChannelInbox clause: the turn-request id is reserved at accept and stable across attempts.

``turn_request_id`` is ``inbound:<inbound id>`` from the first claim on, so
a turn started by a crashed attempt is found by the next one; a worker
durably reserves it before the turn starts (``reserve_turn``), a stale
claim cannot, and the next attempt sees ``turn_reserved``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.errors import StaleClaim
from hostkit.inbox import RetryPolicy
from hostkit.types import InboundFailure
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=5, base_delay_s=1.0, max_delay_s=1.0, lease_s=30.0)


async def test_turn_request_id_is_reserved_at_accept_and_stable_across_attempts(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        seen = []
        for attempt in (1, 2, 3):
            claimed = await sut.inbox.claim()
            assert claimed is not None
            assert claimed.attempt == attempt
            seen.append(claimed.turn_request_id)
            if attempt == 1:
                await sut.inbox.fail(claimed, InboundFailure("transient", "boom"))
                sut.clock.advance(2)
            elif attempt == 2:
                sut.clock.advance(31)  # the worker died: its lease expires
        assert seen == [f"inbound:{receipt.inbound_id}"] * 3


async def test_turn_request_id_reserved_shows_on_the_next_attempt(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        first = await sut.inbox.claim()
        assert first is not None
        assert not first.turn_reserved
        reserved = await sut.inbox.reserve_turn(first)
        assert reserved.turn_reserved
        assert reserved.claim_token == first.claim_token
        # Reserving again under the same claim is harmless.
        assert (await sut.inbox.reserve_turn(reserved)).turn_reserved
        sut.clock.advance(31)  # crash during the turn
        second = await sut.another(owner="worker.b", policy=POLICY).claim()
        assert second is not None
        assert second.turn_reserved
        assert second.turn_request_id == first.turn_request_id


async def test_turn_request_id_reserve_refuses_a_stale_claim(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        first = await sut.inbox.claim()
        assert first is not None
        sut.clock.advance(31)
        second = await sut.another(owner="worker.b", policy=POLICY).claim()
        assert second is not None
        assert not second.turn_reserved
        with pytest.raises(StaleClaim) as refused:
            await sut.inbox.reserve_turn(first)
        assert refused.value.inbound_id == receipt.inbound_id
        # The stale attempt reserved nothing: a third attempt does not see a reservation.
        sut.clock.advance(31)
        third = await sut.another(owner="worker.c", policy=POLICY).claim()
        assert third is not None
        assert not third.turn_reserved


async def test_turn_request_id_a_released_claim_cannot_reserve(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        assert await sut.inbox.release(claimed)
        with pytest.raises(StaleClaim):
            await sut.inbox.reserve_turn(claimed)
