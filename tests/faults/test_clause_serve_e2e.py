"""Clause: end to end on loopback — a signed Slack event becomes one turn and one delivery.

"A signed webhook -> accept -> turn -> delivery to a loopback Slack server,
exactly once, including a SIGKILL of ``hostkit serve`` mid-turn and a
restart (the platform's retry of the same event produces no second turn; the
answer is delivered once); a channel approval answered by a reply message;
SIGTERM drain with a turn in flight."

A real ``hostkit serve`` subprocess (port 0, a scripted provider, a Slack
channel whose ``api_base`` is a FakeSlack in this test process, the secrets
only in the subprocess's environment), driven over HTTP like Slack would.
"""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from hostkit.store import LOST_NOTICE
from hostkit.types import approval_code
from tests.faults._serve_proc import (
    SLACK,
    SLACK_SECRET,
    SLACK_TOKEN,
    eventually,
    post_slack,
    query,
    serving,
    slack_button,
    slack_channel,
    slack_event,
    write_config,
)
from tests.platforms import FakeSlack

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def turns(database: Path, event_id: str) -> list[tuple[str, str]]:
    """(turn id, status) of the turns the inbound of Slack event ``event_id`` started."""
    return [
        (str(turn_id), str(status))
        for turn_id, status in await query(
            database,
            "SELECT t.turn_id, t.status FROM turns t JOIN inbox i "
            "ON t.request_id = 'inbound:' || i.inbound_id "
            "WHERE i.channel_instance_id = ? AND i.platform_event_key = ? ORDER BY t.id",
            SLACK,
            event_id,
        )
    ]


async def intents(database: Path) -> list[tuple[str, str, int]]:
    return [
        (str(turn_id), str(status), int(attempts))
        for turn_id, status, attempts in await query(
            database, "SELECT turn_id, status, attempts FROM outbox ORDER BY id"
        )
    ]


async def test_serve_delivers_once_through_a_sigkill_and_the_platforms_retry(
    tmp_path: Path,
) -> None:
    """Event B is answered; its delivery fails once (a Slack 500) and is pending when
    ``hostkit serve`` is SIGKILLed with event A's turn in flight. After a restart the
    platform retries both events: 200 duplicate each, no second turn; B's answer is
    delivered exactly once, by the new process. A's turn was cut: it ends ``lost`` and
    is never run again (an effect may have happened); its conversation gets one notice
    that the message went unanswered, delivered once too."""
    database = tmp_path / "hostkit.db"
    async with FakeSlack.running(token=SLACK_TOKEN) as slack, httpx.AsyncClient() as client:
        config = write_config(
            tmp_path,
            script=[{"reply": "answer B"}, {"reply": "answer A", "delay_s": 60.0}],
            channels={SLACK: slack_channel(slack.api_base)},
            # The failed attempt is retried 2-4 s later: after the kill and the restart.
            serve={"delivery_backoff_s": 4.0, "drain_timeout_s": 5.0},
        )
        slack.fail_next(1, status=500)
        event_b, event_a = slack_event("EvB", "question B"), slack_event("EvA", "question A")
        async with serving(config) as first:
            accepted = await post_slack(client, first.url, event_b)
            assert accepted.status_code == 200, accepted.text
            assert accepted.json()["status"] == "accepted"

            async def b_failed_once() -> bool:
                return [s for _, s, n in await intents(database) if n >= 1] == ["pending"]

            await eventually(b_failed_once, what="B's first delivery attempt to fail")
            assert (await post_slack(client, first.url, event_a)).status_code == 200

            async def a_running() -> bool:
                return [s for _, s in await turns(database, "EvA")] == ["running"]

            await eventually(a_running, what="A's turn to be running")
            ((_, b_status, _),) = await intents(database)
            assert b_status == "pending"  # not mid-send: the kill cannot double-send it
            first.signal(signal.SIGKILL)
            assert await first.exit_code(10) == -signal.SIGKILL
        assert slack.messages == []

        async with serving(config) as second:
            for event in (event_b, event_a):
                again = await post_slack(client, second.url, event, retry_num=1)
                assert again.status_code == 200, again.text
                assert again.json()["status"] == "duplicate"

            async def both_delivered() -> bool:
                return [s for _, s, _ in await intents(database)] == ["delivered"] * 2

            await eventually(
                both_delivered, what="B's answer and A's notice to be delivered", timeout_s=15
            )
            second.signal(signal.SIGTERM)
            assert await second.exit_code(15) == 0, second.output()[-2000:]

    assert sorted(m.body["text"] for m in slack.messages) == sorted(["answer B", LOST_NOTICE])
    assert {m.body["channel"] for m in slack.messages} == {"C1"}
    assert [s for _, s in await turns(database, "EvB")] == ["completed"]
    # Recovered at the restart: the turn the dead process ran is lost, never run twice.
    assert [s for _, s in await turns(database, "EvA")] == ["lost"]
    assert len(await query(database, "SELECT 1 FROM turns")) == 2
    assert len(await query(database, "SELECT 1 FROM inbox")) == 2
    assert SLACK_SECRET not in first.output() + second.output()
    assert SLACK_TOKEN not in first.output() + second.output()


