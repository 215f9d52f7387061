"""Clause: a database outage longer than the session lease takes no live Host's turn over.

Two Hosts share one PostgreSQL database (a cluster of this test alone). Host A
runs a turn in each of ``SESSIONS`` sessions, and each turn's model step is
still thinking when the server crashes and stays down for more than twice
the lease's ttl: no holder can renew, and every lease A holds expires. Host B
meanwhile asks for a turn in each of those sessions and keeps asking through
the outage, as an inbox worker retries. When the server is back, B's first
look finds A's leases long expired; A, alive throughout, keeps its sessions:
it renews within a ttl of the notice, its turns complete with their answers,
B's turns run after them, and no turn ends lost.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import psycopg
import pytest

from hostkit.errors import HostkitError
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, ModelRequest, TurnRequest, TurnResult, new_id
from tests.postgres import PostgresCluster

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SESSIONS = 3
TTL_S = 2.0
DOWN_S = 2 * TTL_S + 0.5
# Bounds for a hang, not expected durations.
TEST_TIMEOUT_S = 120.0


def host_config(tmp_path: Path, url: str, name: str) -> HostConfig:
    return parse_config(
        {
            "host": {"workspace": str(tmp_path / name), "session_lease_ttl_s": TTL_S},
            "store": {"url": url},
            "providers": {"m": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "m", "instructions": "x", "memory": False}},
        },
        base_dir=tmp_path,
    )


def facts(index: int) -> ConversationFacts:
    return ConversationFacts(channel="c", conversation_key=f"s{index}", principal_key="p")


async def test_a_live_holder_keeps_its_sessions_through_an_outage_longer_than_its_lease(
    tmp_path: Path, own_cluster: PostgresCluster
) -> None:
    url = await own_cluster.create_database()
    thinking = anyio.Event()
    answer = anyio.Event()
    started: list[str] = []

    async def think_through_the_outage(request: ModelRequest) -> Reply:
        started.append(request.messages[-1].content)
        if len(started) == SESSIONS:
            thinking.set()
        await answer.wait()
        return Reply("from A")

    model_a = ScriptedModel([think_through_the_outage], repeat_last=True)
    model_b = ScriptedModel([Reply("from B")], repeat_last=True)
    results_a: dict[int, TurnResult] = {}
    results_b: dict[int, TurnResult] = {}
    window: dict[str, float] = {}

    async with (
        Host.open(host_config(tmp_path, url, "a"), capabilities=capabilities(model_a)) as a,
        Host.open(host_config(tmp_path, url, "b"), capabilities=capabilities(model_b)) as b,
    ):

        async def run_a(index: int) -> None:
            results_a[index] = await a.turns.run(
                TurnRequest(input=f"a{index}", principal=facts(index), request_id=new_id("req"))
            )

        async def run_b(index: int) -> None:
            request = TurnRequest(
                input=f"b{index}", principal=facts(index), request_id=new_id("req")
            )
            while index not in results_b:
                try:
                    results_b[index] = await b.turns.run(request)
                except HostkitError:  # the server is down: ask again, the same request
                    await anyio.sleep(0.1)

        async def outage() -> None:
            await thinking.wait()
            window["down"] = time.monotonic()
            await anyio.to_thread.run_sync(own_cluster.crash)
            await anyio.sleep(DOWN_S)
            await anyio.to_thread.run_sync(own_cluster.restart)
            window["up"] = time.monotonic()
            # B has looked at every session since, and a ttl after its first look it
            # would take over any holder that did not renew.
            await anyio.sleep(1.5 * TTL_S)
            answer.set()

        with anyio.fail_after(TEST_TIMEOUT_S):
            async with anyio.create_task_group() as tg:
                for index in range(SESSIONS):
                    tg.start_soon(run_a, index)
                await thinking.wait()
                for index in range(SESSIONS):
                    tg.start_soon(run_b, index)
                tg.start_soon(outage)

    assert window["up"] - window["down"] > 2 * TTL_S  # every lease of A had expired
    # A kept every session: its answers stand, and B's turns ran after them.
    outcomes_a = {i: (r.outcome, r.text) for i, r in results_a.items()}
    assert outcomes_a == dict.fromkeys(range(SESSIONS), ("completed", "from A"))
    outcomes_b = {i: (r.outcome, r.text) for i, r in results_b.items()}
    assert outcomes_b == dict.fromkeys(range(SESSIONS), ("completed", "from B"))
    async with await psycopg.AsyncConnection.connect(url) as conn:
        ended = await (
            await conn.execute("SELECT kind FROM turn_events WHERE kind = 'turn.lost'")
        ).fetchall()
        transcripts = await (
            await conn.execute(
                "SELECT b.conversation_key, m.role, m.content FROM messages m "
                "JOIN conversation_bindings b ON b.session_id = m.session_id "
                "ORDER BY m.seq"
            )
        ).fetchall()
    assert ended == []
    for index in range(SESSIONS):
        roles = [role for key, role, _ in transcripts if key == f"s{index}"]
        assert roles == ["user", "assistant", "user", "assistant"], (index, transcripts)
