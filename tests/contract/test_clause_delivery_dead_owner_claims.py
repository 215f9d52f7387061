"""Delivery clause: the claims of a provably dead owner are taken over at once.

The inbox's rule for its claims holds for delivery claims too. A Host killed
mid-send leaves its intents ``sending`` until their leases run out; every
claim names its owner, and a successor that proves the owner dead
(``owner_is_dead``) makes its intents due now. A live, remote or
unparseable owner keeps its lease. The claim token stays (the dead token is
refused once the intent is claimed again) and the attempt stays spent (an
intent whose send kills its Host every time still reaches its dead letter).
``DeliveryRuntime`` recovers when it starts serving. No lease expires in
these tests: every claim here is made and recovered at one instant.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.delivery import DeliveryPolicy, DeliveryRuntime
from hostkit.errors import StaleClaim
from hostkit.store import DELIVERY_ATTEMPTS_EXHAUSTED, MAX_CLAIM_OWNERS, LeaseOwner
from hostkit.types import ClaimedDelivery
from tests.contract._delivery_adapters import ADAPTERS, DeliveryUnderTest, open_delivery
from tests.support import dead_owner, this_process

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

LEASE_S = 60.0
# On another machine: only its lease expiry may end its claims.
REMOTE = LeaseOwner("another-machine", 4242, 1.0, "remote-instance").encode()


async def claim_as(
    sut: DeliveryUnderTest, owner: str, now: float, *, max_attempts: int = 3
) -> ClaimedDelivery:
    (claimed,) = await sut.delivery.claim(
        owner=owner, limit=1, lease_s=LEASE_S, max_attempts=max_attempts, now=now
    )
    return claimed


@pytest.mark.parametrize("how", ["reused_pid", "exited_pid"])
async def test_a_dead_owners_claim_is_reclaimable_at_once_a_live_ones_is_not(
    adapter: str, how: str, tmp_path: Path
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        await sut.seed(4)
        now = sut.later()
        dead = await dead_owner("host-dead", how)
        live = (await this_process("host-live")).encode()
        held = {owner: await claim_as(sut, owner, now) for owner in (dead, live, REMOTE, "plain")}
        assert await sut.delivery.claimed_owners() == tuple(sorted(held))
        assert (
            await sut.delivery.claim(
                owner="successor", limit=4, lease_s=LEASE_S, max_attempts=3, now=now
            )
            == ()
        ), "every lease still holds"

        assert await sut.delivery.expire_claims([dead], now=now) == 1
        row = await sut.delivery.intent(held[dead].intent.intent_id)
        assert row is not None
        assert (row.status, row.attempts, row.next_attempt_at) == ("sending", 1, now)
        for owner in (live, REMOTE, "plain"):
            kept = await sut.delivery.intent(held[owner].intent.intent_id)
            assert kept is not None
            assert (kept.status, kept.next_attempt_at) == ("sending", now + LEASE_S)

        taken = await sut.delivery.claim(
            owner="successor", limit=4, lease_s=LEASE_S, max_attempts=3, now=now
        )
        assert [item.intent.intent_id for item in taken] == [held[dead].intent.intent_id]
        assert (taken[0].attempt, taken[0].claim_token != held[dead].claim_token) == (2, True)
        assert dead not in await sut.delivery.claimed_owners()
        assert "successor" in await sut.delivery.claimed_owners()
        # Expiring an owner that holds nothing (any more) changes nothing.
        assert await sut.delivery.expire_claims([dead, "nobody"], now=now) == 0


async def test_the_dead_owners_attempt_stays_spent_and_exhaustion_dead_letters(
    adapter: str, tmp_path: Path
) -> None:
    """An intent whose send kills every Host that claims it ends as a dead letter."""
    async with open_delivery(adapter, tmp_path) as sut:
        (intent_id,) = await sut.seed(1)
        now = sut.later()
        for crash in (1, 2):
            owner = await dead_owner(f"host-{crash}")
            claimed = await claim_as(sut, owner, now, max_attempts=2)
            assert claimed.attempt == crash
            assert await sut.delivery.expire_claims([owner], now=now) == 1
        assert (
            await sut.delivery.claim(
                owner="successor", limit=1, lease_s=LEASE_S, max_attempts=2, now=now
            )
            == ()
        )
        row = await sut.delivery.intent(intent_id)
        assert row is not None
        assert (row.status, row.attempts) == ("dead_lettered", 2)
        assert row.last_error is not None
        assert row.last_error.startswith(DELIVERY_ATTEMPTS_EXHAUSTED)
        assert await sut.delivery.claimed_owners() == ()


async def test_a_late_outcome_by_the_dead_token_is_refused(adapter: str, tmp_path: Path) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        await sut.seed(1)
        now = sut.later()
        owner = await dead_owner("host-dead")
        stale = await claim_as(sut, owner, now)
        assert await sut.delivery.expire_claims([owner], now=now) == 1
        fresh = await claim_as(sut, "successor", now)
        assert fresh.intent.intent_id == stale.intent.intent_id
        with pytest.raises(StaleClaim):
            await sut.delivery.delivered(stale, now=now)
        with pytest.raises(StaleClaim):
            await sut.delivery.extend(stale, lease_s=LEASE_S, now=now)
        done = await sut.delivery.delivered(fresh, now=now)
        assert (done.status, done.attempts) == ("delivered", 2)


async def test_recovery_pages_through_every_owner(adapter: str, tmp_path: Path) -> None:
    """More owners than one page: the dead one on the second page is still found."""
    async with open_delivery(adapter, tmp_path) as sut:
        live = [f"!live-{n:03}" for n in range(MAX_CLAIM_OWNERS)]  # "!" sorts before hosts
        dead = await dead_owner("host-dead")
        await sut.seed(len(live) + 1, concurrent=True)
        now = sut.later()
        for owner in live:
            await claim_as(sut, owner, now)
        dead_claim = await claim_as(sut, dead, now)
        first = await sut.delivery.claimed_owners(limit=MAX_CLAIM_OWNERS)
        assert first == tuple(live)
        assert await sut.delivery.claimed_owners(after=first[-1]) == (dead,)

        class Accepting:
            async def send(
                self, route: Mapping[str, Any], payload: Mapping[str, Any], *, idempotency_key: str
            ) -> None:
                sent.append(idempotency_key)

        sent: list[str] = []
        runtime = DeliveryRuntime(
            sut.delivery,
            lambda alias: Accepting(),
            policy=DeliveryPolicy(lease_s=LEASE_S),
            clock=lambda: now,
        )
        with anyio.fail_after(20):
            assert await runtime.drain() == 1
        assert sent == [dead_claim.idempotency_key]
        row = await sut.delivery.intent(dead_claim.intent.intent_id)
        assert row is not None
        assert (row.status, row.attempts) == ("delivered", 2)


async def test_a_runtime_starting_to_serve_takes_a_dead_owners_claim_over(
    adapter: str, tmp_path: Path
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        dead_id, live_id = await sut.seed(2)
        now = sut.later()
        await claim_as(sut, await dead_owner("host-dead"), now)
        peer = (await this_process("host-peer")).encode()
        await claim_as(sut, peer, now)
        sent: list[tuple[str, tuple[str, ...]]] = []

        class Accepting:
            async def send(
                self, route: Mapping[str, Any], payload: Mapping[str, Any], *, idempotency_key: str
            ) -> None:
                sent.append((str(payload["text"]), await sut.delivery.claimed_owners()))

        runtime = DeliveryRuntime(
            sut.delivery, lambda alias: Accepting(), clock=lambda: now, idle_poll_s=0.05
        )
        with anyio.fail_after(20):
            assert await runtime.drain() == 1
        ((text, owners_while_sending),) = sent
        assert text == "the answer 0"
        dead_row, live_row = [await sut.delivery.intent(i) for i in (dead_id, live_id)]
        assert dead_row is not None
        assert live_row is not None
        assert (dead_row.status, dead_row.attempts) == ("delivered", 2)
        # The live peer's send is its own: untouched until its lease ends.
        assert (live_row.status, live_row.next_attempt_at) == ("sending", now + LEASE_S)
        # While it sent, the runtime's claim named its own process: a successor of this
        # process could prove it dead in turn.
        (mine,) = [LeaseOwner.decode(owner) for owner in owners_while_sending if owner != peer]
        assert mine is not None
        assert (mine.pid, mine.instance.startswith("delivery")) == (
            (await this_process("x")).pid,
            True,
        )
