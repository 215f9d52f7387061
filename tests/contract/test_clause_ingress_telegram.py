"""Clause: Telegram webhook updates, authenticated by the secret-token header.

A text message and an inline approval button become envelopes keyed by
``update_id``; a resent update is one row; updates the Host does not act on
are acknowledged (200) so Telegram stops resending them, and write nothing.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore
from tests.ingress import NOW, SECRETS, serve_ingress, to_json
from tests.platforms import telegram_callback, telegram_message
from tests.support import claim_all

pytestmark = pytest.mark.anyio


async def _post(
    client: httpx.AsyncClient, update: dict[str, Any], token: str = SECRETS["tg"]
) -> httpx.Response:
    return await client.post(
        "/channels/tg",
        content=to_json(update),
        headers={"X-Telegram-Bot-Api-Secret-Token": token, "Content-Type": "application/json"},
    )


async def test_a_message_and_a_button_are_accepted_once_each(store: RuntimeStore) -> None:
    inbox = ChannelInbox.on_store(store)
    message = {"update_id": 500, **telegram_message(-1001, 77, "hi bot")}
    button = {"update_id": 501, **telegram_callback(-1001, 77, "deny k7qx2m", query_id="q-1")}
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        first = await _post(client, message)
        resent = await _post(client, message)
        pressed = await _post(client, button)
    assert first.json()["status"] == "accepted"
    assert resent.json() == {"inbound_id": first.json()["inbound_id"], "status": "duplicate"}
    assert pressed.json()["status"] == "accepted"
    assert len(await inbox.records(channel_instance_id="tg")) == 2
    seen = {}
    for claimed in await claim_all(inbox):
        seen[claimed.envelope.platform_event_key] = claimed.envelope
    assert set(seen) == {"500", "501"}
    text, command = seen["500"], seen["501"]
    assert (text.kind, text.payload) == ("message", "hi bot")
    assert text.conversation_key == "-1001:77"
    assert text.principal_key == "77"
    assert text.authenticated_by == "telegram-secret-token"
    assert dict(text.metadata["reply"]) == {"chat_id": -1001}
    assert text.received_at == NOW
    assert (command.kind, command.payload) == ("command", "deny K7QX2M")
    # The press is kept so its outcome can be told to the presser alone.
    assert dict(command.metadata["press"]) == {"callback_query_id": "q-1"}
    assert dict(command.metadata["reply"]) == {"chat_id": -1001}


IGNORED: dict[str, dict[str, Any]] = {
    "edited": {"update_id": 9, "edited_message": telegram_message(5, 5, "edit")["message"]},
    "no-text": {"update_id": 10, **telegram_message(5, 5, "   ")},
    "other-button": {"update_id": 11, **telegram_callback(5, 5, "some-other-button")},
    "bot": {
        "update_id": 12,
        "message": {**telegram_message(5, 5, "hi")["message"], "from": {"id": 5, "is_bot": True}},
    },
}


async def test_updates_the_host_does_not_act_on_are_acknowledged_without_a_row(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        for case, update in IGNORED.items():
            answer = await _post(client, update)
            assert (answer.status_code, answer.json()) == (200, {"status": "ignored"}), case
    assert await inbox.records() == ()


async def test_an_approval_button_without_its_query_id_is_refused(store: RuntimeStore) -> None:
    """Telegram always sends the query's id; without it the press could be answered only
    to the whole chat, so it is no command (400) rather than one told to everyone."""
    inbox = ChannelInbox.on_store(store)
    pressed = telegram_callback(-1001, 77, "approve k7qx2m")
    del pressed["callback_query"]["id"]
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        answer = await _post(client, {"update_id": 600, **pressed})
    assert answer.status_code == 400
    assert await inbox.records() == ()


def _with_files(update_id: int, caption: str | None, **files: Any) -> dict[str, Any]:
    message = telegram_message(-1001, 77, "unused")["message"]
    del message["text"]
    if caption is not None:
        message["caption"] = caption
    return {"update_id": update_id, "message": {**message, **files}}


async def test_a_photo_or_a_file_is_kept_with_its_caption_never_ignored(
    store: RuntimeStore,
) -> None:
    """The worker cannot give a turn files yet, so an update carrying one must reach it
    (and become a dead letter an operator sees): not ``ignored`` for want of ``text``, and
    not a turn that answers the caption alone. A photo counts once, by its largest size."""
    photo = [{"file_id": "AgAD-small", "width": 90}, {"file_id": "AgAD-large", "width": 1280}]
    updates = [
        _with_files(600, "what does this chart show?", photo=photo),
        _with_files(601, None, document={"file_id": "BQAD-doc", "file_name": "a.pdf"}),
        _with_files(602, None, voice={"file_id": "AwAD-voice"}, sticker={"file_id": 7}),
    ]
    inbox = ChannelInbox.on_store(store)
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        for update in updates:
            answer = await _post(client, update)
            assert answer.json()["status"] == "accepted", update
    seen = {c.envelope.platform_event_key: c.envelope for c in await claim_all(inbox)}
    assert {key: (e.payload, e.artifacts) for key, e in seen.items()} == {
        "600": ("what does this chart show?", ("telegram-file:AgAD-large",)),
        "601": ("", ("telegram-file:BQAD-doc",)),
        "602": ("", ("telegram-file:unnamed", "telegram-file:AwAD-voice")),
    }
