"""Running a turn from the terminal with its answer streamed as it arrives."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TextIO

import anyio

from hostkit.effects import ApprovalDecision
from hostkit.errors import HostkitError
from hostkit.host import Host
from hostkit.turns import TurnEvent
from hostkit.types import (
    ConversationFacts,
    PrincipalScope,
    SessionSelector,
    TurnRequest,
    TurnResult,
    new_id,
)

__all__ = ["stream_answer", "stream_resume", "stream_turn"]


async def stream_turn(
    host: Host,
    message: str,
    *,
    agent: str,
    conversation: str,
    session: SessionSelector = "bound",
    out: TextIO = sys.stdout,
) -> TurnResult:
    """Run a turn for the local terminal user, printing text deltas to ``out``."""
    request = TurnRequest(
        input=message,
        principal=ConversationFacts(
            channel="cli", conversation_key=conversation, principal_key="local-user"
        ),
        request_id=new_id("req"),
        core_id=agent,
        session=session,
    )
    return await _streamed(
        host,
        lambda event: event.request_id == request.request_id,
        lambda: host.turns.run(request),
        out,
    )


async def stream_answer(
    host: Host,
    approval_id: str,
    decision: ApprovalDecision,
    *,
    by: PrincipalScope,
    out: TextIO = sys.stdout,
) -> TurnResult:
    """Answer an approval and stream the continuation turn it runs.

    The continuation runs in the approval's session, and a session runs one
    turn at a time, so that session's events are the continuation's.
    """
    approval = await host.approvals.get(by, approval_id)
    return await _streamed(
        host,
        lambda event: event.session_id == approval.session_id,
        lambda: host.approvals.answer(approval_id, decision, by=by),
        out,
    )


async def stream_resume(
    host: Host, approval_id: str, *, by: PrincipalScope, out: TextIO = sys.stdout
) -> TurnResult:
    """Resume an answered approval and stream the continuation turn it runs (if any)."""
    approval = await host.approvals.get(by, approval_id)
    return await _streamed(
        host,
        lambda event: event.session_id == approval.session_id,
        lambda: host.approvals.resume(approval_id, by=by),
        out,
    )


async def _streamed(
    host: Host,
    accepts: Callable[[TurnEvent], bool],
    run_turn: Callable[[], Awaitable[TurnResult]],
    out: TextIO,
) -> TurnResult:
    result: TurnResult | None = None
    failure: HostkitError | None = None
    async with host.events.subscribe(accepts) as events:

        async def run() -> None:
            nonlocal result, failure
            try:
                result = await run_turn()
            except HostkitError as exc:
                failure = exc
            finally:
                tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            async for event in events:
                if event.kind == "text.delta":
                    out.write(str(event.data["text"]))
                    out.flush()
                elif event.kind == "provider.completed" and event.data.get("tool_calls"):
                    out.write(f"[calling {', '.join(event.data['tool_calls'])}]\n")
    out.write("\n")
    if failure is not None:
        raise failure
    assert result is not None
    return result
