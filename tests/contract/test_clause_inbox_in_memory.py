"""ChannelInbox clause: a strict in-memory adapter runs the same contract (for embedders' tests).

The contract suite runs on it through ``tests/contract/_inbox_adapters.py``;
these tests pin what only it has: ``ChannelInbox.in_memory()`` builds on it,
it keeps its requeue audit readable, and it is strict where the inbox is
lenient by design (an operator scope is checked only for its authority
unless a verifier is given).
"""

from __future__ import annotations

import pytest

from hostkit.errors import ScopeError
from hostkit.inbox import ChannelInbox, RetryPolicy
from hostkit.inbox._memory import MemoryInboxStore, RequeueAudit
from hostkit.types import InboundFailure, PrincipalScope
from tests.contract._inbox_adapters import envelope

pytestmark = pytest.mark.anyio


async def test_in_memory_inbox_keeps_the_contract_without_a_store() -> None:
    inbox = ChannelInbox.in_memory(owner="worker.a", policy=RetryPolicy(max_attempts=1))
    receipt = await inbox.accept(envelope("evt-1"))
    assert (await inbox.accept(envelope("evt-1"))).inbound_id == receipt.inbound_id
    claimed = await inbox.claim()
    assert claimed is not None
    assert claimed.inbound_id == receipt.inbound_id
    decision = await inbox.fail(claimed, InboundFailure("transient", "boom"))
    assert decision.disposition == "dead_lettered"


async def test_in_memory_requeue_is_audited_and_readable() -> None:
    store = MemoryInboxStore()
    inbox = ChannelInbox(store, owner="worker.a", policy=RetryPolicy(max_attempts=1))
    receipt = await inbox.accept(envelope("evt-1"))
    claimed = await inbox.claim()
    assert claimed is not None
    await inbox.fail(claimed, InboundFailure("permanent", "unparseable"))
    # Without a verifier the in-memory inbox checks only the scope's authority.
    user = PrincipalScope(
        principal_id="user-1",
        authority="conversation",
        channel="telegram.support",
        conversation_key="chat-1",
        session_id="ses_1",
        allowed_session_ids=frozenset({"ses_1"}),
        issuer_id="store_x",
    )
    with pytest.raises(ScopeError):
        await inbox.requeue(user, receipt.inbound_id, reason="retry it")
    assert list(store.audit) == []
    operator = PrincipalScope(
        principal_id="operator:ops",
        authority="operator",
        channel="operator",
        conversation_key=None,
        session_id=None,
        allowed_session_ids=frozenset(),
        issuer_id="store_x",
        grant_id="grant_x",
    )
    record = await inbox.requeue(operator, receipt.inbound_id, reason="  parser fixed  ")
    assert (record.state, record.attempt, record.requeues) == ("ready", 0, 1)
    (entry,) = store.audit
    assert entry == RequeueAudit(receipt.inbound_id, "operator:ops", "parser fixed", entry.at)
    assert isinstance(store.audit, tuple)
