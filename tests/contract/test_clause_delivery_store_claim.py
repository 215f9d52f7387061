"""DeliveryStore clause: claim leases due intents oldest first, in bounded batches, with a fresh
fencing token and attempts + 1; an expired lease is claimed again; one that expired after its
last allowed attempt is dead-lettered (``attempts_exhausted``) instead of returned; with
``per_channel``, no more than that many intents of one channel alias are out to the claimant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import InvalidValue, StaleClaim
from hostkit.store import DELIVERY_ATTEMPTS_EXHAUSTED, MAX_DELIVERY_CLAIM
from hostkit.types import DeliveryFailure
from tests.contract._delivery_adapters import ADAPTERS, ROUTE, open_delivery

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]


async def test_claim_leases_due_intents_oldest_first_in_bounded_batches(
    adapter: str, tmp_path: Path
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        ids = await sut.seed(5)
        now = sut.later()
        first = await sut.delivery.claim(
            owner="suite", limit=2, lease_s=30.0, max_attempts=3, now=now
        )
        second = await sut.delivery.claim(
            owner="suite", limit=2, lease_s=30.0, max_attempts=3, now=now
        )
        third = await sut.delivery.claim(
            owner="suite", limit=2, lease_s=30.0, max_attempts=3, now=now
        )
        empty = await sut.delivery.claim(
            owner="suite", limit=2, lease_s=30.0, max_attempts=3, now=now
        )
    claimed = [c.intent.intent_id for c in (*first, *second, *third)]
    assert claimed == list(ids)
    assert (len(first), len(second), len(third), empty) == (2, 2, 1, ())
    for c in (*first, *second, *third):
        assert (c.attempt, c.intent.attempts, c.intent.status) == (1, 1, "sending")
        assert c.lease_expires_at == c.intent.next_attempt_at == now + 30.0
        assert c.intent.route == ROUTE
        assert c.intent.payload["text"].startswith("the answer")
    assert len({c.claim_token for c in (*first, *second, *third)}) == 5
    assert MAX_DELIVERY_CLAIM == 64


async def test_a_sessions_intents_are_claimed_one_at_a_time_in_the_order_written(
    adapter: str, tmp_path: Path
) -> None:
    """Answers reach a chat in turn order: an intent waits while an older one of its
    session is being sent or waits for its retry; other sessions go on meanwhile."""
    async with open_delivery(adapter, tmp_path) as sut:
        session = await sut.store.create_session(owner_kind="system", principal_id="suite")
        first, second, third = await sut.seed(3, session=session)
        (elsewhere,) = await sut.seed(1)
        now = sut.later()

        async def claim(at: float) -> list[str]:
            claimed = await sut.delivery.claim(
                owner="suite", limit=10, lease_s=30.0, max_attempts=5, now=at
            )
            held.update({c.intent.intent_id: c for c in claimed})
            return [c.intent.intent_id for c in claimed]

        held: dict[str, Any] = {}
        assert await claim(now) == [first, elsewhere]
        assert await claim(now) == []  # the rest of the session waits for `first`
        await sut.delivery.delivered(held[first], now=now)
        await sut.delivery.delivered(held[elsewhere], now=now)
        assert await claim(now) == [second]
        await sut.delivery.failed(
            held[second], DeliveryFailure("transient", "http_503"), retry_at=now + 100, now=now
        )
        # `third` has been due all along, but `second` goes first: nothing is due before it.
        assert await claim(now + 50) == []
        assert await sut.delivery.next_due() == pytest.approx(now + 100)
        assert await claim(now + 100) == [second]
        await sut.delivery.failed(
            held[second], DeliveryFailure("permanent", "channel_not_found"), retry_at=None, now=now
        )
        # A dead letter no longer holds its session back.
        assert await claim(now + 100) == [third]


async def test_an_intent_is_not_due_before_its_next_attempt(adapter: str, tmp_path: Path) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        older, newer = await sut.seed(2)
        now = sut.later()
        (claim,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=3, now=now
        )
        assert claim.intent.intent_id == older
        await sut.delivery.failed(
            claim, DeliveryFailure("transient", "http_503"), retry_at=now + 100, now=now
        )
        (next_one,) = await sut.delivery.claim(
            owner="suite", limit=5, lease_s=30.0, max_attempts=3, now=now
        )
        assert next_one.intent.intent_id == newer
        await sut.delivery.delivered(next_one, now=now)
        assert (
            await sut.delivery.claim(
                owner="suite", limit=5, lease_s=30.0, max_attempts=3, now=now + 99
            )
            == ()
        )
        (again,) = await sut.delivery.claim(
            owner="suite", limit=5, lease_s=30.0, max_attempts=3, now=now + 100
        )
    assert (again.intent.intent_id, again.attempt) == (older, 2)


async def test_an_expired_lease_is_claimed_again_with_a_new_token_and_attempt(
    adapter: str, tmp_path: Path
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        (intent_id,) = await sut.seed(1)
        now = sut.later()
        (first,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=10.0, max_attempts=3, now=now
        )
        # Still leased: nobody else gets it.
        assert (
            await sut.delivery.claim(
                owner="suite", limit=1, lease_s=10.0, max_attempts=3, now=now + 9
            )
            == ()
        )
        (second,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=10.0, max_attempts=3, now=now + 10
        )
        assert second.intent.intent_id == intent_id
        assert second.claim_token != first.claim_token
        assert (second.attempt, second.intent.attempts) == (2, 2)
        assert second.lease_expires_at == now + 20
        # The first holder's late outcome is refused: the second claim owns it now.
        with pytest.raises(StaleClaim):
            await sut.delivery.delivered(first, now=now + 11)
        done = await sut.delivery.delivered(second, now=now + 11)
    assert (done.status, done.attempts) == ("delivered", 2)


async def test_an_expired_last_attempt_is_dead_lettered_not_claimed(
    adapter: str, tmp_path: Path
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        (stuck,) = await sut.seed(1)
        now = sut.later()
        (one,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=10.0, max_attempts=2, now=now
        )
        (two,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=10.0, max_attempts=2, now=now + 10
        )
        assert one.intent.intent_id == two.intent.intent_id == stuck
        assert two.attempt == 2
        (fresh,) = await sut.seed(1)
        # Its second (last) lease expires too: dead-lettered, and the claim moves on.
        got = await sut.delivery.claim(
            owner="suite", limit=5, lease_s=10.0, max_attempts=2, now=now + 20
        )
        assert [c.intent.intent_id for c in got] == [fresh]
        dead = await sut.delivery.intent(stuck)
        assert dead is not None
        assert (dead.status, dead.attempts, dead.next_attempt_at) == ("dead_lettered", 2, None)
        assert dead.last_error is not None
        assert dead.last_error.startswith(DELIVERY_ATTEMPTS_EXHAUSTED)
        with pytest.raises(StaleClaim):
            await sut.delivery.delivered(two, now=now + 21)
        assert [i.intent_id for i in await sut.delivery.intents(status="dead_lettered")] == [stuck]


HOOK = {"channel": "hook.down", "conversation": "c", "reply": {"to": "x"}}


async def test_per_channel_bounds_one_aliases_claims_and_the_next_due_of_others_are_taken(
    adapter: str, tmp_path: Path
) -> None:
    """One channel whose sends hang cannot take every slot: its intents are claimed only
    while the claimant has fewer than ``per_channel`` of them out (``sending`` counts the
    sends still under way); an alias at the bound is skipped in the query (never claimed
    and handed back), and the other channels' due intents are claimed past it."""
    async with open_delivery(adapter, tmp_path) as sut:
        hooks = await sut.seed(6, route=HOOK)
        (slack,) = await sut.seed(1)
        unrouted = await sut.seed(1, route={"conversation": "c"})
        now = sut.later()

        async def claim(**options: Any) -> list[str]:
            claimed = await sut.delivery.claim(
                owner="suite", limit=8, lease_s=30.0, max_attempts=3, now=now, **options
            )
            return [c.intent.intent_id for c in claimed]

        # Within one claim: two of the hook's, then the Slack answer and the unrouted one.
        assert await claim(per_channel=2) == [*hooks[:2], slack, *unrouted]
        # Two hook sends still under way: none of its intents is handed out.
        assert await claim(per_channel=2, sending={"hook.down": 2, "slack.main": 1}) == []
        # One of them settled: exactly one more, the next in due order.
        assert await claim(per_channel=2, sending={"hook.down": 1}) == [hooks[2]]
        # Without the bound, a claim takes them all, oldest due first (as before).
        assert await claim() == list(hooks[3:])
        counts = await sut.delivery.counts()
    assert (counts.pending, counts.sending) == (0, 8)


