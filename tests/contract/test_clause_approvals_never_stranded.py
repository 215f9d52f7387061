"""Clause: an answered approval is never stranded — not even when a continuation turn of its
request id had already started and ended before claiming the call.
(Crashes of real processes: tests/faults/test_clause_approvals_never_stranded.py.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.errors import ApprovalRefused
from hostkit.host import Host
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import ConversationFacts, PrincipalScope, TurnResult
from tests.contract.test_effects_approval_flow import Stamps, approval_host, stamp_call
from tests.hosts import request

pytestmark = pytest.mark.anyio


@dataclass
class Paused:
    host: Host
    approval_id: str
    operator: PrincipalScope


@asynccontextmanager
async def paused_stamp(tmp_path: Path, stamps: Stamps, then: str) -> AsyncIterator[Paused]:
    """A Host whose turn paused asking to stamp (the model answers ``then`` after the
    call), with an operator to answer it."""
    model = ScriptedModel([stamp_call(), Reply(then)])
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
        assert paused.pending_approval is not None
        operator = await host.operator("ops", reason="answer approvals")
        yield Paused(host, paused.pending_approval, operator)


async def test_a_continuation_that_ended_before_its_claim_does_not_strand_the_answer(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with paused_stamp(tmp_path, stamps, "stamped at last") as paused:
        host, approval_id, operator = paused.host, paused.approval_id, paused.operator
        # A continuation turn of the approval's own request id starts before the answer is
        # durable (a racing answer, a crash between the two): it finds nothing to claim.
        early = await host.turns.run(
            request("early", request_id=f"continue:{approval_id}", continues=approval_id)
        )
        assert early.outcome == "failed"
        assert stamps.lines() == []
        finished = await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert finished.outcome == "completed"
        assert finished.turn_id != early.turn_id
        assert finished.request_id == f"continue:{approval_id}:2"
        assert (await host.approvals.resume(approval_id, by=operator)).turn_id == finished.turn_id
        # The same answer again (a retry) is idempotent: that continuation's record.
        again = await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert again.turn_id == finished.turn_id
    assert stamps.lines() == ["one"]


async def test_a_continuation_cancelled_before_its_claim_stands_and_a_resume_runs_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel is an answer about that continuation turn: the answer that started it gets
    the cancelled turn and the call does not run behind its back. The approval is still
    unclaimed, so a later resume runs it, once, under the next request id."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with paused_stamp(tmp_path, stamps, "stamped at last") as paused:
        host, approval_id, operator = paused.host, paused.approval_id, paused.operator
        owner = await host.authority.for_conversation(ConversationFacts("test", "c1", "alice"))
        approvals = host.store.approvals
        claim = approvals.claim
        cancelled: list[str] = []

        async def cancel_first_then_claim(approval: str, *, session_id: str, turn_id: str) -> Any:
            if not cancelled:
                cancelled.append(turn_id)
                await host.turns.cancel(turn_id, owner)
                await anyio.sleep(10)  # the cancel ends the turn here, before its claim
            return await claim(approval, session_id=session_id, turn_id=turn_id)

        monkeypatch.setattr(approvals, "claim", cancel_first_then_claim)
        with anyio.fail_after(20):
            ended = await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert (ended.outcome, ended.turn_id) == ("cancelled", cancelled[0])
        assert ended.request_id == f"continue:{approval_id}"
        assert stamps.lines() == []
        assert (await host.approvals.get(operator, approval_id)).awaiting_continuation

        resumed = await host.approvals.resume(approval_id, by=operator)
        assert (resumed.outcome, resumed.text) == ("completed", "stamped at last")
        assert resumed.request_id == f"continue:{approval_id}:2"
        assert (await host.approvals.resume(approval_id, by=operator)).turn_id == resumed.turn_id
    assert stamps.lines() == ["one"]


async def test_resume_of_an_unanswered_approval_is_refused_and_runs_nothing(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with paused_stamp(tmp_path, stamps, "never") as paused:
        with pytest.raises(ApprovalRefused) as refused:
            await paused.host.approvals.resume(paused.approval_id, by=paused.operator)
        assert refused.value.reason == "pending"
    assert stamps.lines() == []


async def test_a_continuation_cancelled_mid_effect_leaves_the_approval_indeterminate(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")

    @tool("files.stamp")
    async def stamp(ctx: ToolContext, label: str, api_key: str = "") -> str:
        """Append a stamp line, then hang (the effect is running when it is cancelled)."""
        async with await anyio.open_file(stamps.path, "a") as out:
            await out.write(label + "\n")
        await anyio.sleep_forever()
        return "unreachable"

    stamps.tool = stamp
    async with paused_stamp(tmp_path, stamps, "never") as paused:
        host, approval_id, operator = paused.host, paused.approval_id, paused.operator
        results: list[TurnResult] = []

        async def answer() -> None:
            results.append(await host.approvals.answer(approval_id, "approve_once", by=operator))

        async with anyio.create_task_group() as group:
            group.start_soon(answer)
            with anyio.fail_after(10):
                while not stamps.lines():  # noqa: ASYNC110 (the tool writes a file)
                    await anyio.sleep(0.02)
            claimed = await host.approvals.get(operator, approval_id)
            assert claimed.continuation_turn_id is not None
            scope = await host.authority.for_conversation(ConversationFacts("test", "c1", "alice"))
            await host.turns.cancel(claimed.continuation_turn_id, scope)
        (ended,) = results
        assert ended.outcome == "indeterminate"
        void = await host.approvals.get(operator, approval_id)
        assert void.status == "indeterminate"
        assert void.void_reason is not None
        assert "may have run" in void.void_reason
        with pytest.raises(ApprovalRefused) as refused:
            await host.approvals.resume(approval_id, by=operator)
        assert refused.value.reason == "indeterminate"
    assert stamps.lines() == ["one"]


async def test_an_answer_after_the_continuation_ran_reports_or_names_that_turn(
    tmp_path: Path,
) -> None:
    """The same answer again reports that turn (idempotent); a different one is refused,
    not with "resume runs its continuation" (it ran) but naming the turn that took the
    answer, and resume shows that turn's result."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with paused_stamp(tmp_path, stamps, "not stamped") as paused:
        host, approval_id, operator = paused.host, paused.approval_id, paused.operator
        denied = await host.approvals.answer(approval_id, "deny", by=operator)
        assert denied.outcome == "completed"
        repeated = await host.approvals.answer(approval_id, "deny", by=operator)
        assert (repeated.turn_id, repeated.outcome) == (denied.turn_id, "completed")
        with pytest.raises(ApprovalRefused) as again:
            await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert again.value.reason == "answered"
        said = str(again.value)
        assert f"its continuation turn {denied.turn_id} took it" in said
        assert "resume runs" not in said
        assert (await host.approvals.resume(approval_id, by=operator)).turn_id == denied.turn_id
    assert stamps.lines() == []
