"""Clause: Slack Events API and button requests, verified with the v0 signing secret.

``url_verification`` is answered only after the signature check; a person's
message is one row however often Slack retries it (retry headers recorded);
bot messages and other events are acknowledged without a row; an approval
button is a command.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from hostkit.channels import sign_slack
from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore
from hostkit.types import APPROVAL_BLOCK
from tests.ingress import NOW, SECRETS, channels, serve_ingress, to_json
from tests.support import claim_all

pytestmark = pytest.mark.anyio

SECRET = SECRETS["slack-acme"]


def _message(event_id: str = "Ev01", **event: Any) -> bytes:
    body = {
        "type": "event_callback",
        "team_id": "T01",
        "api_app_id": "A01",
        "event_id": event_id,
        "event_time": NOW,
        "event": {
            "type": "message",
            "channel": "C123",
            "user": "U42",
            "text": "what is up",
            "ts": "1700000000.000100",
            **event,
        },
    }
    return to_json(body)


async def _post(
    client: httpx.AsyncClient,
    body: bytes,
    *,
    secret: str = SECRET,
    content_type: str = "application/json",
    **headers: str,
) -> httpx.Response:
    signed = {**sign_slack(secret, body, timestamp=NOW), "Content-Type": content_type, **headers}
    return await client.post("/channels/slack-acme", content=body, headers=signed)


async def test_url_verification_echoes_the_challenge_only_when_signed(store: RuntimeStore) -> None:
    inbox = ChannelInbox.on_store(store)
    body = to_json({"type": "url_verification", "token": "t", "challenge": "3eZbrw1aB"})
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        signed = await _post(client, body)
        forged = await _post(client, body, secret="not-the-signing-secret")
    assert (signed.status_code, signed.json()) == (200, {"challenge": "3eZbrw1aB"})
    assert forged.status_code == 401
    assert "3eZbrw1aB" not in forged.text
    assert await inbox.records() == ()


async def test_a_message_and_its_retries_make_one_row_with_the_retry_recorded(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        retried = await _post(
            client,
            _message(thread_ts="1699999999.000200"),
            **{"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"},
        )
        again = await _post(
            client, _message(), **{"X-Slack-Retry-Num": "2", "X-Slack-Retry-Reason": "http_error"}
        )
    assert retried.json()["status"] == "accepted"
    assert again.json() == {"inbound_id": retried.json()["inbound_id"], "status": "duplicate"}
    assert len(await inbox.records(channel_instance_id="slack-acme")) == 1
    claimed = await inbox.claim()
    assert claimed is not None
    envelope = claimed.envelope
    assert envelope.platform_event_key == "Ev01"
    assert envelope.conversation_key == "T01:C123:U42"
    assert envelope.principal_key == "U42"
    assert envelope.authenticated_by == "slack-signature"
    assert (envelope.kind, envelope.payload) == ("message", "what is up")
    assert dict(envelope.metadata["reply"]) == {"channel": "C123", "thread_ts": "1699999999.000200"}
    # The stored envelope is the first delivery's (Retry-Num 1); the second was a duplicate.
    assert envelope.metadata["retry_num"] == 1
    assert envelope.metadata["retry_reason"] == "http_timeout"


IGNORED: dict[str, dict[str, Any]] = {
    "edit": {"subtype": "message_changed"},
    "deletion": {"subtype": "message_deleted"},
    "join": {"subtype": "channel_join"},
    "bot": {"bot_id": "B99"},
    "bot-subtype": {"subtype": "bot_message"},
    "bot-broadcast": {"subtype": "thread_broadcast", "bot_id": "B99"},
    "subtype-not-text": {"subtype": ["thread_broadcast"]},
    "other-event": {"type": "reaction_added"},
}

# What a person sends with a subtype: a thread reply also sent to the channel, a file
# shared with text, a /me message. Acknowledging them without a row would lose them.
PERSON_SUBTYPES = ("thread_broadcast", "file_share", "me_message")


async def test_bot_messages_edits_and_other_events_are_acknowledged_without_a_row(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        for case, event in IGNORED.items():
            answer = await _post(client, _message(f"Ev-{case}", **event))
            assert (answer.status_code, answer.json()) == (200, {"status": "ignored"}), case
    assert await inbox.records() == ()


async def test_a_persons_messages_with_a_subtype_are_accepted_like_plain_ones(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        for subtype in PERSON_SUBTYPES:
            body = _message(f"Ev-{subtype}", subtype=subtype, text=f"from {subtype}")
            answer = await _post(client, body)
            assert (answer.status_code, answer.json()["status"]) == (200, "accepted"), subtype
    stored = []
    for claimed in await claim_all(inbox):
        stored.append((claimed.envelope.kind, claimed.envelope.payload))
    assert sorted(stored) == sorted(("message", f"from {subtype}") for subtype in PERSON_SUBTYPES)


async def test_a_shared_file_is_kept_as_an_artifact_with_or_without_text(
    store: RuntimeStore,
) -> None:
    """The worker cannot give a turn files yet: a message that shares one carries it, so the
    worker dead-letters it where an operator sees it, rather than answering the text as if
    the file were not there, or ignoring a file shared without a word."""
    screenshot = [{"id": "F0SCREEN", "name": "screen.png", "mimetype": "image/png"}]
    inbox = ChannelInbox.on_store(store)
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        for event_id, text in (("Ev-file-text", "what does this show?"), ("Ev-file-only", "")):
            body = _message(event_id, subtype="file_share", text=text, files=screenshot)
            answer = await _post(client, body)
            assert answer.json()["status"] == "accepted", event_id
    seen = {c.envelope.platform_event_key: c.envelope for c in await claim_all(inbox)}
    assert {key: (e.payload, e.artifacts) for key, e in seen.items()} == {
        "Ev-file-text": ("what does this show?", ("slack-file:F0SCREEN",)),
        "Ev-file-only": ("", ("slack-file:F0SCREEN",)),
    }


def _button(value: str, trigger: str = "111.222.abc", **fields: Any) -> bytes:
    payload = {
        "type": "block_actions",
        "user": {"id": "U42", "team_id": "T01"},
        "team": {"id": "T01"},
        "channel": {"id": "C123"},
        "container": {"type": "message", "channel_id": "C123", "message_ts": "1.2"},
        "trigger_id": trigger,
        "actions": [{"action_id": "approval", "value": value, "action_ts": "1700000000.1"}],
        **fields,
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


async def test_an_approval_button_is_a_command_and_other_buttons_are_ignored(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    form = "application/x-www-form-urlencoded"
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        pressed = await _post(client, _button("approve k7qx2m"), content_type=form)
        other = await _post(client, _button("open_settings", "9.9.x"), content_type=form)
    assert pressed.json()["status"] == "accepted"
    assert other.json() == {"status": "ignored"}
    claimed = await inbox.claim()
    assert claimed is not None
    envelope = claimed.envelope
    assert (envelope.kind, envelope.payload) == ("command", "approve K7QX2M")
    assert envelope.platform_event_key == "block_actions:111.222.abc"
    assert envelope.conversation_key == "T01:C123:U42"
    assert dict(envelope.metadata["reply"]) == {"channel": "C123"}
    # The presser, so the outcome is told to them alone (an ephemeral message).
    assert dict(envelope.metadata["press"]) == {"user": "U42"}
    assert len(await inbox.records()) == 1


async def test_a_retry_header_that_is_no_ascii_number_is_not_recorded(store: RuntimeStore) -> None:
    # "²" is a digit to str.isdigit() and not to int(); the retry headers are not signed,
    # so anyone on the path could send it: it used to answer 500 to a signed message.
    inbox = ChannelInbox.on_store(store)
    body = _message()
    headers = {**sign_slack(SECRET, body, timestamp=NOW), "Content-Type": "application/json"}
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        answer = await client.post(
            "/channels/slack-acme",
            content=body,
            headers=[*headers.items(), ("X-Slack-Retry-Num", "\u00b2".encode("latin-1"))],
        )
    assert answer.status_code == 200
    assert answer.json()["status"] == "accepted"
    claimed = await inbox.claim()
    assert claimed is not None
    assert "retry_num" not in claimed.envelope.metadata


def _press(user: dict[str, Any], team: dict[str, Any], trigger: str, **fields: Any) -> bytes:
    """An approval press by U42, whose ``user`` and ``team`` objects are given."""
    return _button("approve k7qx2m", trigger, user={"id": "U42", **user}, team=team, **fields)


async def test_an_ordinary_workspaces_conversation_keys_are_what_they_always_were(
    store: RuntimeStore,
) -> None:
    """A message is keyed by the envelope's team_id and a press without a prompt's block id
    by its team.id, whatever else the payload names (an Enterprise Grid's organisation, a
    Slack Connect member's own workspace): the keys stored before stay the keys."""
    inbox = ChannelInbox.on_store(store)
    grid_message = json.loads(_message("Ev-grid", team="T01", user_team="E01"))
    messages = [
        _message("Ev-plain"),
        _message("Ev-team", team="T01"),
        to_json({**grid_message, "enterprise_id": "E01"}),
    ]
    grid_team = {"id": "T01", "enterprise_id": "E01"}
    presses = [
        _press({"team_id": "T01"}, {"id": "T01"}, "t.1"),
        _press({}, {"id": "T01"}, "t.2"),
        _press({"team_id": "E01"}, grid_team, "t.3", enterprise={"id": "E01"}),
    ]
    form = "application/x-www-form-urlencoded"
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        sent = [await _post(client, body) for body in messages]
        sent += [await _post(client, body, content_type=form) for body in presses]
    assert [answer.json()["status"] for answer in sent] == ["accepted"] * 6
    keys = {c.envelope.conversation_key for c in await claim_all(inbox)}
    assert keys == {"T01:C123:U42"}


async def test_a_slack_connect_member_is_allow_listed_by_her_user_id_alone(
    store: RuntimeStore,
) -> None:
    """A member of another workspace in a shared channel has her own user id, which `allow`
    names like any other; her conversation is keyed by the envelope's team_id as everyone's
    is, and her press by the workspace its prompt's button names (none here: team.id)."""
    inbox = ChannelInbox.on_store(store)
    configs = channels(slack_acme={"allow": ["U42"]})
    shared = {"user_team": "TX", "team": "TX", "source_team": "T01"}
    async with serve_ingress(inbox, configs=configs) as url, httpx.AsyncClient(base_url=url) as c:
        member = await _post(c, _message("Ev-member", **shared))
        stranger = await _post(c, _message("Ev-stranger", **{**shared, "user": "U77"}))
        pressed = await _post(
            c,
            _press({"team_id": "TX"}, {"id": "T01"}, "t.1"),
            content_type="application/x-www-form-urlencoded",
        )
    assert member.json()["status"] == "accepted"
    assert pressed.json()["status"] == "accepted"
    assert stranger.json() == {"status": "ignored"}
    claimed = [c.envelope for c in await claim_all(inbox)]
    assert {(e.conversation_key, e.principal_key) for e in claimed} == {("T01:C123:U42", "U42")}
    assert len(claimed) == 2


async def test_a_press_takes_its_workspace_from_the_prompts_block_id(store: RuntimeStore) -> None:
    """A press of a Host prompt's button (block id ``APPROVAL_BLOCK/<team>``) is keyed by the
    workspace the prompt asked in, not the press's team.id; another block id is not read,
    and a block id that is no workspace id is refused like any malformed field."""
    inbox = ChannelInbox.on_store(store)
    form = "application/x-www-form-urlencoded"

    def press(block_id: str, trigger: str) -> bytes:
        action = {"value": "approve k7qx2m", "action_ts": "1.1", "block_id": block_id}
        return _button("approve k7qx2m", trigger, actions=[action])

    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        ours = await _post(client, press(f"{APPROVAL_BLOCK}/TB", "t.1"), content_type=form)
        other = await _post(client, press("someone_elses/TB", "t.2"), content_type=form)
        bad = await _post(client, press(f"{APPROVAL_BLOCK}/T:B", "t.3"), content_type=form)
    assert ours.json()["status"] == other.json()["status"] == "accepted"
    assert bad.status_code == 400
    keys = sorted(c.envelope.conversation_key for c in await claim_all(inbox))
    assert keys == ["T01:C123:U42", "TB:C123:U42"]
