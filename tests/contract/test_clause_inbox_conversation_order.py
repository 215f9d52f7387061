"""ChannelInbox clause: a conversation's inbounds are claimed one at a time, in accept order.

An inbound is not claimed while an older one of its conversation (same channel
instance and conversation key) is ``ready`` or ``claimed``: a chat's messages
are answered in the order they were sent, whichever worker or process claims,
after a lease expiry or a retry too, and a busy conversation holds one slot
while the others go on. A dead letter no longer holds its conversation back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.inbox import RetryPolicy
from hostkit.types import InboundFailure, InboundResult
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(lease_s=60.0, base_delay_s=10.0, jitter=0.0)


def keys(claimed: tuple[object, ...]) -> list[str]:
    return [c.envelope.platform_event_key for c in claimed]  # type: ignore[attr-defined]


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
