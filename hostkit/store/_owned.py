"""Owner predicates and owned queries, executed in SQL on the database thread.

Every detail, list and write applies its owner predicate inside the SQL
statement that touches the row; nothing fetches a global row by id and checks
ownership afterwards. Conversation, system and delegated scopes name a bounded
set of sessions; operators use a relational predicate over ``session_owners``
(every owned, non-legacy session), never an unbounded bind list.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import time
from collections.abc import Mapping
from typing import Any, Literal

from hostkit.errors import InvalidValue, TurnInProgress
from hostkit.store._checks import MAX_CURSOR
from hostkit.store._dialect import is_postgres
from hostkit.store._json import canonical_json
from hostkit.types import (
    LegacyRepairView,
    MessageRecord,
    Page,
    PrincipalScope,
    SessionRecord,
    TaskRecord,
    is_text,
    new_id,
)

__all__ = [
    "DenialReason",
    "OwnedKind",
    "append_message",
    "create_task",
    "decode_cursor",
    "decode_ranked_cursor",
    "denial_reason",
    "encode_cursor",
    "get_session",
    "get_task",
    "legacy_view",
    "list_messages",
    "list_sessions",
    "list_tasks",
    "next_message_seq",
    "now",
    "owner_predicate",
    "session_authorized",
    "task_record",
    "turn_status",
]

DenialReason = Literal["missing", "unauthorized", "missing_durable_owner", "legacy_repair_required"]

_SESSION_COLUMNS = (
    "s.session_id, s.created_at, s.status, s.title, o.owner_kind, "
    "o.parent_session_id, o.parent_turn_id"
)
# An issued cursor is the base64 of a short JSON array: anything longer is not one.
_MAX_CURSOR_CHARS = 256
# The sort text a two-key cursor holds (an ISO time of the store's clock, with room).
_MAX_SORT_TEXT = 64
_NOT_ISSUED = "cursor is not one this store issued"
_TASK_COLUMNS = "t.task_id, t.session_id, t.kind, t.status, t.detail, t.created_at, t.updated_at"


def turn_status(conn: sqlite3.Connection, turn_id: str, session_id: str) -> str | None:
    """The status of ``turn_id`` in ``session_id`` (None: no such turn there).

    How a running turn's writes beyond its transcript are fenced: a takeover
    ends the turn it took the session from (``lost``) in its own transaction,
    so a holder that paused past its lease reads a status other than ``running``.
    """
    row = conn.execute(
        "SELECT status FROM turns WHERE turn_id = ? AND session_id = ?", [turn_id, session_id]
    ).fetchone()
    return None if row is None else str(row[0])


# The last second ``now`` formatted on SQLite, with its text: the date and time change
# once a second, and formatting them costs more than the rest of a stamp. Replaced whole
# (one assignment), so a thread reads either the old pair or the new one.
_second: tuple[int, str] = (-1, "")


def next_message_seq(session: str) -> str:
    """SQL for the seq of a session's next message, ``session`` its SQL (a column or ``?``).

    After the newest message; in a session with none, after its summary's cutoff: an
    erased session keeps its cutoff (``_erase``), so a Host's cached window sees the
    cutoff move and reads again, and the new messages come after the erased ones.
    """
    return (
        f"COALESCE((SELECT MAX(seq) FROM messages WHERE session_id = {session}), "
        f"(SELECT cutoff_seq FROM context_summaries WHERE session_id = {session}), 0) + 1"
    )


def now(conn: sqlite3.Connection) -> str:
    """The database clock as ISO-8601 UTC with milliseconds.

    SQLite's ``'now'`` is this machine's wall clock read by the process that
    runs the statement, so on SQLite it is read here without a statement; a
    PostgreSQL server's clock is asked for.
    """
    global _second
    if is_postgres(conn):
        return str(conn.execute("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')").fetchone()[0])
    moment = time.time()
    seconds = int(moment)
    millis = min(999, int((moment - seconds) * 1000))
    second = _second
    if second[0] != seconds:
        second = _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
    return f"{second[1]}.{millis:03d}Z"


def owner_predicate(scope: PrincipalScope, owner: str = "o") -> tuple[str, list[Any]]:
    """SQL over ``session_owners AS owner`` that is true exactly for the scope's sessions."""
    if scope.authority == "operator":
        return f"{owner}.owner_kind != 'legacy_local'", []
    allowed = sorted(scope.allowed_session_ids)
    marks = ",".join("?" * len(allowed))
    if scope.authority == "conversation":
        clause = (
            f"{owner}.owner_kind = 'conversation' AND {owner}.channel = ? "
            f"AND {owner}.conversation_key = ?"
        )
        params: list[Any] = [scope.channel, scope.conversation_key]
    else:
        clause = f"{owner}.owner_kind = ? AND {owner}.principal_id = ?"
        params = [scope.authority, scope.principal_id]
    return f"({clause} AND {owner}.session_id IN ({marks}))", [*params, *allowed]


def encode_cursor(*key: int | str) -> str:
    """An opaque cursor holding a page's last sort key: a row id, or ``(sort text, row id)``."""
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