async def test_serve_channel_approval_answered_by_a_reply_message(tmp_path: Path) -> None:
    """An ``ask`` is prompted in Slack with its code and buttons; a stranger's reply with
    the code does nothing, the asker's ``approve CODE`` runs the write once and its
    answer comes back to the channel; a second ask is denied with the prompt's button."""
    database = tmp_path / "hostkit.db"
    async with FakeSlack.running(token=SLACK_TOKEN) as slack, httpx.AsyncClient() as client:
        config = write_config(
            tmp_path,
            script=[
                {"tool": "files.write", "arguments": {"path": "note.txt", "content": "approved"}},
                {"reply": "written"},
                {"tool": "files.write", "arguments": {"path": "other.txt", "content": "denied"}},
                {"reply": "not written"},
            ],
            channels={SLACK: slack_channel(slack.api_base)},
            agent={"builtins": ["files.write"], "policy": {"allow": ["*"], "ask": ["files.write"]}},
            serve={"drain_timeout_s": 5.0},
        )
        async with serving(config) as served:
            asked = await post_slack(client, served.url, slack_event("Ev1", "write the note"))
            assert asked.status_code == 200, asked.text

            async def prompted() -> bool:
                return any("blocks" in m.body for m in slack.messages)

            await eventually(prompted, what="the approval prompt to reach Slack")
            (prompt,) = [m.body for m in slack.messages if "blocks" in m.body]
            ((approval_id,),) = await query(database, "SELECT approval_id FROM approvals")
            code = approval_code(str(approval_id))
            assert f"approve {code}" in prompt["text"]
            buttons = [e["value"] for b in prompt["blocks"] for e in b.get("elements", [])]
            assert buttons == [f"approve {code}", f"deny {code}"]
            assert not (tmp_path / "ws" / "note.txt").exists()

            # Someone else in the channel replies with the code: nothing happens.
            other = slack_event("Ev2", f"approve {code}", user="U2")
            assert (await post_slack(client, served.url, other)).status_code == 200
            # The asker replies in the conversation.
            answer = await post_slack(client, served.url, slack_event("Ev3", f"approve {code}"))
            assert answer.status_code == 200

            async def written() -> bool:
                return "written" in [m.body["text"] for m in slack.messages]

            await eventually(written, what="the continuation's answer to reach Slack")

            # A second ask, answered with the prompt's Deny button (Slack interactivity).
            again = await post_slack(client, served.url, slack_event("Ev4", "write another"))
            assert again.status_code == 200

            async def second_prompt() -> bool:
                return len([m for m in slack.messages if "blocks" in m.body]) == 2

            await eventually(second_prompt, what="the second approval prompt")
            deny = [m.body for m in slack.messages if "blocks" in m.body][1]["blocks"][-1]
            pressed = slack_button(deny["elements"][1]["value"], trigger="trig-1")
            assert (await post_slack(client, served.url, pressed)).status_code == 200

            async def told() -> bool:
                return "not written" in [m.body["text"] for m in slack.messages]

            await eventually(told, what="the denied continuation's answer")
            served.signal(signal.SIGTERM)
            assert await served.exit_code(15) == 0, served.output()[-2000:]

    assert (tmp_path / "ws" / "note.txt").read_text() == "approved"
    assert not (tmp_path / "ws" / "other.txt").exists()
    statuses = await query(database, "SELECT status FROM approvals ORDER BY created_at")
    assert [status for (status,) in statuses] == ["executed", "denied"]
    answers = [m.body for m in slack.messages if m.body["text"] in ("written", "not written")]
    assert [a["channel"] for a in answers] == ["C1", "C1"]
    # Two turns asked, two continuations ran; the stranger's reply ran nothing.
    assert len(await query(database, "SELECT 1 FROM turns")) == 4
    assert await turns(database, "Ev2") == []


async def test_serve_sigterm_drains_a_turn_in_flight_and_delivers_it(tmp_path: Path) -> None:
    database = tmp_path / "hostkit.db"
    async with FakeSlack.running(token=SLACK_TOKEN) as slack, httpx.AsyncClient() as client:
        config = write_config(
            tmp_path,
            script=[{"reply": "slow answer", "delay_s": 1.5}],
            channels={SLACK: slack_channel(slack.api_base)},
            serve={"drain_timeout_s": 10.0},
        )
        async with serving(config) as served:
            sent = await post_slack(client, served.url, slack_event("Ev1", "hi"))
            assert sent.status_code == 200, sent.text

            async def running() -> bool:
                return [s for _, s in await turns(database, "Ev1")] == ["running"]

            await eventually(running, what="the turn to be running")
            served.signal(signal.SIGTERM)
            assert await served.exit_code(20) == 0, served.output()[-2000:]

    assert [m.body["text"] for m in slack.messages] == ["slow answer"]
    assert [s for _, s in await turns(database, "Ev1")] == ["completed"]
    ((state,),) = await query(database, "SELECT state FROM inbox")
    assert state == "completed"
    assert [s for _, s, _ in await intents(database)] == ["delivered"]
