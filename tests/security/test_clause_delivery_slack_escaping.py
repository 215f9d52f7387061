"""Security clause: model text cannot spell Slack mentions, links or commands.

Everything hostkit posts to Slack is mrkdwn. An answer (or a prompt, whose
summary comes from the model's tool arguments) holding ``<!channel>`` or
``<https://evil.example|Approve>`` would ping everyone or disguise a link;
``&``, ``<`` and ``>`` are escaped as Slack asks, in the message text and
in the prompt's section block. Loopback fake Slack, the real adapter.
"""

from __future__ import annotations

import httpx
import pytest

from hostkit.delivery import SlackChannel
from hostkit.types import approval_code
from tests.contract._delivery_hosts import SLACK_TOKEN
from tests.platforms import FakeSlack

pytestmark = pytest.mark.anyio

HOSTILE = "<!channel> click <https://evil.example|Approve> & <@U0ADMIN>"
ESCAPED = "&lt;!channel&gt; click &lt;https://evil.example|Approve&gt; &amp; &lt;@U0ADMIN&gt;"


async def test_an_answer_is_posted_escaped() -> None:
    async with FakeSlack.running(token=SLACK_TOKEN) as slack, httpx.AsyncClient() as client:
        channel = SlackChannel(slack.api_base, SLACK_TOKEN, client)
        await channel.send(
            {"channel": "slack-acme", "reply": {"channel": "C1"}},
            {"text": HOSTILE},
            idempotency_key="out_a",
        )
    (message,) = slack.messages
    assert message.body["text"] == ESCAPED
    assert "<" not in message.body["text"]
    assert ">" not in message.body["text"]


async def test_an_approval_prompt_section_is_posted_escaped() -> None:
    code = approval_code("appr_x")
    prompt = {
        "text": f"Approval needed: files.write — {HOSTILE}. Reply `approve {code}`.",
        "approval": {"approval_id": "appr_x", "code": code, "tool": "files.write", "summary": "s"},
    }
    async with FakeSlack.running(token=SLACK_TOKEN) as slack, httpx.AsyncClient() as client:
        channel = SlackChannel(slack.api_base, SLACK_TOKEN, client)
        await channel.send(
            {"channel": "slack-acme", "reply": {"channel": "C1"}}, prompt, idempotency_key="out_p"
        )
    (message,) = slack.messages
    section = message.body["blocks"][0]["text"]["text"]
    assert ESCAPED in section
    assert ESCAPED in message.body["text"]
    assert "<!channel>" not in section
    # The buttons still carry the exact command the transport reads back.
    values = [b["value"] for b in message.body["blocks"][1]["elements"]]
    assert values == [f"approve {code}", f"deny {code}"]
