"""Clause: text that cannot be stored never reaches the store, and never stalls a transport.

A JSON escape can carry a lone surrogate (``"\\ud800"``): valid JSON, a valid
Python ``str``, but not UTF-8, so the store's write fails. Every string an
``InboundEnvelope`` holds (keys, payload, metadata after redaction) must encode
as UTF-8, else ``InvalidValue``. An authenticated event whose *text* is such is
accepted without it (kind ``unprocessable``) and dead-lettered: a record an
operator sees, not a 4xx that leaves none. One whose identity is such (its
event key) cannot be deduplicated: a webhook answers 400 with no row (not a
500 the platform retries forever). The Telegram poller never stalls on either
(not a crash loop with the cursor stuck).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from hostkit.channels import TelegramPoller, sign_slack, sign_webhook
from hostkit.errors import InvalidValue
from hostkit.host._config import ChannelConfig
from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore
from hostkit.types import InboundEnvelope
from tests.ingress import NOW, SECRETS, serve_ingress
from tests.platforms import FakeTelegram, telegram_message
from tests.support import claim_all

pytestmark = pytest.mark.anyio

LONE = "\ud800"
TOKEN = "123456:poll-token-SECRET"

GOOD: dict[str, Any] = {
    "channel_instance_id": "hooks",
    "platform_event_key": "e1",
    "conversation_key": "c:u",
    "principal_key": "u",
    "authenticated_by": "hmac-sha256",
    "received_at": 1.0,
    "payload": "hello",
}

BAD_FIELDS: dict[str, dict[str, Any]] = {
    "platform_event_key": {"platform_event_key": f"e{LONE}"},
    "conversation_key": {"conversation_key": f"c{LONE}:u"},
    "principal_key": {"principal_key": f"u{LONE}"},
    "payload": {"payload": f"hi {LONE}"},
    "payload_ref": {"payload_ref": f"ref{LONE}"},
    "artifact": {"artifacts": (f"a{LONE}",)},
    "metadata-value": {"metadata": {"reply": {"conversation": LONE}}},
    "metadata-key": {"metadata": {f"k{LONE}": 1}},
}


@pytest.mark.parametrize("case", sorted(BAD_FIELDS))
def test_an_envelope_refuses_text_that_is_not_utf8(case: str) -> None:
    with pytest.raises(InvalidValue) as refused:
        InboundEnvelope(**{**GOOD, **BAD_FIELDS[case]})
    assert "Unicode" in refused.value.message
    # A valid pair (an emoji) is fine: only unpaired surrogates are refused.
    assert InboundEnvelope(**{**GOOD, "payload": "ok \U0001f600"}).payload.endswith("\U0001f600")


def _raw_json(template: str) -> bytes:
    """A JSON body holding the escape ``\\ud800`` (json.dumps would escape its backslash)."""
    return template.replace("LONE", "\\ud800").encode()


async def test_unstorable_text_is_a_dead_letter_and_an_unstorable_key_a_400(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    hook = _raw_json('{"event_id":"e1","sender":"u","conversation":"c","text":"hi LONE"}')
    slack = _raw_json(
        '{"type":"event_callback","team_id":"T1","event_id":"Ev1","event":{"type":"message",'
        '"user":"U1","channel":"C1","text":"hi","ts":"LONE"}}'
    )
    telegram = _raw_json(
        '{"update_id":5,"message":{"message_id":1,"from":{"id":42,"is_bot":false},'
        '"chat":{"id":42},"text":"LONE"}}'
    )
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        answers = [
            await client.post(
                "/channels/hooks",
                content=hook,
                headers=sign_webhook(SECRETS["hooks"], hook, timestamp=NOW),
            ),
            await client.post(
                "/channels/slack-acme",
                content=slack,
                headers=sign_slack(SECRETS["slack-acme"], slack, timestamp=NOW),
            ),
            await client.post(
                "/channels/tg",
                content=telegram,
                headers={"X-Telegram-Bot-Api-Secret-Token": SECRETS["tg"]},
            ),
        ]
    assert [a.status_code for a in answers] == [200, 400, 200]
    assert "Unicode" in answers[1].json()["error"]
    kept = await inbox.records()
    assert sorted(r.channel_instance_id for r in kept) == ["hooks", "tg"]
    assert all(r.kind == "unprocessable" for r in kept)
    for claimed in await claim_all(inbox):
        assert claimed.envelope.payload == ""
        assert "Unicode" in str(claimed.envelope.metadata["unprocessable"])


async def test_the_poller_keeps_an_update_it_cannot_store_as_a_dead_letter_and_moves_on(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.push_update(telegram_message(10, 7, f"bad {LONE}"))
        telegram.push_update(telegram_message(10, 7, "good"))
        config = ChannelConfig(
            kind="telegram",
            inbound="polling",
            token_env="TG_TOKEN",
            api_base=telegram.api_base,
            allow=["*"],
            poll_timeout_s=0,
        )
        poller = TelegramPoller("tg-poll", config, inbox, token=TOKEN, clock=lambda: 1e9)
        assert await poller.poll_once() == 2
        # The next round asks past both: Telegram forgets the bad update too.
        assert await poller.poll_once() == 0
        assert telegram.polls[-1].body["offset"] == 3
        assert telegram.pending_updates == []
    assert await inbox.checkpoint("telegram-poll:tg-poll") == "3"
    kinds = {}
    for claimed in await claim_all(inbox):
        kinds[claimed.envelope.kind] = claimed.envelope.payload
    assert kinds == {"unprocessable": "", "message": "good"}
