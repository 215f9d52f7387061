"""Clause: an approval button press is answered to the person who pressed it, never the chat.

Telegram shows a progress indicator on a pressed inline button until the bot
answers the callback query, and a group (or a Slack channel) is read by
everyone: an answer to a press is ``answerCallbackQuery`` on Telegram and
``chat.postEphemeral`` to the presser on Slack, for every outcome (a
refusal as an alert, an answer that counted, one that changed nothing). A
typed ``approve CODE`` keeps its ordinary reply (test_clause_channel_approvals).

A real Host on SQLite with a scripted model and an ``ask`` effect; the
envelopes are the transports' own parse of real update shapes; its worker
answers the commands and its DeliveryRuntime sends to loopback fakes of the
Bot API and the Slack Web API (tests/platforms.py).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
import pytest

from hostkit.adapters.scripted import ScriptedModel
from hostkit.channels import sign_slack
from hostkit.channels._slack import parse_slack
from hostkit.channels._telegram import envelope_from_update
from hostkit.errors import ChannelRefused, StoreError
from hostkit.host import Host, parse_config
from hostkit.testing import capabilities
from hostkit.types import InboundEnvelope, approval_code
from tests.contract._delivery_hosts import ENV, Clock, channel_tables, configured_channels
from tests.contract.test_clause_channel_approvals import script
from tests.contract.test_effects_approval_flow import ASK, Stamps
from tests.platforms import FakeSlack, FakeTelegram, telegram_callback, telegram_message

pytestmark = pytest.mark.anyio

GROUP, ALICE, BOB = -1001, 111, 222
_updates = iter(range(1, 1_000_000))


@asynccontextmanager
async def button_host(
    tmp_path: Path, stamps: Stamps, tables: Mapping[str, Mapping[str, Any]]
) -> AsyncIterator[Host]:
    """A Host whose agent asks before ``files.stamp``, with channels at the fakes."""
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False, "policy": ASK}},
            "channels": {name: dict(table) for name, table in tables.items()},
        },
        base_dir=tmp_path,
    )
    model = ScriptedModel([script], repeat_last=True)
    caps = dataclasses.replace(
        capabilities(model, tools=[stamps.tool]), channels=await configured_channels(config, ENV)
    )
    async with Host.open(config, capabilities=caps) as host:
        yield host


async def handled(host: Host, envelope: InboundEnvelope) -> None:
    """The inbound is accepted, handled by the Host's worker, and what it wrote delivered."""
    receipt = await host.inbox.accept(envelope)
    assert receipt.disposition == "accepted"
    assert await host.inbox_worker(idle_poll_s=0.05).drain() == 1
    await host.delivery_runtime(clock=Clock()).drain()


def telegram(update: Mapping[str, Any]) -> InboundEnvelope:
    envelope = envelope_from_update(
        {"update_id": next(_updates), **update},
        channel_id="tg",
        authenticated_by="telegram-secret-token",
        now=time.time(),
    )
    assert isinstance(envelope, InboundEnvelope), envelope
    return envelope


def slack(host: Host, body: Mapping[str, Any], *, form: bool = False) -> InboundEnvelope:
    raw = urlencode({"payload": json.dumps(body)}).encode() if form else json.dumps(body).encode()
    envelope = parse_slack(
        raw,
        {
            k.lower(): v
            for k, v in sign_slack(ENV["SLACK_SIGNING"], raw, timestamp=int(time.time())).items()
        },
        channel_id="slack-acme",
        config=host.config.channels["slack-acme"],
        secret=ENV["SLACK_SIGNING"],
        now=time.time(),
    )
    assert isinstance(envelope, InboundEnvelope), envelope
    return envelope


def slack_message(text: str, *, user: str = "U1") -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T1",
        "event_id": f"Ev{next(_updates)}",
        "event": {"type": "message", "channel": "C1", "user": user, "text": text, "ts": "1.1"},
    }


