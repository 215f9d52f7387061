"""ChannelInbox clause: operators see counts by state per channel and records, never payloads.

``counts`` lists every channel instance that has rows, ordered by id; ``backlog``
totals the ready and dead-lettered rows of them all (the live status line's figures);
``records`` lists rows newest accepted first, filtered by state and channel,
at most ``limit``; the failure kept on a row is the redacted one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.inbox import RetryPolicy
from hostkit.types import ChannelCounts, InboundFailure, InboundResult, InboxBacklog
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=1, lease_s=30.0)


async def test_operator_views_counts_by_state_per_channel(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        assert await sut.inbox.counts() == ()
        await sut.inbox.accept_batch([envelope(f"t-{i}", "telegram.support") for i in range(4)])
        await sut.inbox.accept_batch([envelope(f"s-{i}", "slack.team") for i in range(2)])
        first, second, third = await sut.inbox.claim_batch(3)
        await sut.inbox.complete(first, InboundResult("ignored"))
        await sut.inbox.fail(second, InboundFailure("permanent", "unparseable"))
        # Round-robin, ties by id: slack, telegram, slack.
        assert [c.envelope.channel_instance_id for c in (first, second, third)] == [
            "slack.team",
            "telegram.support",
            "slack.team",
        ]
        counts = await sut.inbox.counts()
        assert counts == (
            ChannelCounts("slack.team", ready=0, claimed=1, completed=1, dead_lettered=0),
            ChannelCounts("telegram.support", ready=3, claimed=0, completed=0, dead_lettered=1),
        )


async def test_the_backlog_totals_ready_and_dead_letters_of_every_channel(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        assert await sut.inbox.backlog() == InboxBacklog(ready=0, dead_lettered=0)
        await sut.inbox.accept_batch([envelope(f"t-{i}", "telegram.support") for i in range(5)])
        await sut.inbox.accept_batch([envelope(f"s-{i}", "slack.team") for i in range(3)])
        claims = await sut.inbox.claim_batch(5)
        for claim in claims[:2]:
            await sut.inbox.complete(claim, InboundResult("ignored"))
        for claim in claims[2:4]:
            await sut.inbox.fail(claim, InboundFailure("permanent", "unparseable"))
        # Claimed and completed rows are in neither figure.
        backlog = await sut.inbox.backlog()
        assert backlog == InboxBacklog(ready=3, dead_lettered=2)
        counts = await sut.inbox.counts()
        assert backlog.ready == sum(c.ready for c in counts)
        assert backlog.dead_lettered == sum(c.dead_lettered for c in counts)


async def test_operator_views_records_newest_first_and_filtered(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        ids = []
        for i in range(5):
            ids.append((await sut.inbox.accept(envelope(f"e-{i}", payload="private"))).inbound_id)
            sut.clock.advance(1)
        await sut.inbox.accept(envelope("other", "slack.team"))
        rows = await sut.inbox.records(channel_instance_id="telegram.support")
        assert [r.inbound_id for r in rows] == ids[::-1]
        assert [r.platform_event_key for r in await sut.inbox.records(limit=2)] == ["other", "e-4"]
        claimed = await sut.inbox.claim()
        assert claimed is not None
        await sut.inbox.fail(claimed, InboundFailure("transient", "boom", "secret=abc123 failed"))
        (dead,) = await sut.inbox.records(state="dead_lettered")
        assert dead.inbound_id == claimed.inbound_id
        assert dead.failure_code == "boom"
        assert "abc123" not in dead.failure_message
        assert await sut.inbox.records(state="claimed") == ()
        assert len(await sut.inbox.records(state="ready")) == 5
        assert not hasattr(dead, "payload")
        assert await sut.inbox.record("inb_unknown") is None
