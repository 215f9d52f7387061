"""Clause: the sender of a message the channel accepted without its text is told so.

A channel accepts an event whose text the inbox cannot keep (too long, a
NUL) without it, as kind ``unprocessable``, and the worker dead-letters it:
no turn will ever answer it. Its sender gets one reply on their own route
(``UNREAD_NOTICE``: never the reason, which quotes the event), written once
per inbound, so a repeat of the attempt writes none. A channel with no
delivery (no route) sends nothing. Real Host, real SQLite inbox and outbox.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from hostkit.errors import InvalidValue
from hostkit.host._inbound import UNREAD_NOTICE
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import UNPROCESSABLE, InboundEnvelope
from tests.contract.test_clause_channel_approvals import ROUTE, replies
from tests.contract.test_clause_inbound_route import accept, channel_host, inbound

pytestmark = pytest.mark.anyio


def unread(text: str = "", **fields: str) -> InboundEnvelope:
    """As a channel accepts an event whose text it cannot keep: its reply target kept."""
    envelope = inbound(text, **fields)
    return dataclasses.replace(
        envelope,
        kind=UNPROCESSABLE,
        metadata={**envelope.metadata, UNPROCESSABLE: "the text is over 65536 characters"},
    )


async def test_the_sender_of_an_unreadable_message_is_told_once(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("never")], repeat_last=True)
    async with channel_host(tmp_path, model) as host:
        inbound_id = await accept(host, unread())
        assert await host.inbox_worker(idle_poll_s=0.05).drain() == 1
        record = await host.inbox.record(inbound_id)
        assert (record.state, record.failure_code) == ("dead_lettered", UNPROCESSABLE)
        ((route, said),) = await replies(host, inbound_id)
        assert route == ROUTE
        assert said == {"text": UNREAD_NOTICE}
        assert "65536" not in said["text"]
        # An operator's requeue is refused: it would only dead-letter it again.
        operator = await host.operator("ops", reason="requeue it anyway")
        with pytest.raises(InvalidValue, match="without its text"):
            await host.inbox.requeue(operator, inbound_id, reason="try again")
        # Requeued in the store directly (or before that refusal) and failing again:
        # still one reply.
        await host.store.inbox.requeue(
            inbound_id, reason="try again", actor=operator.principal_id, now=time.time()
        )
        assert await host.inbox_worker(idle_poll_s=0.05).drain() == 1
        assert len(await replies(host, inbound_id)) == 1
        assert model.requests == []  # no turn, ever


async def test_a_channel_without_delivery_tells_nothing(tmp_path: Path) -> None:
    async with channel_host(tmp_path, ScriptedModel([Reply("never")])) as host:
        inbound_id = await accept(host, unread(channel="elsewhere.chat"))
        assert await host.inbox_worker(idle_poll_s=0.05).drain() == 1
        assert (await host.inbox.record(inbound_id)).state == "dead_lettered"
        assert await replies(host, inbound_id) == []
