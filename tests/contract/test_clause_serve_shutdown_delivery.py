"""Serve clause: a shutdown never posts one answer twice, answers a cut turn, and is not late.

``hostkit serve``'s daemon (in-process, on loopback) with Slack delivery to a
loopback fake. A send under way when SIGTERM's drain reaches delivery gets
what is left of the deadline; cut, it spends its attempt (``cut_off``,
retried after the backoff by the next process) and the daemon's last
delivery pass never sends it again. A routed turn the drain cut off gets the
"not answered" notice. While serving, a turn's end wakes delivery at once.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from hostkit.adapters.scripted import Reply, ScriptedModel
from hostkit.channels import sign_webhook
from hostkit.delivery import DeliveryPolicy
from hostkit.freeze import thaw
from hostkit.host import ConfiguredChannels, Host, HostDaemon, parse_config
from hostkit.store import LOST_NOTICE
from hostkit.testing import capabilities
from hostkit.types import ModelRequest
from tests.contract._delivery_hosts import ENV, SLACK_TOKEN, Clock, channel_tables, routed_turn
from tests.platforms import FakeSlack, WebhookReceiver

pytestmark = pytest.mark.anyio

HOOK_SECRET = ENV["HOOK_SECRET"]
# A send far longer than any bound below: a stop that waited for it could not pass them.
SEND_S = 10.0


def _config(tmp_path: Path, channels: dict[str, Any], drain_s: float) -> Any:
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "policy": {"allow": ["*"]}}},
            "channels": channels,
            "serve": {"port": 0, "drain_timeout_s": drain_s, "delivery_backoff_s": 2.0},
        },
        base_dir=tmp_path,
    )


@asynccontextmanager
async def host_of(config: Any, model: Any) -> AsyncIterator[Host]:
    caps = dataclasses.replace(
        capabilities(ScriptedModel([model], repeat_last=True)),
        channels=ConfiguredChannels(config, ENV),
    )
    async with Host.open(config, capabilities=caps) as host:
        yield host


async def test_a_send_cut_by_the_drain_is_posted_once_and_within_the_deadline(
    tmp_path: Path,
) -> None:
    drain_s = 2.0
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.slow_next(1, delay_s=SEND_S)
        config = _config(tmp_path, channel_tables(slack=slack.api_base), drain_s=drain_s)
        async with host_of(config, Reply("the answer")) as host:
            daemon = host.serve(env=ENV)
            async with anyio.create_task_group() as group:
                await group.start(daemon.run)
                (intent_id,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
                await slack.wait_for_requests(1)
                started = time.monotonic()
                exit_ = await daemon.shutdown(reason="SIGTERM")
                took = time.monotonic() - started
            row = await host.store.delivery.intent(intent_id)
    assert (exit_.code, exit_.cut) == (0, ())
    # One post reached Slack: the cut send was neither refunded nor re-sent by the last pass.
    assert len(slack.requests) == 1
    assert row is not None
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.last_error is not None
    assert row.last_error.startswith("cut_off")
    # The whole drain kept to drain_timeout_s (plus store round trips and a loaded machine's
    # scheduling), not twice it.
    assert took < 1.8 * drain_s


async def test_stop_within_bounds_the_grace_of_sends_in_flight(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.slow_next(1, delay_s=SEND_S)
        config = _config(tmp_path, channel_tables(slack=slack.api_base), drain_s=1.0)
        async with host_of(config, Reply("the answer")) as host:
            await routed_turn(host, "slack-acme", {"channel": "C1"})
            runtime = host.delivery_runtime(
                clock=clock, grace_s=30.0, policy=DeliveryPolicy(jitter=0.0)
            )
            async with anyio.create_task_group() as group:
                await group.start(runtime.run)
                await slack.wait_for_requests(1)
                started = time.monotonic()
                runtime.stop(within_s=0.2)
            took = time.monotonic() - started
            counts = await host.store.delivery.counts()
    # Within 0.2 s (plus recording the cut send), not the 30 s grace nor the send's 10 s.
    assert took < 3.0
    assert (counts.pending, counts.sending) == (1, 0)


class Stuck:
    """Answers "quick" at once; any other message blocks until the turn is cut off."""

    def __init__(self) -> None:
        self.entered = anyio.Event()

    async def __call__(self, request: ModelRequest) -> Reply:
        text = next(m.content for m in reversed(request.messages) if m.role == "user")
        if text == "quick":
            return Reply("quick answer")
        self.entered.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def _signed(event_id: str, text: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"event_id": event_id, "sender": "u1", "conversation": "room", "text": text}
    ).encode()
    headers = sign_webhook(HOOK_SECRET, body, timestamp=int(time.time()))
    return body, {**headers, "content-type": "application/json"}


@asynccontextmanager
async def hook_daemon(
    tmp_path: Path, model: Stuck, drain_s: float
) -> AsyncIterator[tuple[Host, HostDaemon, WebhookReceiver, httpx.AsyncClient]]:
    async with WebhookReceiver.running(secret=HOOK_SECRET) as receiver:
        config = _config(tmp_path, channel_tables(deliver_url=receiver.deliver_url), drain_s)
        async with host_of(config, model) as host:
            daemon = host.serve(env=ENV)
            async with anyio.create_task_group() as group:
                await group.start(daemon.run)
                assert daemon.url is not None
                async with httpx.AsyncClient(base_url=daemon.url, timeout=10) as client:
                    yield host, daemon, receiver, client
                if daemon.supervisor is not None and not daemon.supervisor.stopping:
                    await daemon.shutdown()


async def test_a_routed_turn_the_drain_cut_off_tells_its_conversation(tmp_path: Path) -> None:
    model = Stuck()
    # 4 s: delivery's share (a quarter, less the recording margin) sends the notice even
    # when a parallel test loads the machine.
    async with hook_daemon(tmp_path, model, drain_s=4.0) as (host, daemon, receiver, client):
        body, headers = _signed("evt-stuck", "stuck")
        accepted = await client.post("/channels/hook", content=body, headers=headers)
        assert accepted.status_code == 200
        with anyio.fail_after(10):
            await model.entered.wait()
        exit_ = await daemon.shutdown(reason="SIGTERM")
        intents = await host.store.delivery.intents()
    assert exit_.code == 0
    assert [thaw(i.payload) for i in intents] == [{"text": LOST_NOTICE}]
    # Delivery's own share of the deadline sent the notice before the process ended.
    assert [b["text"] for b in receiver.bodies()] == [LOST_NOTICE]


async def _delivered(host: Host) -> None:
    while (await host.store.delivery.counts()).delivered < 1:  # noqa: ASYNC110 - a store poll
        await anyio.sleep(0.02)


async def test_a_finished_turn_wakes_delivery_without_waiting_for_its_poll(
    tmp_path: Path,
) -> None:
    async with hook_daemon(tmp_path, Stuck(), drain_s=2.0) as (host, daemon, receiver, client):
        # Delivery's idle poll is out of the picture: only a wake can send the answer soon.
        daemon.delivery._idle_poll_s = 60.0
        daemon.delivery.wake()
        await anyio.sleep(0.1)
        body, headers = _signed("evt-quick", "quick")
        assert (await client.post("/channels/hook", content=body, headers=headers)).is_success
        with anyio.fail_after(5):
            await _delivered(host)
    assert [b["text"] for b in receiver.bodies()] == ["quick answer"]
