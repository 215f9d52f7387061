"""Delivery clause: transient failures are retried with backoff, permanent ones dead-letter.

Real turns write the intents into the real SQLite outbox; the Host's
DeliveryRuntime drains them to loopback fakes with an injected clock, so
every backoff is checked to the second without sleeping.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hostkit.delivery import DeliveryPolicy
from hostkit.host import Host
from hostkit.types import new_id
from tests.contract._delivery_hosts import (
    SLACK_TOKEN,
    TELEGRAM_TOKEN,
    WEBHOOK_SECRET,
    Clock,
    channel_host,
    channel_tables,
    routed_turn,
)
from tests.platforms import FakeSlack, FakeTelegram, WebhookReceiver

pytestmark = pytest.mark.anyio

NO_JITTER = DeliveryPolicy(max_attempts=3, backoff_s=2.0, backoff_max_s=600.0, jitter=0.0)


async def _intent(host: Host, intent_id: str):  # type: ignore[no-untyped-def]
    intent = await host.store.delivery.intent(intent_id)
    assert intent is not None
    return intent


async def test_transient_failures_back_off_then_deliver_with_one_idempotency_key(
    tmp_path: Path,
) -> None:
    clock = Clock()
    async with WebhookReceiver.running(secret=WEBHOOK_SECRET) as receiver:
        receiver.fail_next(2, status=503)
        tables = channel_tables(deliver_url=receiver.deliver_url)
        async with channel_host(tmp_path, tables) as host:
            (intent_id,) = (await routed_turn(host, "hook", {"conversation": "r"})).deliveries
            runtime = host.delivery_runtime(policy=NO_JITTER, clock=clock)
            assert await runtime.drain() == 1
            first = await _intent(host, intent_id)
            assert (first.status, first.attempts) == ("pending", 1)
            assert first.next_attempt_at == pytest.approx(clock.now + 2.0)
            assert first.last_error is not None
            assert first.last_error.startswith("http_503")
            # Not due yet: nothing is sent.
            clock.advance(1.9)
            assert await runtime.drain() == 0
            clock.advance(0.1)
            assert await runtime.drain() == 1
            second = await _intent(host, intent_id)
            # The second failure doubles the wait.
            assert second.next_attempt_at == pytest.approx(clock.now + 4.0)
            clock.advance(4.0)
            assert await runtime.drain() == 1
            done = await _intent(host, intent_id)
    assert (done.status, done.attempts) == ("delivered", 3)
    keys = [seen.headers["idempotency-key"] for seen in receiver.requests]
    assert keys == [intent_id, intent_id, intent_id]
    assert list(receiver.deliveries) == [intent_id]
    assert (runtime.delivered, runtime.retried, runtime.failed) == (1, 2, 0)


async def test_slack_and_telegram_retry_after_is_honoured(tmp_path: Path) -> None:
    clock = Clock()
    async with (
        FakeSlack.running(token=SLACK_TOKEN) as slack,
        FakeTelegram.running(token=TELEGRAM_TOKEN) as telegram,
    ):
        slack.fail_next(1, status=429, retry_after=120)
        telegram.fail_next(1, status=429, retry_after=30)
        tables = channel_tables(slack=slack.api_base, telegram=telegram.api_base)
        async with channel_host(tmp_path, tables) as host:
            (on_slack,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
            (on_tg,) = (await routed_turn(host, "tg", {"chat_id": 7}, conversation="c2")).deliveries
            runtime = host.delivery_runtime(policy=NO_JITTER, clock=clock)
            assert await runtime.drain() == 2
            slack_row, tg_row = await _intent(host, on_slack), await _intent(host, on_tg)
            assert slack_row.next_attempt_at == pytest.approx(clock.now + 120)
            assert tg_row.next_attempt_at == pytest.approx(clock.now + 30)
            assert slack_row.last_error == "ratelimited: slack answered HTTP 429"
            clock.advance(30)
            assert await runtime.drain() == 1  # only Telegram's wait is over
            clock.advance(90)
            assert await runtime.drain() == 1
            rows = [await _intent(host, i) for i in (on_slack, on_tg)]
    assert [r.status for r in rows] == ["delivered", "delivered"]
    assert len(slack.messages) == 1
    assert len(telegram.messages) == 1


async def test_a_long_slack_answer_is_posted_once_in_parts(tmp_path: Path) -> None:
    """30,000 CJK characters with no space to break at (Slack would refuse them whole as
    ``msg_too_long``): one intent per part, each posted once, in order, the text whole."""
    long_answer = "文" * 30_000
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        tables = channel_tables(slack=slack.api_base)
        async with channel_host(tmp_path, tables, answers=(long_answer,)) as host:
            result = await routed_turn(host, "slack-acme", {"channel": "C1"}, parts=8)
            runtime = host.delivery_runtime(policy=NO_JITTER, clock=Clock())
            assert await runtime.drain() == 8
            rows = [await _intent(host, i) for i in result.deliveries]
    assert {(row.status, row.attempts) for row in rows} == {("delivered", 1)}
    assert "".join(slack.texts()) == long_answer
    assert [m.body["metadata"]["event_payload"]["intent_id"] for m in slack.messages] == list(
        result.deliveries
    )


async def test_slacks_rate_limited_error_is_retried_not_dead_lettered(tmp_path: Path) -> None:
    """chat.postMessage's own "rate_limited" (too many messages to one channel), beside
    the Web API's "ratelimited"."""
    clock = Clock()
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.fail_next(1, ok_false="rate_limited")
        async with channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host:
            (intent_id,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
            runtime = host.delivery_runtime(policy=NO_JITTER, clock=clock)
            assert await runtime.drain() == 1
            waiting = await _intent(host, intent_id)
            assert (waiting.status, waiting.last_error) == (
                "pending",
                "rate_limited: slack refused the post for now",
            )
            clock.advance(2.0)
            assert await runtime.drain() == 1
            row = await _intent(host, intent_id)
    assert (row.status, row.attempts) == ("delivered", 2)
    assert slack.texts() == ["the answer"]


async def test_a_conversations_answers_arrive_in_turn_order_past_a_slow_or_refused_send(
    tmp_path: Path,
) -> None:
    # Following the real clock: the later answers are written after the first drain.
    clock = Clock(follow=True)
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.slow_next(1, delay_s=0.5)
        tables = channel_tables(slack=slack.api_base)
        async with channel_host(tmp_path, tables, answers=("one", "two", "three", "four")) as host:
            for _ in range(2):
                await routed_turn(host, "slack-acme", {"channel": "C1"})
            runtime = host.delivery_runtime(policy=NO_JITTER, clock=clock)
            assert await runtime.drain() == 2
            assert slack.texts() == ["one", "two"]
            # A 429 on the next answer holds the one after it back until it is sent.
            slack.fail_next(1, status=429, retry_after=5)
            for _ in range(2):
                await routed_turn(host, "slack-acme", {"channel": "C1"})
            assert await runtime.drain() == 1
            assert slack.texts() == ["one", "two"]
            clock.advance(5)
            assert await runtime.drain() == 2
    assert slack.texts() == ["one", "two", "three", "four"]


async def test_a_permanent_failure_dead_letters_at_once_and_logs_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.fail_next(1, ok_false="channel_not_found")
        async with channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host:
            (intent_id,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
            runtime = host.delivery_runtime(policy=NO_JITTER, clock=clock)
            with caplog.at_level(logging.WARNING, logger="hostkit.delivery"):
                assert await runtime.drain() == 1
            dead = await _intent(host, intent_id)
            clock.advance(3_600)
            assert await runtime.drain() == 0
    assert (dead.status, dead.attempts) == ("dead_lettered", 1)
    assert dead.last_error == "channel_not_found: slack refused the post"
    assert runtime.failed == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "hostkit.delivery"]
    assert len(lines) == 1
    assert intent_id in lines[0]
    assert "channel_not_found" in lines[0]
    assert len(slack.requests) == 1


async def test_the_dead_letter_line_says_whose_answer_it_was_in_plain_words(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A turn's answer names its turn; a command's answer, which ran no turn, says so
    instead of "turn None"; the channel is its name, not a Python repr."""
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.fail_next(2, ok_false="channel_not_found")
        async with channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host:
            turn = await routed_turn(host, "slack-acme", {"channel": "C1"})
            (by_turn,) = turn.deliveries
            session = await host.store.create_session(owner_kind="system", principal_id="suite")
            inbound = new_id("inb")
            route = {"channel": "slack-acme", "conversation": "c9", "reply": {"channel": "C1"}}
            command = await host.store.delivery.reply(
                inbound_id=inbound, session_id=session, route=route, text="no such code"
            )
            runtime = host.delivery_runtime(policy=NO_JITTER, clock=Clock())
            with caplog.at_level(logging.WARNING, logger="hostkit.delivery"):
                assert await runtime.drain() == 2
    lines = {r.getMessage() for r in caplog.records if r.name == "hostkit.delivery"}
    failure = "dead-lettered after 1 attempt: channel_not_found: slack refused the post"
    assert lines == {
        f"intent {by_turn} (turn {turn.turn_id}, channel slack-acme) {failure}",
        f"intent {command.intent_id} (command answer to {inbound}, channel slack-acme) {failure}",
    }


async def test_max_attempts_dead_letters_with_the_last_error_then_operator_retry_resends(
    tmp_path: Path,
) -> None:
    clock = Clock()
    async with FakeTelegram.running(token=TELEGRAM_TOKEN) as telegram:
        telegram.fail_next(2, status=502)
        async with channel_host(tmp_path, channel_tables(telegram=telegram.api_base)) as host:
            (intent_id,) = (await routed_turn(host, "tg", {"chat_id": 5})).deliveries
            policy = DeliveryPolicy(max_attempts=2, backoff_s=1.0, jitter=0.0)
            runtime = host.delivery_runtime(policy=policy, clock=clock)
            assert await runtime.drain() == 1
            clock.advance(1.0)
            assert await runtime.drain() == 1
            dead = await _intent(host, intent_id)
            assert (dead.status, dead.attempts) == ("dead_lettered", 2)
            assert dead.last_error == "telegram_502: telegram answered HTTP 502"
            assert telegram.messages == []
            retried = await host.store.delivery.retry(
                intent_id, reason="telegram was down", actor="ops", now=clock.now
            )
            assert (retried.status, retried.requeues) == ("pending", 1)
            assert await runtime.drain() == 1
            delivered = await _intent(host, intent_id)
    assert delivered.status == "delivered"
    assert telegram.texts() == ["the answer"]
    assert (runtime.failed, runtime.delivered) == (1, 1)


async def test_jittered_backoff_stays_within_the_policy(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.fail_next(1, status=500)
        async with channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host:
            (intent_id,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
            policy = DeliveryPolicy(backoff_s=10.0, jitter=0.5)
            runtime = host.delivery_runtime(policy=policy, clock=clock, rand=lambda: 0.999)
            await runtime.drain()
            row = await _intent(host, intent_id)
    assert row.next_attempt_at is not None
    assert clock.now + 5.0 <= row.next_attempt_at < clock.now + 5.1
