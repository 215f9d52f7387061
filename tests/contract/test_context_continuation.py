"""ContextManager clause: a continuation turn opens with the results of calls an earlier
turn made; the message holding those calls goes with them, whatever the history's room.

OpenAI ("tool must be a response to a preceding message with tool_calls") and
Anthropic (a tool_result whose tool_use_id matches nothing) both refuse a request
with a result no call precedes. The paused step's other results are what does not
fit: they are cut, as the current turn's own results are, never dropped with the call.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.context import CharEstimator
from hostkit.effects import ToolContext, tool
from hostkit.testing import CallTools, Reply, ScriptedModel
from hostkit.types import ModelLimits, ModelMessage, ModelRequest
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio


@tool("probe.part")
async def part(ctx: ToolContext, n: int) -> str:
    """A long part of a document."""
    return f"part {n}: " + "lorem ipsum dolor sit amet " * 400


@tool("probe.stamp")
async def stamp(ctx: ToolContext) -> str:
    """Asks first."""
    return "stamped"


def _orphans(messages: tuple[ModelMessage, ...]) -> list[str]:
    """Results whose call is not in the assistant message right before their run."""
    calls: set[str] = set()
    found = []
    for message in messages:
        if message.role == "tool":
            if message.tool_call_id not in calls:
                found.append(str(message.tool_call_id))
            continue
        calls = {call.call_id for call in message.tool_calls}
    return found


async def test_a_continuation_keeps_the_call_its_leading_result_answers(tmp_path: Path) -> None:
    # Six results near the view's bound and one call that asks: the paused step alone is
    # more than the 8,192-token window's room for history.
    model = ScriptedModel(
        [
            CallTools(*[("probe_part", {"n": n}) for n in range(6)], ("probe_stamp", {})),
            Reply("done"),
        ],
        limits=ModelLimits(context_window=8192, max_output_tokens=1024),
    )
    policy = {"allow": ["*"], "ask": ["probe.stamp"]}
    async with open_host(tmp_path, model, tools=[part, stamp], policy=policy) as host:
        paused = await host.turns.run(request("read six parts, then stamp"))
        assert paused.pending_approval is not None
        operator = await host.operator("ops", reason="answer")
        done = await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
    assert done.outcome == "completed", done.error
    continuation: ModelRequest = model.requests[-1]
    assert _orphans(continuation.messages) == []
    stamped = next(m for m in continuation.messages if m.content == "stamped")
    head = next(m for m in continuation.messages if m.tool_calls)
    assert stamped.tool_call_id in {call.call_id for call in head.tool_calls}
    # What did not fit was cut, not left out: every call still has its (shorter) result.
    results = [m for m in continuation.messages if m.role == "tool"]
    assert len(results) == 7
    assert sum(len(m.content) for m in results) < 6 * 8_000


async def test_a_continuation_cuts_the_carried_steps_long_text_not_the_turn(
    tmp_path: Path,
) -> None:
    """The paused step wrote 200,000 characters of text before its call that asks: the
    call still waits for its answer, and the continuation sends the step with its text's
    beginning and a note, its call and result whole, within the window."""
    text = "w" + "x" * 199_999
    model = ScriptedModel(
        [CallTools(("probe_stamp", {}), text=text), Reply("done")],
        limits=ModelLimits(context_window=8192, max_output_tokens=1024),
    )
    policy = {"allow": ["*"], "ask": ["probe.stamp"]}
    async with open_host(tmp_path, model, tools=[stamp], policy=policy) as host:
        paused = await host.turns.run(request("think, then stamp"))
        assert paused.pending_approval is not None, paused.error
        operator = await host.operator("ops", reason="answer")
        done = await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
    assert (done.outcome, done.error, done.text) == ("completed", None, "done")
    continuation: ModelRequest = model.requests[-1]
    assert CharEstimator().request(continuation.messages, continuation.tools) <= 8192
    assert _orphans(continuation.messages) == []
    head = next(m for m in continuation.messages if m.tool_calls)
    assert head.content.startswith("wxxx")
    assert head.content.endswith(" of 200,000 characters]")
    assert "stamped" in [m.content for m in continuation.messages if m.role == "tool"]
