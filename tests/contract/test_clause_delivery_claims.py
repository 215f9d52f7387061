"""Delivery clause: claims are fenced, shutdown gives them back, unknown channels fail closed,
and a channel whose sends hang holds at most half the runtime's slots.

Two DeliveryRuntimes on one real SQLite outbox (as two processes would
share it), an injected clock to expire leases, loopback Slack.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.adapters.scripted import Reply, ScriptedModel
from hostkit.delivery import DeliveryPolicy, DeliveryRuntime
from hostkit.store import RuntimeStore
from hostkit.testing import capabilities
from hostkit.types import ClaimedDelivery, DeliveryIntent
from tests.contract._delivery_adapters import finish_routed_turns
from tests.contract._delivery_hosts import (
    ENV,
    SLACK_TOKEN,
    Clock,
    channel_host,
    channel_tables,
    configured_channels,
    host_config,
    routed_turn,
)
from tests.platforms import FakeSlack, Recorded

pytestmark = pytest.mark.anyio


def _intent_of(seen: Recorded) -> str:
    return str(seen.body["metadata"]["event_payload"]["intent_id"])


async def test_a_stale_holder_cannot_mark_an_intent_delivered(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.slow_next(1, delay_s=1.0)
        async with channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host:
            (intent_id,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
            policy = DeliveryPolicy(lease_s=60.0, jitter=0.0)
            slow = host.delivery_runtime(policy=policy, clock=clock)
            other = host.delivery_runtime(policy=policy, clock=clock)
            settled: list[int] = []
            async with anyio.create_task_group() as group:

                async def drain_slow() -> None:
                    settled.append(await slow.drain())

                group.start_soon(drain_slow)
                await slack.wait_for_requests(1)
                # The slow holder's lease expires; another runtime reclaims and delivers.
                clock.advance(61.0)
                assert await other.drain() == 1
            row = await host.store.delivery.intent(intent_id)
    assert row is not None
    assert (row.status, row.attempts) == ("delivered", 2)
    assert settled == [0]
    assert slow.delivered == 0
    assert other.delivered == 1
    # Both attempts reached Slack under the one idempotency key (the receiver's dedup).
    assert [_intent_of(seen) for seen in slack.requests] == [intent_id, intent_id]


async def test_shutdown_spends_the_attempt_of_a_cut_send_and_never_resends_it_itself(
    tmp_path: Path,
) -> None:
    clock = Clock()
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.slow_next(1, delay_s=1.5)
        async with channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host:
            (intent_id,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
            policy = DeliveryPolicy(backoff_s=2.0, jitter=0.0)
            runtime = host.delivery_runtime(
                policy=policy, clock=clock, grace_s=0.1, idle_poll_s=0.05
            )
            async with runtime:
                await slack.wait_for_requests(1)
                assert runtime.in_flight == 1
            assert runtime.in_flight == 0
            assert not runtime.running
            cut = await host.store.delivery.intent(intent_id)
            assert cut is not None
            # The send may have reached Slack: its attempt is spent, retried after the backoff.
            assert (cut.status, cut.attempts) == ("pending", 1)
            assert cut.last_error is not None
            assert cut.last_error.startswith("cut_off")
            assert cut.next_attempt_at == pytest.approx(clock.now + 2.0)
            # The drain after a stop never sends what this runtime cut, even once it is due:
            # it hands the claim back (attempt refunded), for its successor.
            clock.advance(3.0)
            assert await runtime.drain() == 0
            skipped = await host.store.delivery.intent(intent_id)
            assert skipped is not None
            assert (skipped.status, skipped.attempts) == ("pending", 1)
            assert len(slack.requests) == 1
            # The next runtime (the successor process) delivers it: attempt 2.
            assert await host.delivery_runtime(clock=clock).drain() == 1
            row = await host.store.delivery.intent(intent_id)
    assert row is not None
    assert (row.status, row.attempts) == ("delivered", 2)
    assert len(slack.requests) == 2


async def test_an_alias_without_a_channel_fails_closed(tmp_path: Path) -> None:
    async with (
        FakeSlack.running(token=SLACK_TOKEN) as slack,
        channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host,
    ):
        result = await routed_turn(host, "slack-gone", {"channel": "C1"})
        runtime = host.delivery_runtime(clock=Clock())
        assert await runtime.drain() == 1
        row = await host.store.delivery.intent(result.deliveries[0])
    assert row is not None
    assert (row.status, row.attempts) == ("dead_lettered", 1)
    assert row.last_error == "no_channel: no channel 'slack-gone' is configured"
    assert slack.requests == []


async def test_a_config_apply_changes_the_adapter_of_later_attempts_only(tmp_path: Path) -> None:
    clock = Clock()
    async with (
        FakeSlack.running(token=SLACK_TOKEN) as old,
        FakeSlack.running(token=SLACK_TOKEN) as new,
    ):
        old.fail_next(1, status=503)
        async with channel_host(tmp_path, channel_tables(slack=old.api_base)) as host:
            (intent_id,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
            runtime = host.delivery_runtime(
                policy=DeliveryPolicy(backoff_s=1.0, jitter=0.0), clock=clock
            )
            assert await runtime.drain() == 1
            config = host_config(tmp_path, channel_tables(slack=new.api_base))
            caps = dataclasses.replace(
                capabilities(ScriptedModel([Reply("x")])),
                channels=await configured_channels(config, ENV),
            )
            await host.apply_config(config, capabilities=caps)
            clock.advance(1.0)
            assert await runtime.drain() == 1
            row = await host.store.delivery.intent(intent_id)
    assert row is not None
    assert row.status == "delivered"
    assert len(old.requests) == 1
    assert old.messages == []
    (message,) = new.messages
    # The route the turn captured is what the new adapter used.
    assert message.body["channel"] == "C1"
    assert _intent_of(message) == intent_id


async def test_a_drain_calls_the_outbox_idle_only_after_a_claim_begun_with_nothing_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's next answer is claimable only once the one before it is settled. A claim
    that read the outbox while that settle was still being recorded finds nothing, and must
    not make the drain return with the next answer never sent.

    Forced here: the first send's ``delivered`` waits until a claim has read the outbox
    while it is in flight, and that claim returns only after the settle is recorded."""
    async with (
        FakeSlack.running(token=SLACK_TOKEN) as slack,
        channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host,
    ):
        (first,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
        (second,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
        runtime = host.delivery_runtime(clock=Clock(), idle_poll_s=0.05)
        store = runtime.store
        claim, delivered = store.claim, store.delivered
        settle = anyio.Event()
        overlapped = 0

        async def delivered_once_a_claim_overlaps(
            claimed: ClaimedDelivery, *, now: float
        ) -> DeliveryIntent:
            await settle.wait()
            return await delivered(claimed, now=now)

        async def claim_while_a_settle_is_recorded(
            **options: Any,
        ) -> tuple[ClaimedDelivery, ...]:
            nonlocal overlapped
            if not runtime.in_flight:
                return await claim(**options)
            overlapped += 1
            found = await claim(**options)
            settle.set()
            with anyio.fail_after(10):
                while runtime.in_flight:  # noqa: ASYNC110 (the send in flight settles)
                    await anyio.sleep(0.01)
            return found

        monkeypatch.setattr(store, "claim", claim_while_a_settle_is_recorded)
        monkeypatch.setattr(store, "delivered", delivered_once_a_claim_overlaps)
        with anyio.fail_after(20):
            assert await runtime.drain() == 2
        assert overlapped >= 1
        rows = [await host.store.delivery.intent(i) for i in (first, second)]
    assert [row.status if row else None for row in rows] == ["delivered", "delivered"]
    assert [_intent_of(seen) for seen in slack.requests] == [first, second]


class _Held:
    """A channel whose sends wait until the test lets them through."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.sending = anyio.Event()
        self.through = anyio.Event()

    async def send(self, route: Any, payload: Any, *, idempotency_key: str) -> None:
        self.keys.append(idempotency_key)
        self.sending.set()
        await self.through.wait()


async def test_a_runtime_never_claims_back_an_intent_it_is_still_sending_when_its_clock_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wall clock stepped past the lease of a send under way (NTP after a boot with a wrong
    RTC, a resumed VM): the runtime's next claims leave that intent alone (it renews the
    claim itself), so it is sent once and its bookkeeping stays its own: one send in
    flight, then settled with the claim it was sent under (attempt 1)."""
    async with RuntimeStore.open(tmp_path / "h.db") as store:
        (intent_id,) = await finish_routed_turns(store, 1)
        clock = Clock()  # a second past the intent's due time
        channel = _Held()
        runtime = DeliveryRuntime(
            store.delivery,
            lambda alias: channel,
            policy=DeliveryPolicy(lease_s=60.0, jitter=0.0),
            idle_poll_s=0.05,
            grace_s=0.1,
            clock=clock,
        )
        claim = store.delivery.claim
        stepped_at = clock.now + 120.0
        after_step = anyio.Event()

        async def claim_seen(**options: Any) -> tuple[ClaimedDelivery, ...]:
            found = await claim(**options)
            if options["now"] >= stepped_at:
                after_step.set()
            return found

        monkeypatch.setattr(store.delivery, "claim", claim_seen)
        async with runtime:
            with anyio.fail_after(10):
                await channel.sending.wait()
            clock.advance(120.0)  # twice the lease: by this clock, the send's lease ran out
            runtime.wake()
            with anyio.fail_after(10):
                await after_step.wait()
            held = await store.delivery.intent(intent_id)
            assert held is not None
            assert (held.status, held.attempts) == ("sending", 1)
            assert runtime.in_flight == 1
            channel.through.set()
            with anyio.fail_after(10):
                while not runtime.delivered:  # noqa: ASYNC110 (the send under way settles)
                    await anyio.sleep(0.01)
            runtime.stop()
        row = await store.delivery.intent(intent_id)
    assert row is not None
    assert (row.status, row.attempts) == ("delivered", 1)
    assert len(channel.keys) == 1
    assert (runtime.delivered, runtime.in_flight) == (1, 0)


# The sends one alias may have in flight at the default concurrency of 8.
_HALF_OF_EIGHT = 4


class _Hanging:
    """An endpoint that never answers: every send runs into ``send_timeout_s``."""

    def __init__(self) -> None:
        self.sending = 0
        self.most = 0

    async def send(self, route: Any, payload: Any, *, idempotency_key: str) -> None:
        self.sending += 1
        self.most = max(self.most, self.sending)
        try:
            await anyio.sleep(3_600)
        finally:
            self.sending -= 1


class _Healthy:
    def __init__(self) -> None:
        self.sent = anyio.Event()
        self.keys: list[str] = []

    async def send(self, route: Any, payload: Any, *, idempotency_key: str) -> None:
        self.keys.append(idempotency_key)
        self.sent.set()


@pytest.mark.parametrize("queued", [8, 40])
async def test_a_hanging_channel_never_holds_every_slot_so_other_channels_answer_at_once(
    tmp_path: Path, queued: int
) -> None:
    """docs/delivery.md: a slow or failing send holds back its own session's later answers,
    and other sessions go on. With ``queued`` sessions of a webhook whose endpoint hangs (at
    least ``concurrency`` of them), a Slack answer written afterwards is sent within one
    send, not after the hanging wave's ``send_timeout_s``: the hanging alias has at most
    ``per_channel`` (half the slots) in flight."""
    hook = {"channel": "hook.down", "conversation": "c", "reply": {"to": "x"}}
    slack = {"channel": "slack.main", "conversation": "T1:C1:U1", "reply": {"channel": "C1"}}
    async with RuntimeStore.open(tmp_path / "h.db") as store:
        await finish_routed_turns(store, queued, route=hook)
        hanging, healthy = _Hanging(), _Healthy()
        runtime = DeliveryRuntime(
            store.delivery,
            {"hook.down": hanging, "slack.main": healthy}.get,
            send_timeout_s=60.0,
            idle_poll_s=0.05,
            grace_s=0.1,
        )
        async with runtime:
            with anyio.fail_after(10):
                while hanging.sending < _HALF_OF_EIGHT:  # noqa: ASYNC110 (claims start)
                    await anyio.sleep(0.01)
            (answer,) = await finish_routed_turns(store, 1, route=slack)
            runtime.wake()
            with anyio.fail_after(10):  # far less than the hanging sends' 60 s
                await healthy.sent.wait()
            assert hanging.most == runtime.per_channel == _HALF_OF_EIGHT
            runtime.stop()
        row = await store.delivery.intent(answer)
    assert row is not None
    assert row.status == "delivered"
    assert healthy.keys == [answer]


class _Raising:
    """A channel whose send (or, ``at_lookup``, whose lookup) raises ``error``."""

    def __init__(self, error: type[BaseException], *, at_lookup: bool = False) -> None:
        self.error, self.at_lookup = error, at_lookup

    def __call__(self, alias: str) -> _Raising:
        if self.at_lookup:
            raise self.error()
        return self

    async def send(self, route: Any, payload: Any, *, idempotency_key: str) -> None:
        raise self.error()


@pytest.mark.sqlite_only("how the runtime settles a channel's own exception, not the store")
@pytest.mark.parametrize(
    ("error", "at_lookup"),
    [
        (KeyboardInterrupt, False),
        (SystemExit, False),
        (GeneratorExit, False),
        (KeyboardInterrupt, True),
    ],
)
async def test_a_channels_base_exception_is_its_attempt_then_raised_as_itself(
    tmp_path: Path, error: type[BaseException], at_lookup: bool
) -> None:
    """Not a shutdown's ``cut_off`` (nothing shut down), and not hidden in an exception
    group, where ``except KeyboardInterrupt`` would no longer find it."""
    async with RuntimeStore.open(tmp_path / "h.db") as store:
        (intent_id,) = await finish_routed_turns(store, 1)
        runtime = DeliveryRuntime(
            store.delivery, _Raising(error, at_lookup=at_lookup), idle_poll_s=0.05, grace_s=0.1
        )
        with anyio.fail_after(10), pytest.raises(error):
            await runtime.drain()
        row = await store.delivery.intent(intent_id)
    assert row is not None
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.last_error == f"channel_error: {error.__name__}"


@pytest.mark.sqlite_only("how the runtime settles a channel's own exception, not the store")
async def test_a_channels_own_cancelled_error_is_a_failed_attempt(tmp_path: Path) -> None:
    async with RuntimeStore.open(tmp_path / "h.db") as store:
        (intent_id,) = await finish_routed_turns(store, 1)
        cancelled = anyio.get_cancelled_exc_class()
        runtime = DeliveryRuntime(
            store.delivery, _Raising(cancelled), idle_poll_s=0.05, grace_s=0.1
        )
        with anyio.fail_after(10):
            assert await runtime.drain() == 1
        row = await store.delivery.intent(intent_id)
    assert row is not None
    assert (row.status, row.last_error) == ("pending", f"channel_error: {cancelled.__name__}")
