"""ChannelInbox clause: a maximum number of attempts, then a redacted, bounded dead letter.

A transient failure on the last allowed attempt, a permanent failure on any
attempt, and a lease that expired after the last allowed attempt (the worker
died every time: a poison message) all end ``dead_lettered``; the failure
kept for operators is redacted and bounded. An expired lease counts as an
attempt.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.inbox import RetryPolicy
from hostkit.store import ATTEMPTS_EXHAUSTED
from hostkit.types import MAX_FAILURE_MESSAGE, InboundFailure
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=3, base_delay_s=1.0, max_delay_s=1.0, jitter=0.0, lease_s=30.0)
SECRET = "hunter2-very-secret"


async def test_dead_letter_after_max_attempts_with_a_redacted_bounded_failure(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        message = f"upstream said password={SECRET} token: {SECRET} " + "x" * 2_000
        decisions = []
        for _ in range(3):
            claimed = await sut.inbox.claim()
            assert claimed is not None
            decisions.append(
                await sut.inbox.fail(claimed, InboundFailure("transient", "upstream", message))
            )
            sut.clock.advance(1)
        assert [d.disposition for d in decisions] == ["retry", "retry", "dead_lettered"]
        assert [d.attempt for d in decisions] == [1, 2, 3]
        assert decisions[-1].next_attempt_at is None
        (record,) = await sut.inbox.records(state="dead_lettered")
        assert record.inbound_id == receipt.inbound_id
        assert (record.attempt, record.due_at, record.failure_code) == (3, None, "upstream")
        assert SECRET not in record.failure_message
        assert "[redacted]" in record.failure_message
        assert len(record.failure_message) <= MAX_FAILURE_MESSAGE
        sut.clock.advance(3_600)
        assert await sut.inbox.claim() is None


async def test_dead_letter_at_once_for_a_permanent_failure(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        decision = await sut.inbox.fail(
            claimed, InboundFailure("permanent", "unprocessable", "bad attachment")
        )
        assert (decision.disposition, decision.state, decision.attempt) == (
            "dead_lettered",
            "dead_lettered",
            1,
        )
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert (record.state, record.failure_code, record.failure_message) == (
            "dead_lettered",
            "unprocessable",
            "bad attachment",
        )
        (counts,) = await sut.inbox.counts()
        assert (counts.ready, counts.claimed, counts.dead_lettered) == (0, 0, 1)


async def test_dead_letter_an_expired_lease_counts_as_an_attempt(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        first = await sut.inbox.claim()
        assert first is not None
        sut.clock.advance(31)
        second = await sut.inbox.claim()
        assert second is not None
        assert second.attempt == 2
        # The last allowed attempt fails: no attempt is left for a retry.
        decision = await sut.inbox.fail(second, InboundFailure("transient", "boom"))
        assert decision.disposition == "retry"
        sut.clock.advance(1)
        third = await sut.inbox.claim()
        assert third is not None
        assert third.attempt == 3
        last = await sut.inbox.fail(third, InboundFailure("transient", "boom"))
        assert last.disposition == "dead_lettered"


async def test_dead_letter_attempts_exhausted_when_the_worker_dies_every_time(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("poison"))
        await sut.inbox.accept(envelope("fine", "slack.team"))
        claims = 0
        for _ in range(10):
            batch = await sut.inbox.claim_batch(4)
            claims += sum(1 for c in batch if c.inbound_id == receipt.inbound_id)
            sut.clock.advance(31)  # every worker dies holding its claims
        assert claims == POLICY.max_attempts
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert (record.state, record.attempt, record.failure_code) == (
            "dead_lettered",
            3,
            ATTEMPTS_EXHAUSTED,
        )
        assert record.due_at is None
        assert "attempt 3 of 3" in record.failure_message
        counts = {c.channel_instance_id: c for c in await sut.inbox.counts()}
        assert counts["telegram.support"].dead_lettered == 1
        assert counts["slack.team"].dead_lettered == 1


async def test_dead_letter_attempts_exhausted_fences_the_last_claimant(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("poison"))
        last = None
        for _ in range(3):
            last = await sut.inbox.claim()
            assert last is not None
            sut.clock.advance(31)
        assert last is not None
        assert await sut.inbox.claim() is None  # this claim dead-letters it instead
        late = await sut.another(owner="worker.b", policy=POLICY).fail(
            last, InboundFailure("transient", "boom")
        )
        assert (late.disposition, late.state) == ("already_terminal", "dead_lettered")


async def test_a_last_attempt_that_reserved_its_turn_gets_one_claim_more_to_reconcile(
    adapter: str, tmp_path: Path
) -> None:
    """The last allowed attempt reserved its turn id, then its worker died: the turn may
    have ended (its answer sent) with the inbound not yet completed. One claim more
    only reconciles with that turn's record, so it is given, once; an attempt that
    never reserved a turn is dead-lettered as before (above)."""
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("answered"))
        for attempt in range(1, POLICY.max_attempts + 1):
            claimed = await sut.inbox.claim()
            assert claimed is not None
            assert claimed.attempt == attempt
            if attempt == POLICY.max_attempts:
                await sut.inbox.reserve_turn(claimed)
            sut.clock.advance(31)  # the worker died holding it
        reconcile = await sut.inbox.claim()
        assert reconcile is not None
        assert (reconcile.attempt, reconcile.turn_reserved) == (POLICY.max_attempts + 1, True)
        sut.clock.advance(31)  # and died again: no claim more
        assert await sut.inbox.claim() is None
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert (record.state, record.failure_code) == ("dead_lettered", ATTEMPTS_EXHAUSTED)
        assert f"attempt {POLICY.max_attempts + 1} of {POLICY.max_attempts}" in (
            record.failure_message
        )
