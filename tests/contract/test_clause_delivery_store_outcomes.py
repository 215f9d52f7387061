"""DeliveryStore clause: a failed attempt goes back to ``pending`` until ``retry_at``, or to
``dead_lettered`` when there is none; only an operator's ``retry`` brings a dead letter back
(pending now, attempts 0, requeues + 1), audited as ``delivery.retry`` with actor and reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized
from hostkit.types import DeliveryFailure
from tests.contract._delivery_adapters import ADAPTERS, open_delivery

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]


async def test_a_failed_attempt_waits_for_retry_at(adapter: str, tmp_path: Path) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        (intent_id,) = await sut.seed(1)
        now = sut.later()
        (claim,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=5, now=now
        )
        failure = DeliveryFailure("transient", "http_429", "slow down", retry_after_s=20)
        row = await sut.delivery.failed(claim, failure, retry_at=now + 20, now=now + 1)
        assert (row.status, row.attempts, row.next_attempt_at) == ("pending", 1, now + 20)
        assert row.last_error == "http_429: slow down"
        assert await sut.delivery.next_due() == now + 20
        assert (
            await sut.delivery.claim(
                owner="suite", limit=1, lease_s=30.0, max_attempts=5, now=now + 19
            )
            == ()
        )
        (again,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=5, now=now + 20
        )
    assert (again.intent.intent_id, again.attempt, again.intent.last_error) == (
        intent_id,
        2,
        "http_429: slow down",
    )


async def test_a_failure_without_retry_at_is_a_dead_letter(adapter: str, tmp_path: Path) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        (intent_id,) = await sut.seed(1)
        now = sut.later()
        (claim,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=5, now=now
        )
        failure = DeliveryFailure("permanent", "channel_not_found", "no such channel")
        row = await sut.delivery.failed(claim, failure, retry_at=None, now=now + 1)
        assert await sut.delivery.next_due() is None
        assert (
            await sut.delivery.claim(
                owner="suite", limit=5, lease_s=30.0, max_attempts=5, now=now + 1e6
            )
            == ()
        )
    assert (row.intent_id, row.status, row.next_attempt_at) == (intent_id, "dead_lettered", None)
    assert row.last_error == "channel_not_found: no such channel"


async def test_retry_brings_a_dead_letter_back_audited(adapter: str, tmp_path: Path) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        (intent_id,) = await sut.seed(1)
        now = sut.later()
        (claim,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=5, now=now
        )
        await sut.delivery.failed(
            claim, DeliveryFailure("permanent", "http_401"), retry_at=None, now=now
        )
        row = await sut.delivery.retry(
            intent_id, reason="  token rotated  ", actor="ops", now=now + 5
        )
        assert (row.status, row.attempts, row.requeues, row.next_attempt_at) == (
            "pending",
            0,
            1,
            now + 5,
        )
        assert await sut.retry_audit() == ((intent_id, "ops", "token rotated"),)
        (again,) = await sut.delivery.claim(
            owner="suite", limit=1, lease_s=30.0, max_attempts=5, now=now + 5
        )
        assert (again.intent.intent_id, again.attempt) == (intent_id, 1)
        # Only a dead letter can be retried: a sending (or delivered) intent cannot.
        with pytest.raises(InvalidValue, match="dead-lettered"):
            await sut.delivery.retry(intent_id, reason="again", actor="ops", now=now + 6)
        await sut.delivery.delivered(again, now=now + 6)
        with pytest.raises(InvalidValue, match="dead-lettered"):
            await sut.delivery.retry(intent_id, reason="again", actor="ops", now=now + 7)
        with pytest.raises(NotFoundOrUnauthorized):
            await sut.delivery.retry("out_unknown", reason="why", actor="ops", now=now + 7)
        assert await sut.retry_audit() == ((intent_id, "ops", "token rotated"),)
        final = await sut.delivery.intent(intent_id)
    assert final is not None
    assert (final.status, final.requeues) == ("delivered", 1)
