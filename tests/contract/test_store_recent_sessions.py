"""``inspect.recent_sessions``: most recent activity first, ties newest session first.

``hostkit sessions`` and every view that defaults to the latest session
(``context``, ``budget``, ``effects audit``, ``latest_session``) read it. The
ranking is the newest turn's end, or its start while it runs, else the
session's creation; a long turn that ended after many short ones of other
sessions started ranks by its end. Runs on SQLite and PostgreSQL (the store
matrix), against the statement that ranks every session.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from hostkit.authority import AuthorityResolver
from hostkit.store import INTERRUPTED, RowStore, RuntimeStore
from hostkit.store._owned import owner_predicate
from hostkit.types import PrincipalScope
from tests.support import facts

pytestmark = pytest.mark.anyio

# The statement recent_sessions ran before it read candidates only: every session ranked.
_EVERY_SESSION = (
    "SELECT s.session_id, COALESCE(lt.ended_at, lt.started_at, s.created_at) AS last_activity, "
    "lt.core_id AS agent, lt.status AS last_outcome, "
    "(SELECT COUNT(*) FROM turns c WHERE c.session_id = s.session_id) AS turns "
    "FROM sessions s JOIN session_owners o ON o.session_id = s.session_id "
    "LEFT JOIN turns lt ON lt.id = "
    "(SELECT MAX(n.id) FROM turns n WHERE n.session_id = s.session_id) "
    "WHERE {where} ORDER BY last_activity DESC, s.id DESC LIMIT ?"
)

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


async def _every_session_ranked(
    store: RuntimeStore, scope: PrincipalScope, limit: int
) -> list[tuple[Any, ...]]:
    assert isinstance(store, RowStore)
    where, params = owner_predicate(scope)
    found = await store.read(
        lambda conn: conn.execute(_EVERY_SESSION.format(where=where), [*params, limit]).fetchall()
    )
    return [tuple(row) for row in found]


def recorded(outcome: str | None) -> str | None:
    return "running" if outcome == INTERRUPTED else outcome


async def test_the_ranking_is_the_one_every_session_ranked_gave(
    store: RuntimeStore, authority: AuthorityResolver, operator: PrincipalScope
) -> None:
    assert isinstance(store, RowStore)
    await store.write(_seed_timeline)
    for limit in (*range(1, len(_TIMELINE) + 2), 50):
        shown = await store.inspect.recent_sessions(operator, limit=limit)
        # ses_i's turn was written running with no lease (the lease rule would end it): the
        # views show it interrupted where the old statement gave the recorded status.
        got = [
            (a.session.session_id, a.last_activity, a.agent, recorded(a.last_outcome), a.turns)
            for a in shown
        ]
        assert got == await _every_session_ranked(store, operator, limit), limit
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
            row[0] for row in await _every_session_ranked(store, chat, limit)
        ]
    (newest,) = await store.inspect.recent_sessions(operator, limit=1)
    assert newest.session.session_id == session_id
