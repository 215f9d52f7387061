"""ChannelInbox clause: no infinite automatic replay.

A message that always fails is claimed exactly ``max_attempts`` times, then
waits as a dead letter however long the inbox runs; only an operator's
requeue sends it round again, for exactly ``max_attempts`` more claims.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.inbox import RetryPolicy
from hostkit.types import InboundFailure
from tests.contract._inbox_adapters import ADAPTERS, InboxUnderTest, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=4, base_delay_s=1.0, max_delay_s=4.0, lease_s=30.0)


async def claims_until_quiet(sut: InboxUnderTest, inbound_id: str) -> int:
    """Run an always-failing worker for an hour of inbox time; how often it got the message."""
    claims = 0
    for _ in range(720):
        claimed = await sut.inbox.claim()
        if claimed is not None:
            assert claimed.inbound_id == inbound_id
            claims += 1
            await sut.inbox.fail(claimed, InboundFailure("transient", "always"))
        sut.clock.advance(5)
    return claims


async def test_no_infinite_replay_of_a_message_that_always_fails(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        inbound_id = (await sut.inbox.accept(envelope("poison"))).inbound_id
        assert await claims_until_quiet(sut, inbound_id) == 4
        for round_ in (1, 2):
            await sut.inbox.requeue(sut.operator, inbound_id, reason=f"round {round_}")
            assert await claims_until_quiet(sut, inbound_id) == 4
            record = await sut.inbox.record(inbound_id)
            assert record is not None
            assert (record.state, record.requeues) == ("dead_lettered", round_)
        assert len(await sut.requeue_audit()) == 2
