"""ChannelInbox clause: complete and fail are idempotent for the same claim token and payload.

The same token with the same terminal payload gets the same decision again
(a worker that lost the answer may ask again); the same token with another
outcome is a ``conflict``; another token on a terminal row is
``already_terminal``. None of these changes the recorded outcome.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.inbox import RetryPolicy
from hostkit.types import InboundFailure, InboundResult
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=3, base_delay_s=2.0, max_delay_s=10.0, lease_s=30.0)
RESULT = InboundResult("turn", turn_id="turn_1", outcome="completed")


async def test_idempotent_complete_for_the_same_token_and_result(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        first = await sut.inbox.complete(claimed, RESULT)
        record = await sut.inbox.record(receipt.inbound_id)
        sut.clock.advance(5)
        again = await sut.inbox.complete(
            claimed, InboundResult("turn", turn_id="turn_1", outcome="completed")
        )
        assert first == again
        assert (again.disposition, again.state) == ("completed", "completed")
        assert await sut.inbox.record(receipt.inbound_id) == record
        assert record is not None
        assert (record.result_kind, record.turn_id) == ("turn", "turn_1")


async def test_idempotent_complete_conflicts_for_another_result(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        await sut.inbox.complete(claimed, RESULT)
        record = await sut.inbox.record(receipt.inbound_id)
        other = await sut.inbox.complete(
            claimed, InboundResult("turn", turn_id="turn_2", outcome="completed")
        )
        assert (other.disposition, other.state) == ("conflict", "completed")
        failed = await sut.inbox.fail(claimed, InboundFailure("permanent", "late"))
        assert (failed.disposition, failed.state) == ("conflict", "completed")
        assert await sut.inbox.record(receipt.inbound_id) == record


async def test_idempotent_fail_for_the_same_token_and_failure(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        first = await sut.inbox.fail(claimed, InboundFailure("transient", "timeout", "upstream"))
        assert first.disposition == "retry"
        assert first.state == "ready"
        record = await sut.inbox.record(receipt.inbound_id)
        sut.clock.advance(1)
        again = await sut.inbox.fail(claimed, InboundFailure("transient", "timeout", "upstream"))
        assert again == first
        assert await sut.inbox.record(receipt.inbound_id) == record
        other = await sut.inbox.fail(claimed, InboundFailure("transient", "refused"))
        assert (other.disposition, other.state) == ("conflict", "ready")
        completed = await sut.inbox.complete(claimed, RESULT)
        assert (completed.disposition, completed.state) == ("conflict", "ready")
        assert await sut.inbox.record(receipt.inbound_id) == record


async def test_idempotent_dead_letter_for_the_same_token(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        failure = InboundFailure("permanent", "unparseable")
        first = await sut.inbox.fail(claimed, failure)
        assert (first.disposition, first.state, first.next_attempt_at) == (
            "dead_lettered",
            "dead_lettered",
            None,
        )
        assert await sut.inbox.fail(claimed, failure) == first


async def test_idempotent_already_terminal_for_another_token(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        first = await sut.inbox.claim()
        assert first is not None
        sut.clock.advance(31)
        other = sut.another(owner="worker.b", policy=POLICY)
        second = await other.claim()
        assert second is not None
        await other.complete(second, RESULT)
        record = await sut.inbox.record(receipt.inbound_id)
        late = await sut.inbox.complete(first, RESULT)
        assert (late.disposition, late.state) == ("already_terminal", "completed")
        late_fail = await sut.inbox.fail(first, InboundFailure("transient", "boom"))
        assert (late_fail.disposition, late_fail.state) == ("already_terminal", "completed")
        assert await sut.inbox.record(receipt.inbound_id) == record
