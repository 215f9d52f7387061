"""``inspect.recent_sessions``: most recent activity first, ties newest session first.

``hostkit sessions`` and every view that defaults to the latest session
(``context``, ``budget``, ``effects audit``, ``latest_session``) read it. The
ranking is the newest turn's end, or its start while it runs, else the
session's creation; a long turn that ended after many short ones of other
sessions started ranks by its end. Since schema v25 it is a column kept by
triggers with the turns, walked through its index: the rows are those the
statement that ranked every session gave, on SQLite and PostgreSQL (the store
matrix), for a fixed timeline, random histories and the store's own writers.
"""

from __future__ import annotations

import base64
import json
import random
import sqlite3

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.errors import InvalidValue
from hostkit.store import Admitted, LeaseOwner, RowStore, RuntimeStore, TurnAdmission
from hostkit.store._inspect import _AFTER, _RECENT_SESSIONS
from hostkit.store._owned import owner_predicate
from hostkit.types import PrincipalScope, TurnResult, new_id
from tests.contract._session_history import (
    activity_columns,
    every_session_ranked,
    random_history,
    ranked,
)
from tests.support import facts

pytestmark = pytest.mark.anyio

# (session, created minute, turns as (start, end or None while running) minutes), in the
# order the sessions were created; turns are numbered in the order they started.
_TIMELINE: tuple[tuple[str, int, tuple[tuple[int, int | None], ...]], ...] = (
    # One long turn, started first and ended after every other: the most recent activity,
    # though its turn is the oldest and its session too.
    ("ses_long", 0, ((0, 20),)),
    ("ses_a", 0, ((1, 2), (5, 6))),
    ("ses_b", 1, ()),
    ("ses_c", 2, ((3, 4),)),
    ("ses_d", 3, ()),
    ("ses_e", 6, ((7, 8),)),
    # Created as ses_e's turn ended: a tie, the newer session first.
    ("ses_f", 8, ()),
    ("ses_g", 8, ((9, 10),)),
    # Its one turn took no time and ended with ses_g's: a tie again.
    ("ses_h", 9, ((10, 10),)),
    ("ses_legacy", 10, ((11, 12),)),
    ("ses_i", 12, ((12, None),)),
    # Two sessions without turns created together, as ses_i's turn started.
    ("ses_j", 12, ()),
    ("ses_k", 12, ()),
    ("ses_l", 13, ((14, 15), (15, 15), (16, 17))),
)


def _at(minute: int) -> str:
    return f"2026-01-01T00:{minute:02d}:00.000Z"


def _seed_timeline(conn: sqlite3.Connection) -> None:
    turns: list[tuple[int, str, int, int | None]] = []
    for session_id, created, session_turns in _TIMELINE:
        kind = "legacy_local" if session_id == "ses_legacy" else "operator"
        principal = None if kind == "legacy_local" else "alice"
        conn.execute(
            "INSERT INTO sessions (session_id, created_at) VALUES (?, ?)",
            [session_id, _at(created)],
        )
        conn.execute(
            "INSERT INTO session_owners (session_id, owner_kind, principal_id, recorded_at) "
            "VALUES (?, ?, ?, ?)",
            [session_id, kind, principal, _at(created)],
        )
        turns.extend((start, session_id, start, end) for start, end in session_turns)
    for n, (_, session_id, start, end) in enumerate(sorted(turns)):
        _insert_turn(conn, f"turn_{n:04d}", session_id, _at(start), end and _at(end))


def _insert_turn(
    conn: sqlite3.Connection, turn_id: str, session_id: str, started: str, ended: str | None
) -> None:
    conn.execute(
        "INSERT INTO turns (turn_id, request_id, principal_id, session_id, core_id, "
        "core_revision, generation, status, started_at, ended_at) "
        "VALUES (?, ?, 'alice', ?, 'assistant', 'r1', 1, ?, ?, ?)",
        [turn_id, turn_id, session_id, "running" if ended is None else "completed", started, ended],
    )


