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
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from hostkit._store_health import StoreHealth
from hostkit.channels import sign_webhook
from hostkit.errors import StoreError
from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore
from tests.faults._serve_proc import eventually
from tests.ingress import NOW, SECRETS, serve_ingress, to_json
from tests.postgres import HOSTKIT_TEMPLATE, PostgresCluster

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
            with pytest.raises(
                StoreError, match="new connections to the database server fail"
            ) as caught:
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


async def test_a_checkout_waits_for_a_connection_in_use_while_new_ones_are_refused(
    postgres_cluster: PostgresCluster,
) -> None:
    """A healthy server with no connection slot left (other Hosts on the database took
    them) refuses the pool's growth while the connection this store holds works: a
    second call waits for that one to come back, as it did before failing fast; it is
    not failed as if the server were down."""
    url = await postgres_cluster.create_database(template=HOSTKIT_TEMPLATE)
    async with await RuntimeStore.open_postgres(url, pool_size=2) as store:
        others = await anyio.to_thread.run_sync(take_every_slot, url)
        try:

            def holding(conn: object) -> int:
                time.sleep(1.5)
                return 1

            answers: list[object] = []

            async def second() -> None:
                await anyio.sleep(0.1)  # after the first call took the pool's connection
                answers.append(await store.read(sessions))

            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    group.start_soon(second)
                    answers.append(await store.read(holding))
        finally:
            for other in others:
                other.close()
    assert sorted(answers, key=str) == [0, 1]


def take_every_slot(url: str) -> list[psycopg.Connection[Any]]:
    """Connections to ``url`` until the server refuses one (out of slots): theirs to close."""
    taken: list[psycopg.Connection[Any]] = []
    try:
        while len(taken) < 1_000:
            taken.append(psycopg.connect(url))
    except psycopg.OperationalError as exc:
        if "too many clients" not in str(exc) and "reserved" not in str(exc):
            raise  # some other failure than slots running out
        return taken
    for conn in taken:
        conn.close()
    raise AssertionError("the server never ran out of connection slots")
