"""Clause: a signed generic webhook is accepted exactly once, end to end, before its 200.

Real uvicorn on 127.0.0.1, real httpx, a real SQLite store: the 200 comes
after the row exists, a redelivery of the same event_id is a 200 duplicate
with the first inbound id and no second row, and a typed approval answer
arrives as a normalised command.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import hostkit._store_health as store_health_module
from hostkit.channels import _app as ingress_app_module
from hostkit.channels import classify, sign_webhook
from hostkit.errors import DatabaseReplaced, StoreError
from hostkit.inbox import ChannelInbox, InboxWorker
from hostkit.inbox import _admission as admission_module
from hostkit.store import InboxLimits, InboxRoom, RuntimeStore
from tests.ingress import NOW, SECRETS, channels, serve_ingress, to_json
from tests.support import SteppedMonotonic, claim_all

pytestmark = pytest.mark.anyio


def _event(event_id: str = "evt-1", **fields: Any) -> bytes:
    body = {"event_id": event_id, "sender": "u-7", "conversation": "ticket-9", "text": "hello"}
    return to_json({**body, **fields})


async def _post(
    client: httpx.AsyncClient, body: bytes, *, secret: str = SECRETS["hooks"]
) -> httpx.Response:
    return await client.post(
        "/channels/hooks", content=body, headers=sign_webhook(secret, body, timestamp=NOW)
    )


async def test_signed_webhook_is_accepted_once_and_a_redelivery_is_a_duplicate(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    woken: list[int] = []
    async with (
        serve_ingress(inbox, on_accept=lambda: woken.append(1)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        first = await _post(client, _event())
        assert first.status_code == 200
        assert first.json()["status"] == "accepted"
        # The row exists once the 200 arrived.
        records = await inbox.records(channel_instance_id="hooks")
        assert [r.inbound_id for r in records] == [first.json()["inbound_id"]]
        again = await _post(client, _event())
        assert again.status_code == 200
        assert again.json() == {"inbound_id": first.json()["inbound_id"], "status": "duplicate"}
    assert len(await inbox.records(channel_instance_id="hooks")) == 1
    # on_accept wakes the worker for the new envelope only, not for the duplicate.
    assert woken == [1]
    claimed = await inbox.claim()
    assert claimed is not None
    envelope = claimed.envelope
    assert envelope.platform_event_key == "evt-1"
    assert envelope.conversation_key == "ticket-9:u-7"
    assert envelope.principal_key == "u-7"
    assert envelope.authenticated_by == "hmac-sha256"
    assert envelope.kind == "message"
    assert envelope.payload == "hello"
    assert envelope.received_at == NOW
    assert dict(envelope.metadata["reply"]) == {"conversation": "ticket-9"}


async def test_a_typed_approval_answer_arrives_as_a_normalised_command(store: RuntimeStore) -> None:
    inbox = ChannelInbox.on_store(store)
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        typed = await _post(client, _event("evt-a", text="  APPROVE k7qx2m "))
        declared = await _post(client, _event("evt-b", text="deny ABCDEF", kind="command"))
        forced = await _post(client, _event("evt-c", text="approve ABCDEF", kind="message"))
        not_a_command = await _post(client, _event("evt-d", text="hi", kind="command"))
    assert [typed.status_code, declared.status_code, forced.status_code] == [200, 200, 200]
    assert not_a_command.status_code == 400
    seen = {}
    for claimed in await claim_all(inbox):
        seen[claimed.envelope.platform_event_key] = (
            claimed.envelope.kind,
            claimed.envelope.payload,
        )
    assert seen == {
        "evt-a": ("command", "approve K7QX2M"),
        "evt-b": ("command", "deny ABCDEF"),
        "evt-c": ("message", "approve ABCDEF"),
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("approve K7QX2M", ("command", "approve K7QX2M")),
        ("Deny  k7qx2m", ("command", "deny K7QX2M")),
        ("approve K7QX2", ("message", "approve K7QX2")),  # five characters
        ("approve K7QX21", ("message", "approve K7QX21")),  # '1' is not base32
        ("please approve K7QX2M", ("message", "please approve K7QX2M")),
        ("approve K7QX2M now", ("message", "approve K7QX2M now")),
    ],
)
def test_commands_are_exactly_approve_or_deny_and_a_base32_code(
    text: str, expected: tuple[str, str]
) -> None:
    assert classify(text) == expected


async def test_allowlisted_sender_passes_and_health_answers(store: RuntimeStore) -> None:
    inbox = ChannelInbox.on_store(store)
    configs = channels(hooks={"allow": ["u-7"]})
    readiness_state = {"ready": False}
    async with (
        serve_ingress(
            inbox,
            configs=configs,
            readiness=lambda: (readiness_state["ready"], {"inbox": "starting"}),
        ) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        assert (await _post(client, _event())).status_code == 200
        health = await client.get("/healthz")
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        not_ready = await client.get("/readyz")
        assert not_ready.status_code == 503
        assert not_ready.json() == {"status": "not ready", "checks": {"inbox": "starting"}}
        readiness_state["ready"] = True
        assert (await client.get("/readyz")).status_code == 200
        assert (await client.get("/channels/hooks")).status_code == 405
        assert (await client.post("/channels/unknown", content=b"{}")).status_code == 404
    assert len(await inbox.records()) == 1


async def test_a_polling_or_outbound_only_channel_has_no_webhook_route(store: RuntimeStore) -> None:
    inbox = ChannelInbox.on_store(store)
    configs = channels(tg={"inbound": "polling", "secret_env": None})
    async with (
        serve_ingress(inbox, configs=configs) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        answer = await client.post("/channels/tg", content=b"{}")
    assert answer.status_code == 404
    assert await inbox.records() == ()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("hello\x00world", "payload must not contain NUL"),
        ("x" * 70_000, "payload is text of at most 65536 characters"),
    ],
    ids=["nul", "over-long"],
)
async def test_an_authenticated_event_whose_text_cannot_be_kept_is_a_dead_letter(
    store: RuntimeStore, text: str, why: str
) -> None:
    """Signed, so not a 4xx that leaves no trace: accepted without its text (a retry is a
    duplicate), then dead-lettered at once, where `hostkit inbox dlq` shows it."""
    inbox = ChannelInbox.on_store(store)
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        first = await _post(client, _event("evt-bad", text=text))
        again = await _post(client, _event("evt-bad", text=text))
    assert (first.status_code, first.json()["status"]) == (200, "accepted")
    assert again.json() == {"inbound_id": first.json()["inbound_id"], "status": "duplicate"}

    async def no_turn(request: object) -> object:
        raise AssertionError("an unprocessable event never gets a turn")

    assert await InboxWorker(inbox, no_turn, idle_poll_s=0.05).drain() == 1  # type: ignore[arg-type]
    record = await inbox.record(first.json()["inbound_id"])
    assert record is not None
    assert (record.state, record.attempt, record.failure_code) == (
        "dead_lettered",
        1,
        "unprocessable",
    )
    assert record.failure_message == f"the channel accepted the event without its text: {why}"
    assert record.kind == "unprocessable"


async def test_readiness_is_503_for_a_while_after_the_inbox_could_not_store_an_event(
    store: RuntimeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every accept answering 503 while /readyz says 200 would keep a load balancer sending
    events here; after the cooldown readiness is tried again, and a stored event clears it."""
    inbox = ChannelInbox.on_store(store)
    accept = inbox.accept

    async def locked(envelope: object) -> object:
        raise StoreError("write failed: SQLITE_BUSY: database is locked", retryable=True)

    clock = SteppedMonotonic()
    monkeypatch.setattr(store_health_module, "time", clock)
    cooldown_s = ingress_app_module.STORE_FAILURE_COOLDOWN_S
    async with (
        serve_ingress(inbox, readiness=lambda: (True, {"inbox": "running"})) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        assert (await client.get("/readyz")).status_code == 200
        monkeypatch.setattr(inbox, "accept", locked)
        assert (await _post(client, _event("evt-1"))).status_code == 503
        not_ready = await client.get("/readyz")
        assert not_ready.status_code == 503
        assert not_ready.json() == {
            "status": "not ready",
            "checks": {"inbox": "running", "store": "failing"},
        }
        clock.advance(cooldown_s - 0.1)
        assert (await client.get("/readyz")).status_code == 503
        clock.advance(0.2)
        assert (await client.get("/readyz")).status_code == 200
        assert (await _post(client, _event("evt-2"))).status_code == 503
        assert (await client.get("/readyz")).status_code == 503
        monkeypatch.setattr(inbox, "accept", accept)
        assert (await _post(client, _event("evt-3"))).status_code == 200
        assert (await client.get("/readyz")).status_code == 200


async def test_readiness_is_503_while_the_inbox_is_full_and_200_once_it_drained(
    store: RuntimeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full inbox answers every new event 503: readiness says so (a load balancer sends
    them elsewhere) and why, while liveness stays (a restart would not make room). It reads
    nothing while events are stored, looks at the backlog at most once a second while it
    refuses, and is ready again once the workers drained it, with no event tried."""
    inbox = ChannelInbox.on_store(store, limits=InboxLimits(1))
    looks: list[InboxLimits] = []
    room = store.inbox.room

    async def counted(limits: InboxLimits) -> InboxRoom:
        looks.append(limits)
        return await room(limits)

    monkeypatch.setattr(store.inbox, "room", counted)
    clock = SteppedMonotonic()
    monkeypatch.setattr(admission_module, "time", clock)
    async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await _post(client, _event("evt-1"))).status_code == 200
        assert (await client.get("/readyz")).status_code == 200
        assert looks == []
        refused = await _post(client, _event("evt-2"))
        assert (refused.status_code, refused.headers["retry-after"]) == (503, "5")
        for _ in range(3):
            not_ready = await client.get("/readyz")
            assert not_ready.status_code == 503
            assert not_ready.json() == {
                "status": "not ready",
                "checks": {"admission": "inbox full: 1 queued (max 1)"},
            }
        assert len(looks) == 1
        health = await client.get("/healthz")
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        await claim_all(inbox)
        assert (await client.get("/readyz")).status_code == 503  # the last look, < 1 s old
        clock.advance(admission_module.RECHECK_S)
        assert (await client.get("/readyz")).json() == {"status": "ready"}
        assert (await client.get("/readyz")).status_code == 200
        assert len(looks) == 2
        assert (await _post(client, _event("evt-2"))).status_code == 200


async def test_readiness_stays_503_while_the_database_file_is_replaced(
    store: RuntimeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replaced database is no passing trouble (only a restart on the right file ends
    it): back to 200 after the cooldown, a load balancer would send events here again."""
    inbox = ChannelInbox.on_store(store)
    accept = inbox.accept

    async def replaced(envelope: object) -> object:
        raise DatabaseReplaced("hostkit.db")

    clock = SteppedMonotonic()
    monkeypatch.setattr(store_health_module, "time", clock)
    async with (
        serve_ingress(inbox, readiness=lambda: (True, {"inbox": "running"})) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        monkeypatch.setattr(inbox, "accept", replaced)
        assert (await _post(client, _event("evt-1"))).status_code == 503
        clock.advance(ingress_app_module.STORE_FAILURE_COOLDOWN_S * 100)
        assert (await client.get("/readyz")).status_code == 503
        monkeypatch.setattr(inbox, "accept", accept)  # the right file again (a restart)
        assert (await _post(client, _event("evt-2"))).status_code == 200
        assert (await client.get("/readyz")).status_code == 200
