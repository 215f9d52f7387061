"""Random session histories, and the ranking every session ranked gave, for
``inspect.recent_sessions`` and the schema step that made it a column (SQLite v25,
PostgreSQL v12).

A history is written row by row in SQL both engines accept, as no writer of the
store would: sessions created with tied times, turns admitted and ended out of
order (an older turn ending after a newer one started), one busy session of
hundreds of turns, turns deleted and one moved to another session. What the
store's own writers do is a subset.
"""

from __future__ import annotations

import random
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

from hostkit.authority import AuthorityResolver
from hostkit.store import INTERRUPTED, MAX_INSPECT_ROWS, RowStore, RuntimeStore
from hostkit.store._owned import owner_predicate
from hostkit.types import PrincipalScope

__all__ = [
    "EVERY_SESSION",
    "activity_columns",
    "assert_session_activity_backfilled",
    "every_session_ranked",
    "random_history",
    "ranked",
    "recorded",
    "seed_before_session_activity",
]

# The statement recent_sessions ran before schema v25: every session and turn read.
EVERY_SESSION = (
    "SELECT s.session_id, COALESCE(lt.ended_at, lt.started_at, s.created_at) AS last_activity, "
    "lt.core_id AS agent, lt.status AS last_outcome, "
    "(SELECT COUNT(*) FROM turns c WHERE c.session_id = s.session_id) AS turns "
    "FROM sessions s JOIN session_owners o ON o.session_id = s.session_id "
    "LEFT JOIN turns lt ON lt.id = "
    "(SELECT MAX(n.id) FROM turns n WHERE n.session_id = s.session_id) "
    "WHERE {where} ORDER BY last_activity DESC, s.id DESC LIMIT ?"
)
# Every session's activity and turns computed from its turns, legacy sessions included.
_COMPUTED = (
    "SELECT s.session_id, COALESCE(lt.ended_at, lt.started_at, s.created_at), "
    "(SELECT COUNT(*) FROM turns c WHERE c.session_id = s.session_id) "
    "FROM sessions s LEFT JOIN turns lt ON lt.id = "
    "(SELECT MAX(n.id) FROM turns n WHERE n.session_id = s.session_id) ORDER BY s.id"
)
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _at(second: int) -> str:
    return (_EPOCH + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def random_history(
    conn: sqlite3.Connection, rng: random.Random, *, start: int = 0, sessions: int = 40
) -> int:
    """Write a random history of ``sessions`` new sessions in the caller's transaction,
    its clock (seconds) starting at ``start``; returns where the clock ended.

    Times move in whole seconds and often not at all (ties everywhere); a quarter of
    the turns start a little before the one admitted before them. One session is busy
    (a group chat): hundreds of turns in a row. Earlier sessions get turns too.
    """
    clock = start
    first = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
    made = [str(row[0]) for row in conn.execute("SELECT session_id FROM sessions")]
    running: list[str] = []

    def tick() -> str:
        nonlocal clock
        clock += rng.choice((0, 0, 1, 2))
        return _at(clock)

    def admit(session_id: str) -> None:
        started = _at(max(0, clock - rng.choice((0, 0, 0, 3))))
        turn_id = f"turn_{rng.getrandbits(64):016x}"
        conn.execute(
            "INSERT INTO turns (turn_id, request_id, principal_id, session_id, core_id, "
            "core_revision, generation, status, started_at) "
            "VALUES (?, ?, 'alice', ?, ?, 'r1', 1, 'running', ?)",
            [turn_id, turn_id, session_id, rng.choice(("assistant", "notes")), started],
        )
        running.append(turn_id)

    def end(turn_id: str) -> None:
        conn.execute(
            "UPDATE turns SET status = ?, ended_at = ? WHERE turn_id = ?",
            [rng.choice(("completed", "failed", "needs_user", "lost")), tick(), turn_id],
        )

    for n in range(sessions):
        session_id = f"ses_h{first + n:05d}"
        kind = rng.choice(("operator",) * 6 + ("conversation", "legacy_local"))
        conn.execute(
            "INSERT INTO sessions (session_id, created_at) VALUES (?, ?)", [session_id, tick()]
        )
        conn.execute(
            "INSERT INTO session_owners (session_id, owner_kind, principal_id, channel, "
            "conversation_key, recorded_at) VALUES (?, ?, ?, ?, ?, ?)",
            [
                session_id,
                kind,
                None if kind == "legacy_local" else "alice",
                "webhook" if kind == "conversation" else None,
                session_id if kind == "conversation" else None,
                _at(clock),
            ],
        )
        made.append(session_id)
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            admit(rng.choice(made))
            if running and rng.random() < 0.7:
                end(running.pop(rng.randrange(len(running))))
    busy = rng.choice(made)
    for _ in range(rng.randrange(200, 400)):
        admit(busy)
        end(running.pop())
    for _ in range(len(running) // 2):
        end(running.pop(rng.randrange(len(running))))
    ended = "SELECT turn_id FROM turns WHERE status <> 'running' AND session_id = ? ORDER BY id"
    for session_id in rng.sample(made, 3):
        for (turn_id,) in conn.execute(ended, [session_id]).fetchall()[-2:]:
            conn.execute("DELETE FROM turns WHERE turn_id = ?", [turn_id])
    moved = conn.execute(ended, [busy]).fetchall()
    if moved:
        conn.execute("UPDATE turns SET session_id = ? WHERE turn_id = ?", [made[0], moved[-1][0]])
    return clock


async def every_session_ranked(
    store: RuntimeStore, scope: PrincipalScope, limit: int
) -> list[tuple[Any, ...]]:
    """The old statement's rows: session, last activity, agent, last outcome, turns."""
    assert isinstance(store, RowStore)
    where, params = owner_predicate(scope)
    found = await store.read(
        lambda conn: conn.execute(EVERY_SESSION.format(where=where), [*params, limit]).fetchall()
    )
    return [tuple(row) for row in found]


def recorded(outcome: str | None) -> str | None:
    """The recorded status a view shows ``INTERRUPTED`` for (a running turn without a
    live holder: the old statement gave the recorded one)."""
    return "running" if outcome == INTERRUPTED else outcome


async def ranked(store: RuntimeStore, scope: PrincipalScope, limit: int) -> list[tuple[Any, ...]]:
    """``recent_sessions`` as the old statement's rows."""
    shown = await store.inspect.recent_sessions(scope, limit=limit)
    return [
        (a.session.session_id, a.last_activity, a.agent, recorded(a.last_outcome), a.turns)
        for a in shown
    ]


async def activity_columns(store: RuntimeStore) -> tuple[list[Any], list[Any]]:
    """Every session's stored (activity, turns) and the same computed from its turns."""
    assert isinstance(store, RowStore)

    def read(conn: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
        stored = conn.execute(
            "SELECT session_id, last_activity, turn_count FROM sessions ORDER BY id"
        ).fetchall()
        return [tuple(row) for row in stored], [tuple(row) for row in conn.execute(_COMPUTED)]

    return await store.read(read)


# Every session of a test's history on one page.
_ALL = MAX_INSPECT_ROWS


async def seed_before_session_activity(store: RuntimeStore) -> tuple[list[Any], int]:
    """On a store migrated to just before the activity columns (SQLite v24, PostgreSQL
    v11): a random history. Returns its ranking by the old statement, and its clock."""
    assert isinstance(store, RowStore)
    rng = random.Random(11)
    clock = await store.write(lambda conn: random_history(conn, rng, sessions=60))
    async with AuthorityResolver.bind(store) as resolver:
        operator = await resolver.operator_issuer().issue("ops", reason="rank every session")
        return await every_session_ranked(store, operator, _ALL), clock


async def assert_session_activity_backfilled(
    store: RuntimeStore, before: list[Any], clock: int
) -> None:
    """After the upgrade from ``seed_before_session_activity``: every session's columns
    are its turns', the list is the old statement's, and stays so as history goes on."""
    assert isinstance(store, RowStore)
    stored, computed = await activity_columns(store)
    assert stored == computed
    rng = random.Random(12)
    async with AuthorityResolver.bind(store) as resolver:
        operator = await resolver.operator_issuer().issue("ops", reason="rank every session")
        assert await ranked(store, operator, _ALL) == before
        await store.write(lambda conn: random_history(conn, rng, start=clock, sessions=5))
        stored, computed = await activity_columns(store)
        assert stored == computed
        for limit in (1, 2, 3, 10, 50, _ALL):
            assert await ranked(store, operator, limit) == await every_session_ranked(
                store, operator, limit
            )
