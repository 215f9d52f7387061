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
    "mark_indeterminate",
    "open_approval",
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


def open_approval(conn: sqlite3.Connection, turn_id: str) -> OpenApproval | None:
    """The open approval ``turn_id`` paused on (a turn asks one at a time), if any."""
    row = conn.execute(
        f"SELECT approval_id, call_id, status FROM approvals WHERE turn_id = ? AND {_OPEN} "
        "ORDER BY id DESC LIMIT 1",
        [turn_id],
    ).fetchone()
    return None if row is None else OpenApproval(row[0], row[1], row[2])


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
    """A call ``turn_id`` claimed whose result was never recorded (or is unknown)."""

    approval_id: str
    session_id: str
    asked_in: str
    call_id: str
    status: str
    answered: bool


def unsettled_claims(conn: sqlite3.Connection, turn_id: str) -> list[Unsettled]:
    """The calls ``turn_id`` claimed (approved or denied) with no known result."""
    rows = conn.execute(
        "SELECT approval_id, session_id, turn_id, call_id, status FROM approvals "
        "WHERE continuation_turn_id = ? AND status IN ('executed', 'denied')",
        [turn_id],
    ).fetchall()
    found = []
    for approval_id, session_id, asked_in, call_id, status in rows:
        result = _recorded_result(conn, session_id, (asked_in, turn_id), call_id)
        if result is None or result.startswith("[indeterminate]"):
            found.append(
                Unsettled(approval_id, session_id, asked_in, call_id, status, result is not None)
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


def _recorded_result(
    conn: sqlite3.Connection, session_id: str, turns: tuple[str, str], call_id: str
) -> str | None:
    """The text of the tool message answering ``call_id`` in either turn, if one exists."""
    for (content,) in conn.execute(
        "SELECT content FROM messages WHERE session_id = ? AND turn_id IN (?, ?) "
        "AND role = 'tool' ORDER BY seq DESC",
        [session_id, *turns],
    ):
        message = json.loads(content)
        if message.get("tool_call_id") == call_id:
            return str(message.get("text") or "")
    return None


def call_name(conn: sqlite3.Connection, session_id: str, turn_id: str, call_id: str) -> str:
    """The tool name the model used for ``call_id`` (from the asking turn's step)."""
    for (content,) in conn.execute(
        "SELECT content FROM messages WHERE session_id = ? AND turn_id = ? "
        "AND role = 'assistant' ORDER BY seq DESC",
        [session_id, turn_id],
    ):
        for call in json.loads(content).get("tool_calls") or []:
            if call.get("call_id") == call_id:
                return str(call.get("name") or "")
    return ""
