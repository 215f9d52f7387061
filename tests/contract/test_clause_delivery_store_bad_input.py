"""DeliveryStore clause: bad input (a limit out of range, a time that is not finite, a lease
that is not positive, an empty reason, a value of the wrong type) raises ``InvalidValue`` with
a bounded message and writes nothing: no claim is taken, no row or audit changes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import MESSAGE_LIMIT, InvalidValue
from hostkit.store import MAX_CLAIM_OWNERS, MAX_DELIVERY_CLAIM, MAX_DELIVERY_LIST
from hostkit.types import ClaimedDelivery, DeliveryFailure
from tests.contract._delivery_adapters import ADAPTERS, DeliveryUnderTest, open_delivery

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

Call = Callable[[DeliveryUnderTest, ClaimedDelivery, str, float], Awaitable[Any]]
OK_FAILURE = DeliveryFailure("transient", "http_503")

CASES: dict[str, Call] = {
    "claim limit 0": lambda s, c, i, n: s.delivery.claim(
        owner="suite", limit=0, lease_s=30, max_attempts=3, now=n
    ),
    "claim limit too big": lambda s, c, i, n: s.delivery.claim(
        owner="suite", limit=MAX_DELIVERY_CLAIM + 1, lease_s=30, max_attempts=3, now=n
    ),
    "claim limit bool": lambda s, c, i, n: s.delivery.claim(
        owner="suite", limit=True, lease_s=30, max_attempts=3, now=n
    ),
    "claim lease 0": lambda s, c, i, n: s.delivery.claim(
        owner="suite", limit=1, lease_s=0, max_attempts=3, now=n
    ),
    "claim lease nan": lambda s, c, i, n: s.delivery.claim(
        owner="suite", limit=1, lease_s=math.nan, max_attempts=3, now=n
    ),
    "claim attempts 0": lambda s, c, i, n: s.delivery.claim(
        owner="suite", limit=1, lease_s=30, max_attempts=0, now=n
    ),
    "claim now inf": lambda s, c, i, n: s.delivery.claim(
        owner="suite", limit=1, lease_s=30, max_attempts=3, now=math.inf
    ),
    "claim now negative": lambda s, c, i, n: s.delivery.claim(
        owner="suite", limit=1, lease_s=30, max_attempts=3, now=-1.0
    ),
    "claim owner empty": lambda s, c, i, n: s.delivery.claim(
        owner="", limit=1, lease_s=30, max_attempts=3, now=n
    ),
    "claim owner not text": lambda s, c, i, n: s.delivery.claim(
        owner=7,  # type: ignore[arg-type]
        limit=1,
        lease_s=30,
        max_attempts=3,
        now=n,
    ),
    "claim owner too long": lambda s, c, i, n: s.delivery.claim(
        owner="o" * 1_000, limit=1, lease_s=30, max_attempts=3, now=n
    ),
    "claim per_channel 0": lambda s, c, i, n: s.delivery.claim(
        owner="suite", limit=1, lease_s=30, max_attempts=3, now=n, per_channel=0
    ),
    "claim per_channel too big": lambda s, c, i, n: s.delivery.claim(
        owner="suite",
        limit=1,
        lease_s=30,
        max_attempts=3,
        now=n,
        per_channel=MAX_DELIVERY_CLAIM + 1,
    ),
    "claim sending not a mapping": lambda s, c, i, n: s.delivery.claim(
        owner="suite",
        limit=1,
        lease_s=30,
        max_attempts=3,
        now=n,
        sending=["hook"],  # type: ignore[arg-type]
    ),
    "claim sending negative": lambda s, c, i, n: s.delivery.claim(
        owner="suite", limit=1, lease_s=30, max_attempts=3, now=n, sending={"hook": -1}
    ),
    "claim sending empty alias": lambda s, c, i, n: s.delivery.claim(
        owner="suite", limit=1, lease_s=30, max_attempts=3, now=n, sending={"": 1}
    ),
    "claim sending too many aliases": lambda s, c, i, n: s.delivery.claim(
        owner="suite",
        limit=1,
        lease_s=30,
        max_attempts=3,
        now=n,
        sending={f"a{k}": 1 for k in range(MAX_DELIVERY_CLAIM + 1)},
    ),
    "claimed_owners limit 0": lambda s, c, i, n: s.delivery.claimed_owners(limit=0),
    "claimed_owners limit too big": lambda s, c, i, n: s.delivery.claimed_owners(
        limit=MAX_CLAIM_OWNERS + 1
    ),
    "claimed_owners after empty": lambda s, c, i, n: s.delivery.claimed_owners(after=""),
    "expire_claims no owners": lambda s, c, i, n: s.delivery.expire_claims([], now=n),
    "expire_claims a str": lambda s, c, i, n: s.delivery.expire_claims("suite", now=n),
    "expire_claims empty owner": lambda s, c, i, n: s.delivery.expire_claims(["suite", ""], now=n),
    "expire_claims too many": lambda s, c, i, n: s.delivery.expire_claims(
        [f"o{k}" for k in range(MAX_CLAIM_OWNERS + 1)], now=n
    ),
    "expire_claims now nan": lambda s, c, i, n: s.delivery.expire_claims(["suite"], now=math.nan),
    "delivered not a claim": lambda s, c, i, n: s.delivery.delivered(c.intent, now=n),  # type: ignore[arg-type]
    "delivered now nan": lambda s, c, i, n: s.delivery.delivered(c, now=math.nan),
    "failed not a failure": lambda s, c, i, n: s.delivery.failed(
        c,
        "boom",  # type: ignore[arg-type]
        retry_at=None,
        now=n,
    ),
    "failed retry_at inf": lambda s, c, i, n: s.delivery.failed(
        c, OK_FAILURE, retry_at=math.inf, now=n
    ),
    "extend lease negative": lambda s, c, i, n: s.delivery.extend(c, lease_s=-5, now=n),
    "extend lease huge": lambda s, c, i, n: s.delivery.extend(c, lease_s=10**400, now=n),
    "release now text": lambda s, c, i, n: s.delivery.release(c, now="soon"),  # type: ignore[arg-type]
    "retry blank reason": lambda s, c, i, n: s.delivery.retry(i, reason="   ", actor="ops", now=n),
    "retry long reason": lambda s, c, i, n: s.delivery.retry(
        i, reason="r" * 5000, actor="ops", now=n
    ),
    "retry empty actor": lambda s, c, i, n: s.delivery.retry(i, reason="why", actor="", now=n),
    "retry empty id": lambda s, c, i, n: s.delivery.retry("", reason="why", actor="ops", now=n),
    "intents bad status": lambda s, c, i, n: s.delivery.intents(status="lost"),  # type: ignore[arg-type]
    "intents limit too big": lambda s, c, i, n: s.delivery.intents(limit=MAX_DELIVERY_LIST + 1),
    "intent empty id": lambda s, c, i, n: s.delivery.intent(""),
}


async def test_bad_input_is_refused_and_nothing_is_written(adapter: str, tmp_path: Path) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        held_id, dead_id, _waiting = await sut.seed(3)
        now = sut.later()
        (held,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=3, now=now
        )
        (to_kill,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=3, now=now
        )
        assert (held.intent.intent_id, to_kill.intent.intent_id) == (held_id, dead_id)
        await sut.delivery.failed(
            to_kill, DeliveryFailure("permanent", "gone"), retry_at=None, now=now
        )

        async def state() -> tuple[object, ...]:
            delivery = sut.delivery
            return (
                await delivery.intents(),
                await delivery.counts(),
                await delivery.claimed_owners(),
            )

        before = await state()
        assert before[2] == ("suite",)
        for name, call in CASES.items():
            with pytest.raises(InvalidValue) as caught:
                await call(sut, held, dead_id, now + 1)
            assert len(str(caught.value)) <= MESSAGE_LIMIT, name
            assert "rrrrrrrrrr" not in str(caught.value), name
            assert await state() == before, name
        assert await sut.retry_audit() == ()
        # The holder's claim is intact after all of it.
        done = await sut.delivery.delivered(held, now=now + 2)
    assert done.status == "delivered"


async def test_a_claim_value_cannot_be_forged_into_shape(adapter: str, tmp_path: Path) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        await sut.seed(1)
        (claim,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=3, now=sut.later()
        )
    with pytest.raises(InvalidValue):
        dataclasses.replace(claim, claim_token="")
    with pytest.raises(InvalidValue):
        dataclasses.replace(claim, attempt=0)
