"""Clause: an inbound turn of a configured channel captures its reply route; others none.

"Delivery tasks resolve the turn's captured route": the route is fixed when
the inbound becomes a turn (TurnRequest.route, from the authenticated channel
instance and conversation plus the transport's ``metadata["reply"]``), written
with the terminal turn into the outbox, and grants no authority. A channel
not configured under ``[channels]`` (the CLI, a notebook, a test source)
keeps today's behaviour: no route, no outbox intent. A real Host on SQLite
with a scripted model.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from hostkit.effects import AuthoredTool
from hostkit.host import Host, HostConfig, parse_config
from hostkit.inbox import ChannelInbox, InboxWorker
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import ClaimedInbound, InboundEnvelope, InboundResult, TurnRequest, TurnResult
from tests.hosts import turn_rows

pytestmark = pytest.mark.anyio

SLACK = "slack-acme"
HOOK = "hook-ops"
UNCONFIGURED = "telegram.support"
RECEIVE_ONLY = "hook-in"


def channel_config(
    tmp_path: Path, *, policy: Mapping[str, Any] | None = None, timeout_s: float = 5.0
) -> HostConfig:
    """Two agents; a slack channel answered by ``helper`` and a webhook one by ``assistant``."""
    agent = {"provider": "test", "memory": False, "policy": dict(policy or {"allow": ["*"]})}
    return parse_config(
        {
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "workspace": str(tmp_path),
                "approval_timeout_s": timeout_s,
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": agent, "helper": agent},
            "channels": {
                SLACK: {
                    "kind": "slack",
                    "agent": "helper",
                    "secret_env": "TEST_SLACK_SECRET",
                    "token_env": "TEST_SLACK_TOKEN",
                    "allow": ["*"],
                },
                HOOK: {
                    "kind": "webhook",
                    "secret_env": "TEST_HOOK_SECRET",
                    "deliver_url": "https://hooks.example.test/answers",
                },
                RECEIVE_ONLY: {"kind": "webhook", "secret_env": "TEST_HOOK_SECRET"},
            },
        },
        base_dir=tmp_path,
    )


@asynccontextmanager
async def channel_host(
    tmp_path: Path,
    model: ScriptedModel,
    *,
    tools: Sequence[AuthoredTool] = (),
    policy: Mapping[str, Any] | None = None,
) -> AsyncIterator[Host]:
    async with Host.open(
        channel_config(tmp_path, policy=policy), capabilities=capabilities(model, tools=tools)
    ) as host:
        yield host


_events = iter(range(1, 1_000_000))


def inbound(
    text: str,
    *,
    channel: str = SLACK,
    conversation: str = "T1:C1:U1",
    principal: str = "U1",
    kind: str = "message",
    metadata: Mapping[str, Any] | None = None,
    event: str | None = None,
) -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id=channel,
        platform_event_key=event or f"Ev{next(_events)}",
        conversation_key=conversation,
        principal_key=principal,
        authenticated_by="slack-signature",
        received_at=time.time(),
        kind=kind,
        payload=text,
        metadata=dict({"reply": {"channel": "C1"}} if metadata is None else metadata),
    )


async def accept(host: Host, envelope: InboundEnvelope) -> str:
    receipt = await host.inbox.accept(envelope)
    assert receipt.disposition == "accepted"
    return receipt.inbound_id


async def turn_of(host: Host, inbound_id: str) -> str:
    record = await host.inbox.record(inbound_id)
    assert record is not None
    assert record.turn_id is not None, record
    return record.turn_id


async def outbox(host: Host, turn_id: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(route, payload) of every outbox intent of ``turn_id``, oldest first."""
    rows = await host.store.read(
        lambda c: c.execute(
            "SELECT route, payload FROM outbox WHERE turn_id = ? ORDER BY id", [turn_id]
        ).fetchall()
    )
    return [(json.loads(route), json.loads(payload)) for route, payload in rows]


async def core_of(host: Host, turn_id: str) -> str:
    rows = await host.store.read(
        lambda c: c.execute("SELECT core_id FROM turns WHERE turn_id = ?", [turn_id]).fetchall()
    )
    return str(rows[0][0])


def worker(host: Host, **options: Any) -> InboxWorker:
    return host.inbox_worker(idle_poll_s=0.05, **options)


async def test_a_configured_channels_turn_captures_its_reply_route_and_agent(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Reply("hello there")], repeat_last=True)
    async with channel_host(tmp_path, model) as host:
        inbound_id = await accept(
            host, inbound("hi", metadata={"reply": {"channel": "C1", "thread_ts": "17.5"}})
        )
        assert await worker(host).drain() == 1
        turn_id = await turn_of(host, inbound_id)
        # Answered by the channel's configured agent, not the worker's default.
        assert await core_of(host, turn_id) == "helper"
        assert await outbox(host, turn_id) == [
            (
                {
                    "channel": SLACK,
                    "conversation": "T1:C1:U1",
                    "reply": {"channel": "C1", "thread_ts": "17.5"},
                },
                {"text": "hello there", "turn_id": turn_id, "part": 1, "parts": 1},
            )
        ]


async def test_an_unconfigured_channels_turn_has_no_route_and_writes_no_intent(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Reply("hello there")], repeat_last=True)
    async with channel_host(tmp_path, model) as host:
        inbound_id = await accept(host, inbound("hi", channel=UNCONFIGURED))
        assert await worker(host, agent="helper").drain() == 1
        turn_id = await turn_of(host, inbound_id)
        assert [status for _, status in await turn_rows(host)] == ["completed"]
        assert await core_of(host, turn_id) == "helper"  # the worker's ``agent``
        assert await outbox(host, turn_id) == []


