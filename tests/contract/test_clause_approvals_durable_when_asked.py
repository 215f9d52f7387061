"""Clause: an approval is durable from the moment it is asked, not only when its wait times out.

The row is written before any provider sees the request; an inline answer is one conditional
write on it (an answer from another process wins, once); the caller's cancellation (Ctrl-C)
or the Host closing while a person decides leave it pending and the turn ``needs_user``; an
explicit cancel voids it; a notebook panel whose question went away says so.
(Crashes of real processes: tests/faults/test_clause_approvals_durable_when_asked.py.)
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.effects import INLINE, ApprovalDecision, ApprovalLedger, ApprovalRequest
from hostkit.errors import ApprovalRefused
from hostkit.host import Host
from hostkit.notebook._approver import WidgetApprover
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, TurnResult
from tests.contract.test_effects_approval_flow import Stamps, host_config, stamp_call
from tests.hosts import request

pytestmark = pytest.mark.anyio


class Deciding:
    """A person at the prompt: reads the durable row while deciding, answers on ``gate``."""

    def __init__(self, decision: ApprovalDecision | None = None) -> None:
        self.decision = decision
        self.asked = anyio.Event()
        self.gate = anyio.Event()
        self.seen: list[ApprovalRequest] = []
        self.withdrawn_because: list[str] = []
        self.host: Host | None = None
        self.row_while_asked: tuple[str, str] | None = None
        self.meanwhile: list[object] = []

    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(req)
        if self.host is not None:
            operator = await self.host.operator("ops", reason="look while deciding")
            (row,) = await self.host.approvals.list(operator)
            self.row_while_asked = (row.approval_id, row.status)
        for step in self.meanwhile:
            await step(req)  # type: ignore[operator]
        self.asked.set()
        await self.gate.wait()
        if self.decision is None:
            await anyio.sleep_forever()
        assert self.decision is not None
        return self.decision

    def withdrawn(self, req: ApprovalRequest, reason: str) -> None:
        self.withdrawn_because.append(reason)


def open_host(tmp_path: Path, model: ScriptedModel, stamps: Stamps, approver: object) -> Host:
    return Host.open(
        host_config(tmp_path, approval_timeout_s=30.0),
        capabilities=capabilities(model, tools=[stamps.tool]),
        approver=approver,  # type: ignore[arg-type]
    )


async def test_the_row_is_pending_before_the_approver_sees_the_request(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")])
    approver = Deciding("approve_once")
    approver.gate.set()
    async with open_host(tmp_path, model, stamps, approver) as host:
        approver.host = host
        result = await host.turns.run(request("stamp it"))
        operator = await host.operator("ops", reason="review approvals")
        (row,) = await host.approvals.list(operator, status=None)
    assert approver.row_while_asked == (approver.seen[0].approval_id, "pending")
    assert result.outcome == "completed"
    assert stamps.lines() == ["one"]
    # The inline answer is recorded on the same row: claimed by the asking turn itself.
    assert (row.status, row.decision, row.decided_by) == ("executed", "approve_once", INLINE)
    assert row.continuation_turn_id == result.turn_id


async def test_an_answer_from_another_process_wins_and_the_local_answer_loses_cleanly(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    local = Deciding("deny")  # the local person denies, but too late
    elsewhere: list[Host] = []

    async def answered_elsewhere(req: ApprovalRequest) -> None:
        other = elsewhere[0]
        operator = await other.operator("ops", reason="answer from another process")
        answer = await ApprovalLedger(other.store).answer(
            operator, req.approval_id, decision="approve_once", fingerprint=None
        )
        assert answer.accepted

    local.meanwhile.append(answered_elsewhere)
    local.gate.set()
    model = ScriptedModel([stamp_call(), Reply("stamped elsewhere")])
    async with (
        open_host(tmp_path, model, stamps, local) as here,
        open_host(tmp_path, model, stamps, None) as there,
    ):
        elsewhere.append(there)
        paused = await here.turns.run(request("stamp it"))
        # The local deny was refused by the conditional write: the turn waits on the approval.
        assert paused.outcome == "needs_user"
        assert paused.pending_approval == local.seen[0].approval_id
        assert stamps.lines() == []
        assert any("answered elsewhere" in reason for reason in local.withdrawn_because)
        # The process whose answer won finishes its job (the same answer again): runs once.
        operator = await there.operator("ops", reason="finish the answer")
        finished = await there.approvals.answer(
            paused.pending_approval, "approve_once", by=operator
        )
        assert finished.outcome == "completed"
        local_operator = await here.operator("ops", reason="answer here too")
        with pytest.raises(ApprovalRefused):
            await here.approvals.answer(paused.pending_approval, "deny", by=local_operator)
    assert stamps.lines() == ["one"]


async def test_a_prompt_whose_approval_was_answered_elsewhere_is_withdrawn(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    never = Deciding(None)  # the local person never answers
    model = ScriptedModel([stamp_call(), Reply("stamped elsewhere")])
    async with (
        open_host(tmp_path, model, stamps, never) as here,
        open_host(tmp_path, model, stamps, None) as there,
    ):
        results: list[TurnResult] = []

        async def run_here() -> None:
            results.append(await here.turns.run(request("stamp it")))

        async with anyio.create_task_group() as group:
            group.start_soon(run_here)
            with anyio.fail_after(10):
                await never.asked.wait()
            never.gate.set()
            operator = await there.operator("ops", reason="answer from another process")
            # Answered there while the prompt is still open here: the prompt is withdrawn,
            # the local turn pauses, and the continuation there runs the call once.
            with anyio.fail_after(20):
                finished = await there.approvals.answer(
                    never.seen[0].approval_id, "approve_once", by=operator
                )
        (paused,) = results
    assert paused.outcome == "needs_user"
    assert finished.outcome == "completed"
    assert stamps.lines() == ["one"]
    assert any("no longer pending" in reason for reason in never.withdrawn_because)


async def test_cancelling_the_caller_while_a_person_decides_pauses_the_turn(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    approver = Deciding("approve_once")  # gate never set: the caller gives up first (Ctrl-C)
    model = ScriptedModel([stamp_call(), Reply("stamped later")])
    async with open_host(tmp_path, model, stamps, approver) as host:
        async with anyio.create_task_group() as group:
            group.start_soon(host.turns.run, request("stamp it"))
            with anyio.fail_after(10):
                await approver.asked.wait()
            group.cancel_scope.cancel()
        approval_id = approver.seen[0].approval_id
        scope = await host.authority.for_conversation(ConversationFacts("test", "c1", "alice"))
        state = await host.store.turns.state(scope, approver.seen[0].turn_id)
        assert state.result is not None
        assert (state.status, state.result.pending_approval) == ("needs_user", approval_id)
        operator = await host.operator("ops", reason="answer a pending approval")
        (pending,) = await host.approvals.list(operator)
        assert pending.approval_id == approval_id
        finished = await host.approvals.answer(approval_id, "approve_once", by=operator)
    assert finished.outcome == "completed"
    assert stamps.lines() == ["one"]


async def test_an_explicit_cancel_while_a_person_decides_voids_the_approval(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    approver = Deciding("approve_once")  # gate never set
    model = ScriptedModel([stamp_call(), Reply("never")])
    async with open_host(tmp_path, model, stamps, approver) as host:
        results: list[TurnResult] = []

        async def run() -> None:
            results.append(await host.turns.run(request("stamp it")))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            with anyio.fail_after(10):
                await approver.asked.wait()
            scope = await host.authority.for_conversation(ConversationFacts("test", "c1", "alice"))
            cancelled = await host.turns.cancel(approver.seen[0].turn_id, scope)
        assert (cancelled.disposition, cancelled.outcome) == ("cancelled", "cancelled")
        (result,) = results
        assert result.outcome == "cancelled"
        operator = await host.operator("ops", reason="review approvals")
        (void,) = await host.approvals.list(operator, status=None)
        assert void.status == "superseded"
        assert void.void_reason is not None
        assert "cancelled" in void.void_reason
        with pytest.raises(ApprovalRefused) as refused:
            await host.approvals.answer(void.approval_id, "approve_once", by=operator)
        assert refused.value.reason == "superseded"
    assert stamps.lines() == []


async def test_a_panel_left_from_a_closed_host_marks_itself_stale(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    widget = WidgetApprover()
    model = ScriptedModel([stamp_call(), Reply("never")])
    host = await open_host(tmp_path, model, stamps, widget)
    results: list[TurnResult] = []

    async def run() -> None:
        results.append(await host.turns.run(request("stamp it")))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        with anyio.fail_after(10):
            await widget.orphans.approval()
        (row,) = widget.orphans.rows
        assert not any(button.disabled for button in row.buttons)
        await host.aclose()
    (paused,) = results
    assert paused.outcome == "needs_user"
    assert all(button.disabled for button in row.buttons)
    text = widget.orphans.text()
    assert "this Host was closed" in text
    assert f"hostkit approvals approve {paused.pending_approval}" in text
    assert stamps.lines() == []


async def test_a_cancel_recorded_elsewhere_voids_the_approval_before_a_late_click_can_run_it(
    tmp_path: Path,
) -> None:
    """Another Host process records the cancel (the durable request only); the person here
    then approves before this process's heartbeat has noticed it: nothing runs."""
    stamps = Stamps(tmp_path / "stamps.txt")
    approver = Deciding("approve_once")
    model = ScriptedModel([stamp_call(), Reply("never")])
    async with open_host(tmp_path, model, stamps, approver) as host:
        results: list[TurnResult] = []

        async def run() -> None:
            results.append(await host.turns.run(request("stamp it")))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            with anyio.fail_after(10):
                await approver.asked.wait()
            scope = await host.authority.for_conversation(ConversationFacts("test", "c1", "alice"))
            state = await host.store.turns.request_cancel(scope, approver.seen[0].turn_id)
            assert state.cancel_requested
            approver.gate.set()  # the late click
        (result,) = results
        operator = await host.operator("ops", reason="review approvals")
        (void,) = await host.approvals.list(operator, status=None)
    assert result.outcome == "cancelled"
    assert result.pending_approval is None
    assert void.status == "superseded"
    assert stamps.lines() == []


