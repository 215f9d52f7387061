"""Running one turn from the terminal with its answer streamed as it arrives."""

from __future__ import annotations

import sys
from typing import TextIO

import anyio

from hostkit.errors import HostkitError
from hostkit.host import Host
from hostkit.types import ConversationFacts, SessionSelector, TurnRequest, TurnResult, new_id

__all__ = ["stream_turn"]


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
    result: TurnResult | None = None
    failure: HostkitError | None = None
    async with host.events.subscribe(lambda e: e.request_id == request.request_id) as events:

        async def run() -> None:
            nonlocal result, failure
            try:
                result = await host.turns.run(request)
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
