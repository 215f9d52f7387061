"""Clause: an admission that landed as the server crashed does not block its session.

The server is stopped as a crash would stop it (``pg_ctl stop -m immediate``)
right after the admission's COMMIT went through and before its answer was read:
the store cannot read the admission back (the server is down), so the Host
refuses the turn, retryable, while the turn holds its session with nobody to
drive it. Once the server is back, the session's next turn ends that one
``lost`` and runs; it used to wait out the session lease (a minute), which is
how a turn of the server-restart clause once hung in admission.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from hostkit.errors import HostkitError, TurnRejected
from hostkit.host import Host, parse_config
from hostkit.store import _pg_connection
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, TurnRequest, TurnResult, new_id
from tests.postgres import PostgresCluster

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# Well under the session lease's ttl (60 s), which used to free the session.
BACK_WITHIN_S = 30.0


def crash_at_the_admission_commit(
    monkeypatch: pytest.MonkeyPatch, cluster: PostgresCluster
) -> list[str]:
    """The first admission's COMMIT goes through, then the server crashes before its
    answer is read."""
    admitting: set[int] = set()
    crashed: list[str] = []
    run, commit = _pg_connection.PgConnection.run, psycopg.Connection.commit

    def tracking_run(self: Any, sql: str, params: Any) -> Any:
        if "INSERT INTO turns " in sql:
            admitting.add(id(self._conn))
        return run(self, sql, params)

    def crashing_commit(self: psycopg.Connection[Any]) -> None:
        if id(self) not in admitting or crashed:
            return commit(self)
        admitting.discard(id(self))
        commit(self)
        cluster.crash()
        crashed.append(self.info.dbname)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(_pg_connection.PgConnection, "run", tracking_run)
    monkeypatch.setattr(psycopg.Connection, "commit", crashing_commit)
    return crashed


async def test_a_session_whose_admission_landed_in_a_crash_is_freed_by_its_next_turn(
    tmp_path: Path, own_cluster: PostgresCluster
) -> None:
    url = await own_cluster.create_database()
    config = parse_config(
        {
            "host": {"workspace": str(tmp_path), "synchronous": "FULL"},
            "store": {"url": url},
            "providers": {"m": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "m", "memory": False}},
        },
        base_dir=tmp_path,
    )
    facts = ConversationFacts(channel="c", conversation_key="k", principal_key="u")

    def request() -> TurnRequest:
        return TurnRequest(input="hi", principal=facts, request_id=new_id("req"))

    model = ScriptedModel([Reply("ok")], repeat_last=True)
    async with Host.open(config, capabilities=capabilities(model)) as host:
        with pytest.MonkeyPatch.context() as patch:  # own_cluster's PGPASSWORD stays set
            crashed = crash_at_the_admission_commit(patch, own_cluster)
            with pytest.raises(TurnRejected) as caught:
                await host.turns.run(request())
        assert crashed
        assert caught.value.retryable
        await anyio.to_thread.run_sync(own_cluster.restart)
        follow: TurnResult | None = None
        with anyio.fail_after(BACK_WITHIN_S):
            while follow is None:
                try:
                    follow = await host.turns.run(request())
                except HostkitError:  # the pool reconnecting to the restarted server
                    await anyio.sleep(0.2)
        assert follow.outcome == "completed"
    async with await psycopg.AsyncConnection.connect(url) as conn:
        turns = await (await conn.execute("SELECT status FROM turns ORDER BY id")).fetchall()
    assert turns == [("lost",), ("completed",)]
