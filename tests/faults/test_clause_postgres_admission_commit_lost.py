"""Clause: a connection that breaks at the COMMIT of a turn's admission loses no inbound.

On PostgreSQL a COMMIT whose connection breaks may or may not have landed
(``StoreOutcomeUnknown``). The admission reads back what landed: the turn it
admitted goes on under its lease, and an admission that did not land is
retried (its request id is still free). Either way the inbound is answered by
one turn with one terminal record; it used to be dead-lettered at once as a
permanent failure, with no turn, or with a turn left to be lost.

The break is real: the server's backend of the admitting connection is
terminated (``pg_terminate_backend``) before its COMMIT is sent, or the
connection is closed after the COMMIT went through and before its answer was
read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from hostkit.host import Host, parse_config
from hostkit.inbox import ChannelInbox, RetryPolicy
from hostkit.store import _pg_connection
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import InboundEnvelope
from tests.postgres import PostgresCluster

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WAIT_S = 30.0


@pytest.fixture
def cluster(postgres_cluster: PostgresCluster) -> Iterator[PostgresCluster]:
    try:
        yield postgres_cluster
    finally:
        postgres_cluster.drop_created()


def break_the_admission_commit(
    monkeypatch: pytest.MonkeyPatch, url: str, *, landed: bool
) -> list[str]:
    """The first admission's COMMIT breaks: before it is sent (nothing lands), or after it
    went through and before its answer is read (it landed)."""
    admitting: set[int] = set()
    broken: list[str] = []
    run, commit = _pg_connection.PgConnection.run, psycopg.Connection.commit

    def tracking_run(self: Any, sql: str, params: Any) -> Any:
        if "INSERT INTO turns " in sql:
            admitting.add(id(self._conn))
        return run(self, sql, params)

    def breaking_commit(self: psycopg.Connection[Any]) -> None:
        if id(self) not in admitting or broken:
            return commit(self)
        admitting.discard(id(self))
        if landed:
            commit(self)
            self.close()
            broken.append("after")
        else:
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [self.info.backend_pid])
            broken.append("before")
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(_pg_connection.PgConnection, "run", tracking_run)
    monkeypatch.setattr(psycopg.Connection, "commit", breaking_commit)
    return broken


@pytest.mark.parametrize("landed", [False, True], ids=["before_commit", "after_commit"])
async def test_an_inbound_whose_admission_commit_broke_is_answered_once(
    cluster: PostgresCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    url = await cluster.database_for(tmp_path / "hostkit.db")
    broken = break_the_admission_commit(monkeypatch, url, landed=landed)
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "unused.db"), "workspace": str(tmp_path)},
            "store": {"url": url},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=tmp_path,
    )
    model = ScriptedModel([Reply("hello back")])
    async with Host.open(config, capabilities=capabilities(model)) as host:
        policy = RetryPolicy(max_attempts=5, base_delay_s=0.05, max_delay_s=0.2)
        inbox = ChannelInbox.on_store(host.store, policy=policy)
        receipt = await inbox.accept(
            InboundEnvelope(
                channel_instance_id="chat.x",
                platform_event_key="ev-1",
                conversation_key="c1",
                principal_key="u1",
                authenticated_by="signature",
                received_at=time.time(),
                payload="hi",
            )
        )
        async with host.inbox_worker(inbox=inbox, idle_poll_s=0.05):
            with anyio.fail_after(WAIT_S):
                while True:  # polled: the worker reports to the store, not to this test
                    record = await inbox.record(receipt.inbound_id)
                    if record is not None and record.state in ("completed", "dead_lettered"):
                        break
                    await anyio.sleep(0.05)
    assert broken == ["after" if landed else "before"]
    assert record.state == "completed", record
    with psycopg.connect(url) as conn:
        turns = conn.execute("SELECT turn_id, status FROM turns").fetchall()
        ends = conn.execute(
            "SELECT count(*) FROM turn_events WHERE kind LIKE 'turn.%' AND kind != 'turn.started'"
        ).fetchone()
    assert [status for _, status in turns] == ["completed"]
    assert record.turn_id == turns[0][0]
    assert ends == (1,)
    assert len(model.requests) == 1  # the model was asked once
