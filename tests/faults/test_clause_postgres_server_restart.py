"""Clause: the PostgreSQL server stopped abruptly under load loses no turn and runs none twice.

A Host runs turns in several sessions against its own throwaway cluster (this
test stops it, so it cannot share the suite's). Mid-load the server is stopped
with ``pg_ctl stop -m immediate`` (a crash: every connection cut, no checkpoint),
kept down, then started again on the same port. Turns in flight across the
outage either complete once the server is back or end with a typed error; no
turn hangs; every turn the caller saw completed is stored completed, with its
four transcript messages exactly once, and none is left running; the same
Host, never reopened, completes turns in every session after the restart.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import anyio
import psycopg
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.errors import HostkitError, StoreError
from hostkit.host import Host, parse_config
from hostkit.store import RuntimeStore
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, ModelRequest, TurnRequest, new_id
from tests.postgres import PostgresCluster

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SESSIONS = 3
MODEL_DELAY_S = 0.05
BEFORE_S, DOWN_S = 3.0, 3.0
# Each session runs until it completed this many turns begun after the restart.
TURNS_AFTER = 3
# What a turn that ended failed across the outage may say: the store's error, no other.
STORE_FAILURE = re.compile(r"connection|COMMIT|write failed|read failed|database")
# Bounds for a hang, not expected durations: a turn in flight waits out the outage.
TURN_TIMEOUT_S = 60.0
TEST_TIMEOUT_S = 120.0


@tool("echo", description="Echo the text back.")
async def echo(ctx: ToolContext, text: str) -> str:
    return f"echo: {text}"


async def decide(request: ModelRequest) -> Reply | CallTools:
    """One tool call, then the answer; each step takes the model a moment."""
    await anyio.sleep(MODEL_DELAY_S)
    if request.messages[-1].role == "tool":
        return Reply("done")
    return CallTools(("echo", {"text": "hi"}))


async def test_turns_survive_a_server_crash_and_restart(
    tmp_path: Path, own_cluster: PostgresCluster
) -> None:
    url = await own_cluster.create_database()
    config = parse_config(
        {
            "host": {"workspace": str(tmp_path), "synchronous": "FULL"},
            "store": {"url": url},
            "providers": {"m": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "m", "instructions": "x", "memory": False}},
        },
        base_dir=tmp_path,
    )
    model = ScriptedModel([decide], repeat_last=True)
    outcomes: list[tuple[str, float, float, str]] = []  # session, start, end, outcome
    store_failures: list[str] = []  # the errors of turns that ended failed
    window: dict[str, float] = {}
    start = time.monotonic()

    async with Host.open(config, capabilities=capabilities(model, tools=[echo])) as host:

        async def session(key: str) -> None:
            facts = ConversationFacts(channel="c", conversation_key=key, principal_key=key)
            after_restart = 0
            while after_restart < TURNS_AFTER:
                began = time.monotonic() - start
                try:
                    with anyio.fail_after(TURN_TIMEOUT_S):
                        result = await host.turns.run(
                            TurnRequest(input="hi", principal=facts, request_id=new_id("req"))
                        )
                    outcome = result.outcome
                    if outcome == "failed":  # a store failure mid-turn, recorded: say which
                        store_failures.append(result.error or "")
                except HostkitError as exc:
                    outcome = type(exc).__name__
                    await anyio.sleep(0.2)
                outcomes.append((key, began, time.monotonic() - start, outcome))
                if "up" in window and began > window["up"] and outcome == "completed":
                    after_restart += 1

        async def crash() -> None:
            await anyio.sleep(BEFORE_S)
            window["down"] = time.monotonic() - start
            await anyio.to_thread.run_sync(own_cluster.crash)
            await anyio.sleep(DOWN_S)
            await anyio.to_thread.run_sync(own_cluster.restart)
            window["up"] = time.monotonic() - start

        with anyio.fail_after(TEST_TIMEOUT_S):
            async with anyio.create_task_group() as tg:
                for index in range(SESSIONS):
                    tg.start_soon(session, f"s{index}")
                tg.start_soon(crash)

    # Every outcome is a completed turn or a typed error, and some turn was in flight
    # across the outage. A turn whose write failed mid-turn and whose end could be
    # recorded once the server was back ends ``failed`` with the store's own error.
    kinds = Counter(outcome for *_, outcome in outcomes)
    typed = {"completed", "failed", "TurnInfrastructureError", "StoreError", "TurnRejected"}
    assert set(kinds) <= typed
    assert all(STORE_FAILURE.search(error) for error in store_failures), store_failures
    assert any(began < window["down"] < end for _, began, end, _ in outcomes)
    # The same Host serves every session again once the server is back.
    for index in range(SESSIONS):
        after = [o for key, began, _, o in outcomes if key == f"s{index}" and began > window["up"]]
        assert after.count("completed") >= TURNS_AFTER, (index, after)

    completed = Counter(key for key, *_, outcome in outcomes if outcome == "completed")
    async with await psycopg.AsyncConnection.connect(url) as conn:
        statuses = dict(
            await (
                await conn.execute("SELECT status, count(*) FROM turns GROUP BY status")
            ).fetchall()
        )
        per_session = dict(
            await (
                await conn.execute(
                    "SELECT b.conversation_key, count(*) FROM messages m "
                    "JOIN conversation_bindings b ON b.session_id = m.session_id "
                    "JOIN turns t ON t.turn_id = m.turn_id AND t.status = 'completed' "
                    "GROUP BY b.conversation_key"
                )
            ).fetchall()
        )
    # No turn left running; what the callers saw completed is what is stored completed.
    assert "running" not in statuses, statuses
    assert statuses.get("completed", 0) == sum(completed.values())
    # Each completed turn's four transcript messages (input, call, result, answer), once.
    for key, count in completed.items():
        assert per_session.get(key, 0) == 4 * count, (key, per_session, completed)


LONG_DOWN_S = 16.0
# Well under what psycopg_pool's own doubling backoff would leave after LONG_DOWN_S (its
# tries would come 15 s and 31 s after the first failure: about 14 s after the restart).
BACK_WITHIN_S = 7.0


async def test_a_busy_pool_uses_a_restarted_server_again_within_seconds(
    own_cluster: PostgresCluster,
) -> None:
    """A pool whose every connection was lost (one slot, so it cannot grow around the
    problem) and whose tries failed for a long outage reconnects within seconds of the
    restart: the store answers again, instead of "no database connection in time" for
    about as long as the outage lasted."""
    url = await own_cluster.create_database()

    def count(conn: object) -> int:
        return int(conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0])  # type: ignore[attr-defined]

    async with await RuntimeStore.open_postgres(url, pool_size=1, connect_timeout_s=1.0) as store:
        assert await store.read(count) == 0
        await anyio.to_thread.run_sync(own_cluster.crash)
        down = time.monotonic()
        while time.monotonic() - down < LONG_DOWN_S:  # the store is used throughout
            with pytest.raises(StoreError):
                await store.read(count)
            await anyio.sleep(0.2)
        await anyio.to_thread.run_sync(own_cluster.restart)
        up = time.monotonic()
        with anyio.fail_after(60):
            while True:
                try:
                    assert await store.read(count) == 0
                    break
                except StoreError:
                    await anyio.sleep(0.1)
        back_in = time.monotonic() - up
    assert back_in < BACK_WITHIN_S, back_in