def slack_press(value: str, *, user: str) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "trigger_id": f"trig-{next(_updates)}",
        "team": {"id": "T1"},
        "user": {"id": user, "team_id": "T1"},
        "channel": {"id": "C1"},
        "container": {"type": "message", "channel_id": "C1"},
        "actions": [{"type": "button", "value": value, "action_ts": "1700000000.1"}],
    }


async def pending_code(host: Host) -> str:
    rows = await host.store.read(
        lambda c: c.execute("SELECT approval_id, status FROM approvals").fetchall()
    )
    ((approval_id, status),) = rows
    assert status == "pending"
    return approval_code(approval_id)


async def test_telegram_presses_are_answered_to_the_presser_and_never_to_the_group(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with FakeTelegram.running(token=ENV["TG_TOKEN"]) as tg:
        tables = channel_tables(telegram=tg.api_base)
        async with button_host(tmp_path, stamps, tables) as host:
            await handled(host, telegram(telegram_message(GROUP, ALICE, "stamp it")))
            (prompt,) = tg.messages
            assert "reply_markup" in prompt.body
            code = await pending_code(host)

            # Bob presses Approve under Alice's prompt: only Bob is told, as an alert.
            await handled(
                host, telegram(telegram_callback(GROUP, BOB, f"approve {code}", query_id="q-bob"))
            )
            (refused,) = tg.callback_answers
            assert refused.body["callback_query_id"] == "q-bob"
            assert refused.body["show_alert"] is True
            assert refused.body["text"].startswith("No pending approval of yours has this code")
            assert len(refused.body["text"]) <= 200
            assert tg.messages == [prompt]  # nothing said to the group
            assert await pending_code(host) == code
            assert stamps.lines() == []

            # Alice's press counts: her press is acknowledged, and before the continuation's
            # answer (written before the continuation ran); that answer goes to the group.
            await handled(
                host, telegram(telegram_callback(GROUP, ALICE, f"approve {code}", query_id="q-a1"))
            )
            assert stamps.lines() == ["one"]
            acknowledged = tg.callback_answers[1]
            assert acknowledged.body == {
                "callback_query_id": "q-a1",
                "text": f"Approval {code}: approved.",
                "show_alert": False,
            }
            (_, answer) = tg.messages
            assert (answer.body["chat_id"], answer.body["text"]) == (GROUP, "done: stamped one")
            assert acknowledged.at <= answer.at

            # Pressed again: nothing new runs, and the press is still answered (no spinner).
            await handled(
                host, telegram(telegram_callback(GROUP, ALICE, f"approve {code}", query_id="q-a2"))
            )
            again = tg.callback_answers[2]
            assert again.body["callback_query_id"] == "q-a2"
            assert again.body["show_alert"] is False
            assert "nothing new" in again.body["text"]
            assert len(tg.messages) == 2
            assert stamps.lines() == ["one"]

            # A different answer to the answered code: refused, to Alice alone.
            await handled(
                host, telegram(telegram_callback(GROUP, ALICE, f"deny {code}", query_id="q-a3"))
            )
            late = tg.callback_answers[3]
            assert (late.body["callback_query_id"], late.body["show_alert"]) == ("q-a3", True)
            assert (
                late.body["text"] == f"Approval {code}: it was answered already; nothing more runs."
            )
            assert len(tg.messages) == 2
            intents = await host.store.delivery.intents()
    assert {i.status for i in intents} == {"delivered"}


async def test_a_press_retried_after_its_answer_was_recorded_is_told_it_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer was recorded, then the press's own reply could not be written (a store
    hiccup, a crash): the worker retries the press, whose attempt runs the approved call.
    It is told the call was approved, never that nothing new runs."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with FakeTelegram.running(token=ENV["TG_TOKEN"]) as tg:
        tables = channel_tables(telegram=tg.api_base)
        async with button_host(tmp_path, stamps, tables) as host:
            await handled(host, telegram(telegram_message(GROUP, ALICE, "stamp it")))
            code = await pending_code(host)
            reply = host.store.delivery.reply
            failures = iter([StoreError("database is locked", retryable=True)])

            async def once_unwritable(**fields: Any) -> Any:
                failure = next(failures, None)
                if failure is not None:
                    raise failure
                return await reply(**fields)

            monkeypatch.setattr(host.store.delivery, "reply", once_unwritable)
            press = telegram_callback(GROUP, ALICE, f"approve {code}", query_id="q-a1")
            assert (await host.inbox.accept(telegram(press))).disposition == "accepted"
            worker = host.inbox_worker(idle_poll_s=0.05)
            with anyio.fail_after(30):
                while not tg.callback_answers:
                    await worker.drain()
                    await host.delivery_runtime(clock=Clock()).drain()
                    await anyio.sleep(0.05)
            assert stamps.lines() == ["one"]
            (told,) = tg.callback_answers
            assert told.body["text"] == f"Approval {code}: approved."


