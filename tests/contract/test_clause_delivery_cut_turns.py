"""Delivery clause: a routed turn the Host cut off tells its conversation; a user's cancel does not.

A turn cut by the Host or its caller (a shutdown's drain, a deadline) ends
``cancelled`` with ``cancelled_by`` "host"/"caller": the person's message was
acknowledged and got no answer, so the same notice recovery writes for a
``lost`` turn is committed with its terminal record. A person's own cancel
(``cancelled_by`` "user") writes nothing. Real Host, real SQLite outbox.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from hostkit.adapters.scripted import ScriptedModel
from hostkit.effects import ToolContext, tool
from hostkit.freeze import thaw
from hostkit.host import Host
from hostkit.store import INDETERMINATE_NOTICE, LOST_NOTICE
from hostkit.testing import CallTools, Reply, capabilities
from hostkit.types import ConversationFacts, ModelRequest, TurnRequest, TurnResult, new_id
from tests.contract._delivery_hosts import ENV, channel_tables, configured_channels, host_config
from tests.hosts import turn_rows

pytestmark = pytest.mark.anyio


class Blocked:
    """A provider step that blocks until cancelled."""

    def __init__(self) -> None:
        self.entered = anyio.Event()

    async def __call__(self, request: ModelRequest) -> Reply:
        self.entered.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


@asynccontextmanager
async def blocked_host(tmp_path: Path, blocked: Blocked) -> AsyncIterator[Host]:
    config = host_config(tmp_path, channel_tables(slack="http://127.0.0.1:9/api"))
    caps = dataclasses.replace(
        capabilities(ScriptedModel([blocked])), channels=await configured_channels(config, ENV)
    )
    async with Host.open(config, capabilities=caps) as host:
        yield host


def routed(conversation: str) -> TurnRequest:
    return TurnRequest(
        input="hello",
        principal=ConversationFacts(
            channel="slack-acme", conversation_key=conversation, principal_key="U1"
        ),
        request_id=new_id("req"),
        core_id="assistant",
        route={"channel": "slack-acme", "conversation": conversation, "reply": {"channel": "C1"}},
    )


async def test_a_routed_turn_its_caller_cut_off_sends_the_unanswered_notice(
    tmp_path: Path,
) -> None:
    blocked = Blocked()
    async with blocked_host(tmp_path, blocked) as host:
        async with anyio.create_task_group() as group:
            group.start_soon(host.turns.run, routed("c1"))
            await blocked.entered.wait()
            # What the inbox worker does to a turn still running at the end of its grace.
            group.cancel_scope.cancel()
        intents = await host.store.delivery.intents()
    assert len(intents) == 1
    assert thaw(intents[0].payload) == {"text": LOST_NOTICE}
    assert thaw(intents[0].route)["reply"] == {"channel": "C1"}
    assert "stopped or restarted" in LOST_NOTICE


async def test_a_routed_turn_the_user_cancelled_sends_nothing(tmp_path: Path) -> None:
    blocked = Blocked()
    async with blocked_host(tmp_path, blocked) as host:
        results: list[TurnResult] = []
        turn_request = routed("c2")

        async def run() -> None:
            results.append(await host.turns.run(turn_request))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await blocked.entered.wait()
            facts = turn_request.principal
            assert isinstance(facts, ConversationFacts)
            owner = await host.authority.for_conversation(facts)
            ((turn_id, _),) = await turn_rows(host)
            await host.turns.cancel(turn_id, owner)
        intents = await host.store.delivery.intents()
    assert (results[0].outcome, results[0].cancelled_by) == ("cancelled", "user")
    assert results[0].deliveries == ()
    assert intents == ()


async def test_a_routed_turn_cut_off_while_its_call_ran_says_it_may_have_acted(
    tmp_path: Path,
) -> None:
    """A drain that cuts a turn off in the middle of a tool call ends it ``indeterminate``:
    the call may have acted, so the person is not invited to send the message again
    unchecked (that could make it act twice)."""
    running = anyio.Event()

    @tool("work.slow")
    async def slow(ctx: ToolContext) -> str:
        """Acts, then takes its time."""
        running.set()
        await anyio.sleep_forever()
        return "never"

    config = host_config(tmp_path, channel_tables(slack="http://127.0.0.1:9/api"))
    model = ScriptedModel([CallTools(("work_slow", {})), Reply("never")])
    caps = dataclasses.replace(
        capabilities(model, tools=[slow]), channels=await configured_channels(config, ENV)
    )
    async with Host.open(config, capabilities=caps) as host:
        async with anyio.create_task_group() as group:
            group.start_soon(host.turns.run, routed("c3"))
            with anyio.fail_after(30):
                await running.wait()
            group.cancel_scope.cancel()  # the inbox worker's end of grace
        intents = await host.store.delivery.intents()
        ((_, status),) = await turn_rows(host)
    assert status == "indeterminate"
    assert [thaw(intent.payload) for intent in intents] == [{"text": INDETERMINATE_NOTICE}]
    assert "Please send it again" not in INDETERMINATE_NOTICE
    assert "check before you send it again" in INDETERMINATE_NOTICE
