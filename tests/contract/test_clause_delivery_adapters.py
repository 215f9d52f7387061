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
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
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
        "unfurl_links": False,
        "unfurl_media": False,
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
    assert answer.body == {
        "chat_id": 4242,
        "text": "bonjour",
        "link_preview_options": {"is_disabled": True},
    }
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
                # The answer's turn and the part's place, for a receiver to rebuild a long one.
                "turn_id": result.turn_id,
                "part": 1,
                "parts": 1,
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


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


# What a proxy that ignores ``accept-encoding: identity`` may send: gzip, deflate in both
# framings (zlib-wrapped, as RFC 9110 says, and raw, as some servers send it), stacked.
CODINGS = {
    "gzip": ("gzip", gzip.compress),
    "x-gzip": ("x-gzip", gzip.compress),
    "deflate-zlib": ("deflate", zlib.compress),
    "deflate-raw": ("deflate", _raw_deflate),
    "gzip-gzip": ("gzip, gzip", lambda data: gzip.compress(gzip.compress(data))),
    "deflate-gzip": ("deflate, GZip", lambda data: gzip.compress(zlib.compress(data))),
}


async def test_a_gzip_accepted_slack_answer_is_one_delivery_not_a_retry(tmp_path: Path) -> None:
    """A proxy that gzips Slack's ``200 {"ok":true}`` although asked not to: the answer is
    decoded within the read bound and read as accepted, so the message is posted once (a
    refused read was a transient failure, retried: the person saw it twice)."""
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.compress_answers("gzip", gzip.compress)
        tables = channel_tables(slack=slack.api_base)
        async with channel_host(tmp_path, tables, answers=["hi from the agent"]) as host:
            result = await routed_turn(host, "slack-acme", {"channel": "C123"})
            runtime = host.delivery_runtime()
            assert await runtime.drain() == 1
            intent = await host.store.delivery.intent(result.deliveries[0])
    assert intent is not None
    assert intent.status == "delivered"
    assert intent.attempts == 1
    assert slack.texts() == ["hi from the agent"]
    assert (runtime.delivered, runtime.failed) == (1, 0)
    assert slack.messages[0].headers["accept-encoding"] == "identity"


def _target(channel: str, base: str, client: httpx.AsyncClient) -> Any:
    return {
        "slack": lambda: SlackChannel(base, SLACK_TOKEN, client),
        "telegram": lambda: TelegramChannel(base, TELEGRAM_TOKEN, client),
    }[channel]()


@asynccontextmanager
async def _platform(channel: str) -> AsyncIterator[tuple[FakeSlack | FakeTelegram, str]]:
    if channel == "slack":
        async with FakeSlack.running(token=SLACK_TOKEN) as slack:
            yield slack, slack.api_base
    else:
        async with FakeTelegram.running(token=TELEGRAM_TOKEN) as telegram:
            yield telegram, telegram.api_base


ROUTE = {"channel": "x", "reply": {"channel": "C9", "chat_id": 5}}


@pytest.mark.parametrize("coding", sorted(CODINGS))
@pytest.mark.parametrize("channel", ["slack", "telegram"])
async def test_a_compressed_accepted_answer_is_read_as_accepted(channel: str, coding: str) -> None:
    """Every coding a proxy may add (gzip, deflate zlib-wrapped or raw, two stacked) is
    decoded, so the platform's acceptance is read and the send returns: posted once."""
    async with _platform(channel) as (fake, base), httpx.AsyncClient() as client:
        fake.compress_answers(*CODINGS[coding])
        await _target(channel, base, client).send(ROUTE, {"text": "hi"}, idempotency_key="k")
    assert fake.texts() == ["hi"]


@pytest.mark.parametrize("channel", ["slack", "telegram"])
async def test_a_compressed_refusal_is_read_as_the_refusal_it_is(channel: str) -> None:
    """A compressed ``ok: false`` is read too: Slack's error code (permanent), Telegram's
    description, not an unreadable answer retried."""
    async with _platform(channel) as (fake, base), httpx.AsyncClient() as client:
        fake.compress_answers("gzip", gzip.compress)
        if channel == "slack":
            fake.fail_next(ok_false="channel_not_found")
        else:
            fake.fail_next(status=400, description="Bad Request: chat not found")
        with pytest.raises(DeliveryRefused) as refused:
            await _target(channel, base, client).send(ROUTE, {"text": "hi"}, idempotency_key="k")
    assert refused.value.failure.kind == "permanent"
    expected = "channel_not_found" if channel == "slack" else "telegram_400"
    assert refused.value.failure.code == expected


