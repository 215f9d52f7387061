"""Clause: a scheduled run's or a child agent's pending approval is never stranded.

docs/effects.md: an unanswered ask stays ``pending``, "answerable from any
process", and an answer is always finished. Neither owner's scope can be
minted again by its own method (a child's always gets a new session), so an
operator's answer (``host.approvals.answer(id, decision, by=operator)``, what
``hostkit approvals approve ID`` calls) runs the continuation under the
owner's scope, rebuilt by the resolver from the session's durable owner row,
in a fresh Host open. docs/context.md: a session whose first turn left the
bootstrap snapshot out (a delegated child run, ``bootstrap=False``) keeps
none: its continuation, in any process, does not see the workspace's
AGENTS.md either. Real Host, real SQLite, scripted model.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from hostkit.cli._turn import stream_answer
from hostkit.errors import NotFoundOrUnauthorized, ScopeError
from hostkit.host import Host
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import ConversationFacts, PrincipalScope, TurnRequest, new_id
from tests.contract.test_effects_approval_flow import Stamps, approval_host, stamp_call
from tests.hosts import request

pytestmark = pytest.mark.anyio

NOTES = "PARENT-ONLY NOTES: the deploy key is in vault/prod"


def system_text(model: ScriptedModel, index: int) -> str:
    return "\n".join(m.content for m in model.requests[index].messages if m.role == "system")


async def child_paused(host: Host) -> tuple[str, PrincipalScope]:
    """A child agent's turn (``bootstrap=False``) pauses on its ask; its approval id."""
    parent = await host.turns.run(request("parent turn"))
    owner = await host.authority.for_conversation(ConversationFacts("test", "c1", "alice"))
    child = await host.authority.for_child_agent(
        owner, parent_turn_id=parent.turn_id, agent="researcher"
    )
    paused = await host.turns.run(
        TurnRequest(input="stamp it", principal=child, request_id=new_id("req"), bootstrap=False)
    )
    assert paused.outcome == "needs_user"
    assert paused.pending_approval is not None
    return paused.pending_approval, child


async def test_a_childs_continuation_keeps_its_session_without_the_bootstrap_snapshot(
    tmp_path: Path,
) -> None:
    (tmp_path / "AGENTS.md").write_text(NOTES)
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([Reply("parent"), stamp_call(), Reply("done")], repeat_last=True)
    async with approval_host(tmp_path, model, stamps) as host:
        approval_id, child = await child_paused(host)
        result = await host.approvals.answer(approval_id, "approve_once", by=child)
    assert result.outcome == "completed"
    assert stamps.lines() == ["one"]
    assert NOTES in system_text(model, 0), "the parent's session has the snapshot"
    assert NOTES not in system_text(model, 1)
    assert NOTES not in system_text(model, 2), "the continuation leaves it out too"


async def test_an_operator_answers_a_childs_approval_after_its_host_closed(
    tmp_path: Path,
) -> None:
    (tmp_path / "AGENTS.md").write_text(NOTES)
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([Reply("parent"), stamp_call(), Reply("done")], repeat_last=True)
    async with approval_host(tmp_path, model, stamps) as host:
        approval_id, child = await child_paused(host)
    async with approval_host(tmp_path, model, stamps) as host:
        operator = await host.operator("ops", reason="answer a child's approval")
        result = await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert result.outcome == "completed"
        assert result.session_id == child.session_id
        assert (await host.approvals.get(operator, approval_id)).status == "executed"
        again = await host.approvals.resume(approval_id, by=operator)
        assert again.turn_id == result.turn_id, "answered once: resume reports it"
    assert stamps.lines() == ["one"], "the approved call ran exactly once"
    assert NOTES not in system_text(model, 2), "the child's session still has no snapshot"


async def test_an_operator_answers_a_scheduled_runs_approval_with_the_cli_in_a_fresh_open(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")], repeat_last=True)
    async with approval_host(tmp_path, model, stamps) as host:
        run = await host.authority.for_scheduled_run(schedule_id="nightly", run_id="r1")
        paused = await host.turns.run(
            TurnRequest(input="stamp it", principal=run, request_id="nightly/r1")
        )
        assert paused.pending_approval is not None
    async with approval_host(tmp_path, model, stamps) as host:
        operator = await host.operator("ops", reason="answer a scheduled run's approval")
        # What `hostkit approvals approve ID` runs.
        result = await stream_answer(
            host, paused.pending_approval, "approve_once", by=operator, out=io.StringIO()
        )
        assert result.outcome == "completed"
        assert result.session_id == paused.session_id
        audit = await host.store.read_audit(operator, kind="principal_scope.owner_rebuilt")
        assert [row.session_id for row in audit] == [paused.session_id]
    assert stamps.lines() == ["one"]


async def test_only_an_operator_has_the_owner_scope_rebuilt(tmp_path: Path) -> None:
    """Only for an approval of that owner that can still run: never a way for an operator
    to act as a child or a schedule otherwise."""
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel(
        [Reply("parent"), stamp_call(), stamp_call(), Reply("told"), Reply("parent"), stamp_call()]
    )
    async with approval_host(tmp_path, model, stamps) as host:
        approval_id, child = await child_paused(host)
        alice = await host.authority.for_conversation(ConversationFacts("test", "c1", "alice"))
        for scope in (alice, child):
            with pytest.raises(ScopeError):
                await host.authority.owner_of_answered(scope, approval_id)
        operator = await host.operator("ops", reason="check")
        alices = await host.turns.run(request("stamp it too"))
        assert alices.pending_approval is not None
        with pytest.raises(ScopeError):  # a conversation's comes back through its binding
            await host.authority.owner_of_answered(operator, alices.pending_approval)
        with pytest.raises(NotFoundOrUnauthorized):  # no approval, no scope
            await host.authority.owner_of_answered(operator, "apr_none")
        denied = await host.approvals.answer(approval_id, "deny", by=operator)
        assert denied.outcome in ("completed", "needs_user")
        with pytest.raises(ScopeError):  # settled: nothing of it can run any more
            await host.authority.owner_of_answered(operator, approval_id)
        approval_id, child = await child_paused(host)
        rebuilt = await host.authority.owner_of_answered(operator, approval_id)
        assert (rebuilt.principal_id, rebuilt.authority, rebuilt.allowed_session_ids) == (
            child.principal_id,
            "delegated_agent",
            child.allowed_session_ids,
        )
