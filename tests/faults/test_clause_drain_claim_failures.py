"""Clause: a claim that failed never proves a drain idle, for the inbox and delivery alike.

``drain()`` returns its count only once a claim begun with nothing in flight
found nothing due. A claim that failed (another process holding the
database's lock past ``op_timeout_s``, a dropped PostgreSQL connection) found
nothing out, so the drain claims again after its pause; claims that keep
failing (``DRAIN_CLAIM_TRIES`` in a row, over at least ``op_timeout_s``) end it
with a ``StoreError`` saying the messages are kept, never a count as if done,
and everything due stays stored and due for a later drain. ``hostkit serve``'s
last delivery pass after a stop logs that error (its supervisor reports none
of a daemon it is stopping).

The failures are injected at the store seam: the real SQLite inbox's
``claim_batch`` and the real outbox's ``claim`` fail their first N calls,
raising a retryable ``StoreError`` or answering after the worker's
``op_timeout_s`` (it gives up on them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit._failed_claims import DRAIN_CLAIM_TRIES
from hostkit.adapters.scripted import Reply, ScriptedModel
from hostkit.errors import DatabaseReplaced, StoreError
from hostkit.host._bus import EventBus
from hostkit.host._serve import _Delivery
from hostkit.inbox import ChannelInbox
from hostkit.types import InboundEnvelope
from tests.contract._delivery_hosts import (
    SLACK_TOKEN,
    Clock,
    channel_host,
    channel_tables,
    routed_turn,
)
from tests.hosts import open_host
from tests.platforms import FakeSlack

pytestmark = pytest.mark.anyio

OP_TIMEOUT_S = 0.5
IDLE_POLL_S = 0.05
# Each claim ends within op_timeout_s, a pause apart: the drain's bound, and some slack.
GIVES_UP_WITHIN_S = (DRAIN_CLAIM_TRIES + 1) * (OP_TIMEOUT_S + IDLE_POLL_S) + 5.0
KEEPS_FAILING = 10**6


class FailingClaims:
    """A store's claim call whose first ``failures`` calls fail (``how``), then the real one."""

    def __init__(self, real: Callable[..., Awaitable[Any]], failures: int, how: str) -> None:
        self.real = real
        self.failures = failures
        self.how = how
        self.calls = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls > self.failures:
            return await self.real(*args, **kwargs)
        if self.how == "timeout":
            await anyio.sleep(60)  # the worker's op_timeout_s gives up first
        if self.how == "replaced":
            raise DatabaseReplaced("/srv/hostkit/hostkit.db")
        raise StoreError("database is locked", retryable=True)


def envelope(n: int) -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id="telegram.support",
        platform_event_key=f"update-{n}",
        conversation_key=f"chat-{n}",
        principal_key="alice",
        authenticated_by="bot_token",
        received_at=time.time(),
        payload=f"message {n}",
    )


# -- the inbox worker ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["error", "timeout"])
async def test_an_inbox_drain_claims_again_after_a_failed_claim_and_handles_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        inbox = ChannelInbox.on_store(host.store)
        ids = [(await inbox.accept(envelope(n))).inbound_id for n in range(3)]
        failing = FailingClaims(inbox.claim_batch, 1, how)
        monkeypatch.setattr(inbox, "claim_batch", failing)
        worker = host.inbox_worker(inbox=inbox, idle_poll_s=IDLE_POLL_S, op_timeout_s=OP_TIMEOUT_S)
        with anyio.fail_after(30):
            assert await worker.drain() == 3
        assert failing.calls > 1
        for inbound_id in ids:
            record = await inbox.record(inbound_id)
            assert record is not None
            assert record.state == "completed"


@pytest.mark.parametrize("how", ["error", "timeout"])
async def test_an_inbox_drain_whose_claims_keep_failing_raises_and_keeps_every_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        inbox = ChannelInbox.on_store(host.store)
        ids = [(await inbox.accept(envelope(n))).inbound_id for n in range(3)]
        real_claim = inbox.claim_batch
        failing = FailingClaims(real_claim, KEEPS_FAILING, how)
        monkeypatch.setattr(inbox, "claim_batch", failing)
        worker = host.inbox_worker(inbox=inbox, idle_poll_s=IDLE_POLL_S, op_timeout_s=OP_TIMEOUT_S)
        started = anyio.current_time()
        with anyio.fail_after(GIVES_UP_WITHIN_S), pytest.raises(StoreError) as caught:
            await worker.drain()
        took = anyio.current_time() - started
        # Given up only after a few tries over one store call's bound, not at the first.
        assert failing.calls >= DRAIN_CLAIM_TRIES
        assert took >= OP_TIMEOUT_S
        assert caught.value.retryable
        message = caught.value.message
        assert message.startswith("the inbox drain stopped:")
        assert "stay stored for a later run() or drain()" in message
        assert ("database is locked" if how == "error" else "op_timeout_s") in message
        assert not worker.running
        assert worker.handled == 0
        for inbound_id in ids:
            record = await inbox.record(inbound_id)
            assert record is not None
            assert (record.state, record.attempt) == ("ready", 0)
        # The store answers again: a later drain handles every message.
        monkeypatch.setattr(inbox, "claim_batch", real_claim)
        with anyio.fail_after(30):
            assert await worker.drain() == 3


