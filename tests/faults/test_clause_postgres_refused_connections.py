"""Clause: a PostgreSQL server that refuses connections fails store calls in a moment.

A stopped server refuses every connection, and psycopg_pool would keep each
checkout waiting for the whole ``connect_timeout_s`` (10 s by default): a
webhook hung that long before its 503, and ``/readyz`` answered 200 all the
while. The store remembers the pool's failed tries to connect, so each call
fails within a second or two with a retryable ``StoreError`` that says the
server refused, the webhook is answered 503 as fast and ``/readyz`` turns
not-ready with it; once the server is back, the same store answers within a
second or so.
"""

from __future__ import annotations

import sqlite3
import time

import anyio
import httpx
import pytest

from hostkit._store_health import StoreHealth
from hostkit.channels import sign_webhook
from hostkit.errors import StoreError
from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore
from tests.faults._serve_proc import eventually
from tests.ingress import NOW, SECRETS, serve_ingress, to_json
from tests.postgres import PostgresCluster

pytestmark = pytest.mark.anyio

# Well under the default connect_timeout_s (10 s) and the accept deadline (5 s).
REFUSED_WITHIN_S = 2.5
BACK_WITHIN_S = 5.0


def event(event_id: str) -> tuple[bytes, dict[str, str]]:
    body = to_json({"event_id": event_id, "sender": "u-1", "conversation": "c", "text": "hi"})
    return body, sign_webhook(SECRETS["hooks"], body, timestamp=NOW)


def sessions(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0])


async def test_a_stopped_server_fails_calls_webhooks_and_readiness_at_once(
    own_cluster: PostgresCluster,
) -> None:
    url = await own_cluster.create_database()
    async with (
        await RuntimeStore.open_postgres(url) as store,
        serve_ingress(ChannelInbox.on_store(store), store_health=StoreHealth()) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        body, headers = event("evt-up")
        assert (await client.post("/channels/hooks", content=body, headers=headers)).is_success
        assert (await client.get("/readyz")).status_code == 200

        await anyio.to_thread.run_sync(own_cluster.crash)
        body, headers = event("evt-down")
        started = time.monotonic()
        refused = await client.post("/channels/hooks", content=body, headers=headers)
        assert refused.status_code == 503
        assert time.monotonic() - started < REFUSED_WITHIN_S
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["store"] == "failing"
        # Every later call fails as fast, and says why.
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(StoreError, match="refused new connections") as caught:
                await store.read(sessions)
            assert time.monotonic() - started < REFUSED_WITHIN_S
            assert caught.value.retryable

        await anyio.to_thread.run_sync(own_cluster.restart)
        up = time.monotonic()

        async def accepted() -> bool:
            return (await client.post("/channels/hooks", content=body, headers=headers)).is_success

        await eventually(accepted, what="the retried webhook accepted", timeout_s=30)
        assert time.monotonic() - up < BACK_WITHIN_S
        assert (await client.get("/readyz")).status_code == 200
        assert await store.read(sessions) >= 0
