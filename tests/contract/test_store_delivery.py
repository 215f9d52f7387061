"""The SQLite delivery adapter's own facts: migration 13 and the outbox indexes.

Intents written before v13 were never read; after the upgrade each is pending and due from
its creation time, so the first claim sends it. Turns of v12 get ``turns.route`` NULL:
unrouted, so recovering one of them sends nothing. The claim (and ``next_due``) read only
the partial ``outbox_due`` index, in its order, and check a session's older intents in
``outbox_session_due``; the dead-letter listing reads ``outbox_dead``.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest

from hostkit.store import MIGRATIONS, SCHEMA_VERSION, RuntimeStore, SqliteStore
from hostkit.store._delivery_rows import DUE_ROWS, NEXT_DUE, count_rows, list_intents
from hostkit.types import DeliveryCounts
from tests.contract._delivery_adapters import ROUTE, finish_routed_turns

pytestmark = pytest.mark.anyio

LEGACY_CREATED = "2025-03-04T05:06:07.250Z"


def v12_turn(conn: sqlite3.Connection, turn_id: str, session_id: str, status: str) -> None:
    """A turn row as a v12 Host admitted it (no route column yet)."""
    conn.execute(
        "INSERT INTO turns (turn_id, request_id, principal_id, session_id, core_id, "
        "core_revision, generation, status, lease_owner, lease_expires_at, started_at) "
        "VALUES (?, ?, 'suite', ?, 'assistant', 'rev', 1, ?, 'gone-host|1|1.000|gone', 1.0, ?)",
        [turn_id, f"req-{turn_id}", session_id, status, LEGACY_CREATED],
    )


@pytest.mark.sqlite_only("a v12 SQLite file, PRAGMA table_info and sqlite_master")
async def test_migration_13_makes_legacy_intents_due_from_their_creation(tmp_path: Path) -> None:
    path = tmp_path / "v12.db"
    async with await RuntimeStore.open(path, migrations=MIGRATIONS[:12]) as old:
        assert isinstance(old, SqliteStore)
        session_id = await old.create_session(owner_kind="system", principal_id="suite")
        # What a v12 Host wrote: a terminal turn with its intent (the outbox's only writer),
        # and a turn still running when that Host died (its admission lease long expired).
        await old.write(lambda c: v12_turn(c, "turn_done", session_id, "completed"))
        await old.write(lambda c: v12_turn(c, "turn_cut", session_id, "running"))
        turn_id = "turn_done"
        await old.write(
            lambda c: c.execute(
                "INSERT INTO outbox (intent_id, turn_id, session_id, route, payload, created_at) "
                "SELECT 'out_legacy', turn_id, session_id, ?, ?, ? FROM turns "
                "WHERE turn_id = 'turn_done'",
                [json.dumps(dict(ROUTE)), json.dumps({"text": "old answer"}), LEGACY_CREATED],
            )
        )

    async with await RuntimeStore.open(path) as new:
        assert isinstance(new, SqliteStore)
        assert (new.migration.from_version, new.migration.to_version) == (12, SCHEMA_VERSION)
        assert new.migration.backup is not None
        created = datetime.fromisoformat(LEGACY_CREATED.replace("Z", "+00:00")).timestamp()
        legacy = await new.delivery.intent("out_legacy")
        assert legacy is not None
        assert (legacy.turn_id, legacy.status, legacy.attempts) == (turn_id, "pending", 0)
        assert legacy.next_attempt_at == pytest.approx(created, abs=0.002)
        assert (legacy.route, legacy.payload) == (ROUTE, {"text": "old answer"})
        # turns.route (v13): the turns of v12 have none, so they count as unrouted, and
        # recovering the cut one writes no intent (there is nowhere to send it).
        columns = await new.read(lambda c: c.execute("PRAGMA table_info(turns)").fetchall())
        assert ("route", "TEXT", 0) in {(col[1], col[2], col[3]) for col in columns}
        routes = await new.read(lambda c: c.execute("SELECT route FROM turns").fetchall())
        assert routes == [(None,), (None,)]
        assert await new.turns.route_of("turn_done") is None
        recovered = await new.turns.recover()
        assert [(r.turn_id, r.outcome) for r in recovered] == [("turn_cut", "lost")]
        assert [i.intent_id for i in await new.delivery.intents()] == ["out_legacy"]
        assert await new.delivery.next_due() == legacy.next_attempt_at
        (claim,) = await new.delivery.claim(
            owner="suite", limit=5, lease_s=30.0, max_attempts=3, now=created + 0.01
        )
        assert claim.intent.intent_id == "out_legacy"
        indexes = await new.read(
            lambda c: {
                row[0]: row[1]
                for row in c.execute(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                    "AND tbl_name = 'outbox' AND sql IS NOT NULL"
                )
            }
        )
    assert set(indexes) == {
        "outbox_due",
        "outbox_dead",
        "outbox_session_due",
        "outbox_delivered",
        "outbox_delivered_payload",
    }
    assert "WHERE status IN ('pending', 'sending')" in indexes["outbox_due"]
    assert "WHERE status IN ('pending', 'sending')" in indexes["outbox_session_due"]
    assert "WHERE status = 'dead_lettered'" in indexes["outbox_dead"]


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN: SQLite planner and partial indexes")
async def test_the_claim_reads_only_the_due_index_in_its_order(tmp_path: Path) -> None:
    async with await RuntimeStore.open(tmp_path / "hostkit.db") as store:
        assert isinstance(store, SqliteStore)
        await finish_routed_turns(store, 3)

        def plans(conn: sqlite3.Connection) -> tuple[list[str], ...]:
            queries = (
                (DUE_ROWS, [1e12, 5]),
                (NEXT_DUE, []),
                (
                    "SELECT id FROM outbox WHERE status = 'dead_lettered' ORDER BY id DESC LIMIT 5",
                    [],
                ),
            )
            return tuple(
                [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
                for sql, params in queries
            )

        due, soonest, dead = await store.read(plans)
    # The per-session order check walks its own partial index, never the table.
    first_of_session = [
        "CORRELATED SCALAR SUBQUERY 1",
        "SEARCH earlier USING INDEX outbox_session_due (session_id=? AND id<?)",
    ]
    assert due == [
        "SEARCH outbox USING INDEX outbox_due (next_attempt_at<?)",
        *first_of_session,
    ], due
    assert soonest == ["SEARCH outbox USING INDEX outbox_due", *first_of_session], soonest
    assert dead == ["SCAN outbox USING INDEX outbox_dead"], dead


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN: SQLite planner and partial indexes")
async def test_listing_the_pending_or_sending_intents_reads_the_due_index_not_the_history(
    tmp_path: Path,
) -> None:
    """``delivery list --status pending`` on a week of delivered intents walked the id order
    back through every one of them when fewer than the limit were due (0.18 s at 200,000);
    it reads the due intents' partial index instead, in the same newest-first order."""
    async with await RuntimeStore.open(tmp_path / "hostkit.db") as store:
        assert isinstance(store, SqliteStore)
        await finish_routed_turns(store, 4)

        def plan(conn: sqlite3.Connection, status: str) -> list[str]:
            seen: list[str] = []
            conn.set_trace_callback(seen.append)
            try:
                list_intents(conn, status, 50)
            finally:
                conn.set_trace_callback(None)
            return [str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {seen[-1]}")]

        for status in ("pending", "sending"):
            steps = await store.read(lambda conn, status=status: plan(conn, status))
            assert "USING INDEX outbox_" in steps[0], (status, steps)
            assert "outbox_dead" not in steps[0], (status, steps)
        everything = await store.delivery.intents(limit=100)
        pending = [i.intent_id for i in everything if i.status == "pending"]
        assert len(pending) == 4
        listed = await store.delivery.intents(status="pending", limit=50)
        assert [i.intent_id for i in listed] == pending


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN: SQLite planner and partial indexes")
async def test_counts_read_the_due_index_and_the_tallies_never_the_history(
    tmp_path: Path,
) -> None:
    """``delivery counts`` grouped every intent, the delivered history too: 0.14 s at
    200,000 rows. It counts the due intents from their partial index and reads the
    finished ones' tallies (v28)."""
    async with await RuntimeStore.open(tmp_path / "hostkit.db") as store:
        assert isinstance(store, SqliteStore)
        await finish_routed_turns(store, 3)
        total = len(await store.delivery.intents())
        claimed = await store.delivery.claim(
            owner="suite", limit=2, lease_s=30.0, max_attempts=3, now=store.now()
        )
        await store.delivery.delivered(claimed[0], now=store.now())

        def plan(conn: sqlite3.Connection) -> list[str]:
            seen: list[str] = []
            conn.set_trace_callback(seen.append)
            try:
                count_rows(conn)
            finally:
                conn.set_trace_callback(None)
            return [str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {seen[-1]}")]

        steps = await store.read(plan)
        counts = await store.delivery.counts()
    reads = [step for step in steps if step.startswith(("SCAN", "SEARCH"))]
    assert reads == [
        "SCAN outbox USING INDEX outbox_due",
        "SCAN outbox_tallies",
        "SCAN outbox_tally_deltas",
        "SCAN q",
    ], steps
    sending = len(claimed) - 1
    assert counts == DeliveryCounts(pending=total - sending - 1, sending=sending, delivered=1)
