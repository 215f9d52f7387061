"""Clause: an answered approval is never stranded — not even when a continuation turn of its
request id had already started and ended before claiming the call.
(Crashes of real processes: tests/faults/test_clause_approvals_never_stranded.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.errors import ApprovalRefused
from hostkit.testing import Reply, ScriptedModel
from tests.contract.test_effects_approval_flow import Stamps, approval_host, stamp_call
from tests.hosts import request

pytestmark = pytest.mark.anyio


async def test_a_continuation_that_ended_before_its_claim_does_not_strand_the_answer(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("stamped at last")])
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
        approval_id = paused.pending_approval
        assert approval_id is not None
        # A continuation turn of the approval's own request id starts before the answer is
        # durable (a racing answer, a crash between the two): it finds nothing to claim.
        early = await host.turns.run(
            request("early", request_id=f"continue:{approval_id}", continues=approval_id)
        )
        assert early.outcome == "failed"
        assert stamps.lines() == []
        operator = await host.operator("ops", reason="answer approvals")
        finished = await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert finished.outcome == "completed"
        assert finished.turn_id != early.turn_id
        assert finished.request_id == f"continue:{approval_id}:2"
        assert (await host.approvals.resume(approval_id, by=operator)).turn_id == finished.turn_id
        with pytest.raises(ApprovalRefused) as again:
            await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert again.value.reason == "answered"
    assert stamps.lines() == ["one"]


async def test_resume_of_an_unanswered_approval_is_refused_and_runs_nothing(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("never")])
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
        assert paused.pending_approval is not None
        operator = await host.operator("ops", reason="answer approvals")
        with pytest.raises(ApprovalRefused) as refused:
            await host.approvals.resume(paused.pending_approval, by=operator)
        assert refused.value.reason == "pending"
    assert stamps.lines() == []
