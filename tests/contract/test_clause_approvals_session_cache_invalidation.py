"""Clause: session approval cache invalidation.

"Session approval cache entries are invalidated on session end, authority or
conversation-binding change and revocation."

Alice answers "approve for session" once; after each event her next call in
that same session is asked again (the approver sees a second request). Without
the event the answer keeps applying (the control case).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from hostkit.effects import AuthoredTool, ToolContext, tool
from hostkit.host import Host, RuntimeCapabilities
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, TurnResult
from tests.contract.test_effects_approval_flow import (
    ASK,
    Approver,
    Stamps,
    host_config,
    stamp_call,
)
from tests.hosts import request

pytestmark = pytest.mark.anyio

ROOM = "room"
ALICE = ConversationFacts("test", ROOM, "alice")
BOB = ConversationFacts("test", ROOM, "bob")

Event = Callable[[Host, TurnResult, "Tools"], Awaitable[None]]


class Tools:
    """The stamp tool, and a second tool a capability change may add."""

    def __init__(self, tmp_path: Path, model: ScriptedModel) -> None:
        self.tmp_path = tmp_path
        self.model = model
        self.stamps = Stamps(tmp_path / "stamps.txt")

        @tool("files.note")
        async def note(ctx: ToolContext, text: str) -> str:
            """Take a note."""
            return text

        self.extra: AuthoredTool = note

    def capabilities(self, *extra: AuthoredTool) -> RuntimeCapabilities:
        return capabilities(self.model, tools=[self.stamps.tool, *extra])


async def nothing(host: Host, first: TurnResult, tools: Tools) -> None:
    """The control: no event, so the session approval still applies."""


async def session_replaced_and_resumed(host: Host, first: TurnResult, tools: Tools) -> None:
    """Session end: the conversation moves to a fresh session (no turn runs there), then back."""
    fresh = await host.authority.for_conversation(ALICE, session="fresh")
    assert fresh.session_id != first.session_id
    back = await host.authority.for_conversation(ALICE, session=first.session_id)
    assert back.session_id == first.session_id


async def binding_moved_by_another_principal(host: Host, first: TurnResult, tools: Tools) -> None:
    """A conversation-binding change made by bob, who shares the room, and undone."""
    moved = await host.authority.for_conversation(BOB, session="fresh")
    assert moved.session_id != first.session_id
    await host.authority.for_conversation(BOB, session=first.session_id)


async def authority_changed_and_restored(host: Host, first: TurnResult, tools: Tools) -> None:
    """The agent's grants change (a tool is added), then change back to exactly the old ones."""
    config = host_config(tools.tmp_path, ASK)
    await host.apply_config(config, capabilities=tools.capabilities(tools.extra))
    await host.apply_config(config, capabilities=tools.capabilities())


async def revoked(host: Host, first: TurnResult, tools: Tools) -> None:
    """Explicit revocation by the owner."""
    alice = await host.authority.for_conversation(ALICE)
    assert await host.approvals.revoke(alice, first.session_id) == 1


@pytest.mark.parametrize(
    ("event", "asked"),
    [
        (nothing, 1),
        (session_replaced_and_resumed, 2),
        (binding_moved_by_another_principal, 2),
        (authority_changed_and_restored, 2),
        (revoked, 2),
    ],
    ids=["control", "session_end", "binding_change", "authority_change", "revocation"],
)
async def test_session_cache_invalidation_after_each_event_the_approver_is_asked_again(
    tmp_path: Path, event: Event, asked: int
) -> None:
    model = ScriptedModel([stamp_call("a"), Reply("one"), stamp_call("b"), Reply("two")])
    tools = Tools(tmp_path, model)
    approver = Approver("approve_session")
    async with Host.open(
        host_config(tmp_path, ASK),
        capabilities=tools.capabilities(),
        approver=approver,
    ) as host:
        first = await host.turns.run(request("first", conversation=ROOM, principal="alice"))
        assert first.outcome == "completed", first
        assert len(approver.seen) == 1
        await event(host, first, tools)
        second = await host.turns.run(request("second", conversation=ROOM, principal="alice"))
        assert second.outcome == "completed", second
        assert second.session_id == first.session_id
    assert tools.stamps.lines() == ["a", "b"]
    assert len(approver.seen) == asked
    if asked == 2:
        assert approver.seen[1].key.session_id == first.session_id
