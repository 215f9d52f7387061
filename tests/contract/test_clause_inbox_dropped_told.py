"""Clause: the sender of a message dead-lettered after its last transient failure is told.

A message whose attempts all failed for a reason not about it (its session busy past
the admission deadline with a turn started elsewhere, a store or service that never
came back) is dead-lettered with no turn to answer it. Its sender gets one reply on
their own route (``DROPPED_NOTICE``: not to just send it again, since a turn may have
started before it stopped), rather than the conversation's next message being answered
as if it had never been sent. Real Host, real SQLite inbox and outbox.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.host import Host
from hostkit.host._inbound import DROPPED_NOTICE
from hostkit.inbox import ChannelInbox, RetryPolicy
from hostkit.testing import ScriptedModel, capabilities
from hostkit.types import ConversationFacts, TurnRequest, new_id
from tests.contract.test_clause_channel_approvals import ALICE, ROUTE, replies, script
from tests.contract.test_clause_inbound_route import SLACK, accept, channel_config, inbound

pytestmark = pytest.mark.anyio


async def test_a_message_dropped_after_its_last_transient_failure_is_told_once(
    tmp_path: Path,
) -> None:
    entered, release = anyio.Event(), anyio.Event()

    @tool("files.stamp")
    async def stamp(ctx: ToolContext, label: str, api_key: str = "") -> str:
        """Stamp, holding the session until the test lets go."""
        entered.set()
        await release.wait()
        return f"stamped {label}"

    config = channel_config(tmp_path)
    config = config.model_copy(
        update={"host": config.host.model_copy(update={"admission_timeout_s": 0.5})}
    )
    model = ScriptedModel([script], repeat_last=True)
    async with Host.open(config, capabilities=capabilities(model, tools=[stamp])) as host:
        alice = ConversationFacts(SLACK, ALICE["conversation"], ALICE["principal"])
        elsewhere = TurnRequest(
            input="stamp it", principal=alice, request_id=new_id("req"), core_id="helper"
        )
        async with anyio.create_task_group() as group:
            group.start_soon(host.turns.run, elsewhere)  # the session, busy with another turn
            with anyio.fail_after(10):
                await entered.wait()
            inbound_id = await accept(host, inbound("first", **ALICE))
            once = ChannelInbox.on_store(host.store, policy=RetryPolicy(max_attempts=1))
            assert await host.inbox_worker(inbox=once, idle_poll_s=0.05).drain() == 1
            record = await host.inbox.record(inbound_id)
            assert (record.state, record.failure_code) == ("dead_lettered", "turn_rejected")
            ((route, said),) = await replies(host, inbound_id)
            assert (route, said) == (ROUTE, {"text": DROPPED_NOTICE})
            # Requeued and dropped again: still one reply.
            operator = await host.operator("ops", reason="try it again")
            await host.inbox.requeue(operator, inbound_id, reason="try again")
            assert await host.inbox_worker(inbox=once, idle_poll_s=0.05).drain() == 1
            assert len(await replies(host, inbound_id)) == 1
            release.set()
