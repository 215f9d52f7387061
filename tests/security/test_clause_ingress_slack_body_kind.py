"""Clause: a Slack request is an event or a button press by its signed body, not its Content-Type.

The Content-Type header is not signed. Were it trusted, one signed Events API
body from a workspace member outside ``allow`` could be re-sent as a form and a
``payload=`` smuggled inside its message read as a button press by an allowed
user. A body starting with ``{`` is JSON; a body that is exactly one
``payload=`` form field is interactivity; anything else is 400 with no row.
"""

from __future__ import annotations

import json
from urllib.parse import quote, urlencode

import httpx
import pytest

from hostkit.channels import sign_slack
from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore
from tests.ingress import NOW, SECRETS, channels, serve_ingress, to_json

pytestmark = pytest.mark.anyio

FORM = "application/x-www-form-urlencoded"
ALLOWED = "UALLOWED"


def _forged_press() -> str:
    return json.dumps(
        {
            "type": "block_actions",
            "user": {"id": ALLOWED},
            "team": {"id": "T1"},
            "channel": {"id": "C9"},
            "trigger_id": "t-1",
            "actions": [{"value": "approve ABCDEF"}],
        }
    )


def _event_with_smuggled_form() -> bytes:
    """An event from UEVIL whose rich-text block carries ``&payload=<forged press>&``."""
    smuggled = "&payload=" + quote(_forged_press(), safe="") + "&"
    block = {"type": "rich_text_section", "elements": [{"type": "text", "text": smuggled}]}
    event = {
        "type": "event_callback",
        "team_id": "T1",
        "event_id": "Ev1",
        "event": {
            "type": "message",
            "user": "UEVIL",
            "channel": "C9",
            "text": "hi",
            "blocks": [{"type": "rich_text", "elements": [block]}],
        },
    }
    return json.dumps(event, ensure_ascii=False).encode()


def _press(value: str) -> bytes:
    payload = {
        "type": "block_actions",
        "user": {"id": ALLOWED, "team_id": "T1"},
        "team": {"id": "T1"},
        "channel": {"id": "C9"},
        "trigger_id": "t-2",
        "actions": [{"action_id": "approval", "value": value}],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


async def _post(client: httpx.AsyncClient, body: bytes, content_type: str) -> httpx.Response:
    headers = {
        **sign_slack(SECRETS["slack-acme"], body, timestamp=NOW),
        "Content-Type": content_type,
    }
    return await client.post("/channels/slack-acme", content=body, headers=headers)


async def test_a_signed_event_resent_as_a_form_is_still_the_event(store: RuntimeStore) -> None:
    inbox = ChannelInbox.on_store(store)
    body = _event_with_smuggled_form()
    configs = channels(slack_acme={"allow": [ALLOWED]})
    async with (
        serve_ingress(inbox, configs=configs) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        as_json = await _post(client, body, "application/json")
        as_form = await _post(client, body, FORM)
    # Both are the event from UEVIL, who is not allowed (acknowledged, dropped); no forged
    # command was stored.
    assert as_json.json() == as_form.json() == {"status": "ignored"}
    assert await inbox.records() == ()
    assert await inbox.claim() is None


async def test_a_button_press_is_read_from_its_body_whatever_the_content_type(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        pressed = await _post(client, _press("approve k7qx2m"), "application/json")
    assert pressed.status_code == 200
    assert pressed.json()["status"] == "accepted"
    claimed = await inbox.claim()
    assert claimed is not None
    assert (claimed.envelope.kind, claimed.envelope.payload) == ("command", "approve K7QX2M")
    assert claimed.envelope.principal_key == ALLOWED


BAD_BODIES: dict[str, bytes] = {
    "two-fields": _press("approve k7qx2m") + b"&user=U1",
    "field-before-payload": b"token=x&" + _press("approve k7qx2m"),
    "semicolon-separated": _press("approve k7qx2m") + b";x=1",
    "another-field": b"ssl_check=1",
    "json-array": to_json([{"type": "event_callback"}]),
    "leading-space-json": b" " + to_json({"type": "url_verification", "challenge": "c"}),
    "not-ascii-form": "payload=é".encode(),
    "empty": b"",
}


async def test_a_body_that_is_neither_shape_is_400_with_no_row(store: RuntimeStore) -> None:
    inbox = ChannelInbox.on_store(store)
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        answers = {
            (case, kind): (await _post(client, body, kind)).status_code
            for case, body in BAD_BODIES.items()
            for kind in (FORM, "text/plain")
        }
    assert answers == dict.fromkeys(answers, 400)
    assert len(answers) == 2 * len(BAD_BODIES)
    assert await inbox.records() == ()