async def test_the_turn_deadline_while_a_person_decides_pauses_the_turn_on_the_approval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn's own deadline (900 s) can end before the approval timeout (up to a day):
    a person still deciding is not a failure, and the approval stays answerable."""
    stamps = Stamps(tmp_path / "stamps.txt")
    approver = Deciding(None)  # never decides
    model = ScriptedModel([stamp_call(), Reply("done")], repeat_last=True)
    async with open_host(tmp_path, model, stamps, approver) as host:
        monkeypatch.setattr(host.turns, "_turn_timeout_s", 1.0)
        result = await host.turns.run(request("stamp it"))
        operator = await host.operator("ops", reason="review approvals")
        (pending,) = await host.approvals.list(operator)
    assert result.outcome == "needs_user"
    assert result.pending_approval == pending.approval_id
    assert pending.status == "pending"
    assert stamps.lines() == []


class ApproverBroke(BaseException):
    """Not an ``Exception``: what a misbehaving approver may raise (SystemExit-like)."""


async def test_a_base_exception_from_the_approver_reaches_the_caller_as_itself(
    tmp_path: Path,
) -> None:
    # It used to arrive wrapped in a BaseExceptionGroup ("unhandled errors in a
    # TaskGroup") from the watch beside the prompt; an Exception already came as itself.
    class Broken:
        async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
            raise ApproverBroke()

    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")])
    async with open_host(tmp_path, model, stamps, Broken()) as host:
        with pytest.raises(ApproverBroke):
            await host.turns.run(request("stamp it"))
    assert stamps.lines() == []