async def test_a_channel_that_only_receives_writes_no_intent(tmp_path: Path) -> None:
    """A webhook channel without deliver_url only receives: an intent for it could only be
    dead-lettered as if the channel were missing."""
    model = ScriptedModel([Reply("hello there")], repeat_last=True)
    async with channel_host(tmp_path, model) as host:
        inbound_id = await accept(
            host, inbound("hi", channel=RECEIVE_ONLY, conversation="c1:bob", principal="bob")
        )
        assert await worker(host).drain() == 1
        turn_id = await turn_of(host, inbound_id)
        assert [status for _, status in await turn_rows(host)] == ["completed"]
        assert await outbox(host, turn_id) == []


async def test_the_route_comes_from_authenticated_fields_and_the_reply_target_only(
    tmp_path: Path,
) -> None:
    """Forged metadata beside the reply target reaches neither the route nor the principal;
    a missing reply target is an empty one (delivery fails it closed as a bad route)."""
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    async with channel_host(tmp_path, model) as host:
        forged = await accept(
            host,
            inbound(
                "hi",
                channel=HOOK,
                conversation="room-9:bob",
                principal="bob",
                metadata={
                    "reply": {"conversation": "room-9"},
                    "channel": SLACK,
                    "conversation": "someone-else",
                    "principal_key": "root",
                },
            ),
        )
        bare = await accept(host, inbound("hi", channel=HOOK, conversation="c2:eve", metadata={}))
        assert await worker(host).drain() == 2
        forged_turn = await turn_of(host, forged)
        ((route, _),) = await outbox(host, forged_turn)
        assert route == {
            "channel": HOOK,
            "conversation": "room-9:bob",
            "reply": {"conversation": "room-9"},
        }
        ((bare_route, _),) = await outbox(host, await turn_of(host, bare))
        assert bare_route == {"channel": HOOK, "conversation": "c2:eve", "reply": {}}
        principals = await host.store.read(
            lambda c: c.execute(
                "SELECT principal_id FROM turns WHERE turn_id = ?", [forged_turn]
            ).fetchall()
        )
        assert [p for (p,) in principals] == [f"{HOOK}:bob"]


async def test_an_explicit_agent_route_keeps_the_reply_route(tmp_path: Path) -> None:
    """``hostkit serve`` passes its own channel -> agent map: delivery still gets the route."""
    model = ScriptedModel([Reply("routed")], repeat_last=True)
    async with channel_host(tmp_path, model) as host:
        inbound_id = await accept(host, inbound("hi"))
        assert await worker(host, route=lambda _channel: "assistant").drain() == 1
        turn_id = await turn_of(host, inbound_id)
        assert await core_of(host, turn_id) == "assistant"
        ((route, payload),) = await outbox(host, turn_id)
        assert (route["channel"], route["reply"], payload) == (
            SLACK,
            {"channel": "C1"},
            {"text": "routed", "turn_id": turn_id, "part": 1, "parts": 1},
        )


async def test_the_worker_hands_reply_routes_and_commands_to_its_callables(
    tmp_path: Path,
) -> None:
    """The seam itself: ``reply_route`` fills TurnRequest.route; a command goes to
    ``run_command`` and its result ends the inbound; without one it is ignored."""
    inbox = ChannelInbox.in_memory()
    seen: list[TurnRequest] = []
    commands: list[str] = []
    results: list[InboundResult] = []

    async def run_turn(request: TurnRequest) -> TurnResult:
        seen.append(request)
        return TurnResult(
            request_id=request.request_id,
            turn_id=f"turn_{len(seen)}",
            session_id="sess_1",
            core_id=request.core_id,
            core_revision="r1",
            outcome="completed",
            text="ok",
            durable_result_ref=f"turn_{len(seen)}",
            generation=1,
        )

    async def run_command(claimed: ClaimedInbound) -> InboundResult:
        commands.append(claimed.envelope.payload)
        results.append(InboundResult("command", turn_id="turn_c", outcome="answered"))
        return results[-1]

    def reply_route(envelope: InboundEnvelope) -> Mapping[str, Any] | None:
        return {"channel": envelope.channel_instance_id, "reply": dict(envelope.metadata["reply"])}

    message = await inbox.accept(inbound("hi"))
    command = await inbox.accept(inbound("approve ABCDEF", kind="command"))
    with_commands = InboxWorker(
        inbox, run_turn, reply_route=reply_route, run_command=run_command, idle_poll_s=0.05
    )
    assert await with_commands.drain() == 2
    (request,) = seen
    assert dict(request.route or {}) == {"channel": SLACK, "reply": {"channel": "C1"}}
    assert commands == ["approve ABCDEF"]
    record = await inbox.record(command.inbound_id)
    assert record is not None
    assert (record.state, record.result_kind, record.turn_id) == ("completed", "command", "turn_c")
    message_record = await inbox.record(message.inbound_id)
    assert message_record is not None
    assert message_record.result_kind == "turn"

    ignored = await inbox.accept(inbound("approve ABCDEF", kind="command"))
    assert await InboxWorker(inbox, run_turn, idle_poll_s=0.05).drain() == 1
    record = await inbox.record(ignored.inbound_id)
    assert record is not None
    assert record.result_kind == "ignored"
    assert commands == ["approve ABCDEF"]
    assert len(seen) == 1