async def test_a_drain_ended_by_a_failure_that_cannot_pass_is_not_retryable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        inbox = ChannelInbox.on_store(host.store)
        await inbox.accept(envelope(1))
        monkeypatch.setattr(
            inbox, "claim_batch", FailingClaims(inbox.claim_batch, KEEPS_FAILING, "replaced")
        )
        worker = host.inbox_worker(inbox=inbox, idle_poll_s=IDLE_POLL_S, op_timeout_s=OP_TIMEOUT_S)
        with anyio.fail_after(GIVES_UP_WITHIN_S), pytest.raises(StoreError) as caught:
            await worker.drain()
    assert not caught.value.retryable
    assert isinstance(caught.value.__cause__, DatabaseReplaced)
    assert "was deleted or replaced" in caught.value.message


# -- the delivery runtime --------------------------------------------------------------


@pytest.mark.parametrize("how", ["error", "timeout"])
async def test_a_delivery_drain_claims_again_after_a_failed_claim_and_sends_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    async with (
        FakeSlack.running(token=SLACK_TOKEN) as slack,
        channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host,
    ):
        ids = [
            (await routed_turn(host, "slack-acme", {"channel": "C1"}, conversation=c)).deliveries[0]
            for c in ("c1", "c2")
        ]
        runtime = host.delivery_runtime(
            clock=Clock(), idle_poll_s=IDLE_POLL_S, op_timeout_s=OP_TIMEOUT_S
        )
        failing = FailingClaims(runtime.store.claim, 1, how)
        monkeypatch.setattr(runtime.store, "claim", failing)
        with anyio.fail_after(30):
            assert await runtime.drain() == 2
        assert failing.calls > 1
        rows = [await host.store.delivery.intent(i) for i in ids]
        assert [row.status if row else None for row in rows] == ["delivered", "delivered"]
        assert len(slack.requests) == 2


@pytest.mark.parametrize("how", ["error", "timeout"])
async def test_a_delivery_drain_whose_claims_keep_failing_raises_and_keeps_every_intent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    async with (
        FakeSlack.running(token=SLACK_TOKEN) as slack,
        channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host,
    ):
        ids = [
            (await routed_turn(host, "slack-acme", {"channel": "C1"}, conversation=c)).deliveries[0]
            for c in ("c1", "c2")
        ]
        runtime = host.delivery_runtime(
            clock=Clock(), idle_poll_s=IDLE_POLL_S, op_timeout_s=OP_TIMEOUT_S
        )
        real_claim = runtime.store.claim
        failing = FailingClaims(real_claim, KEEPS_FAILING, how)
        monkeypatch.setattr(runtime.store, "claim", failing)
        started = anyio.current_time()
        with anyio.fail_after(GIVES_UP_WITHIN_S), pytest.raises(StoreError) as caught:
            await runtime.drain()
        took = anyio.current_time() - started
        assert failing.calls >= DRAIN_CLAIM_TRIES
        assert took >= OP_TIMEOUT_S
        assert caught.value.retryable
        message = caught.value.message
        assert message.startswith("the delivery drain stopped:")
        assert "stay stored for a later run() or drain()" in message
        assert not runtime.running
        rows = [await host.store.delivery.intent(i) for i in ids]
        assert [(row.status, row.attempts) if row else None for row in rows] == [
            ("pending", 0),
            ("pending", 0),
        ]
        assert slack.requests == []
        # The store answers again: a later drain sends every answer.
        monkeypatch.setattr(runtime.store, "claim", real_claim)
        with anyio.fail_after(30):
            assert await runtime.drain() == 2
        assert len(slack.requests) == 2


async def test_the_daemons_last_delivery_pass_says_its_claims_kept_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hostkit.serve")
    async with (
        FakeSlack.running(token=SLACK_TOKEN) as slack,
        channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host,
    ):
        (intent_id,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
        runtime = host.delivery_runtime(
            clock=Clock(), idle_poll_s=IDLE_POLL_S, op_timeout_s=OP_TIMEOUT_S
        )
        monkeypatch.setattr(
            runtime.store, "claim", FailingClaims(runtime.store.claim, KEEPS_FAILING, "error")
        )
        daemon = _Delivery(runtime, EventBus(), lambda: None)
        with anyio.fail_after(GIVES_UP_WITHIN_S):
            async with anyio.create_task_group() as group:
                await group.start(daemon.run)
                await daemon.stop()
        row = await host.store.delivery.intent(intent_id)
    assert row is not None
    assert row.status == "pending"
    (line,) = [r.getMessage() for r in caplog.records if r.name == "hostkit.serve"]
    assert line.startswith("delivery's last pass before exiting: the delivery drain stopped:")
    assert "stay stored for a later run() or drain()" in line
