"""The committed summary and the compaction lease rows (schema v5), as store functions.

Each function runs inside one transaction on the store's database thread
(``RuntimeStore.write``/``read``), so "summary, cutoff, lease release and
cooldown together" is literally one transaction. ``lease_id`` is the fencing
token: only the holder of the lease id on the row may commit.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Literal

from hostkit.store import now

__all__ = [
    "CommittedSummary",
    "LeaseTake",
    "commit_summary",
    "cutoff_of",
    "end_lease",
    "poll",
    "read_summary",
    "release_lease",
    "take_lease",
    "upsert_summary",
]


@dataclass(frozen=True, slots=True)
class CommittedSummary:
    """A session's committed summary: it stands for every message with ``seq <= cutoff_seq``."""

    session_id: str
    summary: str
    cutoff_seq: int
    summarized_messages: int
    summarizer: str
    created_at: str


def read_summary(conn: sqlite3.Connection, session_id: str) -> CommittedSummary | None:
    """The session's committed summary, if any."""
    row = conn.execute(
        "SELECT summary, cutoff_seq, summarized_messages, summarizer, created_at "
        "FROM context_summaries WHERE session_id = ?",
        [session_id],
    ).fetchone()
    if row is None:
        return None
    return CommittedSummary(session_id, row[0], int(row[1]), int(row[2]), row[3], row[4])


def cutoff_of(summary: CommittedSummary | None) -> int | None:
    """The seq a summary covers up to; None when there is no summary."""
    return summary.cutoff_seq if summary is not None else None


@dataclass(frozen=True, slots=True)
class LeaseTake:
    """What ``take_lease`` found: ``held`` names the holder's lease id and owner text."""

    kind: Literal["taken", "reread", "cooldown", "held"]
    summary: CommittedSummary | None
    holder_lease: str | None = None
    holder_owner: str | None = None


def take_lease(
    conn: sqlite3.Connection,
    *,
    session_id: str,
    expected_cutoff: int | None,
    lease_id: str,
    owner: str,
    now_epoch: float,
    expires_at: float,
    force: bool,
    dead_lease: str | None,
) -> LeaseTake:
    """Revalidate the snapshot and take the lease in one transaction.

    The lease is free, expired, or held under ``dead_lease`` (a lease id whose
    owner the caller proved dead) -> taken. A cooldown refuses unless ``force``.
    """
    summary = read_summary(conn, session_id)
    if cutoff_of(summary) != expected_cutoff:
        return LeaseTake("reread", summary)
    row = conn.execute(
        "SELECT lease_id, owner, expires_at, cooldown_until FROM context_leases "
        "WHERE session_id = ?",
        [session_id],
    ).fetchone()
    if row is not None:
        held, held_owner, expires, cooldown = row
        if cooldown is not None and cooldown > now_epoch and not force:
            return LeaseTake("cooldown", summary)
        live = expires is not None and expires >= now_epoch
        if held is not None and live and held != dead_lease:
            return LeaseTake("held", summary, held, held_owner)
    conn.execute(
        "INSERT INTO context_leases (session_id, lease_id, owner, expires_at, cooldown_until, "
        "updated_at) VALUES (?, ?, ?, ?, NULL, ?) ON CONFLICT (session_id) DO UPDATE SET "
        "lease_id = excluded.lease_id, owner = excluded.owner, "
        "expires_at = excluded.expires_at, updated_at = excluded.updated_at",
        [session_id, lease_id, owner, expires_at, now(conn)],
    )
    return LeaseTake("taken", summary)


def poll(conn: sqlite3.Connection, session_id: str) -> tuple[CommittedSummary | None, str | None]:
    """(committed summary, current lease id) in one snapshot."""
    row = conn.execute(
        "SELECT lease_id FROM context_leases WHERE session_id = ?", [session_id]
    ).fetchone()
    return read_summary(conn, session_id), (row[0] if row else None)


def upsert_summary(conn: sqlite3.Connection, summary: CommittedSummary) -> None:
    """Replace the session's summary and cutoff (part of ``commit_summary``)."""
    conn.execute(
        "INSERT INTO context_summaries (session_id, summary, cutoff_seq, summarized_messages, "
        "summarizer, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE "
        "SET summary = excluded.summary, cutoff_seq = excluded.cutoff_seq, "
        "summarized_messages = excluded.summarized_messages, summarizer = excluded.summarizer, "
        "created_at = excluded.created_at",
        [
            summary.session_id,
            summary.summary,
            summary.cutoff_seq,
            summary.summarized_messages,
            summary.summarizer,
            summary.created_at,
        ],
    )


def end_lease(conn: sqlite3.Connection, session_id: str, cooldown_until: float, at: str) -> None:
    """Free the lease and start the cooldown (part of ``commit_summary``)."""
    conn.execute(
        "UPDATE context_leases SET lease_id = NULL, owner = NULL, expires_at = NULL, "
        "cooldown_until = ?, updated_at = ? WHERE session_id = ?",
        [cooldown_until, at, session_id],
    )


def commit_summary(
    conn: sqlite3.Connection,
    *,
    session_id: str,
    lease_id: str,
    text: str,
    cutoff_seq: int,
    added: int,
    summarizer: str,
    cooldown_until: float,
) -> CommittedSummary | None:
    """Summary, cutoff, lease release and cooldown together; None if the lease is no longer ours."""
    row = conn.execute(
        "SELECT lease_id FROM context_leases WHERE session_id = ?", [session_id]
    ).fetchone()
    if row is None or row[0] != lease_id:
        return None
    previous = read_summary(conn, session_id)
    at = now(conn)
    summary = CommittedSummary(
        session_id=session_id,
        summary=text,
        cutoff_seq=cutoff_seq,
        summarized_messages=(previous.summarized_messages if previous else 0) + added,
        summarizer=summarizer,
        created_at=at,
    )
    upsert_summary(conn, summary)
    end_lease(conn, session_id, cooldown_until, at)
    return summary


def release_lease(conn: sqlite3.Connection, session_id: str, lease_id: str) -> bool:
    """Free the lease if it is still ours (no cooldown: nothing was committed)."""
    cursor = conn.execute(
        "UPDATE context_leases SET lease_id = NULL, owner = NULL, expires_at = NULL, "
        "updated_at = ? WHERE session_id = ? AND lease_id = ?",
        [now(conn), session_id, lease_id],
    )
    return cursor.rowcount == 1