async def test_a_typed_command_in_a_telegram_group_keeps_its_ordinary_reply(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with FakeTelegram.running(token=ENV["TG_TOKEN"]) as tg:
        tables = channel_tables(telegram=tg.api_base)
        async with button_host(tmp_path, stamps, tables) as host:
            await handled(host, telegram(telegram_message(GROUP, ALICE, "stamp it")))
            code = await pending_code(host)
            await handled(host, telegram(telegram_message(GROUP, BOB, f"approve {code}")))
    assert tg.callback_answers == []
    (_, reply) = tg.messages
    assert reply.body["chat_id"] == GROUP
    assert reply.body["text"].startswith("No pending approval of yours has this code")


def in_topic(update: dict[str, Any], topic: int) -> dict[str, Any]:
    """``update`` as written in forum topic ``topic`` of a supergroup with topics."""
    message = update.get("message") or update["callback_query"]["message"]
    message["chat"].update(type="supergroup", is_forum=True)
    message.update(message_thread_id=topic, is_topic_message=True)
    return update


async def test_a_question_asked_in_a_telegram_forum_topic_is_answered_in_that_topic(
    tmp_path: Path,
) -> None:
    """A supergroup with topics: the approval prompt and the answer go back to the topic
    the question was asked in, never to the group's General topic."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with FakeTelegram.running(token=ENV["TG_TOKEN"]) as tg:
        tables = channel_tables(telegram=tg.api_base)
        async with button_host(tmp_path, stamps, tables) as host:
            asked = in_topic(telegram_message(GROUP, ALICE, "stamp it"), 42)
            await handled(host, telegram(asked))
            code = await pending_code(host)
            pressed = in_topic(telegram_callback(GROUP, ALICE, f"approve {code}"), 42)
            await handled(host, telegram(pressed))
    assert stamps.lines() == ["one"]
    assert len(tg.messages) >= 2
    for sent in tg.messages:
        assert (sent.body["chat_id"], sent.body.get("message_thread_id")) == (GROUP, 42)


def test_a_topic_message_without_its_topic_id_is_refused() -> None:
    update = in_topic(telegram_message(GROUP, ALICE, "hi"), 42)
    update["update_id"] = 7
    del update["message"]["message_thread_id"]
    with pytest.raises(ChannelRefused):
        envelope_from_update(update, channel_id="telegram.x", authenticated_by="t", now=0.0)


async def test_slack_presses_are_ephemeral_to_the_presser_and_never_a_channel_post(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with FakeSlack.running(token=ENV["SLACK_BOT_TOKEN"]) as fake:
        tables = channel_tables(slack=fake.api_base)
        async with button_host(tmp_path, stamps, tables) as host:
            await handled(host, slack(host, slack_message("stamp it")))
            (prompt,) = fake.messages
            assert "blocks" in prompt.body
            code = await pending_code(host)

            await handled(host, slack(host, slack_press(f"approve {code}", user="U2"), form=True))
            (refused,) = fake.ephemerals
            assert refused.path == "/api/chat.postEphemeral"
            assert (refused.body["channel"], refused.body["user"]) == ("C1", "U2")
            assert refused.body["text"].startswith("No pending approval of yours has this code")
            assert fake.messages == [prompt]  # nothing posted to the channel
            assert stamps.lines() == []

            await handled(host, slack(host, slack_press(f"approve {code}", user="U1"), form=True))
            assert stamps.lines() == ["one"]
            acknowledged = fake.ephemerals[1]
            assert (acknowledged.body["user"], acknowledged.body["text"]) == (
                "U1",
                f"Approval {code}: approved.",
            )
            (_, answer) = fake.messages
            assert answer.body["text"] == "done: stamped one"


# Payload shapes where the asking message and the press name different workspaces: a Slack
# Connect channel (the envelope's team_id names the channel's workspace TB,
# slackapi/java-slack-sdk#629; a press's team.id the app's TA, #1041) and an Enterprise
# Grid org-wide install (a press's user.team_id one fixed workspace, slackapi/bolt-js#1875).
SHAPES = {
    "connect": ({"team_id": "TB"}, {"team": {"id": "TA"}, "user_team": "TB"}),
    "grid": (
        {"team_id": "T01", "enterprise_id": "E01"},
        {"team": {"id": "T03"}, "user_team": "T03"},
    ),
}


def shaped_message(text: str, *, user: str, shape: str) -> dict[str, Any]:
    body = slack_message(text, user=user)
    body.update(SHAPES[shape][0])
    return body


def pressed_button(prompt: Any, value: str, *, user: str, shape: str) -> dict[str, Any]:
    """A press of the posted prompt's button, as Slack sends it: the button's block id
    echoed, the workspaces named as that payload shape names them."""
    body = slack_press(value, user=user)
    press = SHAPES[shape][1]
    body["team"] = press["team"]
    body["user"]["team_id"] = press["user_team"]
    (actions,) = [b for b in prompt.body["blocks"] if b["type"] == "actions"]
    body["actions"][0]["block_id"] = actions["block_id"]
    return body


@pytest.mark.parametrize("shape", sorted(SHAPES))
async def test_a_press_is_keyed_as_the_message_that_asked_whatever_workspace_it_names(
    tmp_path: Path, shape: str
) -> None:
    """The asker's press answers her approval although the press names another workspace
    than her message did (the prompt's button carries the asking conversation's
    workspace); someone else pressing it is still not her."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with FakeSlack.running(token=ENV["SLACK_BOT_TOKEN"]) as fake:
        tables = channel_tables(slack=fake.api_base)
        async with button_host(tmp_path, stamps, tables) as host:
            asked = slack(host, shaped_message("stamp it", user="U1", shape=shape))
            team = SHAPES[shape][0]["team_id"]
            # The key it always had: the envelope's team_id.
            assert asked.conversation_key == f"{team}:C1:U1"
            await handled(host, asked)
            code = await pending_code(host)
            (prompt,) = fake.messages

            stranger = pressed_button(prompt, f"approve {code}", user="U9", shape=shape)
            await handled(host, slack(host, stranger, form=True))
            (refused,) = fake.ephemerals
            assert refused.body["user"] == "U9"
            assert refused.body["text"].startswith("No pending approval of yours has this code")
            assert await pending_code(host) == code

            mine = pressed_button(prompt, f"approve {code}", user="U1", shape=shape)
            pressed = slack(host, mine, form=True)
            assert pressed.conversation_key == asked.conversation_key
            await handled(host, pressed)
            assert stamps.lines() == ["one"]
            acknowledged = fake.ephemerals[1]
            assert (acknowledged.body["user"], acknowledged.body["text"]) == (
                "U1",
                f"Approval {code}: approved.",
            )
