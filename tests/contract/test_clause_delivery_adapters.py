"""Delivery clause: each outbound adapter sends the platform's real request shape.

Answers come from real turns on the real SQLite store, drained by the
Host's DeliveryRuntime through the Host's configured channels to loopback
fakes of Slack, Telegram and a signed webhook receiver. Approval prompts
are sent through the adapters directly (the payload the outbox carries).
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import json
from pathlib import Path

import httpx
import pytest

from hostkit.delivery import SlackChannel, TelegramChannel, WebhookChannel
from hostkit.errors import DeliveryRefused
from hostkit.types import approval_code
from tests.contract._delivery_hosts import (
    SLACK_TOKEN,
    TELEGRAM_TOKEN,
    WEBHOOK_SECRET,
    channel_host,
    channel_tables,
    routed_turn,
)
from tests.contract.test_clause_inbound_route import inbound
from tests.platforms import FakeSlack, FakeTelegram, WebhookReceiver

pytestmark = pytest.mark.anyio

CODE = approval_code("appr_1")
PROMPT = {
    "text": "The agent asks to run files.write: notes.md",
    "approval": {"approval_id": "appr_1", "code": CODE, "tool": "files.write", "summary": "w"},
}


async def test_slack_answer_is_chat_post_message_in_the_captured_thread(tmp_path: Path) -> None:
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        tables = channel_tables(slack=slack.api_base)
        async with channel_host(tmp_path, tables, answers=["hi from the agent"]) as host:
            result = await routed_turn(
                host, "slack-acme", {"channel": "C123", "thread_ts": "1700000000.000100"}
            )
            runtime = host.delivery_runtime()
            assert await runtime.drain() == 1
            intent = await host.store.delivery.intent(result.deliveries[0])
    assert intent is not None
    assert intent.status == "delivered"
    (message,) = slack.messages
    assert message.path == "/api/chat.postMessage"
    assert message.headers["authorization"] == f"Bearer {SLACK_TOKEN}"
    assert message.headers["content-type"].startswith("application/json")
    assert message.body == {
        "channel": "C123",
        "text": "hi from the agent",
        "thread_ts": "1700000000.000100",
        "metadata": {
            "event_type": "hostkit_delivery",
            "event_payload": {"intent_id": result.deliveries[0]},
        },
    }
    assert runtime.delivered == 1
    assert runtime.failed == 0


async def test_slack_approval_prompt_has_approve_and_deny_buttons() -> None:
    async with FakeSlack.running(token=SLACK_TOKEN) as slack, httpx.AsyncClient() as client:
        channel = SlackChannel(slack.api_base, SLACK_TOKEN, client)
        await channel.send(
            {"channel": "slack-acme", "reply": {"channel": "C9"}}, PROMPT, idempotency_key="out_1"
        )
    (message,) = slack.messages
    section, actions = message.body["blocks"]
    # verbatim: Slack would otherwise turn a plain "@channel" in the arguments into a mention.
    assert section == {
        "type": "section",
        "text": {"type": "mrkdwn", "text": PROMPT["text"], "verbatim": True},
    }
    assert actions["type"] == "actions"
    buttons = {b["action_id"]: b["value"] for b in actions["elements"]}
    assert buttons == {"hostkit_approve": f"approve {CODE}", "hostkit_deny": f"deny {CODE}"}
    assert message.body["text"] == PROMPT["text"]


async def test_telegram_answer_and_prompt_are_send_message(tmp_path: Path) -> None:
    async with FakeTelegram.running(token=TELEGRAM_TOKEN) as telegram:
        tables = channel_tables(telegram=telegram.api_base)
        async with channel_host(tmp_path, tables, answers=["bonjour"]) as host:
            await routed_turn(host, "tg", {"chat_id": 4242})
            assert await host.delivery_runtime().drain() == 1
        async with httpx.AsyncClient() as client:
            channel = TelegramChannel(telegram.api_base, TELEGRAM_TOKEN, client)
            await channel.send(
                {"channel": "tg", "reply": {"chat_id": -100200}}, PROMPT, idempotency_key="o"
            )
    answer, prompt = telegram.messages
    assert answer.path == f"/bot{TELEGRAM_TOKEN}/sendMessage"
    assert answer.body == {"chat_id": 4242, "text": "bonjour"}
    assert prompt.body["chat_id"] == -100200
    assert prompt.body["reply_markup"] == {
        "inline_keyboard": [
            [
                {"text": "Approve", "callback_data": f"approve {CODE}"},
                {"text": "Deny", "callback_data": f"deny {CODE}"},
            ]
        ]
    }


async def test_webhook_delivery_is_signed_json_with_the_intent_as_idempotency_key(
    tmp_path: Path,
) -> None:
    async with WebhookReceiver.running(secret=WEBHOOK_SECRET) as receiver:
        tables = channel_tables(deliver_url=receiver.deliver_url)
        async with channel_host(tmp_path, tables, answers=["signed answer"]) as host:
            result = await routed_turn(
                host, "hook", {"conversation": "room-7"}, conversation="room-7:bob"
            )
            assert await host.delivery_runtime().drain() == 1
    (intent_id,) = result.deliveries
    assert receiver.deliveries == {
        intent_id: [
            {
                "intent_id": intent_id,
                "conversation": "room-7:bob",
                "reply": {"conversation": "room-7"},
                "text": "signed answer",
            }
        ]
    }
    (seen,) = receiver.requests
    stamp = seen.headers["x-hostkit-timestamp"]
    mac = hmac.new(WEBHOOK_SECRET.encode(), f"{stamp}.".encode() + seen.raw, hashlib.sha256)
    assert seen.headers["x-hostkit-signature"] == "sha256=" + mac.hexdigest()
    assert WEBHOOK_SECRET not in seen.raw.decode()


async def test_webhook_prompt_carries_the_approval() -> None:
    async with (
        WebhookReceiver.running(secret=WEBHOOK_SECRET) as receiver,
        httpx.AsyncClient() as client,
    ):
        channel = WebhookChannel(receiver.deliver_url, WEBHOOK_SECRET, client)
        route = {"channel": "hook", "conversation": "r:b", "reply": {"conversation": "r"}}
        await channel.send(route, PROMPT, idempotency_key="out_9")
        wrong = WebhookChannel(receiver.deliver_url, "another-secret", client)
        with pytest.raises(DeliveryRefused) as refused:
            await wrong.send(route, PROMPT, idempotency_key="out_10")
    assert receiver.deliveries["out_9"][0]["approval"] == PROMPT["approval"]
    # The receiver refused the bad signature with 401: permanent, never retried.
    assert refused.value.failure.kind == "permanent"
    assert refused.value.failure.code == "http_401"
    assert "out_10" not in receiver.deliveries


@pytest.mark.parametrize(
    ("reply", "kind"),
    [({}, "slack"), ({"thread_ts": "1.2"}, "slack"), ({"chat_id": True}, "telegram")],
)
async def test_a_malformed_reply_target_is_a_permanent_bad_route(
    reply: dict[str, object], kind: str
) -> None:
    async with httpx.AsyncClient() as client:
        channel = (
            SlackChannel("http://127.0.0.1:9", SLACK_TOKEN, client)
            if kind == "slack"
            else TelegramChannel("http://127.0.0.1:9", TELEGRAM_TOKEN, client)
        )
        with pytest.raises(DeliveryRefused) as refused:
            await channel.send({"channel": "x", "reply": reply}, {"text": "t"}, idempotency_key="k")
    assert (refused.value.failure.kind, refused.value.failure.code) == ("permanent", "bad_route")
    assert json.dumps(refused.value.message).find(SLACK_TOKEN) == -1


async def test_a_command_that_matched_nothing_is_answered_in_its_slack_thread(
    tmp_path: Path,
) -> None:
    """`approve` with a code nobody was given: the sender reads why, where they typed it."""
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        tables = channel_tables(slack=slack.api_base)
        async with channel_host(tmp_path, tables) as host:
            receipt = await host.inbox.accept(
                inbound(
                    "approve K7QX2M",
                    channel="slack-acme",
                    kind="command",
                    metadata={"reply": {"channel": "C9", "thread_ts": "1700000000.000200"}},
                )
            )
            assert await host.inbox_worker(idle_poll_s=0.05).drain() == 1
            record = await host.inbox.record(receipt.inbound_id)
            assert record is not None
            assert (record.result_kind, record.turn_id) == ("command", None)
            assert await host.delivery_runtime().drain() == 1
            (intent,) = await host.store.delivery.intents()
    assert (intent.status, intent.inbound_id, intent.turn_id) == (
        "delivered",
        receipt.inbound_id,
        None,
    )
    (message,) = slack.messages
    assert message.path == "/api/chat.postMessage"
    assert message.body["channel"] == "C9"
    assert message.body["thread_ts"] == "1700000000.000200"
    assert message.body["text"].startswith("No pending approval of yours has this code")


PRESS_ANSWER = {
    "text": "No pending approval of yours <!channel> " + "x" * 400,
    "press_answer": {"alert": True},
}


async def test_a_press_answer_goes_to_the_presser_alone() -> None:
    """Telegram: answerCallbackQuery (its 200 characters, an alert); Slack: an ephemeral
    message to the user who pressed, escaped like every text. Never a chat message."""
    async with (
        FakeTelegram.running(token=TELEGRAM_TOKEN) as telegram,
        FakeSlack.running(token=SLACK_TOKEN) as slack,
        httpx.AsyncClient() as client,
    ):
        await TelegramChannel(telegram.api_base, TELEGRAM_TOKEN, client).send(
            {"channel": "tg", "reply": {"chat_id": -100200, "callback_query_id": "q-7"}},
            PRESS_ANSWER,
            idempotency_key="out_1",
        )
        await SlackChannel(slack.api_base, SLACK_TOKEN, client).send(
            {"channel": "slack-acme", "reply": {"channel": "C9", "thread_ts": "1.2", "user": "U2"}},
            PRESS_ANSWER,
            idempotency_key="out_2",
        )
    (answered,) = telegram.callback_answers
    assert answered.path == f"/bot{TELEGRAM_TOKEN}/answerCallbackQuery"
    assert answered.body["callback_query_id"] == "q-7"
    assert answered.body["show_alert"] is True
    assert len(answered.body["text"]) == 200
    assert answered.body["text"].endswith("…")
    assert telegram.messages == []
    (ephemeral,) = slack.ephemerals
    assert ephemeral.path == "/api/chat.postEphemeral"
    assert {k: ephemeral.body[k] for k in ("channel", "user", "thread_ts")} == {
        "channel": "C9",
        "user": "U2",
        "thread_ts": "1.2",
    }
    assert "<!channel>" not in ephemeral.body["text"]
    assert "&lt;!channel&gt;" in ephemeral.body["text"]
    assert slack.messages == []


@pytest.mark.parametrize(
    ("kind", "reply", "code"),
    [
        ("telegram", {"chat_id": -100200}, "bad_route"),
        ("slack", {"channel": "C9"}, "bad_route"),
        ("webhook", {"conversation": "room-7"}, "bad_payload"),
    ],
)
async def test_a_press_answer_without_its_presser_is_refused_not_posted_to_everyone(
    kind: str, reply: dict[str, object], code: str
) -> None:
    async with httpx.AsyncClient() as client:
        channel = {
            "telegram": lambda: TelegramChannel("http://127.0.0.1:9", TELEGRAM_TOKEN, client),
            "slack": lambda: SlackChannel("http://127.0.0.1:9", SLACK_TOKEN, client),
            "webhook": lambda: WebhookChannel("http://127.0.0.1:9", WEBHOOK_SECRET, client),
        }[kind]()
        with pytest.raises(DeliveryRefused) as refused:
            await channel.send({"channel": "x", "reply": reply}, PRESS_ANSWER, idempotency_key="k")
    assert (refused.value.failure.kind, refused.value.failure.code) == ("permanent", code)


@pytest.mark.parametrize("channel", ["slack", "telegram", "webhook"])
async def test_an_answer_sent_compressed_is_not_inflated(channel: str) -> None:
    """Answers are asked for uncompressed and read to a bound as they arrive; httpx would
    inflate a compressed chunk whole before that bound (64 KiB of deflate is 64 MiB). So an
    answer that comes compressed anyway is not read: its status alone decides, and a Web
    API's ``ok`` in it is unknown (a transient failure, retried), never taken as read."""
    asked: list[str | None] = []

    def compressed(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("accept-encoding"))
        body = gzip.compress(json.dumps({"ok": True, "result": {}}).encode())
        return httpx.Response(200, content=body, headers={"content-encoding": "gzip"})

    reply = {"channel": "C9", "chat_id": 5, "conversation": "room-7"}
    route = {"channel": channel, "reply": reply}
    async with httpx.AsyncClient(transport=httpx.MockTransport(compressed)) as client:
        target = {
            "slack": SlackChannel("https://slack.test/api", SLACK_TOKEN, client),
            "telegram": TelegramChannel("https://telegram.test", TELEGRAM_TOKEN, client),
            "webhook": WebhookChannel("https://hooks.test/in", WEBHOOK_SECRET, client),
        }[channel]
        if channel == "webhook":
            await target.send(route, {"text": "hi"}, idempotency_key="out_1")
        else:
            with pytest.raises(DeliveryRefused) as refused:
                await target.send(route, {"text": "hi"}, idempotency_key="out_1")
            assert refused.value.retryable
    assert asked == ["identity"]