@pytest.mark.parametrize("channel", ["slack", "telegram"])
async def test_a_gzip_bomb_answer_is_read_only_to_the_bound(channel: str) -> None:
    """A gzip answer that inflates to 256 MiB is decoded only to the 64 KiB read bound (the
    work stops there); its opening ``{"ok":true`` still says the post was accepted."""
    opening = b'{"ok":true,"result":{"message_id":1},"padding":"'
    bomb = _gzip_stream(opening, b"a" * (1 << 20), 256)
    async with _platform(channel) as (fake, base), httpx.AsyncClient() as client:
        fake.compress_answers("gzip", lambda _: bomb)
        with anyio.fail_after(5):
            await _target(channel, base, client).send(ROUTE, {"text": "hi"}, idempotency_key="k")
    assert fake.texts() == ["hi"]


def _gzip_stream(opening: bytes, block: bytes, count: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [packer.compress(opening)]
    parts += [packer.compress(block) for _ in range(count)]
    return b"".join([*parts, packer.flush()])


@pytest.mark.parametrize("channel", ["slack", "telegram"])
async def test_a_gzip_answer_cut_short_is_read_to_where_it_breaks(channel: str) -> None:
    """A gzip answer cut before its end keeps the opening that decoded, like an answer past
    the read bound: its ``{"ok":true`` is read, so an accepted post is not sent again."""
    async with _platform(channel) as (fake, base), httpx.AsyncClient() as client:
        fake.compress_answers("gzip", lambda body: gzip.compress(body)[:-12])
        await _target(channel, base, client).send(ROUTE, {"text": "hi"}, idempotency_key="k")
    assert fake.texts() == ["hi"]


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip", "gzip, gzip, gzip"])
@pytest.mark.parametrize("channel", ["slack", "telegram", "webhook"])
async def test_an_answer_that_cannot_be_decoded_leaves_only_its_status(
    channel: str, encoding: str
) -> None:
    """A body in a coding not decoded (br, zstd, three stacked) or that is not what its
    coding says (garbage called gzip) is no answer read: its status alone decides, and a
    Web API's ``ok`` in it is unknown (a transient failure, retried), never a crash."""
    if channel == "webhook":
        async with WebhookReceiver.running(secret=WEBHOOK_SECRET) as receiver:
            receiver.compress_answers(encoding, lambda _: b"\x00garbage")
            async with httpx.AsyncClient() as client:
                target = WebhookChannel(receiver.deliver_url, WEBHOOK_SECRET, client)
                route = {"channel": "x", "reply": {"conversation": "room-7"}}
                await target.send(route, {"text": "hi"}, idempotency_key="out_1")
        assert len(receiver.bodies()) == 1
        return
    async with _platform(channel) as (fake, base), httpx.AsyncClient() as client:
        fake.compress_answers(encoding, lambda _: b"\x00garbage")
        with pytest.raises(DeliveryRefused) as refused:
            await _target(channel, base, client).send(ROUTE, {"text": "hi"}, idempotency_key="k")
    assert refused.value.retryable
    assert fake.requests[0].headers["accept-encoding"] == "identity"


# A long message, as Slack and Telegram echo it back: the answer is long enough that its
# opening ``{"ok":...`` decodes from the first part of it, compressed or not.
LONG = " ".join(f"line {n} of a long answer" for n in range(150))
BREAK_CODINGS = {"identity": None, "gzip": ("gzip", gzip.compress)}


def _target_within(channel: str, base: str, client: httpx.AsyncClient, timeout_s: float) -> Any:
    if channel == "slack":
        return SlackChannel(base, SLACK_TOKEN, client, timeout_s=timeout_s)
    return TelegramChannel(base, TELEGRAM_TOKEN, client, timeout_s=timeout_s)


@pytest.mark.parametrize("coding", sorted(BREAK_CODINGS))
@pytest.mark.parametrize("channel", ["slack", "telegram"])
async def test_an_accepted_answer_that_breaks_off_is_read_as_accepted(
    channel: str, coding: str
) -> None:
    """The platform answers ``200 {"ok":true,...`` and the connection drops before the
    declared length arrived: the post was taken, so the send returns (its opening ``ok``
    read), never a transient failure whose retry posts the message again."""
    async with _platform(channel) as (fake, base), httpx.AsyncClient() as client:
        if (encode := BREAK_CODINGS[coding]) is not None:
            fake.compress_answers(*encode)
        fake.break_answers(lambda data: len(data) // 2)
        with anyio.fail_after(10):
            await _target(channel, base, client).send(ROUTE, {"text": LONG}, idempotency_key="k")
    assert fake.texts() == [LONG]


@pytest.mark.parametrize("channel", ["slack", "telegram"])
async def test_an_accepted_answer_that_stalls_after_its_opening_is_read_as_accepted(
    channel: str,
) -> None:
    """The opening ``{"ok":true,...`` arrives, then the rest stalls past the send's
    deadline: the body's read ends inside that deadline with what came, read as accepted
    (a timeout threw the opening away, and every retry posted the message again)."""
    async with _platform(channel) as (fake, base), httpx.AsyncClient() as client:
        # A send deadline of 2 s: the request and the opening's read fit it on a loaded
        # two-core machine (1 s did not, once in a full run), and the rest stalls past it.
        fake.break_answers(lambda data: 40, stall_s=6.0)
        with anyio.fail_after(5):
            await _target_within(channel, base, client, 2.0).send(
                ROUTE, {"text": LONG}, idempotency_key="k"
            )
    assert fake.texts() == [LONG]


@pytest.mark.parametrize("channel", ["slack", "telegram"])
async def test_a_refusal_that_breaks_off_is_the_refusal_it_opened_with(channel: str) -> None:
    """A broken-off ``{"ok":false,...`` is the platform's refusal (permanent for these),
    not an unreadable answer retried."""
    async with _platform(channel) as (fake, base), httpx.AsyncClient() as client:
        if channel == "slack":
            fake.fail_next(ok_false="channel_not_found")
            fake.break_answers(lambda data: data.index(b"channel_not_found") + 18)
        else:
            fake.fail_next(status=400, description="Bad Request: chat not found " + "x" * 200)
            fake.break_answers(lambda data: 20)
        with pytest.raises(DeliveryRefused) as refused:
            await _target(channel, base, client).send(ROUTE, {"text": LONG}, idempotency_key="k")
    assert refused.value.failure.kind == "permanent"


@pytest.mark.parametrize(
    ("error", "reason_read", "kind"),
    [
        ("ratelimited", True, "transient"),  # its reason read: a "for now" stays one
        ("channel_not_found", True, "permanent"),
        ("channel_not_found", False, "transient"),  # broke off before its reason: no guess
    ],
)
async def test_a_slack_refusal_that_breaks_off_is_classed_by_the_reason_it_got_to(
    error: str, reason_read: bool, kind: str
) -> None:
    def keep(data: bytes) -> int:
        return data.index(error.encode()) + len(error) + 1 if reason_read else data.index(b"error")

    async with _platform("slack") as (fake, base), httpx.AsyncClient() as client:
        fake.fail_next(ok_false=error)
        fake.break_answers(keep)
        with pytest.raises(DeliveryRefused) as refused:
            await _target("slack", base, client).send(ROUTE, {"text": LONG}, idempotency_key="k")
    assert refused.value.failure.kind == kind


@pytest.mark.parametrize("channel", ["slack", "telegram"])
async def test_an_answer_that_breaks_off_before_its_ok_is_a_transient_failure(
    channel: str,
) -> None:
    """Broken off before its ``"ok"`` could be read, the answer says nothing: transient,
    as an unreadable answer always was."""
    async with _platform(channel) as (fake, base), httpx.AsyncClient() as client:
        fake.break_answers(lambda data: 3)
        with pytest.raises(DeliveryRefused) as refused:
            await _target(channel, base, client).send(ROUTE, {"text": LONG}, idempotency_key="k")
    assert refused.value.failure.kind == "transient"


async def test_a_broken_off_acceptance_is_delivered_once_by_the_runtime(tmp_path: Path) -> None:
    """End to end: Telegram takes the answer and its reply breaks off after the opening;
    the intent is delivered on its first attempt and the chat got it once."""
    async with FakeTelegram.running(token=TELEGRAM_TOKEN) as telegram:
        telegram.break_answers(lambda data: len(data) // 2)
        tables = channel_tables(telegram=telegram.api_base)
        async with channel_host(tmp_path, tables, answers=[LONG]) as host:
            result = await routed_turn(host, "tg", {"chat_id": 42})
            assert await host.delivery_runtime().drain() == 1
            intent = await host.store.delivery.intent(result.deliveries[0])
    assert intent is not None
    assert (intent.status, intent.attempts) == ("delivered", 1)
    assert telegram.texts() == [LONG]
