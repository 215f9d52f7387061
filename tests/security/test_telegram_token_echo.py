"""A bot token echoed back by the platform (or a proxy) never reaches an error or a log.

Telegram's API takes the token in the URL path (``/bot<token>/sendMessage``); a
server or proxy that echoes the request path in its error ``description`` hands it
back, raw or percent-encoded (``%3A`` for its colon), or only its secret half. The
delivery channel and the poller mask every one of those spellings
(``hostkit.errors.scrub_secret``), and ``bounded()`` masks the token's shape in
either spelling whatever code path builds the message.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from hostkit.channels import TelegramPoller
from hostkit.delivery._telegram import TelegramChannel
from hostkit.errors import DeliveryRefused, PollError, bounded, scrub_secret
from hostkit.host._config import ChannelConfig
from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore

pytestmark = pytest.mark.anyio

TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawX"
SECRET_HALF = TOKEN.partition(":")[2]
ECHOES: dict[str, Callable[[str], str]] = {
    "raw": lambda path: f"Not Found: {path}",
    "percent-encoded": lambda path: f"Not Found: {path.replace(':', '%3A')}",
    "secret half": lambda path: f"Unauthorized: token {SECRET_HALF} is invalid",
}


def echoing(echo: Callable[[str], str]) -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        description = echo(request.url.raw_path.decode())
        return httpx.Response(404, json={"ok": False, "description": description})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


@pytest.mark.parametrize("echo", ECHOES.values(), ids=ECHOES.keys())
async def test_delivery_masks_an_echoed_token(echo: Callable[[str], str]) -> None:
    async with echoing(echo) as client:
        channel = TelegramChannel("https://api.telegram.example", TOKEN, client)
        with pytest.raises(DeliveryRefused) as refused:
            await channel.send({"reply": {"chat_id": 42}}, {"text": "hi"}, idempotency_key="i1")
    shown = refused.value.failure.text()
    assert SECRET_HALF not in shown
    assert "[redacted]" in shown


@pytest.mark.parametrize("echo", ECHOES.values(), ids=ECHOES.keys())
async def test_polling_masks_an_echoed_token(
    store: RuntimeStore, echo: Callable[[str], str]
) -> None:
    config = ChannelConfig(
        kind="telegram",
        inbound="polling",
        token_env="TG_TOKEN",
        api_base="https://api.telegram.example",
        poll_timeout_s=0,
        allow=["*"],
    )
    async with echoing(echo) as client:
        poller = TelegramPoller(
            "tg-poll", config, ChannelInbox.on_store(store), token=TOKEN, client=client
        )
        with pytest.raises(PollError) as failed:
            await poller.poll_once()
    assert SECRET_HALF not in failed.value.message
    assert "[redacted]" in failed.value.message


def test_bounded_masks_a_token_shape_in_either_spelling() -> None:
    for spelling in (TOKEN, TOKEN.replace(":", "%3A"), TOKEN.replace(":", "%3a")):
        assert SECRET_HALF not in bounded(f"GET /bot{spelling}/getUpdates failed")


@pytest.mark.parametrize(
    "spelling",
    [
        "pa ss/wörd:&?=x",
        "pa+ss%2Fw%C3%B6rd%3A%26%3F%3Dx",
        "pa%20ss%2Fw%C3%B6rd%3A%26%3F%3Dx",
        '"pa ss/w\\u00f6rd:&?=x"',
        "'pa ss/wörd:&?=x'",
    ],
)
def test_scrub_secret_masks_every_echoed_spelling(spelling: str) -> None:
    scrubbed = scrub_secret(f"the server said: {spelling} (sorry)", "pa ss/wörd:&?=x")
    assert "ss/w" not in scrubbed
    assert "ss%2Fw" not in scrubbed
    assert scrubbed.startswith("the server said: ")
    assert scrubbed.endswith(" (sorry)")


def test_scrub_secret_leaves_a_short_secret_alone() -> None:
    assert scrub_secret("a b c", "b") == "a b c"
