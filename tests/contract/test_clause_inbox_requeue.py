"""ChannelInbox clause: operator requeue is explicit, needs an operator scope and a reason, audited.

Only a dead letter can be requeued, and not one accepted without its text
(it would dead-letter again at once); it comes back ``ready``, due now, with
attempt 0 (a fresh set of attempts), ``requeues`` + 1 and an
``inbox.requeue`` audit row naming the operator and the reason. A scope that
is not an operator's, forged, or a blank reason change nothing.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, ScopeError
from hostkit.inbox import RetryPolicy
from hostkit.types import UNPROCESSABLE, InboundFailure, InboundResult, PrincipalScope
from tests.contract._inbox_adapters import ADAPTERS, InboxUnderTest, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=2, base_delay_s=1.0, max_delay_s=1.0, lease_s=30.0)


async def dead_letter(sut: InboxUnderTest, key: str = "evt-1") -> str:
    receipt = await sut.inbox.accept(envelope(key))
    claimed = await sut.inbox.claim()
    assert claimed is not None
    assert claimed.inbound_id == receipt.inbound_id
    await sut.inbox.fail(claimed, InboundFailure("permanent", "unparseable"))
    return receipt.inbound_id


async def test_requeue_with_an_operator_scope_brings_it_back_with_attempt_0(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        inbound_id = await dead_letter(sut)
        sut.clock.advance(60)
        record = await sut.inbox.requeue(sut.operator, inbound_id, reason="parser fixed in 1.2")
        assert (record.state, record.attempt, record.requeues) == ("ready", 0, 1)
        assert record.due_at == sut.clock.now
        assert await sut.requeue_audit() == (
            (inbound_id, sut.operator.principal_id, "parser fixed in 1.2"),
        )
        claimed = await sut.inbox.claim()
        assert claimed is not None
        assert (claimed.inbound_id, claimed.attempt) == (inbound_id, 1)
        done = await sut.inbox.complete(claimed, InboundResult("ignored"))
        assert done.disposition == "completed"


async def test_requeue_needs_an_operator_scope(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        inbound_id = await dead_letter(sut)
        before = await sut.inbox.record(inbound_id)
        forged = replace(sut.operator, principal_id="operator:mallory")
        foreign = PrincipalScope(
            principal_id="operator:ops",
            authority="operator",
            channel="operator",
            conversation_key=None,
            session_id=None,
            allowed_session_ids=frozenset(),
            issuer_id="store_elsewhere",
            grant_id="grant_elsewhere",
        )
        for scope in (forged, foreign, "operator", None):
            with pytest.raises(ScopeError):
                await sut.inbox.requeue(scope, inbound_id, reason="let me")  # type: ignore[arg-type]
        assert await sut.inbox.record(inbound_id) == before
        assert await sut.requeue_audit() == ()


@pytest.mark.parametrize("reason", ["", "   ", "x" * 501, None])
async def test_requeue_needs_a_reason(adapter: str, tmp_path: Path, reason: object) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        inbound_id = await dead_letter(sut)
        before = await sut.inbox.record(inbound_id)
        with pytest.raises(ScopeError):
            await sut.inbox.requeue(sut.operator, inbound_id, reason=reason)  # type: ignore[arg-type]
        assert await sut.inbox.record(inbound_id) == before
        assert await sut.requeue_audit() == ()


async def test_requeue_only_a_dead_letter(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        ready = (await sut.inbox.accept(envelope("ready"))).inbound_id
        with pytest.raises(InvalidValue):
            await sut.inbox.requeue(sut.operator, ready, reason="not dead")
        claimed = await sut.inbox.claim()
        assert claimed is not None
        with pytest.raises(InvalidValue):
            await sut.inbox.requeue(sut.operator, ready, reason="claimed")
        await sut.inbox.complete(claimed, InboundResult("ignored"))
        with pytest.raises(InvalidValue):
            await sut.inbox.requeue(sut.operator, ready, reason="completed")
        with pytest.raises(NotFoundOrUnauthorized):
            await sut.inbox.requeue(sut.operator, "inb_unknown", reason="who?")
        record = await sut.inbox.record(ready)
        assert record is not None
        assert (record.state, record.requeues) == ("completed", 0)
        assert await sut.requeue_audit() == ()


async def test_requeue_refuses_a_dead_letter_accepted_without_its_text(
    adapter: str, tmp_path: Path
) -> None:
    """No turn can answer it, so a requeue would only dead-letter it again: refused for
    every caller (CLI, notebook, Python), with nothing changed and nothing audited."""
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        textless = replace(envelope("evt-long"), kind=UNPROCESSABLE, payload="")
        inbound_id = (await sut.inbox.accept(textless)).inbound_id
        claimed = await sut.inbox.claim()
        assert claimed is not None
        failure = InboundFailure("permanent", UNPROCESSABLE, "the event's text is too long")
        await sut.inbox.fail(claimed, failure)
        before = await sut.inbox.record(inbound_id)
        assert before is not None
        assert (before.state, before.unprocessable) == ("dead_lettered", True)
        with pytest.raises(InvalidValue, match="without its text") as refused:
            await sut.inbox.requeue(sut.operator, inbound_id, reason="try again")
        assert inbound_id in refused.value.message
        assert await sut.inbox.record(inbound_id) == before
        assert await sut.requeue_audit() == ()
        # Another dead letter of the same channel is still requeued.
        other = await dead_letter(sut, "evt-2")
        assert (await sut.inbox.requeue(sut.operator, other, reason="fixed")).state == "ready"


async def test_requeue_fences_out_the_dead_claim(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        failure = InboundFailure("permanent", "unparseable")
        await sut.inbox.fail(claimed, failure)
        await sut.inbox.requeue(sut.operator, receipt.inbound_id, reason="retry once")
        # The old claimant repeating its fail is no longer the row's claim.
        late = await sut.inbox.fail(claimed, failure)
        assert (late.disposition, late.state) == ("stale_claim", "ready")
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert (record.state, record.attempt) == ("ready", 0)
