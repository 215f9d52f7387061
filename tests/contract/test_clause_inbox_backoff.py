"""ChannelInbox clause: bounded exponential backoff with jitter between attempts.

After failed attempt ``n`` the inbound is due again after
``min(max_delay, base * 2**(n-1))`` scaled into ``[1 - jitter, 1]`` of that;
not before, so a failing message does not spin, and never later than the cap.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hostkit.inbox import RetryPolicy
from hostkit.types import InboundFailure
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=8, base_delay_s=2.0, max_delay_s=20.0, jitter=0.5, lease_s=60.0)


async def test_backoff_grows_is_capped_and_stays_in_the_jitter_band(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY, rng=random.Random(7)) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        expected_rng = random.Random(7)
        delays = []
        for attempt in range(1, 8):
            claimed = await sut.inbox.claim()
            assert claimed is not None
            assert claimed.attempt == attempt
            decision = await sut.inbox.fail(claimed, InboundFailure("transient", "timeout"))
            assert decision.disposition == "retry"
            assert decision.next_attempt_at is not None
            delay = decision.next_attempt_at - sut.clock.now
            ceiling = min(20.0, 2.0 * 2 ** (attempt - 1))
            assert ceiling * 0.5 <= delay <= ceiling
            assert delay == pytest.approx(POLICY.delay(attempt, expected_rng))
            record = await sut.inbox.record(claimed.inbound_id)
            assert record is not None
            assert record.due_at == pytest.approx(decision.next_attempt_at)
            # Not due a moment before its time; due at it.
            sut.clock.advance(delay - 0.01)
            assert await sut.inbox.claim() is None
            sut.clock.advance(0.01)
            delays.append(delay)
        # Grows until the cap: every ceiling doubles, so each delay beats the one two back.
        assert all(delays[i + 2] > delays[i] for i in range(3))
        assert max(delays) <= 20.0
        assert delays[-1] >= 10.0


async def test_backoff_without_jitter_is_exact(adapter: str, tmp_path: Path) -> None:
    policy = RetryPolicy(max_attempts=6, base_delay_s=1.0, max_delay_s=5.0, jitter=0.0)
    async with open_inbox(adapter, tmp_path, policy=policy) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        delays = []
        for _ in range(5):
            claimed = await sut.inbox.claim()
            assert claimed is not None
            decision = await sut.inbox.fail(claimed, InboundFailure("transient", "timeout"))
            assert decision.next_attempt_at is not None
            delays.append(decision.next_attempt_at - sut.clock.now)
            sut.clock.advance(delays[-1])
        assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
