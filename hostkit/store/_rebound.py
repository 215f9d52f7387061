"""What becomes of a session's approvals when its conversation moves to another session.

A conversation answers in the session it is bound to, so once it is bound to
another one (a fresh session, a resumed one) the calls still open in the
previous session can never be answered: they become ``stale`` in the very
transaction that rebinds, with a reason naming the new session. Lists,
panels and channel prompts show that at once, not when someone tries to
answer. A turn of the previous session still running elsewhere may ask again
after the rebinding, or end waiting on an approval the rebinding voided: its
end settles both (``unanswerable``, ``void_if_rebound``).
"""

from __future__ import annotations

import sqlite3

from hostkit.store._approval_rows import OPEN_CALL, void_session
from hostkit.store._approval_values import VOID_STATUSES
from hostkit.store._owned import now

__all__ = ["REBOUND", "rebound_to", "unanswerable", "void_if_rebound", "void_rebound"]

REBOUND = "the conversation was bound to session {session} before this call ran"


def void_rebound(conn: sqlite3.Connection, previous: str, session_id: str) -> int:
    """Void the calls of ``previous`` that have not run (``stale``); how many."""
    return void_session(conn, previous, REBOUND.format(session=session_id), status="stale")


def rebound_to(conn: sqlite3.Connection, session_id: str) -> str | None:
    """The session the conversation owning ``session_id`` is bound to now, when another.

    None for a session still bound, or one no conversation binds (a child's).
    """
    row = conn.execute(
        "SELECT b.session_id FROM session_owners o JOIN conversation_bindings b "
        "ON b.channel = o.channel AND b.conversation_key = o.conversation_key "
        "WHERE o.session_id = ? AND b.session_id <> o.session_id",
        [session_id],
    ).fetchone()
    return None if row is None else str(row[0])


def void_if_rebound(conn: sqlite3.Connection, session_id: str, approval_id: str) -> bool:
    """Void ``approval_id`` (``stale``) when its session's conversation moved on; True then.

    An approval asked by a turn that was already running when the conversation
    moved is not among those the rebinding voided, and nobody could answer it.
    """
    moved = rebound_to(conn, session_id)
    if moved is None:
        return False
    cursor = conn.execute(
        "UPDATE approvals SET status = 'stale', void_reason = ?, "
        "decided_at = COALESCE(decided_at, ?), arguments = '{}' "
        f"WHERE approval_id = ? AND {OPEN_CALL}",
        [REBOUND.format(session=moved), now(conn), approval_id],
    )
    return cursor.rowcount == 1


def unanswerable(
    conn: sqlite3.Connection, session_id: str, approval_id: str, *, still_open: bool
) -> str | None:
    """Why a turn ending ``needs_user`` on ``approval_id`` would wait for nothing, or None.

    ``still_open``: the approval can still run as far as the turn's end read it;
    it may yet be one a moved conversation can never answer. One that is not
    open any more was voided while it was asked (the rebinding).
    """
    if still_open and not void_if_rebound(conn, session_id, approval_id):
        return None
    row = conn.execute(
        "SELECT status, void_reason FROM approvals WHERE approval_id = ?", [approval_id]
    ).fetchone()
    if row is None or row[0] not in VOID_STATUSES:
        return None
    return f"approval {approval_id} is {row[0]}: {row[1]}; nobody can answer it"
