"""Approval revocations: ends of "approve for session" answers that every Host sees.

Each Host keeps its session answers in memory (a Host's shutdown forgets
them), so an end decided in one process (an operator's revocation, a
conversation moved to another session, a core's revision moved) is a row
here: every Host reads the rows after the last one it saw before it uses a
cached answer. Rows are few (people and promotions make them) and append-only.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from hostkit.errors import InvalidValue, bounded

__all__ = [
    "MAX_REVOCATIONS_READ",
    "ApprovalRevocation",
    "RevocationPage",
    "insert_revocation",
    "latest_revocation",
    "revocations_after",
]

# Rows one read returns; a Host further behind forgets every cached answer instead.
MAX_REVOCATIONS_READ = 500
MAX_REVOCATION_REASON = 300


@dataclass(frozen=True, slots=True)
class ApprovalRevocation:
    """One end of cached session approvals: those matching every field that is set.

    ``session_id`` with ``principal_id`` None: every principal's answers in
    the session. ``core_id`` alone: every answer given for the core.
    """

    id: int
    session_id: str | None
    principal_id: str | None
    core_id: str | None
    actor: str
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class RevocationPage:
    """What a Host has not seen yet: rows after its cursor, and the cursor after them.

    ``overflow``: more rows than one read returns were recorded since the
    cursor; the reader forgets every cached answer (it is asked again).
    """

    cursor: int
    revocations: tuple[ApprovalRevocation, ...]
    overflow: bool = False


def insert_revocation(
    raw: sqlite3.Connection,
    *,
    actor: str,
    reason: str,
    session_id: str | None = None,
    principal_id: str | None = None,
    core_id: str | None = None,
) -> ApprovalRevocation:
    """Append one revocation inside the caller's write transaction."""
    if session_id is None and core_id is None:
        raise InvalidValue("a revocation names a session or a core")
    text = bounded(reason, MAX_REVOCATION_REASON)
    at = time.time()
    # The id is the last one plus one, read in this transaction, not a sequence's next
    # value: a sequence hands ids out at insert, so on PostgreSQL a reader could see id
    # 6 committed before id 5 and skip 5 for ever. Two writers that read the same last
    # id conflict (SQLite has one writer; PostgreSQL fails one as a serialisation race
    # and runs it again), so ids are in commit order.
    revocation_id = latest_revocation(raw) + 1
    raw.execute(
        "INSERT INTO approval_revocations (id, session_id, principal_id, core_id, actor, reason, "
        "at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [revocation_id, session_id, principal_id, core_id, actor, text, at],
    )
    return ApprovalRevocation(revocation_id, session_id, principal_id, core_id, actor, text, at)


def latest_revocation(raw: sqlite3.Connection) -> int:
    """The id of the newest revocation (0 for none): a new reader starts after it."""
    return int(raw.execute("SELECT COALESCE(MAX(id), 0) FROM approval_revocations").fetchone()[0])


def revocations_after(raw: sqlite3.Connection, cursor: int) -> RevocationPage:
    """The revocations recorded after ``cursor``, oldest first, bounded."""
    rows = raw.execute(
        "SELECT id, session_id, principal_id, core_id, actor, reason, at "
        "FROM approval_revocations WHERE id > ? ORDER BY id LIMIT ?",
        [cursor, MAX_REVOCATIONS_READ + 1],
    ).fetchall()
    if len(rows) > MAX_REVOCATIONS_READ:
        return RevocationPage(latest_revocation(raw), (), overflow=True)
    revocations = tuple(
        ApprovalRevocation(
            int(row[0]), row[1], row[2], row[3], str(row[4]), str(row[5]), float(row[6])
        )
        for row in rows
    )
    return RevocationPage(revocations[-1].id if revocations else cursor, revocations)
