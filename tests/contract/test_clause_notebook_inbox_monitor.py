"""Clause: the InboxMonitor shows the inbox per channel and requeues a dead letter with a reason.

Counts by state per channel instance and the dead letters (failure code
and message, attempts, requeues) are drawn from a real SQLite inbox; a
Requeue click opens a reason field, an empty reason is refused in the row
and sends nothing, a dead letter accepted without its text is offered no
requeue (the row says why), a reason requeues as the Host's operator scope and is
audited; refreshes run on the loop under a deadline and stop by
themselves. Headless (ipywidgets' dummy comm); the Host is real.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import ipywidgets as widgets
import pytest

import hostkit.notebook as hn
from hostkit.errors import InvalidValue, UserError
from hostkit.host import Host
from hostkit.inbox import ChannelInbox, RetryPolicy
from hostkit.inspect import inbox_view
from hostkit.notebook import InboxMonitor
from hostkit.notebook._inbox import NOT_REQUEUEABLE, REASON_REQUIRED
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import (
    UNPROCESSABLE,
    InboundEnvelope,
    InboundFailure,
    InboundResult,
    PrincipalScope,
)
from tests.hosts import config as host_config
from tests.hosts import open_host

pytestmark = pytest.mark.anyio

REASON = "the parser is fixed"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a kernel's loop is asyncio


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def envelope(channel: str, key: str) -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id=channel,
        platform_event_key=key,
        conversation_key=f"room-{key}",  # one conversation each: claimed together
        principal_key="ada",
        authenticated_by="test",
        received_at=1_800_000_000.0,
        payload="hello",
    )


@dataclass
class Inbox:
    host: Host
    inbox: ChannelInbox
    clock: Clock
    scope: PrincipalScope
    dead: str  # dead-lettered after its two transient attempts
    poison: str  # dead-lettered at once (permanent)


@pytest.fixture
async def made(tmp_path: Path) -> AsyncIterator[Inbox]:
    """demo.chat: one completed, one dead letter; demo.mail: one ready, one poison message."""
    clock = Clock()
    policy = RetryPolicy(max_attempts=2, base_delay_s=1.0, jitter=0.0, lease_s=30.0)
    async with open_host(tmp_path, ScriptedModel([Reply("-")])) as host:
        inbox = ChannelInbox.on_store(host.store, policy=policy, clock=clock)
        ids = {}
        for name, channel, key in (
            ("done", "demo.chat", "evt-1"),
            ("dead", "demo.chat", "evt-<b>2</b>"),
            ("poison", "demo.mail", "evt-3"),
            ("waiting", "demo.mail", "evt-4"),
        ):
            ids[name] = (await inbox.accept(envelope(channel, key))).inbound_id
            clock.now += 1
        claimed = {c.inbound_id: c for c in await inbox.claim_batch(4)}
        await inbox.complete(claimed[ids["done"]], InboundResult("ignored"))
        busy = InboundFailure("transient", "model_busy", "the model answered 529")
        await inbox.fail(claimed[ids["dead"]], busy)
        bad = InboundFailure("permanent", "unreadable", "cannot parse <script>x</script>")
        await inbox.fail(claimed[ids["poison"]], bad)
        await inbox.release(claimed[ids["waiting"]])
        clock.now += 10
        again = {c.inbound_id: c for c in await inbox.claim_batch(4)}
        await inbox.fail(again[ids["dead"]], busy)
        await inbox.release(again[ids["waiting"]])
        scope = await host.operator("ops-ada", reason="watch the inbox")
        yield Inbox(host, inbox, clock, scope, ids["dead"], ids["poison"])


async def until(predicate: Any) -> None:
    """Let the loop run (as an idle kernel does) until ``predicate`` holds, at most 5 s."""
    with anyio.fail_after(5):
        while not predicate():  # noqa: ASYNC110 (polling widget state, as a person looks)
            await asyncio.sleep(0.01)


async def requeue_audits(host: Host) -> list[Any]:
    reader = await host.operator("test", reason="read the audit")
    return list(await host.store.read_audit(reader, kind="inbox.requeue"))


async def test_counts_by_state_per_channel_and_each_dead_letter_with_its_failure(
    made: Inbox,
) -> None:
    monitor = await InboxMonitor.load(made.inbox, scope=made.scope)
    counts = {c.channel_instance_id: c for c in monitor.model.counts.channels}
    assert (counts["demo.chat"].completed, counts["demo.chat"].dead_lettered) == (1, 1)
    assert (counts["demo.mail"].ready, counts["demo.mail"].dead_lettered) == (1, 1)
    assert list(monitor.lines) == [made.poison, made.dead]  # newest first
    text = monitor.text()
    assert text.splitlines()[0] == "inbox: 1 ready, 0 claimed, 1 completed, 2 dead-lettered"
    assert any(line.split() == ["demo.chat", "0", "0", "1", "1"] for line in text.splitlines())
    assert any(line.split() == ["demo.mail", "1", "0", "0", "1"] for line in text.splitlines())
    dead = monitor.lines[made.dead].text()
    assert "attempts 2" in dead
    assert "requeues 0" in dead
    assert "model_busy: the model answered 529" in dead
    # Event keys and failure messages come from outside: escaped, never markup.
    drawn = (
        monitor.lines[made.poison].description.value + monitor.lines[made.dead].description.value
    )
    assert "<script>" not in drawn
    assert "&lt;script&gt;" in drawn
    assert "evt-&lt;b&gt;2&lt;/b&gt;" in drawn
    assert "<td>demo.mail</td>" in monitor.html()


async def test_the_text_view_shows_control_and_bidi_characters_as_escapes() -> None:
    inbox = ChannelInbox.in_memory()
    key = "evt-\x1b]0;owned\x07\x1b[2J\x9b31m\u202eevil"
    await inbox.accept(envelope("demo.chat", key))
    claimed = await inbox.claim()
    assert claimed is not None
    said = "boom \x1b[31mRED\x1b[0m \u2028 <script>x</script>"
    await inbox.fail(claimed, InboundFailure("permanent", "unreadable", said))
    monitor = await InboxMonitor.load(inbox)
    text = monitor._repr_mimebundle_()["text/plain"]
    assert all(line.isprintable() for line in text.splitlines())
    row = monitor.lines[claimed.inbound_id].text()
    assert "event evt-\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202eevil" in row
    assert "unreadable: boom \\x1b[31mRED\\x1b[0m \\u2028 <script>x</script>" in row
    assert all(ch.isprintable() for ch in monitor.lines[claimed.inbound_id].description.value)


async def test_an_empty_reason_is_refused_in_the_row_and_nothing_is_requeued(
    made: Inbox,
) -> None:
    monitor = await InboxMonitor.load(made.inbox, scope=made.scope)
    line = monitor.lines[made.dead]
    assert not line.asking
    line.requeue.click()
    assert line.asking  # the reason field and its confirm are shown
    line.reason.value = "   "
    line.confirm.click()
    await monitor.join()
    assert line.said == REASON_REQUIRED
    assert REASON_REQUIRED in line.message.value
    assert not line.confirm.disabled
    record = await made.inbox.record(made.dead)
    assert record is not None
    assert (record.state, record.requeues) == ("dead_lettered", 0)
    assert await requeue_audits(made.host) == []
    line.cancel.click()
    assert not line.asking
    assert line.said == ""


async def test_a_reason_requeues_as_the_operator_and_the_monitor_refreshes(
    made: Inbox,
) -> None:
    monitor = await InboxMonitor.load(made.inbox, scope=made.scope)
    line = monitor.lines[made.dead]
    line.requeue.click()
    line.reason.value = REASON
    line.confirm.click()
    await monitor.join()
    record = await made.inbox.record(made.dead)
    assert record is not None
    assert (record.state, record.attempt, record.requeues) == ("ready", 0, 1)
    audits = await requeue_audits(made.host)
    assert [(a.reason, a.principal_id) for a in audits] == [(REASON, "operator:ops-ada")]
    # Refreshed: the row left the dead letters, the counts moved, the status says what happened.
    assert list(monitor.lines) == [made.poison]
    chat = monitor.model.counts.of("demo.chat")
    assert (chat.ready, chat.dead_lettered) == (1, 0)
    assert monitor.status_text.startswith(f"requeued {made.dead} (demo.chat): ready, attempt 0")
    assert REASON in monitor.text()


async def test_a_failed_requeue_shows_why_in_the_row_and_can_be_tried_again(
    made: Inbox,
) -> None:
    monitor = await InboxMonitor.load(made.inbox, scope=made.scope)
    line = monitor.lines[made.dead]
    # Someone else requeues it first (another notebook, the CLI).
    await made.inbox.requeue(made.scope, made.dead, reason="requeued elsewhere")
    line.requeue.click()
    line.reason.value = REASON
    line.confirm.click()
    await monitor.join()
    assert line.said.startswith("error: ")
    assert not line.confirm.disabled  # the row outlives the failure
    assert len(await requeue_audits(made.host)) == 1


async def test_a_dead_letter_accepted_without_its_text_is_offered_no_requeue(
    made: Inbox,
) -> None:
    """The inbox refuses to requeue it (it would dead-letter again at once): its button
    is disabled with the reason as its tooltip, the row says why, and the other dead
    letters keep theirs."""
    textless = replace(envelope("demo.chat", "evt-long"), kind=UNPROCESSABLE, payload="")
    inbound_id = (await made.inbox.accept(textless)).inbound_id
    claimed = {c.inbound_id: c for c in await made.inbox.claim_batch(4)}
    too_long = InboundFailure("permanent", UNPROCESSABLE, "the event's text is too long")
    await made.inbox.fail(claimed.pop(inbound_id), too_long)
    for other in claimed.values():
        await made.inbox.release(other)
    monitor = await InboxMonitor.load(made.inbox, scope=made.scope)
    line = monitor.lines[inbound_id]
    assert line.requeue.disabled
    assert line.requeue.tooltip == NOT_REQUEUEABLE
    assert NOT_REQUEUEABLE in line.description.value
    assert NOT_REQUEUEABLE in line.text()
    for other in (made.dead, made.poison):
        assert not monitor.lines[other].requeue.disabled
        assert not monitor.lines[other].requeue.tooltip
        assert NOT_REQUEUEABLE not in monitor.lines[other].text()
    # A click that reaches it anyway opens no reason field and sends nothing.
    line.requeue.click()
    assert not line.asking
    line.reason.value = REASON
    line.confirm.click()
    await monitor.join()
    assert line.said == NOT_REQUEUEABLE
    record = await made.inbox.record(inbound_id)
    assert record is not None
    assert (record.state, record.requeues) == ("dead_lettered", 0)
    assert await requeue_audits(made.host) == []
    await monitor.refresh()
    assert monitor.lines[inbound_id].requeue.disabled


async def test_without_an_operator_scope_the_buttons_are_disabled(made: Inbox) -> None:
    monitor = await InboxMonitor.load(made.inbox)
    assert all(line.requeue.disabled for line in monitor.lines.values())
    line = monitor.lines[made.dead]
    line.reason.value = REASON
    line.confirm.click()  # a click that reaches it anyway sends nothing
    await monitor.join()
    record = await made.inbox.record(made.dead)
    assert record is not None
    assert record.state == "dead_lettered"


async def test_watch_refreshes_on_the_loop_keeps_a_typed_reason_and_stops_by_itself(
    made: Inbox,
) -> None:
    monitor = await InboxMonitor.load(made.inbox, scope=made.scope)
    line = monitor.lines[made.poison]
    line.requeue.click()
    line.reason.value = "typing a reason"
    task = monitor.watch(0.2, for_s=1.5)
    assert monitor.watching
    ticks = 0
    await made.inbox.accept(envelope("demo.sms", "evt-5"))

    async def ticking() -> None:  # the loop stays free while the monitor refreshes
        nonlocal ticks
        while not task.done():
            ticks += 1
            await asyncio.sleep(0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(ticking)
        await until(lambda: monitor.model.counts.of("demo.sms").ready == 1)
        assert monitor.lines[made.poison] is line
        assert line.reason.value == "typing a reason"  # a refresh keeps the row's widgets
        assert line.asking
        with anyio.fail_after(5):
            await task  # ends by itself after for_s
    assert ticks > 20
    assert not monitor.watching
    before = monitor.refreshed_at
    second = monitor.watch(0.2, for_s=60)
    # Stopped mid-watch (after a refresh, not before its first step): it ends cancelled.
    await until(lambda: monitor.refreshed_at != before)
    assert monitor.watching
    monitor.stop()
    with anyio.fail_after(5):
        await asyncio.wait({second})
    assert second.cancelled()  # stopped, not ended on its own after for_s
    assert not monitor.watching


async def test_bad_watch_bounds_and_a_monitor_outside_a_loop_are_refused(made: Inbox) -> None:
    monitor = await InboxMonitor.load(made.inbox, scope=made.scope)
    with pytest.raises(InvalidValue, match="every_s"):
        monitor.watch(0.0)
    with pytest.raises(InvalidValue, match="for_s"):
        monitor.watch(1.0, for_s=10_000)
    view = await inbox_view(made.inbox)

    def build() -> InboxMonitor:
        return InboxMonitor(made.inbox, view, scope=made.scope)

    with pytest.raises(UserError, match="running event loop"):
        await anyio.to_thread.run_sync(build)


async def test_nb_inbox_monitor_acts_as_an_audited_operator_and_stops_at_close(
    tmp_path: Path,
) -> None:
    nb = await hn.start(
        host_config(tmp_path), capabilities=capabilities(ScriptedModel([Reply("-")]))
    )
    try:
        inbox = ChannelInbox.on_store(nb.host.store)
        receipt = await inbox.accept(envelope("demo.chat", "evt-1"))
        claimed = await inbox.claim()
        assert claimed is not None
        await inbox.fail(claimed, InboundFailure("permanent", "unreadable", "no"))
        monitor = await nb.inbox_monitor(reason="notebook test")
        assert isinstance(monitor, widgets.VBox)
        assert monitor.watching
        assert list(monitor.lines) == [receipt.inbound_id]
        line = monitor.lines[receipt.inbound_id]
        line.requeue.click()
        line.reason.value = REASON
        line.confirm.click()
        await monitor.join()
        record = await inbox.record(receipt.inbound_id)
        assert record is not None
        assert record.state == "ready"
        audits = await requeue_audits(nb.host)
        assert [a.reason for a in audits] == [REASON]
    finally:
        await nb.aclose()
    assert not monitor.watching
