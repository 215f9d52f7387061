"""The SQL that settles a turn's approvals when the turn ends without its Host.

Shared by the approvals group and the turn records (recovery, takeover,
abandon and explicit cancel all end a turn in one transaction; what becomes
of its approvals commits in that same transaction). An approval is durable
from the moment it is asked, so a turn that stopped while a person decided
still has its ``pending`` row: the turn pauses ``needs_user`` on it. A
continuation turn that claimed a call and stopped before the call's result
was recorded leaves an approval that may have run: ``indeterminate``, never
run again.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from hostkit.store._owned import now

__all__ = [
    "CANCELLED_WHILE_ASKED",
    "MAY_HAVE_RUN",
    "OpenApproval",
    "Unsettled",
    "call_name",
    "has_open_calls",
    "mark_indeterminate",
    "open_approval",
    "supersede_open",
    "unsettled_claims",
    "void_open",
]

CANCELLED_WHILE_ASKED = "the turn was cancelled while its approval was asked: the call never ran"
MAY_HAVE_RUN = (
    "turn {turn} claimed the call and stopped before its result was recorded: it may have "
    "run, so it is never run again"
)


@dataclass(frozen=True, slots=True)
class OpenApproval:
    """A turn's approval that can still run: ``pending``, or answered and not yet claimed."""

    approval_id: str
    call_id: str
    status: str


_OPEN = (
    "(status = 'pending' OR (status IN ('approved', 'denied') AND continuation_turn_id IS NULL))"
)


def has_open_calls(conn: sqlite3.Connection, session_id: str) -> bool:
    """Whether the session has a call that can still run (what a new turn supersedes)."""
    sql = f"SELECT 1 FROM approvals WHERE session_id = ? AND {_OPEN} LIMIT 1"
    return conn.execute(sql, [session_id]).fetchone() is not None


def supersede_open(conn: sqlite3.Connection, session_id: str, reason: str) -> int:
    """Void every call of the session that has not run (its arguments too); how many."""
    cursor = conn.execute(
        "UPDATE approvals SET status = 'superseded', void_reason = ?, "
        "decided_at = COALESCE(decided_at, ?), arguments = '{}' "
        f"WHERE session_id = ? AND {_OPEN}",
        [reason, now(conn), session_id],
    )
    return cursor.rowcount


def _rows(conn: sqlite3.Connection, sql: str, params: list[str]) -> list[sqlite3.Row]:
    """Rows addressable by column name (this cursor only)."""
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor.execute(sql, params).fetchall()


def open_approval(conn: sqlite3.Connection, turn_id: str) -> OpenApproval | None:
    """The open approval ``turn_id`` paused on (a turn asks one at a time), if any."""
    rows = _rows(
        conn,
        f"SELECT approval_id, call_id, status FROM approvals WHERE turn_id = ? AND {_OPEN} "
        "ORDER BY id DESC LIMIT 1",
        [turn_id],
    )
    if not rows:
        return None
    return OpenApproval(rows[0]["approval_id"], rows[0]["call_id"], rows[0]["status"])


def void_open(conn: sqlite3.Connection, approval_id: str, reason: str) -> bool:
    """Void an open approval (``superseded``, with ``reason``, arguments dropped).

    True when it was open.
    """
    cursor = conn.execute(
        "UPDATE approvals SET status = 'superseded', void_reason = ?, arguments = '{}', "
        f"decided_at = COALESCE(decided_at, ?) WHERE approval_id = ? AND {_OPEN}",
        [reason, now(conn), approval_id],
    )
    return cursor.rowcount == 1


@dataclass(frozen=True, slots=True)
class Unsettled:
    """A call ``turn_id`` claimed whose result was never recorded, or recorded as unknown
    (``answered``: a tool message already says so)."""

    approval_id: str
    session_id: str
    asked_in: str
    call_id: str
    status: str
    answered: bool


def unsettled_claims(conn: sqlite3.Connection, turn_id: str) -> list[Unsettled]:
    """The calls ``turn_id`` claimed (approved or denied) with no known result."""
    rows = _rows(
        conn,
        "SELECT approval_id, session_id, turn_id, call_id, status FROM approvals "
        "WHERE continuation_turn_id = ? AND status IN ('executed', 'denied')",
        [turn_id],
    )
    found = []
    for row in rows:
        asked_in, call_id, session_id = row["turn_id"], row["call_id"], row["session_id"]
        turns = (asked_in, turn_id)
        if _known_outcome(conn, turns, call_id):
            continue
        answered = _has_result_message(conn, session_id, turns, call_id)
        found.append(
            Unsettled(row["approval_id"], session_id, asked_in, call_id, row["status"], answered)
        )
    return found


def mark_indeterminate(conn: sqlite3.Connection, approval_id: str, turn_id: str) -> bool:
    """An ``executed`` approval whose call may have run: never run again, with the reason."""
    cursor = conn.execute(
        "UPDATE approvals SET status = 'indeterminate', void_reason = ?, arguments = '{}' "
        "WHERE approval_id = ? AND status = 'executed'",
        [MAY_HAVE_RUN.format(turn=turn_id), approval_id],
    )
    return cursor.rowcount == 1


def _known_outcome(conn: sqlite3.Connection, turns: tuple[str, str], call_id: str) -> bool:
    """Whether either turn recorded the call's result with a known outcome.

    Read from the typed ``effect.completed`` events, never from the result's
    text (a tool's own output could say anything).
    """
    for row in _rows(
        conn,
        "SELECT detail FROM turn_events WHERE turn_id IN (?, ?) AND kind = 'effect.completed'",
        list(turns),
    ):
        event = json.loads(row["detail"])
        if event.get("call_id") == call_id and event.get("status") != "indeterminate":
            return True
    return False


def _has_result_message(
    conn: sqlite3.Connection, session_id: str, turns: tuple[str, str], call_id: str
) -> bool:
    """Whether a tool message in either turn answers ``call_id`` already."""
    for row in _rows(
        conn,
        "SELECT content FROM messages WHERE session_id = ? AND turn_id IN (?, ?) AND role = 'tool'",
        [session_id, *turns],
    ):
        if json.loads(row["content"]).get("tool_call_id") == call_id:
            return True
    return False


def call_name(conn: sqlite3.Connection, session_id: str, turn_id: str, call_id: str) -> str:
    """The tool name the model used for ``call_id`` (from the asking turn's step)."""
    for row in _rows(
        conn,
        "SELECT content FROM messages WHERE session_id = ? AND turn_id = ? "
        "AND role = 'assistant' ORDER BY seq DESC",
        [session_id, turn_id],
    ):
        for call in json.loads(row["content"]).get("tool_calls") or []:
            if call.get("call_id") == call_id:
                return str(call.get("name") or "")
    return ""
