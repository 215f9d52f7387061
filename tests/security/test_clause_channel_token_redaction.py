"""Clause: a Telegram bot token never survives into an error, whole or in part.

``bounded()`` (behind every hostkit error message) recognises the bot token
shape ``<bot id>:<35 characters>``, bare and inside a ``/bot<token>/`` URL
path. The poller redacts the token from a ``getUpdates`` error description
*before* cutting it, so a token straddling the cut cannot leave a prefix.
"""

from __future__ import annotations

import pytest

from hostkit.channels import TelegramPoller
from hostkit.errors import PollError, bounded
from hostkit.host._config import ChannelConfig
from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore
from tests.platforms import FakeTelegram

pytestmark = pytest.mark.anyio

# The shape BotFather issues: a numeric bot id, ':', 35 of [A-Za-z0-9_-].
TOKEN = "123456789:AAHk3-Qz_8sVbN2mXcR7tYpLwE4uJdFgH0i"
SECRET_PART = TOKEN.split(":")[1]


@pytest.mark.parametrize(
    "text",
    [
        f"the token is {TOKEN}.",
        f"GET https://api.telegram.org/bot{TOKEN}/getUpdates failed",
        f"{TOKEN}",
        f"x={TOKEN[:-1]}-",  # ends in '-': no word boundary after it
    ],
)
def test_bounded_redacts_a_telegram_bot_token(text: str) -> None:
    shown = bounded(text)
    assert "[redacted]" in shown
    assert SECRET_PART[:8] not in shown


def test_bounded_keeps_text_that_only_looks_alike() -> None:
    ordinary = "at 12:30 the job 1234567:done ran; ids 42:7 and 10:7"
    assert bounded(ordinary) == ordinary


async def test_a_token_straddling_the_cut_of_a_getupdates_error_is_redacted(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    async with FakeTelegram.running(token=TOKEN) as telegram:
        config = ChannelConfig(
            kind="telegram",
            inbound="polling",
            token_env="TG_TOKEN",
            api_base=telegram.api_base,
            allow=["*"],
            poll_timeout_s=0,
        )
        poller = TelegramPoller("tg-poll", config, inbox, token=TOKEN)
        # The token starts at character 100 of the description: the 120-character
        # cut falls inside it.
        telegram.fail_next(1, status=404, description="x" * 96 + f"/bot{TOKEN}/getUpdates")
        with pytest.raises(PollError) as failed:
            await poller.poll_once()
    message = failed.value.message
    assert "getUpdates answered 404" in message
    assert "[redacted]" in message
    assert SECRET_PART[:6] not in message
    assert TOKEN.split(":")[0] not in message
