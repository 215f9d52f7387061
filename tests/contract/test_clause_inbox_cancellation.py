"""ChannelInbox clause: user cancellation is terminal and never replays the message.

An ``InboundResult`` of kind ``cancelled`` completes the inbound like any
other business result: it is never claimed again, however much time passes,
and a redelivery of the same platform event stays a duplicate.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.inbox import RetryPolicy
from hostkit.types import InboundFailure, InboundResult
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=3, lease_s=10.0)


async def test_cancellation_is_terminal_and_never_claimed_again(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        await sut.inbox.reserve_turn(claimed)
        decision = await sut.inbox.complete(
            claimed, InboundResult("cancelled", turn_id="turn_1", outcome="cancelled")
        )
        assert (decision.disposition, decision.state) == ("completed", "completed")
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert (record.state, record.result_kind, record.due_at) == (
            "completed",
            "cancelled",
            None,
        )
        for _ in range(3):
            sut.clock.advance(3_600)
            assert await sut.inbox.claim() is None
        again = await sut.inbox.accept(envelope("evt-1"))
        assert again.disposition == "duplicate"
        assert await sut.inbox.claim() is None
        # Nothing can turn it back into a retry.
        late = await sut.inbox.fail(claimed, InboundFailure("transient", "boom"))
        assert (late.disposition, late.state) == ("conflict", "completed")


async def test_cancellation_before_a_turn_is_an_ordinary_result(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        decision = await sut.inbox.complete(claimed, InboundResult("cancelled"))
        assert decision.disposition == "completed"
        (counts,) = await sut.inbox.counts()
        assert (counts.ready, counts.claimed, counts.completed) == (0, 0, 1)
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert record.turn_id is None
