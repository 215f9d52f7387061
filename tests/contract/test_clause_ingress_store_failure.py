"""Clause: a store failure answers 5xx, so the platform retries; nothing is acknowledged early.

A closed store (StoreClosed) and a store that does not answer within the
accept deadline both give 503 with a short body; once the store is back, the
platform's retry of the same event is accepted once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import httpx
import pytest

from hostkit.channels import sign_webhook
from hostkit.inbox import ChannelInbox
from hostkit.inbox._memory import MemoryInboxStore
from hostkit.store import InboxLimits, RuntimeStore
from hostkit.types import InboundEnvelope, InboxReceipt, SourceCheckpoint
from tests.ingress import NOW, SECRETS, serve_ingress, to_json

pytestmark = pytest.mark.anyio

BODY = to_json({"event_id": "evt-503", "sender": "u-1", "conversation": "c", "text": "hello"})
HEADERS = sign_webhook(SECRETS["hooks"], BODY, timestamp=NOW)


async def test_a_closed_store_answers_503_and_the_retry_is_accepted_once(db_path: Path) -> None:
    store = await RuntimeStore.open(db_path)
    await store.aclose()
    async with (
        serve_ingress(ChannelInbox.on_store(store)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        refused = await client.post("/channels/hooks", content=BODY, headers=HEADERS)
    assert refused.status_code == 503
    assert refused.json() == {"error": "the inbox is unavailable; retry later"}
    # The sender is told when to retry, not left to hammer a failing store.
    assert refused.headers["retry-after"] == "5"
    async with RuntimeStore.open(db_path) as reopened:
        inbox = ChannelInbox.on_store(reopened)
        assert await inbox.records() == ()
        async with serve_ingress(inbox) as url, httpx.AsyncClient(base_url=url) as client:
            retried = await client.post("/channels/hooks", content=BODY, headers=HEADERS)
            again = await client.post("/channels/hooks", content=BODY, headers=HEADERS)
        assert retried.json()["status"] == "accepted"
        assert again.json()["status"] == "duplicate"
        assert len(await inbox.records()) == 1


class _StalledStore(MemoryInboxStore):
    """An InboxStore test adapter whose accept hangs until the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.release = anyio.Event()

    async def accept(
        self,
        envelopes: Sequence[InboundEnvelope],
        checkpoint: SourceCheckpoint | None,
        *,
        now: float,
        limits: InboxLimits | None = None,
    ) -> tuple[InboxReceipt, ...]:
        await self.release.wait()
        return await super().accept(envelopes, checkpoint, now=now, limits=limits)


async def test_an_accept_past_its_deadline_answers_503() -> None:
    stalled = _StalledStore()
    inbox = ChannelInbox(stalled)
    async with (
        serve_ingress(inbox, accept_timeout_s=0.2) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        slow = await client.post("/channels/hooks", content=BODY, headers=HEADERS)
        assert slow.status_code == 503
        assert await inbox.records() == ()
        stalled.release.set()
        retried = await client.post("/channels/hooks", content=BODY, headers=HEADERS)
    assert retried.json()["status"] == "accepted"
    assert len(await inbox.records()) == 1