# Routes the databases' JSON functions cannot read back: PostgreSQL refused a claim naming
# the intents it holds for a NUL or a lone surrogate, SQLite for a NaN, in any session.
UNREADABLE_ROUTES = {
    "nul": {**ROUTE, "reply": {"thread_ts": "1.2\x00"}},
    "nul-key": {**ROUTE, "reply": {"thread\x00ts": "1.2"}},
    "surrogate": {**ROUTE, "reply": {"t": "\ud800"}},
    "nan": {**ROUTE, "reply": {"n": float("nan")}},
    "infinity": {**ROUTE, "reply": {"n": float("-inf")}},
    "past-64-bits": {**ROUTE, "reply": {"n": 2**63}},
}


@pytest.mark.parametrize("route", UNREADABLE_ROUTES.values(), ids=UNREADABLE_ROUTES.keys())
async def test_a_route_no_store_reads_back_is_refused_and_claims_go_on(
    adapter: str, tmp_path: Path, route: dict[str, Any]
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        first = await sut.seed(1)
        with pytest.raises(InvalidValue, match="route holds"):
            await sut.seed(1, route=route)
        second = await sut.seed(1)
        # What DeliveryRuntime passes whenever a send is in flight.
        claimed = await sut.delivery.claim(
            owner="suite",
            limit=10,
            lease_s=30.0,
            max_attempts=3,
            now=sut.later(),
            holding=["dlv_in_flight"],
        )
    assert [c.intent.intent_id for c in claimed] == [*first, *second]
