"""ChannelInbox clause: bad input on every method is ``InvalidValue`` and changes nothing.

Checked both through ``ChannelInbox`` and on the raw ``InboxStore`` adapter,
which must refuse the same arguments with the same limits (the in-memory
adapter is strict so embedders' tests cannot pass on input production
refuses).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import InvalidValue
from hostkit.inbox import RetryPolicy
from hostkit.store import MAX_CLAIM_BATCH, MAX_INBOX_LIST, InboxStore
from hostkit.types import ClaimedInbound, InboundFailure, InboundResult
from tests.contract._inbox_adapters import ADAPTERS, InboxUnderTest, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=3, lease_s=30.0)


async def snapshot(sut: InboxUnderTest) -> tuple[object, ...]:
    return (
        await sut.inbox.records(limit=MAX_INBOX_LIST),
        await sut.inbox.counts(),
        await sut.inbox.checkpoint("imap.support"),
    )


async def test_bad_input_through_the_inbox_changes_nothing(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        await sut.inbox.accept(envelope("evt-2"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        before = await snapshot(sut)
        bad_token = replace(claimed, claim_token="")
        bad_id = replace(claimed, inbound_id=42)  # type: ignore[arg-type]
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: sut.inbox.accept("evt-3"),  # type: ignore[arg-type]
            lambda: sut.inbox.accept_batch(envelope("evt-3")),  # type: ignore[arg-type]
            lambda: sut.inbox.accept_batch([envelope("evt-3"), None]),  # type: ignore[list-item]
            lambda: sut.inbox.accept_batch(42),  # type: ignore[arg-type]
            lambda: sut.inbox.accept_batch({envelope("evt-3")}),  # type: ignore[arg-type]
            lambda: sut.inbox.accept_batch([envelope("evt-3")], "cursor"),  # type: ignore[arg-type]
            lambda: sut.inbox.checkpoint(""),
            lambda: sut.inbox.checkpoint(None),  # type: ignore[arg-type]
            # A lone surrogate cannot be stored: refused alike, not a raw UnicodeEncodeError.
            lambda: sut.inbox.checkpoint("imap\udcff"),
            lambda: sut.inbox.record("inb_\udcff"),
            lambda: sut.inbox.records(channel_instance_id="telegram\udcff"),
            lambda: sut.inbox.complete(
                replace(claimed, claim_token="t\udcff"), InboundResult("ignored")
            ),
            lambda: sut.inbox.claim_batch(0),
            lambda: sut.inbox.complete("claim", InboundResult("ignored")),  # type: ignore[arg-type]
            lambda: sut.inbox.complete(claimed, "done"),  # type: ignore[arg-type]
            lambda: sut.inbox.complete(bad_token, InboundResult("ignored")),
            lambda: sut.inbox.complete(bad_id, InboundResult("ignored")),
            lambda: sut.inbox.fail(claimed, "boom"),  # type: ignore[arg-type]
            lambda: sut.inbox.fail(bad_token, InboundFailure("transient", "boom")),
            lambda: sut.inbox.release(None),  # type: ignore[arg-type]
            lambda: sut.inbox.release(bad_token),
            lambda: sut.inbox.extend(bad_id),
            lambda: sut.inbox.reserve_turn(bad_token),
            lambda: sut.inbox.records(state="finished"),  # type: ignore[arg-type]
            lambda: sut.inbox.records(limit=0),
            lambda: sut.inbox.records(limit=MAX_INBOX_LIST + 1),
            lambda: sut.inbox.records(channel_instance_id=""),
            lambda: sut.inbox.record(""),
            lambda: sut.inbox.record(None),  # type: ignore[arg-type]
        ]
        for index, call in enumerate(calls):
            with pytest.raises(InvalidValue):
                await call()
            assert await snapshot(sut) == before, f"call {index} changed the inbox"
        # The claim itself is untouched and still ends normally.
        done = await sut.inbox.complete(claimed, InboundResult("ignored"))
        assert done.disposition == "completed"


def store_calls(store: InboxStore, claimed: ClaimedInbound, now: float) -> list[Any]:
    token = claimed.claim_token
    inbound = claimed.inbound_id
    ok = {"owner": "worker.a", "now": now, "lease_s": 30.0, "limit": 1, "max_attempts": 3}
    claims = [
        {**ok, "owner": ""},
        {**ok, "owner": None},
        {**ok, "now": math.nan},
        {**ok, "now": -1.0},
        {**ok, "now": True},
        {**ok, "lease_s": 0.0},
        {**ok, "lease_s": math.inf},
        {**ok, "limit": 0},
        {**ok, "limit": MAX_CLAIM_BATCH + 1},
        {**ok, "limit": 1.0},
        {**ok, "max_attempts": 0},
        {**ok, "max_attempts": 101},
    ]
    result = InboundResult("ignored")
    failure = InboundFailure("transient", "boom")
    return [
        *(lambda kw=kw: store.claim(**kw) for kw in claims),
        lambda: store.accept([], None, now=now),
        lambda: store.accept([envelope("x")], None, now=math.nan),
        lambda: store.accept([envelope("x")], None, now=-5.0),
        lambda: store.room(None),  # type: ignore[arg-type]
        lambda: store.room(10),  # type: ignore[arg-type]
        lambda: store.checkpoint(""),
        lambda: store.reserve_turn(inbound, "", now=now),
        lambda: store.reserve_turn(inbound, token, now=math.inf),
        lambda: store.extend(inbound, token, now=now, lease_s=0.0),
        lambda: store.extend(inbound, token, now=now, lease_s=-3.0),
        lambda: store.complete(inbound, token, "done", now=now),  # type: ignore[arg-type]
        lambda: store.complete("", token, result, now=now),
        lambda: store.complete(inbound, token, result, now=math.nan),
        lambda: store.fail(inbound, token, "boom", retry_at=None, now=now),  # type: ignore[arg-type]
        lambda: store.fail(inbound, token, failure, retry_at=math.nan, now=now),
        lambda: store.fail(inbound, token, failure, retry_at=-1.0, now=now),
        lambda: store.fail(inbound, None, failure, retry_at=None, now=now),  # type: ignore[arg-type]
        lambda: store.release(inbound, token, now=-1.0),
        lambda: store.release(inbound, "x" * 257, now=now),
        lambda: store.requeue(inbound, reason="", actor="operator:ops", now=now),
        lambda: store.requeue(inbound, reason="fixed", actor="", now=now),
        lambda: store.requeue(inbound, reason="x" * 501, actor="operator:ops", now=now),
        lambda: store.requeue(inbound, reason="fixed", actor="operator:ops", now=math.nan),
        lambda: store.prune(payload_before=math.nan, tombstone_before=0.0, limit=1),
        lambda: store.prune(payload_before=0.0, tombstone_before=math.inf, limit=1),
        lambda: store.prune(payload_before=0.0, tombstone_before=0.0, limit=0),
        lambda: store.records(state="gone"),  # type: ignore[arg-type]
        lambda: store.records(limit=MAX_INBOX_LIST + 1),
        lambda: store.record(""),
    ]


async def test_bad_input_on_the_adapter_is_refused_alike(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        await sut.inbox.accept(envelope("evt-2"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        before = await snapshot(sut)
        for index, call in enumerate(store_calls(sut.store, claimed, sut.clock.now)):
            with pytest.raises(InvalidValue):
                await call()
            assert await snapshot(sut) == before, f"store call {index} changed the inbox"
        # Retention cut-offs may lie before the epoch (a young clock minus a long period).
        report = await sut.store.prune(payload_before=-10.0, tombstone_before=-5.0, limit=10)
        assert (report.payloads_cleared, report.tombstones_removed) == (0, 0)


async def test_a_failure_message_with_a_lone_surrogate_is_recorded(
    adapter: str, tmp_path: Path
) -> None:
    # An exception's text may hold one; it used to fail the SQLite write and leave the
    # inbound claimed until its lease ended, where the in-memory adapter retried it.
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        failure = InboundFailure("transient", "handler", "it broke: \ud83d")
        assert failure.message == "it broke: ?"
        decision = await sut.inbox.fail(claimed, failure)
        assert decision.disposition == "retry"
        (record,) = await sut.inbox.records()
        assert (record.state, record.attempt) == ("ready", 1)
        assert record.failure_message == "it broke: ?"


async def test_a_failure_message_with_a_nul_is_recorded(adapter: str, tmp_path: Path) -> None:
    # A platform's or a model's JSON "\u0000" decodes to one; PostgreSQL's text holds none,
    # so recording the failure failed there and left the inbound claimed, then exhausted.
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        failure = InboundFailure("permanent", "handler", "it broke: \x00 here")
        assert failure.message == "it broke: \ufffd here"
        decision = await sut.inbox.fail(claimed, failure)
        assert decision.disposition == "dead_lettered"
        (record,) = await sut.inbox.records()
        assert (record.state, record.failure_message) == ("dead_lettered", "it broke: \ufffd here")


async def test_a_nul_in_any_text_argument_is_refused_alike(adapter: str, tmp_path: Path) -> None:
    # PostgreSQL's text holds no NUL: it refused these (a raw "cannot store" even on a
    # read) where SQLite and the in-memory inbox answered, so the checks refuse it first.
    nul = "x\x00y"
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        before = await snapshot(sut)
        store, now = sut.store, sut.clock.now
        inbound, token = claimed.inbound_id, claimed.claim_token
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: store.claim(owner=nul, now=now, lease_s=30.0, limit=5, max_attempts=3),
            lambda: store.claimed_owners(after=nul),
            lambda: store.expire_claims([nul], now=now),
            lambda: store.bring_forward([nul], due_at=now, now=now),
            lambda: store.requeue(nul, reason="fixed", actor="operator:ops", now=now),
            lambda: store.requeue(inbound, reason="fix\x00ed", actor="operator:ops", now=now),
            lambda: store.requeue(inbound, reason="fixed", actor=nul, now=now),
            lambda: store.record(nul),
            lambda: store.records(channel_instance_id=nul),
            lambda: store.checkpoint(nul),
            lambda: store.reserve_turn(nul, token, now=now),
            lambda: store.reserve_turn(inbound, nul, now=now),
            lambda: store.extend(inbound, nul, now=now, lease_s=10.0),
            lambda: store.release(inbound, nul, now=now),
        ]
        for index, call in enumerate(calls):
            with pytest.raises(InvalidValue) as refused:
                await call()
            assert "PostgreSQL" not in str(refused.value), f"store call {index}"
            assert await snapshot(sut) == before, f"store call {index} changed the inbox"
