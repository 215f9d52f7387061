"""Delivery clause: an answer goes to the route its turn captured; completion is not delivery.

Real turns (scripted model) on the real SQLite store, delivered by the
Host's DeliveryRuntime to a loopback Slack.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hostkit.types import InboundEnvelope
from tests.contract._delivery_hosts import (
    SLACK_TOKEN,
    Clock,
    channel_host,
    channel_tables,
    routed_turn,
)
from tests.platforms import FakeSlack

pytestmark = pytest.mark.anyio


async def test_two_turns_in_one_conversation_keep_their_own_reply_targets(
    tmp_path: Path,
) -> None:
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        tables = channel_tables(slack=slack.api_base)
        async with channel_host(tmp_path, tables, answers=["first", "second"]) as host:
            first = await routed_turn(host, "slack-acme", {"channel": "C1", "thread_ts": "1.1"})
            # The conversation's reply target moves (another thread, another channel).
            second = await routed_turn(host, "slack-acme", {"channel": "C2"})
            assert first.session_id == second.session_id
            assert await host.delivery_runtime(clock=Clock()).drain() == 2
    sent = {
        m.body["metadata"]["event_payload"]["intent_id"]: (
            m.body["channel"],
            m.body.get("thread_ts"),
            m.body["text"],
        )
        for m in slack.messages
    }
    assert sent == {
        first.deliveries[0]: ("C1", "1.1", "first"),
        second.deliveries[0]: ("C2", None, "second"),
    }


async def test_inbox_completion_never_implies_delivery_success(tmp_path: Path) -> None:
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.fail_next(1, ok_false="not_in_channel")
        async with channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host:
            receipt = await host.inbox.accept(
                InboundEnvelope(
                    channel_instance_id="slack-acme",
                    platform_event_key="Ev1",
                    conversation_key="T1:C1:U1",
                    principal_key="U1",
                    authenticated_by="slack-signature",
                    received_at=time.time(),
                    payload="hello",
                    metadata={"reply": {"channel": "C1"}},
                )
            )
            assert await host.inbox_worker().drain() == 1
            runtime = host.delivery_runtime(clock=Clock())
            assert await runtime.drain() == 1
            record = await host.inbox.record(receipt.inbound_id)
            assert record is not None
            assert record.turn_id is not None
            (intent,) = await host.store.delivery.intents()
    # The inbound is done (its turn ran); its answer is a dead letter of its own.
    assert (record.state, record.result_kind) == ("completed", "turn")
    assert intent.turn_id == record.turn_id
    assert intent.route["reply"] == {"channel": "C1"}
    assert (intent.status, intent.last_error) == (
        "dead_lettered",
        "not_in_channel: slack refused the post",
    )
    assert slack.messages == []
