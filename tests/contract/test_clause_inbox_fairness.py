"""ChannelInbox clause: due claims are fair across channel instances, in bounded batches.

Round-robin: each round takes the oldest due row of every channel instance
that has one, least recently served instance first, so one noisy channel
cannot starve a quiet one. A claim call leases at most its limit (1 to
``MAX_CLAIM_BATCH``) rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.errors import InvalidValue
from hostkit.inbox import RetryPolicy
from hostkit.store import MAX_CLAIM_BATCH
from hostkit.types import InboundResult
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(lease_s=600.0)


async def test_fairness_a_noisy_channel_does_not_starve_a_quiet_one(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        for start in range(0, 1_000, 500):
            await sut.inbox.accept_batch(
                [envelope(f"n-{i}", "alpha.noisy") for i in range(start, start + 500)]
            )
        sut.clock.advance(1)
        await sut.inbox.accept_batch([envelope(f"q-{i}", "zulu.quiet") for i in range(5)])
        order = []
        for _ in range(10):
            claimed = await sut.inbox.claim()
            assert claimed is not None
            order.append(claimed.envelope.platform_event_key)
            await sut.inbox.complete(claimed, InboundResult("ignored"))
        assert sorted(k for k in order if k.startswith("q-")) == [f"q-{i}" for i in range(5)]
        # The noisy channel sorts first and was accepted first: only fairness lets the quiet in.
        assert order[:2] == ["n-0", "q-0"]
        # Within each channel, oldest first.
        assert [k for k in order if k.startswith("n-")] == [f"n-{i}" for i in range(5)]


async def test_fairness_round_robin_least_recently_served_first(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept_batch([envelope(f"a-{i}", "chan.a") for i in range(3)])
        await sut.inbox.accept_batch([envelope(f"b-{i}", "chan.b") for i in range(3)])
        await sut.inbox.accept_batch([envelope(f"c-{i}", "chan.c") for i in range(1)])
        batch = await sut.inbox.claim_batch(5)
        assert [c.envelope.platform_event_key for c in batch] == ["a-0", "b-0", "c-0", "a-1", "b-1"]
        # chan.a was served longest ago now; chan.c has nothing due.
        rest = await sut.inbox.claim_batch(5)
        assert [c.envelope.platform_event_key for c in rest] == ["a-2", "b-2"]


async def test_fairness_a_batch_claim_serves_every_channel(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept_batch([envelope(f"n-{i}", "alpha.noisy") for i in range(200)])
        await sut.inbox.accept(envelope("q-0", "zulu.quiet"))
        batch = await sut.inbox.claim_batch(2)
        assert [c.envelope.channel_instance_id for c in batch] == ["alpha.noisy", "zulu.quiet"]


async def test_fairness_claim_batches_are_bounded(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept_batch([envelope(f"e-{i}") for i in range(MAX_CLAIM_BATCH + 10)])
        for limit in (0, -1, MAX_CLAIM_BATCH + 1, True, 2.0):
            with pytest.raises(InvalidValue):
                await sut.inbox.claim_batch(limit)  # type: ignore[arg-type]
        assert sut.inbox.held == 0
        first = await sut.inbox.claim_batch(3)
        assert len(first) == 3
        full = await sut.inbox.claim_batch(MAX_CLAIM_BATCH)
        assert len(full) == MAX_CLAIM_BATCH
        rest = await sut.inbox.claim_batch(MAX_CLAIM_BATCH)
        assert len(rest) == 10 - 3
        assert len({c.inbound_id for c in (*first, *full, *rest)}) == MAX_CLAIM_BATCH + 10
        assert await sut.inbox.claim_batch(MAX_CLAIM_BATCH) == ()


async def test_fairness_only_due_rows_are_claimed(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("early"))
        sut.clock.advance(10)
        await sut.inbox.accept(envelope("late"))
        sut.clock.advance(-5)  # a clock that stepped back: "late" is not due yet
        batch = await sut.inbox.claim_batch(5)
        assert [c.envelope.platform_event_key for c in batch] == ["early"]
