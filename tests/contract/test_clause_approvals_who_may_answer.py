"""Clause: who may answer an approval.

"Who may answer: the principal the call would run as, or an operator with an
audited reason. Another principal who shares the conversation is refused, with
the same external result as a missing approval."

Two principals bound to one conversation share its session; only the one the
paused call would run as (or an operator, whose issuance reason is recorded
again with the answer) sees, answers or resumes it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from hostkit.effects import ApprovalLedger
from hostkit.errors import ApprovalRefused, HostkitError, NotFoundOrUnauthorized
from hostkit.host import Host
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import ConversationFacts, PrincipalScope, TurnRequest
from tests.contract.test_effects_approval_flow import Stamps, approval_host, stamp_call
from tests.hosts import request

pytestmark = pytest.mark.anyio

SHARED = "shared-room"


async def refusal(attempt: Awaitable[Any]) -> HostkitError:
    with pytest.raises(HostkitError) as caught:
        await attempt
    return caught.value


def same_result(one: HostkitError, other: HostkitError) -> bool:
    return (type(one), str(one), one.message) == (type(other), str(other), other.message)


async def paused_for_alice(host: Host) -> tuple[str, PrincipalScope, PrincipalScope]:
    """Alice's call pauses; returns its approval id, alice's scope and bob's (same room)."""
    paused = await host.turns.run(request("stamp it", conversation=SHARED, principal="alice"))
    assert paused.outcome == "needs_user"
    assert paused.pending_approval is not None
    alice = await host.authority.for_conversation(ConversationFacts("test", SHARED, "alice"))
    bob = await host.authority.for_conversation(ConversationFacts("test", SHARED, "bob"))
    # The precondition of the clause: both principals are bound to the one session.
    assert bob.session_id == alice.session_id == paused.session_id
    assert bob.principal_id != alice.principal_id
    return paused.pending_approval, alice, bob


async def test_who_may_answer_another_principal_sharing_the_conversation_is_refused_as_missing(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")], repeat_last=True)
    async with approval_host(tmp_path, model, stamps) as host:
        approval_id, alice, bob = await paused_for_alice(host)
        attempts: dict[str, Callable[[str], Awaitable[Any]]] = {
            "get": lambda a: host.approvals.get(bob, a),
            "answer": lambda a: host.approvals.answer(a, "approve_once", by=bob),
            "resume": lambda a: host.approvals.resume(a, by=bob),
        }
        for name, attempt in attempts.items():
            refused = await refusal(attempt(approval_id))
            missing = await refusal(attempt("apr_missing"))
            assert isinstance(refused, NotFoundOrUnauthorized), name
            assert same_result(refused, missing), (name, refused, missing)
        assert await host.approvals.list(bob) == []
        assert await host.approvals.list(bob, status=None) == []
        assert stamps.lines() == []
        # The principal the call runs as may see and answer it.
        assert [a.approval_id for a in await host.approvals.list(alice)] == [approval_id]
        result = await host.approvals.answer(approval_id, "approve_once", by=alice)
        assert result.outcome == "completed"
        assert stamps.lines() == ["one"]
        # Answered now: bob still cannot tell it exists.
        refused = await refusal(host.approvals.resume(approval_id, by=bob))
        assert same_result(refused, await refusal(host.approvals.resume("apr_x", by=bob)))
        operator = await host.operator("ops", reason="read audit")
        rows = await host.store.read_audit(operator, kind="approval.answered")
        (row,) = rows
        assert (row.subject, row.principal_id, row.authority) == (
            f"approval:{approval_id}",
            alice.principal_id,
            "conversation",
        )
        assert row.detail["runs_as"] == alice.principal_id


async def test_who_may_answer_an_operator_answers_and_its_audited_reason_is_recorded(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")], repeat_last=True)
    async with approval_host(tmp_path, model, stamps) as host:
        approval_id, _, bob = await paused_for_alice(host)
        with pytest.raises(NotFoundOrUnauthorized):
            await host.approvals.answer(approval_id, "deny", by=bob)
        operator = await host.operator("ops", reason="ticket 4711: approve the stamp")
        result = await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert result.outcome == "completed"
        assert stamps.lines() == ["one"]
        # The same answer again reports that turn and records nothing; another is refused.
        again = await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert again.turn_id == result.turn_id
        with pytest.raises(ApprovalRefused):
            await host.approvals.answer(approval_id, "deny", by=operator)
        assert stamps.lines() == ["one"]
        (row,) = await host.store.read_audit(operator, kind="approval.answered")
        assert row.authority == "operator"
        assert row.principal_id == operator.principal_id
        assert row.subject == f"approval:{approval_id}"
        assert row.reason == "ticket 4711: approve the stamp"
        assert row.detail["decision"] == "approve_once"
        assert row.detail["runs_as"] == "test:alice"


async def test_who_may_answer_another_principal_cannot_run_the_answered_call_either(
    tmp_path: Path,
) -> None:
    """Alice's answer is recorded but her continuation never ran; Bob, sharing the
    conversation, asks for a continuation of it himself: nothing runs, and Alice can
    still resume it."""
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")], repeat_last=True)
    async with approval_host(tmp_path, model, stamps) as host:
        approval_id, alice, _bob = await paused_for_alice(host)
        ledger = ApprovalLedger(host.store)
        answered = await ledger.answer(
            alice, approval_id, decision="approve_once", fingerprint=None
        )
        assert answered.accepted
        bob_facts = ConversationFacts("test", SHARED, "bob")
        taken = await host.turns.run(
            TurnRequest(
                input="mine", principal=bob_facts, request_id="bob-x", continues=approval_id
            )
        )
        assert taken.outcome == "failed"
        assert taken.effects == ()
        assert stamps.lines() == []
        resumed = await host.approvals.resume(approval_id, by=alice)
        assert [(e.effect, e.status) for e in resumed.effects] == [("files.stamp", "succeeded")]
    assert len(stamps.lines()) == 1
