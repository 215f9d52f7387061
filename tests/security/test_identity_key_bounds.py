"""Identity keys are held to one bound on every path, checked where they are composed.

A conversation key (``<conversation>:<sender>``, ``<team>:<channel>:<user>``) and
a principal id (``<channel>:<principal_key>``) are at most ``MAX_KEY_CHARS``
wherever they are held: the inbox, the scope, turn admission, the store. An
event within its documented field limits therefore runs its turn (never a 200
and then a dead letter); a key that cannot fit is refused where it is
composed, naming the caller's own fields, before anything is accepted.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from hostkit.channels import sign_slack, sign_webhook
from hostkit.channels._webhook import parse_webhook
from hostkit.errors import InvalidValue
from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import MAX_KEY_CHARS, InboundEnvelope
from tests.contract.test_clause_inbound_route import RECEIVE_ONLY, accept, channel_host, worker
from tests.hosts import turn_rows
from tests.ingress import NOW, SECRETS, serve_ingress, to_json

pytestmark = pytest.mark.anyio

_SECRET = "hook-secret-for-key-bounds"


async def test_a_webhook_event_at_its_documented_field_maxima_runs_its_turn(
    tmp_path: Path,
) -> None:
    """docs/channels.md: ``conversation`` up to 120 characters, ``sender`` up to 128."""
    model = ScriptedModel([Reply("answered")], repeat_last=True)
    async with channel_host(tmp_path, model) as host:
        body = to_json(
            {"event_id": "e-max", "sender": "s" * 128, "conversation": "c" * 120, "text": "hi"}
        )
        now = int(time.time())
        headers = {k.lower(): v for k, v in sign_webhook(_SECRET, body, timestamp=now).items()}
        envelope = parse_webhook(
            body,
            headers,
            channel_id=RECEIVE_ONLY,
            config=host.config.channels[RECEIVE_ONLY],
            secret=_SECRET,
            now=now,
        )
        assert isinstance(envelope, InboundEnvelope)
        assert len(envelope.conversation_key) == 249
        inbound_id = await accept(host, envelope)
        assert await worker(host).drain() == 1
        record = await host.inbox.record(inbound_id)
        assert record is not None
        assert (record.state, record.failure_code) == ("completed", ""), record
        assert [status for _, status in await turn_rows(host)] == ["completed"]
        assert len(model.requests) == 1


async def test_a_key_of_the_bound_runs_a_turn_and_one_past_it_is_refused_before_any_write(
    tmp_path: Path,
) -> None:
    """The embedder's own keys: a conversation key and a principal id of exactly
    ``MAX_KEY_CHARS`` run their turn; one character more is ``InvalidValue`` naming
    ``run_turn``'s parameter, and no turn is written."""
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    room = MAX_KEY_CHARS - len("embedder:")
    async with channel_host(tmp_path, model) as host:
        assert await host.run_turn("assistant", "hi", conversation="c" * MAX_KEY_CHARS) == "ok"
        assert await host.run_turn("assistant", "hi", principal="p" * room) == "ok"
        with pytest.raises(InvalidValue, match=r"^conversation must be .* at most 256"):
            await host.run_turn("assistant", "hi", conversation="c" * (MAX_KEY_CHARS + 1))
        with pytest.raises(InvalidValue, match=rf"^principal must be at most {room} characters"):
            await host.run_turn("assistant", "hi", principal="p" * (room + 1))
        assert [status for _, status in await turn_rows(host)] == ["completed", "completed"]


def test_an_envelope_whose_principal_id_cannot_fit_is_refused_on_construction() -> None:
    """The inbox never accepts an envelope whose ``<channel>:<principal_key>`` the
    admission of its turn would refuse."""
    fields = {
        "channel_instance_id": "hooks",
        "platform_event_key": "e1",
        "conversation_key": "c",
        "authenticated_by": "hmac-sha256",
        "received_at": 1.0,
    }
    fits = InboundEnvelope(principal_key="p" * (MAX_KEY_CHARS - len("hooks:")), **fields)
    assert len(f"{fits.channel_instance_id}:{fits.principal_key}") == MAX_KEY_CHARS
    with pytest.raises(InvalidValue, match="principal id"):
        InboundEnvelope(principal_key="p" * (MAX_KEY_CHARS - len("hooks")), **fields)


async def test_a_slack_event_whose_key_cannot_fit_is_a_400_naming_its_fields(
    store: RuntimeStore,
) -> None:
    """Three platform ids of 128 each make a 386-character key: refused at parse time,
    naming the fields, and nothing is accepted."""
    inbox = ChannelInbox.on_store(store)
    event = {"type": "message", "channel": "C" * 128, "user": "U" * 128, "text": "hi"}
    body = to_json(
        {"type": "event_callback", "team_id": "T" * 128, "event_id": "Ev1", "event": event}
    )
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        answer = await client.post(
            "/channels/slack-acme",
            content=body,
            headers=sign_slack(SECRETS["slack-acme"], body, timestamp=NOW),
        )
    assert answer.status_code == 400
    assert "team_id and event.channel and event.user together" in answer.json()["error"]
    assert await inbox.records() == ()
