"""Delivery clause: closing the Host never fails an answer it was about to send.

A closing Host's channels are going away, not unconfigured: a claim that
comes back after the close began is released (pending again, its attempt not
spent) and sent by the next process, never dead-lettered as ``no_channel``.
A channel lookup or send that says so (``ChannelsClosing``: nothing was
sent) is no attempt either, and the runtime stops claiming. Real turns on the
real SQLite store, a loopback fake of Telegram.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.delivery import ChannelsClosing, DeliveryRuntime, OutboundChannel
from hostkit.types import ClaimedDelivery
from tests.contract._delivery_hosts import (
    TELEGRAM_TOKEN,
    channel_host,
    channel_tables,
    routed_turn,
)
from tests.platforms import FakeTelegram

pytestmark = pytest.mark.anyio

REPLY = {"chat_id": 42}


async def test_a_claim_under_way_when_the_host_closes_is_released_not_dead_lettered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime's claim returns after ``aclose()`` began (a turn just woke it): the
    answer is pending again with its attempt unspent, and the next Host sends it once
    (it was dead-lettered ``no_channel: no channel 'tg' is configured``, never sent)."""
    async with FakeTelegram.running(token=TELEGRAM_TOKEN) as telegram:
        tables = channel_tables(telegram=telegram.api_base)
        async with channel_host(tmp_path, tables, answers=["the answer"]) as host:
            result = await routed_turn(host, "tg", REPLY)
            (intent_id,) = result.deliveries
            claim = host.store.delivery.claim
            limit_waits = host.store.limit_waits
            claimed, closing = anyio.Event(), anyio.Event()

            async def claim_until_closing(**options: Any) -> tuple[ClaimedDelivery, ...]:
                taken = await claim(**options)
                if taken:
                    claimed.set()
                    await closing.wait()
                return taken

            def close_began(seconds: float) -> None:
                # Called by aclose() right as it marks the Host closed.
                limit_waits(seconds)
                closing.set()

            monkeypatch.setattr(host.store.delivery, "claim", claim_until_closing)
            monkeypatch.setattr(host.store, "limit_waits", close_began)
            runtime = host.delivery_runtime(idle_poll_s=3600)
            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    await group.start(runtime.run)
                    await claimed.wait()
                    await host.aclose()
            assert runtime.failed == 0
        assert telegram.texts() == []
        async with channel_host(tmp_path, tables) as reopened:
            intent = await reopened.store.delivery.intent(intent_id)
            assert intent is not None
            assert (intent.status, intent.attempts, intent.last_error) == ("pending", 0, None)
            assert await reopened.delivery_runtime().drain() == 1
            intent = await reopened.store.delivery.intent(intent_id)
    assert intent is not None
    assert (intent.status, intent.attempts) == ("delivered", 1)
    assert telegram.texts() == ["the answer"]


class _Closing:
    """A channel whose owner closed between the lookup and the send: nothing was sent."""

    async def send(
        self, route: Mapping[str, Any], payload: Mapping[str, Any], *, idempotency_key: str
    ) -> None:
        raise ChannelsClosing()


def _lookup_closing(alias: str) -> OutboundChannel | None:
    raise ChannelsClosing()


@pytest.mark.parametrize("where", ["lookup", "send"])
async def test_channels_closing_releases_the_claim_unspent_and_stops_the_runtime(
    tmp_path: Path, where: str
) -> None:
    """``ChannelsClosing`` from the lookup or the send is no attempt: the intent is pending
    again (attempt refunded, no error recorded) and the runtime stops claiming instead of
    taking it back at once."""
    async with channel_host(tmp_path, channel_tables(telegram="http://127.0.0.1:9")) as host:
        result = await routed_turn(host, "tg", REPLY)
        (intent_id,) = result.deliveries
        lookup = _lookup_closing if where == "lookup" else (lambda alias: _Closing())
        runtime = DeliveryRuntime(host.store.delivery, lookup, idle_poll_s=0.05)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(runtime.run)
        intent = await host.store.delivery.intent(intent_id)
    assert intent is not None
    assert (intent.status, intent.attempts, intent.last_error) == ("pending", 0, None)
    assert (runtime.delivered, runtime.failed, runtime.retried) == (0, 0, 0)
