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
from typing import Literal

from hostkit.store._owned import now

__all__ = [
    "CANCELLED_WHILE_ASKED",
    "MAY_HAVE_RUN",
    "OPEN_CALL",
    "OpenApproval",
    "Unsettled",
    "call_name",
    "ending_approvals",
    "has_open_calls",
    "mark_indeterminate",
    "open_approval",
    "open_call",
    "supersede_open",
    "void_open",
    "void_session",
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


def open_call(table: str = "") -> str:
    """SQL true for an approval whose call can still run: pending, or answered and not yet
    claimed by a continuation turn (``table``: the alias its columns are qualified with)."""
    prefix = f"{table}." if table else ""
    return (
        f"({prefix}status = 'pending' OR ({prefix}status IN ('approved', 'denied') "
        f"AND {prefix}continuation_turn_id IS NULL))"
    )


# An approval whose call can still run (unqualified: approvals' own columns).
OPEN_CALL = open_call()


def has_open_calls(conn: sqlite3.Connection, session_id: str) -> bool:
    """Whether the session has a call that can still run (what a new turn supersedes)."""
    sql = f"SELECT 1 FROM approvals WHERE session_id = ? AND {OPEN_CALL} LIMIT 1"
    return conn.execute(sql, [session_id]).fetchone() is not None


def supersede_open(conn: sqlite3.Connection, session_id: str, reason: str) -> int:
    """Void every call of the session that has not run (its arguments too); how many."""
    return void_session(conn, session_id, reason, status="superseded")


def void_session(
    conn: sqlite3.Connection,
    session_id: str,
    reason: str,
    *,
    status: Literal["superseded", "stale"],
) -> int:
    """Make every call of the session that has not run ``status`` with ``reason``; how many.

    ``superseded``: a newer turn ran there; ``stale``: its conversation moved to
    another session. Either way nobody can answer them any more, so they say so now
    rather than when someone tries.
    """
    cursor = conn.execute(
        "UPDATE approvals SET status = ?, void_reason = ?, "
        "decided_at = COALESCE(decided_at, ?), arguments = '{}' "
        f"WHERE session_id = ? AND {OPEN_CALL}",
        [status, reason, now(conn), session_id],
    )
    return cursor.rowcount


def _rows(conn: sqlite3.Connection, sql: str, params: list[object]) -> list[sqlite3.Row]:
    """Rows addressable by column name (this cursor only)."""
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor.execute(sql, params).fetchall()


def open_approval(conn: sqlite3.Connection, turn_id: str) -> OpenApproval | None:
    """The open approval ``turn_id`` paused on (a turn asks one at a time), if any."""
    rows = _rows(
        conn,
        f"SELECT approval_id, call_id, status FROM approvals WHERE turn_id = ? AND {OPEN_CALL} "
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
        f"decided_at = COALESCE(decided_at, ?) WHERE approval_id = ? AND {OPEN_CALL}",
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


def ending_approvals(
    conn: sqlite3.Connection, turn_id: str
) -> tuple[list[Unsettled], OpenApproval | None]:
    """What a turn's end settles: the calls it claimed with no known result, and the
    approval it is paused on (``open_approval``), in one statement.

    Every turn ends through here, and most have neither: one indexed read (each
    statement is a hand-over of the interpreter lock between the writer's thread
    and a busy event loop). Settling the claims never opens or closes an approval
    (a claimed call is no longer open), so reading both first is reading each when
    it is needed.
    """
    rows = _rows(
        conn,
        "SELECT approval_id, session_id, turn_id, call_id, effect, status, "
        "continuation_turn_id FROM approvals WHERE (continuation_turn_id = ? AND "
        f"status IN ('executed', 'denied')) OR (turn_id = ? AND {OPEN_CALL}) ORDER BY id",
        [turn_id, turn_id],
    )
    claimed = [row for row in rows if row["continuation_turn_id"] == turn_id]
    asked = [row for row in rows if row["continuation_turn_id"] != turn_id]
    paused = (
        OpenApproval(asked[-1]["approval_id"], asked[-1]["call_id"], asked[-1]["status"])
        if asked
        else None
    )
    return _unsettled(conn, turn_id, claimed), paused


def _unsettled(conn: sqlite3.Connection, turn_id: str, rows: list[sqlite3.Row]) -> list[Unsettled]:
    """Of the calls ``turn_id`` claimed (approved or denied), those with no known result.

    Call ids are unique per model step only (a server that sends none gets
    ``call_0`` in every response), so an approved call's result is found by its
    approval, never by its call id across turns: another step's ``call_0`` is
    not its result (see ``_claimed_result`` and ``_inline_result``).
    """
    found = []
    for row in rows:
        if row["turn_id"] == turn_id:
            known, answered = _inline_result(conn, row)
        else:
            known, answered = _claimed_result(conn, row, turn_id)
        if known:
            continue
        found.append(
            Unsettled(
                row["approval_id"],
                row["session_id"],
                row["turn_id"],
                row["call_id"],
                row["status"],
                answered,
            )
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


def _claimed_result(
    conn: sqlite3.Connection, approval: sqlite3.Row, turn_id: str
) -> tuple[bool, bool]:
    """(known, answered) for a call a continuation ``turn_id`` claimed from an earlier turn.

    Its result is the ``effect.completed`` event tagged with the approval's id,
    read from the typed event, never from the result's text (a tool's own
    output could say anything). Only the continuation answers the call: the
    turn that asked paused on it, and the continuation runs it before any
    step of its own, so a tool message of the continuation with its call id is
    its answer; the asking turn's earlier steps may reuse the id.
    """
    status = _tagged_status(conn, turn_id, approval["approval_id"])
    if status is not None and status != "indeterminate":
        return True, True
    answered = status is not None or _answers(
        conn, approval["session_id"], turn_id, approval["call_id"], after=0
    )
    return False, answered


def _inline_result(conn: sqlite3.Connection, approval: sqlite3.Row) -> tuple[bool, bool]:
    """(known, answered) for a call answered inside the turn that asked it.

    Tagged with the approval's id, its result is that event. Untagged, it is
    bounded to the turn's last step: calls run one at a time and each result
    is recorded before the next call starts, so only the turn's latest ask can
    lack a result, and only while its call is in the last step (the last
    assistant message, written with the last ``provider.completed`` event);
    earlier steps reusing the call id are never its result.
    """
    turn_id, call_id = approval["turn_id"], approval["call_id"]
    status = _tagged_status(conn, turn_id, approval["approval_id"])
    if status is not None:
        return status != "indeterminate", True
    latest = _rows(
        conn,
        "SELECT approval_id FROM approvals WHERE turn_id = ? ORDER BY id DESC LIMIT 1",
        [turn_id],
    )
    if latest[0]["approval_id"] != approval["approval_id"]:
        return True, True
    step = _last_step(conn, approval["session_id"], turn_id)
    if step is None or not step.has(call_id, approval["effect"]):
        return True, True
    known = any(
        event.get("call_id") == call_id
        and "approval_id" not in event
        and event.get("status") != "indeterminate"
        for event in _events(conn, turn_id, after=step.event_seq)
    )
    answered = _answers(conn, approval["session_id"], turn_id, call_id, after=step.message_seq)
    return known, answered


@dataclass(frozen=True, slots=True)
class _Step:
    """A turn's last model step: its assistant message and ``provider.completed`` event seqs,
    and its calls as (call id, effect; None when the event predates ``effects_called``)."""

    message_seq: int
    event_seq: int
    calls: tuple[tuple[object, object], ...]

    def has(self, call_id: str, effect: str) -> bool:
        """Whether the step called ``effect`` as ``call_id``."""
        return any(id_ == call_id and eff in (None, effect) for id_, eff in self.calls)


def _last_step(conn: sqlite3.Connection, session_id: str, turn_id: str) -> _Step | None:
    """The turn's last step; its message and event are written in one transaction."""
    messages = _rows(
        conn,
        "SELECT seq, content FROM messages WHERE session_id = ? AND turn_id = ? "
        "AND role = 'assistant' ORDER BY seq DESC LIMIT 1",
        [session_id, turn_id],
    )
    events = _rows(
        conn,
        "SELECT seq, detail FROM turn_events WHERE turn_id = ? AND kind = 'provider.completed' "
        "ORDER BY seq DESC LIMIT 1",
        [turn_id],
    )
    if not messages or not events:
        return None
    calls = _json_object(messages[0]["content"]).get("tool_calls")
    effects = _json_object(events[0]["detail"]).get("effects_called")
    ids = (
        [call.get("call_id") for call in calls if isinstance(call, dict)]
        if isinstance(calls, list)
        else []
    )
    named = effects if isinstance(effects, list) and len(effects) == len(ids) else [None] * len(ids)
    return _Step(
        int(messages[0]["seq"]), int(events[0]["seq"]), tuple(zip(ids, named, strict=True))
    )


def _tagged_status(conn: sqlite3.Connection, turn_id: str, approval_id: str) -> str | None:
    """The status of the ``effect.completed`` event ``turn_id`` tagged with ``approval_id``."""
    status = None
    for event in _events(conn, turn_id, after=0):
        if event.get("approval_id") == approval_id:
            status = str(event.get("status"))
    return status


def _events(conn: sqlite3.Connection, turn_id: str, *, after: int) -> list[dict[str, object]]:
    """The details of the turn's ``effect.completed`` events after event seq ``after``."""
    rows = _rows(
        conn,
        "SELECT detail FROM turn_events WHERE turn_id = ? AND kind = 'effect.completed' "
        "AND seq > ? ORDER BY seq",
        [turn_id, after],
    )
    return [_json_object(row["detail"]) for row in rows]


def _answers(
    conn: sqlite3.Connection, session_id: str, turn_id: str, call_id: str, *, after: int
) -> bool:
    """Whether a tool message of the turn after message seq ``after`` answers ``call_id``."""
    for row in _rows(
        conn,
        "SELECT content FROM messages WHERE session_id = ? AND turn_id = ? AND role = 'tool' "
        "AND seq > ?",
        [session_id, turn_id, after],
    ):
        if _json_object(row["content"]).get("tool_call_id") == call_id:
            return True
    return False


def _json_object(text: str | None) -> dict[str, object]:
    """A stored JSON object; anything unreadable reads as empty (no result, no call)."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


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