async def test_the_ranking_is_the_one_every_session_ranked_gave(
    store: RuntimeStore, authority: AuthorityResolver, operator: PrincipalScope
) -> None:
    assert isinstance(store, RowStore)
    await store.write(_seed_timeline)
    for limit in (*range(1, len(_TIMELINE) + 2), 50):
        # ses_i's turn was written running with no lease (the lease rule would end it): the
        # views show it interrupted where the old statement gave the recorded status.
        got = await ranked(store, operator, limit)
        assert got == await every_session_ranked(store, operator, limit), limit
    latest = await store.inspect.recent_sessions(operator, limit=3)
    # The long turn's end; the session created last, tied with the start of the running
    # turn; legacy never shown.
    assert [a.session.session_id for a in latest] == ["ses_long", "ses_l", "ses_k"]
    everything = await store.inspect.recent_sessions(operator, limit=50)
    assert "ses_legacy" not in {a.session.session_id for a in everything}
    assert len(everything) == len(_TIMELINE) - 1


async def test_a_conversation_sees_only_its_session(
    store: RuntimeStore, authority: AuthorityResolver, operator: PrincipalScope
) -> None:
    assert isinstance(store, RowStore)
    await store.write(_seed_timeline)
    chat = await authority.for_conversation(facts("chat"))
    session_id = chat.session_id or ""
    await store.write(lambda conn: _insert_turn(conn, "turn_chat", session_id, _at(20), _at(21)))
    for limit in (1, 50):
        shown = await store.inspect.recent_sessions(chat, limit=limit)
        assert [(a.session.session_id, a.turns) for a in shown] == [(session_id, 1)]
        assert [a.session.session_id for a in shown] == [
            row[0] for row in await every_session_ranked(store, chat, limit)
        ]
    (newest,) = await store.inspect.recent_sessions(operator, limit=1)
    assert newest.session.session_id == session_id


async def _same_at_every_limit(store: RuntimeStore, scope: PrincipalScope) -> None:
    total = len(await every_session_ranked(store, scope, 10_000))
    for limit in sorted({*range(1, 12), *range(12, total + 2, 7), total, total + 1}):
        assert await ranked(store, scope, limit) == await every_session_ranked(
            store, scope, limit
        ), limit
    stored, computed = await activity_columns(store)
    assert stored == computed


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_random_history_ranks_as_every_session_ranked(
    store: RuntimeStore, operator: PrincipalScope, seed: int
) -> None:
    """Ties at every page boundary, a busy session, turns ended out of order, deleted and
    moved; then sessions erased, and more history after the erase, erased sessions too."""
    assert isinstance(store, RowStore)
    rng = random.Random(seed)
    clock = await store.write(lambda conn: random_history(conn, rng))
    await _same_at_every_limit(store, operator)
    idle = await store.read(
        lambda conn: [
            str(row[0])
            for row in conn.execute(
                "SELECT s.session_id FROM sessions s JOIN session_owners o "
                "ON o.session_id = s.session_id WHERE o.owner_kind = 'operator' AND NOT EXISTS "
                "(SELECT 1 FROM turns t WHERE t.session_id = s.session_id "
                "AND t.status = 'running') ORDER BY s.id"
            )
        ]
    )
    for session_id in rng.sample(idle, 4):
        await store.erase_session(operator, session_id, "a person asked to be forgotten")
    await _same_at_every_limit(store, operator)
    await store.write(lambda conn: random_history(conn, rng, start=clock, sessions=10))
    await _same_at_every_limit(store, operator)


