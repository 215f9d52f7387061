"""Clause: an answered approval is never stranded — not even when a continuation turn of its
request id had already started and ended before claiming the call.
(Crashes of real processes: tests/faults/test_clause_approvals_never_stranded.py.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.effects import ApprovalDecision, ApprovalRequest, AuthoredTool, ToolContext, tool
from hostkit.errors import ApprovalRefused
from hostkit.host import Host
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, PrincipalScope, TurnResult
from tests.contract.test_effects_approval_flow import (
    Stamps,
    approval_host,
    host_config,
    stamp_call,
)
from tests.hosts import request
from tests.positional_ids import PositionalIds

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


# -- call ids unique per step only ------------------------------------------------------
# A server that sends no call ids is read as call_0, call_1… in every response: the
# approved call's result is its own, never an earlier step's call of the same id.


def hanging_stamp(stamps: Stamps) -> AuthoredTool:
    """``files.stamp`` that appends its line, then hangs (cancelled while it runs)."""

    @tool("files.stamp")
    async def stamp(ctx: ToolContext, label: str) -> str:
        """Append a stamp line, then hang."""
        async with await anyio.open_file(stamps.path, "a") as out:
            await out.write(label + "\n")
        await anyio.sleep_forever()
        return "unreachable"

    return stamp


@tool("files.peek")
async def peek(ctx: ToolContext, what: str) -> str:
    """Allowed without asking; harmless."""
    return f"peeked {what}"


class Decisions:
    """Answers each ask with the next decision; ``None``: never answers that one."""

    def __init__(self, *decisions: ApprovalDecision | None) -> None:
        self.decisions = list(decisions)

    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        decision = self.decisions.pop(0)
        if decision is None:
            await anyio.sleep_forever()
        assert decision is not None
        return decision


def peek_then_stamp(then: str = "never") -> PositionalIds:
    """Step one peeks as ``call_0``; step two asks to stamp as ``call_0`` again."""
    return PositionalIds([CallTools(("files_peek", {"what": "notes"})), stamp_call(), Reply(then)])


def reused_id_host(
    tmp_path: Path, model: ScriptedModel, stamp: AuthoredTool, approver: Decisions | None = None
) -> Host:
    caps = capabilities(model, tools=[stamp, peek])
    return Host.open(
        host_config(tmp_path, approval_timeout_s=0.5), capabilities=caps, approver=approver
    )


async def cancel_when_stamped(
    host: Host, stamps: Stamps, turn_id: Callable[[], Awaitable[str]]
) -> None:
    with anyio.fail_after(10):
        while not stamps.lines():  # noqa: ASYNC110 (the tool writes a file)
            await anyio.sleep(0.02)
    scope = await host.authority.for_conversation(ConversationFacts("test", "c1", "alice"))
    await host.turns.cancel(await turn_id(), scope)


async def test_a_continuation_cancelled_mid_effect_is_indeterminate_despite_a_reused_call_id(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with reused_id_host(tmp_path, peek_then_stamp(), hanging_stamp(stamps)) as host:
        paused = await host.turns.run(request("stamp it"))
        approval_id = paused.pending_approval
        assert approval_id is not None
        operator = await host.operator("ops", reason="answer approvals")
        results: list[TurnResult] = []

        async def answer() -> None:
            results.append(await host.approvals.answer(approval_id, "approve_once", by=operator))

        async def continuation() -> str:
            claimed = await host.approvals.get(operator, approval_id)
            assert claimed.continuation_turn_id is not None
            return claimed.continuation_turn_id

        async with anyio.create_task_group() as group:
            group.start_soon(answer)
            await cancel_when_stamped(host, stamps, continuation)
        assert results[0].outcome == "indeterminate"
        void = await host.approvals.get(operator, approval_id)
        assert (void.status, void.call_id) == ("indeterminate", "call_0")
        assert void.void_reason is not None
        assert "may have run" in void.void_reason
    assert stamps.lines() == ["one"]


async def test_a_turn_cancelled_in_an_inline_approved_call_is_indeterminate_despite_a_reused_id(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    approver = Decisions("approve_once")
    async with reused_id_host(tmp_path, peek_then_stamp(), hanging_stamp(stamps), approver) as host:
        operator = await host.operator("ops", reason="inspect approvals")
        results: list[TurnResult] = []

        async def run() -> None:
            results.append(await host.turns.run(request("stamp it")))

        async def asking_turn() -> str:
            (claimed,) = await host.approvals.list(operator, status=None)
            return claimed.turn_id

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await cancel_when_stamped(host, stamps, asking_turn)
        assert results[0].outcome == "indeterminate"
        (void,) = await host.approvals.list(operator, status=None)
        assert (void.status, void.call_id) == ("indeterminate", "call_0")
        assert void.continuation_turn_id == void.turn_id
        assert void.void_reason is not None
        assert "may have run" in void.void_reason
    assert stamps.lines() == ["one"]


async def test_inline_approved_calls_that_ran_stay_executed_when_later_steps_reuse_their_id(
    tmp_path: Path,
) -> None:
    """Nothing is voided that has a result: the first stamp (``call_0``) ran and was
    recorded; the second, asked as ``call_0`` too, is approved at once in one turn and
    left unanswered in the other (the turn pauses on it)."""
    stamps = Stamps(tmp_path / "stamps.txt")
    script = [stamp_call("one"), stamp_call("two"), Reply("done")]
    for second, outcome in (("approve_once", "completed"), (None, "needs_user")):
        root = tmp_path / str(second)
        root.mkdir()
        approver = Decisions("approve_once", second)
        async with reused_id_host(root, PositionalIds(script), stamps.tool, approver) as host:
            result = await host.turns.run(request("stamp twice"))
            assert result.outcome == outcome
            operator = await host.operator("ops", reason="inspect approvals")
            listed = await host.approvals.list(operator, status=None)
            assert [(a.call_id, a.status) for a in reversed(listed)] == [
                ("call_0", "executed"),
                ("call_0", "executed" if second else "pending"),
            ]
    assert stamps.lines() == ["one", "two", "one"]
