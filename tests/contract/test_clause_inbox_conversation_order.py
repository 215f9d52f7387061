"""ChannelInbox clause: a conversation's inbounds are claimed one at a time, in accept order.

An inbound is not claimed while an older one of its conversation (same channel
instance and conversation key) is ``ready`` or ``claimed``: a chat's messages
are answered in the order they were sent, whichever worker or process claims,
after a lease expiry or a retry too, and a busy conversation holds one slot
while the others go on. A dead letter no longer holds its conversation back.
Conversations take turns by when they became eligible: when a claim ends its
conversation's turn, the next message is due from then, so a quiet conversation
is not kept waiting for busy ones' backlogs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.inbox import RetryPolicy
from hostkit.types import InboundFailure, InboundResult
from tests.contract._inbox_adapters import ADAPTERS, InboxUnderTest, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(lease_s=60.0, base_delay_s=10.0, jitter=0.0)


def keys(claimed: tuple[object, ...]) -> list[str]:
    return [c.envelope.platform_event_key for c in claimed]  # type: ignore[attr-defined]


async def due_at(sut: InboxUnderTest, key: str) -> float:
    """When the inbound with platform event key ``key`` is due (operators see it so)."""
    (record,) = [r for r in await sut.inbox.records(limit=100) if r.platform_event_key == key]
    assert record.due_at is not None
    return record.due_at


async def test_a_conversations_messages_are_claimed_one_at_a_time_in_accept_order(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        for key in ("a-1", "a-2", "b-1", "a-3", "b-2"):
            await sut.inbox.accept(envelope(key, conversation=key[0]))
        first = await sut.inbox.claim_batch(10)
        # One per conversation: the rest wait for the message before them.
        assert keys(first) == ["a-1", "b-1"]
        assert await sut.inbox.claim_batch(10) == ()
        held = {c.envelope.platform_event_key: c for c in first}
        await sut.inbox.complete(held["b-1"], InboundResult("ignored"))
        assert keys(await sut.inbox.claim_batch(10)) == ["b-2"]
        await sut.inbox.complete(held["a-1"], InboundResult("ignored"))
        (second,) = await sut.inbox.claim_batch(10)
        assert keys((second,)) == ["a-2"]
        # A message waiting for its retry holds the later ones of its conversation back.
        await sut.inbox.fail(second, InboundFailure("transient", "timeout"))
        assert await sut.inbox.claim_batch(10) == ()
        sut.clock.advance(10)
        (again,) = await sut.inbox.claim_batch(10)
        assert (keys((again,)), again.attempt) == (["a-2"], 2)
        # Dead-lettered, it no longer does.
        await sut.inbox.fail(again, InboundFailure("permanent", "unreadable"))
        assert keys(await sut.inbox.claim_batch(10)) == ["a-3"]


async def test_an_expired_lease_is_claimed_again_before_the_conversations_later_messages(
    adapter: str, tmp_path: Path
) -> None:
    """A worker that died holding a message: its successor answers that one first."""
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        for key in ("a-1", "a-2"):
            await sut.inbox.accept(envelope(key, conversation="a"))
        dead = sut.another(policy=POLICY, owner="worker.dead")
        assert keys(await dead.claim_batch(10)) == ["a-1"]
        assert await sut.inbox.claim_batch(10) == ()  # held, not expired
        sut.clock.advance(61)
        (taken,) = await sut.inbox.claim_batch(10)
        assert (keys((taken,)), taken.attempt) == (["a-1"], 2)
        await sut.inbox.complete(taken, InboundResult("ignored"))
        assert keys(await sut.inbox.claim_batch(10)) == ["a-2"]


async def test_the_same_conversation_key_on_two_channels_is_two_conversations(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("x-1", "chan.x", conversation="room"))
        await sut.inbox.accept(envelope("y-1", "chan.y", conversation="room"))
        assert sorted(keys(await sut.inbox.claim_batch(10))) == ["x-1", "y-1"]


async def test_a_requeued_dead_letter_goes_before_its_conversations_waiting_messages(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("a-1", conversation="a"))
        (poison,) = await sut.inbox.claim_batch(10)
        await sut.inbox.fail(poison, InboundFailure("permanent", "unreadable"))
        for key in ("a-2", "a-3"):
            await sut.inbox.accept(envelope(key, conversation="a"))
        (second,) = await sut.inbox.claim_batch(10)
        assert keys((second,)) == ["a-2"]
        await sut.inbox.complete(second, InboundResult("ignored"))
        await sut.inbox.requeue(sut.operator, poison.inbound_id, reason="parser fixed")
        assert keys(await sut.inbox.claim_batch(10)) == ["a-1"]
        assert await sut.inbox.claim_batch(10) == ()


async def test_a_quiet_conversation_is_claimed_in_the_next_round_not_after_the_backlogs(
    adapter: str, tmp_path: Path
) -> None:
    """Four busy conversations hold all four worker slots with backlogs queued; a quiet
    conversation's message accepted after their backlogs takes the first slot that frees
    (a conversation's next message is due from when its previous one ended), and every
    conversation still goes in its own order."""
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        busy = "abcd"
        await sut.inbox.accept_batch(
            [envelope(f"{c}-{i}", conversation=c) for i in range(10) for c in busy]
        )
        held = list(await sut.inbox.claim_batch(4))
        assert sorted(keys(tuple(held))) == ["a-0", "b-0", "c-0", "d-0"]
        sut.clock.advance(1)
        await sut.inbox.accept(envelope("q-0", conversation="q"))
        order: list[str] = []
        while held:
            sut.clock.advance(1)  # one turn of work
            await sut.inbox.complete(held.pop(0), InboundResult("ignored"))
            following = await sut.inbox.claim()
            if following is not None:
                held.append(following)
                order.append(following.envelope.platform_event_key)
        assert order[0] == "q-0"
        # The busy ones take turns too, each in its own accept order.
        assert order[1:5] == ["a-1", "b-1", "c-1", "d-1"]
        for c in busy:
            assert [k for k in order if k[0] == c] == [f"{c}-{i}" for i in range(1, 10)]


@pytest.mark.parametrize("end", ["completed", "dead_lettered"])
async def test_every_end_that_frees_a_conversation_sends_its_next_message_to_the_back(
    adapter: str, tmp_path: Path, end: str
) -> None:
    """One worker slot, one busy conversation: whether its message was answered or
    dead-lettered, its next message is due from that end, behind the quiet message
    accepted meanwhile."""
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept_batch([envelope(f"a-{i}", conversation="a") for i in range(3)])
        (first,) = await sut.inbox.claim_batch(1)
        sut.clock.advance(1)
        await sut.inbox.accept(envelope("q-0", conversation="q"))
        sut.clock.advance(1)
        if end == "completed":
            await sut.inbox.complete(first, InboundResult("ignored"))
        else:
            await sut.inbox.fail(first, InboundFailure("permanent", "unreadable"))
        assert (await due_at(sut, "a-1")) == sut.clock.now
        assert keys(await sut.inbox.claim_batch(1)) == ["q-0"]
        assert keys(await sut.inbox.claim_batch(1)) == ["a-1"]


async def test_a_lease_exhausted_on_its_last_attempt_sends_the_conversation_to_the_back(
    adapter: str, tmp_path: Path
) -> None:
    """A worker died on the message's last attempt: the claim that dead-letters it frees
    the conversation, whose next message is due from then (or is claimed at once)."""
    policy = RetryPolicy(lease_s=60.0, jitter=0.0, max_attempts=1)
    async with open_inbox(adapter, tmp_path, policy=policy) as sut:
        await sut.inbox.accept_batch([envelope(f"a-{i}", conversation="a") for i in range(3)])
        dead = sut.another(policy=policy, owner="worker.dead")
        (lost,) = await dead.claim_batch(1)
        sut.clock.advance(1)
        await sut.inbox.accept(envelope("q-0", conversation="q"))
        sut.clock.advance(61)
        assert keys(await sut.inbox.claim_batch(1)) == ["q-0"]
        taken = keys(await sut.inbox.claim_batch(1))  # dead-letters a-0 on the way
        record = await sut.inbox.record(lost.inbound_id)
        assert record is not None
        assert record.state == "dead_lettered"
        if not taken:
            assert (await due_at(sut, "a-1")) == sut.clock.now
            taken = keys(await sut.inbox.claim_batch(1))
        assert taken == ["a-1"]


async def test_a_deferred_next_message_keeps_its_later_due_time(
    adapter: str, tmp_path: Path
) -> None:
    """Ending a claim brings the conversation's next message no earlier than now, never
    earlier than it was due: a message deferred to later stays deferred."""
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("a-1", conversation="a"))
        (poison,) = await sut.inbox.claim_batch(1)
        await sut.inbox.fail(poison, InboundFailure("permanent", "unreadable"))
        await sut.inbox.accept(envelope("a-2", conversation="a"))
        (second,) = await sut.inbox.claim_batch(1)
        await sut.inbox.defer(second, since=None, until=sut.clock.now + 100)
        later = await due_at(sut, "a-2")
        assert later > sut.clock.now
        # The requeued dead letter goes first; its end leaves a-2's later due time alone.
        await sut.inbox.requeue(sut.operator, poison.inbound_id, reason="parser fixed")
        (again,) = await sut.inbox.claim_batch(1)
        assert keys((again,)) == ["a-1"]
        sut.clock.advance(1)
        await sut.inbox.complete(again, InboundResult("ignored"))
        assert (await due_at(sut, "a-2")) == later
        assert await sut.inbox.claim_batch(1) == ()
        sut.clock.advance(later - sut.clock.now)
        assert keys(await sut.inbox.claim_batch(1)) == ["a-2"]