def decode_cursor(cursor: object) -> int | None:
    """The row id a one-key cursor this store issued holds (None for no cursor)."""
    if cursor is None:
        return None
    (row_id,) = _cursor_key(cursor, 1)
    return _row_id(row_id)


def decode_ranked_cursor(cursor: object) -> tuple[str, int]:
    """The ``(sort text, row id)`` a two-key cursor this store issued holds."""
    text, row_id = _cursor_key(cursor, 2)
    if not is_text(text, limit=_MAX_SORT_TEXT):
        raise InvalidValue(_NOT_ISSUED)
    return text, _row_id(row_id)


def _cursor_key(cursor: object, size: int) -> list[Any]:
    # Bounded before it is decoded: a cursor is never echoed, and never costs more to refuse.
    if not isinstance(cursor, str) or not 0 < str.__len__(cursor) <= _MAX_CURSOR_CHARS:
        raise InvalidValue(_NOT_ISSUED)
    try:
        key = json.loads(base64.urlsafe_b64decode(str.encode(cursor)))
    except (ValueError, TypeError) as exc:
        raise InvalidValue(_NOT_ISSUED) from exc
    if not isinstance(key, list) or len(key) != size:
        raise InvalidValue(_NOT_ISSUED)
    return key


def _row_id(value: object) -> int:
    # A row id a 64-bit column holds: SQLite cannot bind a larger int, and True is no id.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CURSOR:
        raise InvalidValue(_NOT_ISSUED)
    return value