async def test_the_stores_own_writers_rank_a_session_in_their_transactions(
    store: RuntimeStore, authority: AuthorityResolver, operator: PrincipalScope
) -> None:
    """Admission ranks its session by the turn's start, the terminal commit by its end,
    recovery by the end it writes; an erase keeps the ranking (the turns' times stay)."""
    assert isinstance(store, RowStore)
    owner = await anyio.to_thread.run_sync(LeaseOwner.current, "ranking-instance")
    first, second = [await authority.for_conversation(facts(name)) for name in ("a", "b")]

    async def admit(scope: PrincipalScope) -> Admitted:
        turn_id = new_id("turn")
        admitted = await store.turns.admit(
            TurnAdmission(
                turn_id=turn_id,
                request_id=new_id("req"),
                principal_id=scope.principal_id,
                core_id="assistant",
                core_revision="r1",
                generation=1,
                session=scope.session_id or "",
                trace_id=new_id("trace"),
            ),
            owner=owner,
            ttl_s=600.0,
        )
        assert isinstance(admitted, Admitted), admitted
        return admitted

    async def first_is(scope: PrincipalScope) -> None:
        assert (await ranked(store, operator, 1))[0][0] == scope.session_id
        await _same_at_every_limit(store, operator)

    running = await admit(first)
    await first_is(first)
    later = await admit(second)
    await first_is(second)
    await store.turns.finish(
        running.lease,
        TurnResult(
            request_id="req",
            turn_id=running.lease.turn_id,
            session_id=running.lease.session_id,
            core_id="assistant",
            core_revision="r1",
            outcome="completed",
            text="done",
            durable_result_ref=running.lease.turn_id,
            generation=1,
        ),
        event_seq=2,
    )
    await first_is(first)
    (ended,) = await store.turns.recover(instance="ranking-instance")
    assert ended.turn_id == later.lease.turn_id
    await first_is(second)
    await store.erase_session(operator, second.session_id or "", "a person asked")
    await first_is(second)


@pytest.mark.sqlite_only("SQLite's query plan")
async def test_the_list_walks_the_activity_index_and_reads_only_the_rows_it_shows(
    store: RuntimeStore, operator: PrincipalScope
) -> None:
    """Newest first down ``sessions_last_activity`` to the limit: no sort, no scan of the
    sessions or turns; each shown session's newest turn is one index search."""
    assert isinstance(store, RowStore)
    await store.write(lambda conn: random_history(conn, random.Random(5)))
    where, params = owner_predicate(operator)

    def plan(conn: sqlite3.Connection, after: str, keys: list[object]) -> list[str]:
        sql = f"EXPLAIN QUERY PLAN {_RECENT_SESSIONS.format(where=where, after=after)}"
        return [str(row[3]) for row in conn.execute(sql, [*params, *keys, 50])]

    lines = await store.read(lambda conn: plan(conn, "", []))
    assert lines[0] == "SCAN s USING INDEX sessions_last_activity", lines
    assert not any("TEMP B-TREE" in line for line in lines), lines
    assert [line for line in lines[1:] if line.startswith("SCAN")] == [], lines
    # A later page starts in the index at the cursor's key: a search, not a walk from the top.
    lines = await store.read(lambda conn: plan(conn, _AFTER, ["2026-01-01T00:00:30.000Z", 9]))
    # (SQLite names the row value's leading column; the tie on it is the test below's.)
    assert lines[0] == "SEARCH s USING INDEX sessions_last_activity (last_activity<?)", lines
    assert not any("TEMP B-TREE" in line for line in lines), lines
    assert [line for line in lines[1:] if line.startswith("SCAN")] == [], lines


async def _walk(store: RuntimeStore, scope: PrincipalScope, size: int) -> list[str]:
    """Every page's session ids, one page after another through the cursors."""
    shown: list[str] = []
    cursor: str | None = None
    while True:
        page = await store.inspect.session_page(scope, cursor=cursor, limit=size)
        assert len(page.items) <= size
        shown.extend(a.session.session_id for a in page.items)
        if page.next_cursor is None:
            return shown
        cursor = page.next_cursor


async def test_pages_list_every_session_once_in_the_rankings_order(
    store: RuntimeStore, operator: PrincipalScope
) -> None:
    """Ties in the activity at page boundaries: the row id breaks them, so no page
    repeats or skips a session, at any page size."""
    assert isinstance(store, RowStore)
    await store.write(_seed_timeline)
    await store.write(lambda conn: random_history(conn, random.Random(7), sessions=60))
    every = [row[0] for row in await every_session_ranked(store, operator, 10_000)]
    assert len(every) > 50
    assert len({row[1] for row in await ranked(store, operator, 500)}) < len(every)  # ties
    for size in (1, 2, 3, 7, 50, len(every), len(every) + 1):
        assert await _walk(store, operator, size) == every, size
    last = await store.inspect.session_page(operator, limit=len(every))
    assert last.next_cursor is None


