"""Delivery clause: what a platform would refuse or mangle never costs the person the answer.

Slack refuses a text past about 4,000 characters (``msg_too_long``, a
permanent refusal) and Telegram one past 4,096 UTF-16 code units: a long
answer goes out as ordered parts that fit, one intent each, broken at a line
or a word and never inside a character, each keeping its break so the parts
joined are the answer (a webhook receiver is told the turn, the part's place
and what the split added: a code fence closed and reopened, so a block keeps
its formatting); a runaway answer goes in at most ``MAX_PARTS`` and says how
much was withheld. An answer with nothing visible in it
is never written as a text no platform posts: the conversation is told the
turn had no reply. A text an adapter must still cut ends in a ``[cut: …]``
mark, cut before Slack's escaping so no ``&amp;`` is split; and a text Slack
refuses as too long anyway is told to the conversation, not dropped in
silence. Real turns on a real SQLite outbox, loopback fakes (tests/platforms.py).
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from hostkit.delivery import SlackChannel, TelegramChannel
from hostkit.delivery._slack import TOO_LONG_NOTICE
from hostkit.errors import DeliveryRefused
from hostkit.store import EMPTY_NOTICE
from hostkit.types import (
    CUT_MARK,
    MAX_PART_UNITS,
    MAX_PARTS,
    chat_units,
    has_visible,
    split_parts,
    utf16_units,
    withheld_mark,
)
from tests.contract._delivery_hosts import (
    SLACK_TOKEN,
    TELEGRAM_TOKEN,
    WEBHOOK_SECRET,
    channel_host,
    channel_tables,
    routed_turn,
)
from tests.platforms import FakeSlack, FakeTelegram, WebhookReceiver

pytestmark = pytest.mark.anyio

# 240 lines of 50 characters (12,000), with what Slack escapes in every line.
REPORT = "\n".join(f"line {i:03}: revenue & costs <net> went up ....." for i in range(240))
SLACK_ROUTE = {"channel": "slack-acme", "reply": {"channel": "C1"}}
TELEGRAM_ROUTE = {"channel": "tg", "reply": {"chat_id": 7}}


async def test_a_long_slack_answer_arrives_whole_in_ordered_parts_that_fit(
    tmp_path: Path,
) -> None:
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        tables = channel_tables(slack=slack.api_base)
        async with channel_host(tmp_path, tables, answers=[REPORT]) as host:
            parts = len(split_parts(REPORT))
            result = await routed_turn(host, "slack-acme", {"channel": "C1"}, parts=parts)
            assert await host.delivery_runtime().drain() == parts
            rows = [await host.store.delivery.intent(i) for i in result.deliveries]
    assert parts >= 4  # escaped, 12,000 characters are ~16,000
    assert [row.status for row in rows if row is not None] == ["delivered"] * parts
    texts = slack.texts()
    assert all(len(text) <= 4_000 for text in texts)
    # In order, broken at line ends only (each part keeps its own), and nothing lost.
    assert all(html.unescape(text).endswith("\n") for text in texts[:-1])
    assert "".join(html.unescape(text) for text in texts) == REPORT


async def test_a_long_telegram_answer_is_split_as_telegram_counts_it(tmp_path: Path) -> None:
    """3,000 emoji with skin tones are 12,000 UTF-16 code units though 6,000 code points:
    no part passes 4,096 units, and no skin tone is parted from its emoji."""
    answer = "👍🏽 " * 3_000
    async with FakeTelegram.running(token=TELEGRAM_TOKEN) as telegram:
        tables = channel_tables(telegram=telegram.api_base)
        async with channel_host(tmp_path, tables, answers=[answer]) as host:
            parts = len(split_parts(answer))
            result = await routed_turn(host, "tg", {"chat_id": 7}, parts=parts)
            assert await host.delivery_runtime().drain() == parts
            rows = [await host.store.delivery.intent(i) for i in result.deliveries]
    assert parts >= 3
    assert [row.status for row in rows if row is not None] == ["delivered"] * parts
    texts = telegram.texts()
    assert all(utf16_units(text) <= 4_096 for text in texts)
    assert all(text.startswith("👍🏽") and text.endswith("👍🏽 ") for text in texts)
    assert "".join(texts) == answer


@pytest.mark.parametrize(
    "text",
    [
        "👨‍👩‍👧" * 2_000,  # joiner sequences, no space to break at
        "e\u0301" * 5_000,  # combining accents
        "\ud83d\ude00" * 3_000,  # a pair written as two code points (streamed deltas)
        "a&b<c>" * 2_000,  # what Slack escapes
    ],
)
def test_a_part_never_ends_inside_a_character(text: str) -> None:
    parts = split_parts(text)
    assert len(parts) > 1
    assert "".join(parts) == text
    for part in parts:
        assert chat_units(part) <= MAX_PART_UNITS
        assert not part.endswith(("\u200d", "\ud83d"))
        assert not part.startswith(("\u200d", "\u0301", "\ude00"))


@pytest.mark.parametrize(
    ("text", "starts"),
    [
        ("a" + "🇺🇸" * 2_100, "🇺🇸"),  # flags at an odd offset: pairs counted from the run's start
        ("ก" + "กั" * 3_000, "ก"),  # Thai MAI HAN-AKAT (Mn, combining class 0)
        ("क" + "कि" * 3_000, "क"),  # Devanagari vowel sign I (Mc)
        ("x" + "\u1100\u1161" * 3_000, "\u1100"),  # a Hangul syllable written as jamo
    ],
)
def test_a_part_never_begins_inside_a_character_a_reader_sees(text: str, starts: str) -> None:
    parts = split_parts(text)
    assert len(parts) > 1
    assert "".join(parts) == text
    assert all(part.startswith(starts) for part in parts[1:])
    assert all(chat_units(part) <= MAX_PART_UNITS for part in parts)


@pytest.mark.parametrize(
    "text",
    [
        "\n".join(f"line {i}: a fairly ordinary sentence" for i in range(600)),
        ("some words and more words " * 900).strip(),
        "header\r\n" + "tab\tseparated\tcells\r\n" * 700,
        "  indented\n" * 900 + "end",
    ],
)
def test_parts_keep_their_breaks_so_joined_they_are_the_answer(text: str) -> None:
    """Nothing is dropped at a break: a receiver that joins the parts has the answer."""
    parts = split_parts(text)
    assert len(parts) > 1
    assert "".join(parts) == text
    assert all(part[-1].isspace() for part in parts[:-1])


def test_a_long_run_of_spaces_never_makes_a_part_with_nothing_visible() -> None:
    parts = split_parts("start " + " " * 12_000 + "\n" * 9_000 + "\u200b" * 5_000 + " end")
    assert all(has_visible(part) for part in parts)
    assert (parts[0][:5], parts[-1].rstrip()[-3:]) == ("start", "end")


@pytest.mark.parametrize("text", ["word " * 900_000, "&" * (4 << 20), "🇺🇸" * 500_000])
def test_a_runaway_answer_goes_in_at_most_max_parts_and_says_how_much_was_withheld(
    text: str,
) -> None:
    """Megabytes of answer are not a thousand messages the session's later answers wait
    behind: ``MAX_PARTS`` go out, the last saying how many characters were not sent."""
    parts = split_parts(text)
    assert len(parts) == MAX_PARTS == 10
    assert all(chat_units(part) <= MAX_PART_UNITS for part in parts)
    sent = "".join(parts[:-1]) + parts[-1].split("\n\n[… ")[0]
    assert text.startswith(sent)
    assert parts[-1].endswith(withheld_mark(len(text) - len(sent)))
    assert "history on the Host" in parts[-1]


def test_an_answer_of_exactly_max_parts_is_sent_whole() -> None:
    text = ("a" * 3_000 + "\n") * MAX_PARTS
    parts = split_parts(text)
    assert len(parts) == MAX_PARTS
    assert "".join(parts) == text


CODE = (
    "Here is the script:\n```python\n"
    + "\n".join(f"total = total * rate_{i} + base  # & <step>" for i in range(300))
    + "\n```\nRun it with python."
)


def _fence_lines(text: str) -> list[str]:
    return re.findall(r"(?m)^```.*$", text)


def test_a_code_block_split_across_parts_is_closed_and_reopened() -> None:
    """Each part's block is whole, so Slack draws every part of the code as code; the
    fences count against the limit."""
    parts = split_parts(CODE)
    assert len(parts) >= 3
    assert all(chat_units(part) <= MAX_PART_UNITS for part in parts)
    assert all(len(_fence_lines(part)) == 2 for part in parts)
    assert all(part.startswith("```python\n") for part in parts[1:])
    assert all(part.endswith("\n```") for part in parts[:-1])
    assert parts[-1].endswith("```\nRun it with python.")


def _rebuilt(bodies: list[Any]) -> str:
    """The answer as a receiver puts it back: each part without what the split added."""
    texts = []
    for body in bodies:
        added = body.get("added", {"before": "", "after": ""})
        texts.append(body["text"].removeprefix(added["before"]).removesuffix(added["after"]))
    return "".join(texts)


async def test_a_webhook_receiver_can_put_a_long_answer_back_together(tmp_path: Path) -> None:
    answer = ("alpha beta gamma " * 300).strip() + "\n" + CODE + "\n" + "line\n" * 1_200
    async with WebhookReceiver.running(secret=WEBHOOK_SECRET) as hook:
        tables = channel_tables(deliver_url=hook.deliver_url)
        async with channel_host(tmp_path, tables, answers=[answer]) as host:
            parts = len(split_parts(answer))
            result = await routed_turn(host, "hook", {"conversation": "c1"}, parts=parts)
            assert await host.delivery_runtime().drain() == parts
    bodies = hook.bodies()
    assert parts >= 4
    assert [(body["turn_id"], body["part"], body["parts"]) for body in bodies] == [
        (result.turn_id, number, parts) for number in range(1, parts + 1)
    ]
    assert any("added" in body for body in bodies)  # the code block was closed and reopened
    assert _rebuilt(bodies) == answer


@pytest.mark.parametrize("answer", ["", " \n\t ", "\u200b\u2060", "\u202e"])
async def test_an_answer_with_nothing_visible_tells_the_conversation_so(
    tmp_path: Path, answer: str
) -> None:
    """Never a ``bad_payload`` dead letter no retry can fix, and never silence."""
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        tables = channel_tables(slack=slack.api_base)
        async with channel_host(tmp_path, tables, answers=[answer]) as host:
            result = await routed_turn(host, "slack-acme", {"channel": "C1"})
            assert await host.delivery_runtime().drain() == 1
            (row,) = [await host.store.delivery.intent(i) for i in result.deliveries]
    assert row is not None
    assert (row.status, row.payload["text"]) == ("delivered", EMPTY_NOTICE)
    assert slack.texts() == [EMPTY_NOTICE]


async def test_an_older_hosts_invisible_answer_is_sent_as_the_notice_not_refused() -> None:
    """An answer intent written before answers were checked at the turn's end (an older
    Host's ``{"text": "\u200b"}``) tells the conversation, on every channel, instead of
    a ``bad_payload`` dead letter that ``hostkit delivery retry`` could never mend; an
    approval prompt or a press answer that shows nothing is still refused."""
    async with (
        FakeSlack.running(token=SLACK_TOKEN) as slack,
        FakeTelegram.running(token=TELEGRAM_TOKEN) as telegram,
        httpx.AsyncClient() as client,
    ):
        await SlackChannel(slack.api_base, SLACK_TOKEN, client).send(
            SLACK_ROUTE, {"text": "\u200b"}, idempotency_key="out_old_s"
        )
        tg = TelegramChannel(telegram.api_base, TELEGRAM_TOKEN, client)
        await tg.send(TELEGRAM_ROUTE, {"text": " \n "}, idempotency_key="out_old_t")
        with pytest.raises(DeliveryRefused) as refused:
            await tg.send(
                TELEGRAM_ROUTE,
                {"text": "\u200b", "approval": {"code": "ABC123"}},
                idempotency_key="out_old_a",
            )
    assert slack.texts() == [EMPTY_NOTICE]
    assert telegram.texts() == [EMPTY_NOTICE]
    assert refused.value.failure.code == "bad_payload"


async def test_slack_cuts_a_text_before_escaping_it_so_no_entity_is_split() -> None:
    """A text that reaches the adapter too long anyway (an intent written before parts)
    is cut to what fits once escaped, then escaped, and ends in the cut mark."""
    for text in ("a" * 5_000 + "<b>", "x" * 3_997 + "a & b" + "y" * 100):
        async with FakeSlack.running(token=SLACK_TOKEN) as slack, httpx.AsyncClient() as client:
            await SlackChannel(slack.api_base, SLACK_TOKEN, client).send(
                SLACK_ROUTE, {"text": text}, idempotency_key="out_long"
            )
        (posted,) = slack.texts()
        assert len(posted) <= 4_000
        assert posted.endswith(CUT_MARK)
        kept = posted.removesuffix(CUT_MARK)
        assert "&" not in kept.replace("&amp;", "").replace("&lt;", "").replace("&gt;", "")
        assert text.startswith(html.unescape(kept))


async def test_slack_prompt_section_is_cut_before_escaping() -> None:
    prompt = {
        "text": "Approval needed: x — " + "<" * 2_000,
        "approval": {"approval_id": "appr_1", "code": "ABC123", "tool": "x", "summary": "s"},
    }
    async with FakeSlack.running(token=SLACK_TOKEN) as slack, httpx.AsyncClient() as client:
        await SlackChannel(slack.api_base, SLACK_TOKEN, client).send(
            SLACK_ROUTE, prompt, idempotency_key="out_p"
        )
    (message,) = slack.messages
    section = message.body["blocks"][0]["text"]["text"]
    assert len(section) <= 3_000
    assert section.removesuffix(CUT_MARK).endswith("&lt;")


async def test_telegram_cuts_a_text_by_utf16_units() -> None:
    async with (
        FakeTelegram.running(token=TELEGRAM_TOKEN) as telegram,
        httpx.AsyncClient() as client,
    ):
        await TelegramChannel(telegram.api_base, TELEGRAM_TOKEN, client).send(
            TELEGRAM_ROUTE, {"text": "😀" * 4_000}, idempotency_key="out_t"
        )
    (posted,) = telegram.texts()
    assert utf16_units(posted) <= 4_096
    assert posted.endswith("😀" + CUT_MARK)


async def test_a_text_slack_refuses_as_too_long_is_told_not_dropped(tmp_path: Path) -> None:
    """Slack may refuse a text within 4,000 characters as ``msg_too_long`` (a permanent
    refusal): the conversation hears that a reply could not be shown, and the intent is
    dead-lettered under that reason for an operator."""
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.fail_next(1, ok_false="msg_too_long")
        tables = channel_tables(slack=slack.api_base)
        async with channel_host(tmp_path, tables, answers=["a fine answer"]) as host:
            result = await routed_turn(host, "slack-acme", {"channel": "C1"})
            await host.delivery_runtime().drain()
            row = await host.store.delivery.intent(result.deliveries[0])
    assert row is not None
    assert row.status == "dead_lettered"
    assert row.last_error is not None
    assert row.last_error.startswith("msg_too_long")
    assert slack.texts() == [TOO_LONG_NOTICE]