def _session(row: sqlite3.Row | tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(*row)


def task_record(row: tuple[Any, ...]) -> TaskRecord:
    task_id, session_id, kind, status, detail, created_at, updated_at = row
    return TaskRecord(task_id, session_id, kind, status, json.loads(detail), created_at, updated_at)


def session_authorized(conn: sqlite3.Connection, scope: PrincipalScope, session_id: str) -> bool:
    where, params = owner_predicate(scope)
    row = conn.execute(
        f"SELECT 1 FROM session_owners o WHERE o.session_id = ? AND {where}",
        [session_id, *params],
    ).fetchone()
    return row is not None


def get_session(
    conn: sqlite3.Connection, scope: PrincipalScope, session_id: str
) -> SessionRecord | None:
    where, params = owner_predicate(scope)
    row = conn.execute(
        f"SELECT {_SESSION_COLUMNS} FROM sessions s "
        f"JOIN session_owners o ON o.session_id = s.session_id "
        f"WHERE s.session_id = ? AND {where}",
        [session_id, *params],
    ).fetchone()
    return _session(row) if row else None


def list_sessions(
    conn: sqlite3.Connection, scope: PrincipalScope, *, cursor: str | None, limit: int
) -> Page[SessionRecord]:
    where, params = owner_predicate(scope)
    before = decode_cursor(cursor)
    rows = conn.execute(
        f"SELECT s.id, {_SESSION_COLUMNS} FROM sessions s "
        f"JOIN session_owners o ON o.session_id = s.session_id "
        f"WHERE {where} AND s.id < ? ORDER BY s.id DESC LIMIT ?",
        [*params, before if before is not None else 2**63 - 1, limit + 1],
    ).fetchall()
    return _page(rows, limit, _session)


def _page(rows: list[Any], limit: int, build: Any) -> Page[Any]:
    more = len(rows) > limit
    rows = rows[:limit]
    items = tuple(build(row[1:]) for row in rows)
    return Page(items, encode_cursor(rows[-1][0]) if more and rows else None)


def list_messages(
    conn: sqlite3.Connection,
    scope: PrincipalScope,
    session_id: str,
    *,
    after_seq: int,
    cursor: str | None,
    limit: int,
) -> Page[MessageRecord] | None:
    """A page of ``session_id``'s messages in seq order, or None when not authorized."""
    if not session_authorized(conn, scope, session_id):
        return None
    if cursor is not None:
        after_seq = decode_cursor(cursor) or 0
    rows = conn.execute(
        "SELECT message_id, session_id, seq, role, content, turn_id, created_at "
        "FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        [session_id, after_seq, limit + 1],
    ).fetchall()
    more = len(rows) > limit
    items = tuple(
        MessageRecord(mid, sid, seq, role, json.loads(content), turn_id, created_at)
        for mid, sid, seq, role, content, turn_id, created_at in rows[:limit]
    )
    return Page(items, encode_cursor(items[-1].seq) if more and items else None)


def append_message(
    conn: sqlite3.Connection,
    scope: PrincipalScope,
    session_id: str,
    *,
    role: str,
    content: Mapping[str, Any],
    turn_id: str | None,
) -> MessageRecord | None:
    """Append to an owned session's transcript; None when the scope does not own it.

    Refused with ``TurnInProgress`` while a turn holds the session's lease:
    the transcript is written by one turn at a time, across processes.
    """
    where, params = owner_predicate(scope)
    held = conn.execute(
        "SELECT l.turn_id FROM session_leases l JOIN session_owners o "
        "ON o.session_id = l.session_id WHERE l.session_id = ? AND l.owner IS NOT NULL "
        f"AND {where}",
        [session_id, *params],
    ).fetchone()
    if held is not None:
        raise TurnInProgress(str(held[0]))
    message_id = new_id("msg")
    created_at = now(conn)
    body = canonical_json(content)
    cursor = conn.execute(
        "INSERT INTO messages (message_id, session_id, seq, role, content, turn_id, created_at) "
        f"SELECT ?, o.session_id, {next_message_seq('o.session_id')}, ?, ?, ?, ? "
        f"FROM session_owners o WHERE o.session_id = ? AND {where}",
        [message_id, role, body, turn_id, created_at, session_id, *params],
    )
    if cursor.rowcount != 1:
        return None
    seq = conn.execute("SELECT seq FROM messages WHERE message_id = ?", [message_id]).fetchone()[0]
    return MessageRecord(message_id, session_id, seq, role, content, turn_id, created_at)


def get_task(conn: sqlite3.Connection, scope: PrincipalScope, task_id: str) -> TaskRecord | None:
    where, params = owner_predicate(scope)
    row = conn.execute(
        f"SELECT {_TASK_COLUMNS} FROM tasks t "
        f"JOIN session_owners o ON o.session_id = t.session_id WHERE t.task_id = ? AND {where}",
        [task_id, *params],
    ).fetchone()
    return task_record(row) if row else None


def list_tasks(
    conn: sqlite3.Connection,
    scope: PrincipalScope,
    *,
    session_id: str | None,
    cursor: str | None,
    limit: int,
) -> Page[TaskRecord]:
    where, params = owner_predicate(scope)
    before = decode_cursor(cursor)
    session_clause = "AND t.session_id = ?" if session_id is not None else ""
    session_params = [session_id] if session_id is not None else []
    rows = conn.execute(
        f"SELECT t.id, {_TASK_COLUMNS} FROM tasks t "
        f"JOIN session_owners o ON o.session_id = t.session_id "
        f"WHERE {where} {session_clause} AND t.id < ? ORDER BY t.id DESC LIMIT ?",
        [*params, *session_params, before if before is not None else 2**63 - 1, limit + 1],
    ).fetchall()
    return _page(rows, limit, task_record)


def create_task(
    conn: sqlite3.Connection,
    scope: PrincipalScope,
    session_id: str,
    *,
    kind: str,
    detail: Mapping[str, Any],
) -> TaskRecord | None:
    where, params = owner_predicate(scope)
    task_id = new_id("task")
    created_at = now(conn)
    body = canonical_json(detail)
    cursor = conn.execute(
        "INSERT INTO tasks (task_id, session_id, kind, status, detail, created_at, updated_at) "
        f"SELECT ?, o.session_id, ?, 'pending', ?, ?, ? FROM session_owners o "
        f"WHERE o.session_id = ? AND {where}",
        [task_id, kind, body, created_at, created_at, session_id, *params],
    )
    if cursor.rowcount != 1:
        return None
    return TaskRecord(task_id, session_id, kind, "pending", detail, created_at, created_at)


OwnedKind = Literal["session", "task", "turn"]


def denial_reason(conn: sqlite3.Connection, kind: OwnedKind, object_id: str) -> DenialReason:
    """Why an exact owned lookup found nothing: recorded in the Host-only audit only."""
    if kind in ("task", "turn"):
        table = "tasks" if kind == "task" else "turns"
        row = conn.execute(
            f"SELECT session_id FROM {table} WHERE {kind}_id = ?", [object_id]
        ).fetchone()
        if row is None:
            return "missing"
        session_id = row[0]
    else:
        session_id = object_id
        if (
            conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", [session_id]).fetchone()
            is None
        ):
            return "missing"
    owner = conn.execute(
        "SELECT owner_kind FROM session_owners WHERE session_id = ?", [session_id]
    ).fetchone()
    if owner is None:
        return "missing_durable_owner"
    if owner[0] == "legacy_local":
        return "legacy_repair_required"
    return "unauthorized"


def legacy_view(
    raw: sqlite3.Connection, kind: OwnedKind, object_id: str
) -> LegacyRepairView | None:
    reason = denial_reason(raw, kind, object_id)
    if reason not in ("legacy_repair_required", "missing_durable_owner"):
        return None
    status: Literal["legacy_local", "missing"] = (
        "legacy_local" if reason == "legacy_repair_required" else "missing"
    )
    task: TaskRecord | None = None
    session_id = object_id
    if kind == "task":
        row = raw.execute(
            "SELECT task_id, session_id, kind, status, detail, created_at, updated_at "
            "FROM tasks t WHERE task_id = ?",
            [object_id],
        ).fetchone()
        task = task_record(row)
        session_id = task.session_id
    row = raw.execute(
        "SELECT session_id, created_at, status, title FROM sessions WHERE session_id = ?",
        [session_id],
    ).fetchone()
    session = (
        SessionRecord(row[0], row[1], row[2], row[3], "legacy_local") if row is not None else None
    )
    return LegacyRepairView(session=session, task=task, owner_status=status)