async def test_a_session_active_between_pages_moves_up_and_the_pages_go_on(
    store: RuntimeStore, operator: PrincipalScope
) -> None:
    """Between pages a new session starts, and a turn runs in the last session shown (the
    one the cursor names) and in one not shown yet: the next pages go on from where the
    last one stopped. A cursor of the row id alone started again from the top."""
    assert isinstance(store, RowStore)
    await store.write(lambda conn: random_history(conn, random.Random(11)))
    every = [row[0] for row in await every_session_ranked(store, operator, 10_000)]
    first = await store.inspect.session_page(operator, limit=5)
    shown = [a.session.session_id for a in first.items]
    assert shown == every[:5]
    assert first.next_cursor is not None
    moved = every[20]

    def activity(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO sessions (session_id, created_at) VALUES ('ses_new', ?)", [_at(50)]
        )
        conn.execute(
            "INSERT INTO session_owners (session_id, owner_kind, principal_id, recorded_at) "
            "VALUES ('ses_new', 'operator', 'alice', ?)",
            [_at(50)],
        )
        _insert_turn(conn, "turn_cursor", shown[-1], _at(51), _at(52))
        _insert_turn(conn, "turn_moved", moved, _at(51), _at(53))

    await store.write(activity)
    cursor: str | None = first.next_cursor
    while cursor is not None:
        page = await store.inspect.session_page(operator, cursor=cursor, limit=5)
        shown.extend(a.session.session_id for a in page.items)
        cursor = page.next_cursor
    # Each once, in order; the session that moved up ranks before the cursor now: it is on
    # the first page of a new listing, which starts with the three.
    assert shown == [s for s in every if s != moved]
    assert [a.session.session_id for a in await store.inspect.recent_sessions(operator)][:3] == [
        moved,
        shown[4],
        "ses_new",
    ]


async def test_a_cursor_this_store_did_not_issue_is_refused_typed_and_bounded(
    store: RuntimeStore, operator: PrincipalScope
) -> None:
    """Negative, past 64 bits, a boolean, the wrong shape, text no engine stores, or not
    a cursor at all: ``InvalidValue`` naming no part of it, on both list methods."""
    assert isinstance(store, RowStore)
    await store.write(_seed_timeline)

    def issued(key: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()

    ranked_bad = [
        issued(["2026-01-01T00:00:00.000Z", -1]),
        issued(["2026-01-01T00:00:00.000Z", 2**63]),
        issued(["2026-01-01T00:00:00.000Z", True]),
        issued(["2026-01-01T00:00:00.000Z", "9"]),
        issued(["2026-01-01T00:00:00.000Z", 9, 1]),
        issued([9]),
        issued({"at": "x", "id": 9}),
        issued(["", 9]),
        issued(["a\u0000b", 9]),
        issued(["\ud800", 9]),
        issued(["x" * 65, 9]),
        "W" * 257,
        "",
        "not a cursor!",
        "\ud800",
    ]
    one_bad = [issued([-1]), issued([2**63]), issued([True]), issued(["9"]), issued([1, 2])]
    for cursor in [*ranked_bad, 7, b"W1s5XQ=="]:
        with pytest.raises(InvalidValue) as refused:
            await store.inspect.session_page(operator, cursor=cursor, limit=3)  # type: ignore[arg-type]
        assert str(refused.value) == "cursor is not one this store issued"
    for cursor in one_bad:
        with pytest.raises(InvalidValue) as refused:
            await store.list_sessions(operator, cursor=cursor, limit=3)
        assert str(refused.value) == "cursor is not one this store issued"
    # What the store issued still pages.
    page = await store.inspect.session_page(operator, limit=3)
    assert page.next_cursor is not None
    assert len((await store.inspect.session_page(operator, cursor=page.next_cursor)).items) > 0
