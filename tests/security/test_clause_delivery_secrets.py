"""Delivery clause: a channel secret never reaches a log record, an error text or a row.

Every outbound channel fails here (refused credentials, refused signature,
a closed port), so every failure path writes what it writes: log lines
(captured at DEBUG from every logger, httpx's request lines included: a
Telegram URL carries the bot token), dead-letter rows, error messages. None
may contain a token or a signing secret.
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import httpx
import pytest

from hostkit.delivery import DeliveryPolicy, TelegramChannel
from hostkit.errors import ConfigError, DeliveryRefused
from hostkit.host import ConfiguredChannels
from tests.contract._delivery_hosts import (
    ENV,
    SLACK_TOKEN,
    TELEGRAM_TOKEN,
    WEBHOOK_SECRET,
    Clock,
    channel_host,
    channel_tables,
    host_config,
    routed_turn,
)
from tests.platforms import FakeSlack, FakeTelegram, WebhookReceiver
from tests.support import table_rows

pytestmark = pytest.mark.anyio

SECRETS = (SLACK_TOKEN, TELEGRAM_TOKEN, WEBHOOK_SECRET, TELEGRAM_TOKEN.split(":")[1])


async def test_no_secret_in_logs_errors_or_dead_letters(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with (
        FakeSlack.running(token="xoxb-9999-other-token") as slack,
        FakeTelegram.running(token="1:other") as telegram,
        WebhookReceiver.running(secret="another-secret") as receiver,
    ):
        tables = channel_tables(
            slack=slack.api_base, telegram=telegram.api_base, deliver_url=receiver.deliver_url
        )
        tables["tg-down"] = {**tables["tg"], "api_base": "http://127.0.0.1:9"}
        async with channel_host(tmp_path, tables) as host:
            for n, (channel, reply) in enumerate(
                [
                    ("slack-acme", {"channel": "C1"}),
                    ("tg", {"chat_id": 1}),
                    ("hook", {"conversation": "r"}),
                    ("tg-down", {"chat_id": 2}),
                ]
            ):
                await routed_turn(host, channel, reply, conversation=f"c{n}")
            runtime = host.delivery_runtime(policy=DeliveryPolicy(max_attempts=1), clock=Clock())
            assert await runtime.drain() == 4
            rows = await host.store.delivery.intents()
    assert [r.status for r in rows] == ["dead_lettered"] * 4
    errors = {r.route["channel"]: r.last_error for r in rows}
    assert errors == {
        "slack-acme": "invalid_auth: slack refused the post",
        "tg": "telegram_401: Unauthorized",
        "hook": "http_401: the receiver answered HTTP 401",
        "tg-down": "connect_error: ConnectError",
    }
    # The token was really sent (as Slack and Telegram expect it) ...
    assert slack.requests[0].headers["authorization"] == f"Bearer {SLACK_TOKEN}"
    assert telegram.requests[0].path == f"/bot{TELEGRAM_TOKEN}/sendMessage"
    # ... and is nowhere else.
    logged = [record.getMessage() for record in caplog.records]
    assert any("sendMessage" in line for line in logged), "httpx request lines were captured"
    cells = await anyio.to_thread.run_sync(lambda: list(table_rows(tmp_path / "hostkit.db")))
    for secret in SECRETS:
        assert not any(secret in line for line in logged), secret
        assert not any(secret in cell for cell in cells), secret


async def test_adapter_errors_and_reprs_hold_no_token() -> None:
    async with httpx.AsyncClient() as client:
        channel = TelegramChannel("http://127.0.0.1:9", TELEGRAM_TOKEN, client)
        with pytest.raises(DeliveryRefused) as refused:
            await channel.send(
                {"channel": "tg", "reply": {"chat_id": 1}}, {"text": "t"}, idempotency_key="k"
            )
    texts = [str(refused.value), repr(refused.value), repr(channel), refused.value.failure.text()]
    assert refused.value.failure.kind == "transient"
    for secret in SECRETS:
        assert not any(secret in text for text in texts)


def test_a_missing_secret_variable_is_named_at_configuration_time(tmp_path: Path) -> None:
    config = host_config(tmp_path, channel_tables(slack="http://127.0.0.1:9"))
    env = {k: v for k, v in ENV.items() if k != "SLACK_BOT_TOKEN"}
    with pytest.raises(ConfigError) as missing:
        ConfiguredChannels(config, env)
    assert "SLACK_BOT_TOKEN" in str(missing.value)
    assert "channels.slack-acme.token_env" in str(missing.value)
    assert ConfiguredChannels(config, ENV).aliases == ("slack-acme",)
