"""Erasing a session: its content goes, its ids stay (``RuntimeStore.erase_session``).

A person may ask to be forgotten, and a session may hold what must not be
kept. In one transaction the session's content is deleted or emptied: the
transcript (``messages``, behind an empty summary whose cutoff covers them),
what each turn's events recorded, its result (text, effects, error,
structured output), the context decisions, summary and bootstrap snapshot,
state authored in the session's scope, the payloads of its outbox intents
and of the inbounds that started its turns, its approvals' arguments and
views (an approval that could still run is made ``stale``), its references
to attachments (the bytes go with the last reference, unless an upload of
them still waits for its turn) and the details of its tasks. What stays is
id-only: the session row (its title emptied) and its owner rows, the turns'
ids, statuses and times, the event kinds and sequence, the intents' routes
and outcomes, the usage counts, so every audit row still points at something
that existed. One ``session.erased`` audit row records who, why and how
much, never the content.

A turn still running in the session is refused (``TurnInProgress``): it
would write its answer after the erase; so is an answer being sent under a
live claim (``DeliveryInProgress``: erased mid-send it would be recorded as
never sent). Intents not known delivered are deleted, so nobody is sent an
empty message and no dead letter is left that nobody could retry or clear.

What this cannot reach: the memory items of the person (``memory forget``:
memory belongs to the person, not to a session), terminal output files in
the workspace (removed by their own retention), and on SQLite the freed pages
of the database file and its WAL until a checkpoint and ``VACUUM``
(docs/store.md).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hostkit.errors import DeliveryInProgress, NotFoundOrUnauthorized, TurnInProgress
from hostkit.store._approval_rows import void_session
from hostkit.store._attachments import release_session
from hostkit.store._context_rows import read_summary, upsert_summary
from hostkit.store._context_values import CommittedSummary
from hostkit.store._delivery import PRUNED_PAYLOAD
from hostkit.store._json import canonical_json
from hostkit.store._owned import now
from hostkit.store._sessions import insert_audit

if TYPE_CHECKING:
    from hostkit.types import PrincipalScope

__all__ = ["ERASED", "ERASED_SUMMARIZER", "ErasedSession", "erase_rows"]

# The void reason of an erased session's open approvals, and the last error of its
# intents that were still to be sent.
ERASED = "the session was erased"
# What a turn's result keeps: ids, outcome and counts, never what was said or done.
_RESULT_KEEPS = (
    "request_id",
    "turn_id",
    "session_id",
    "core_id",
    "core_revision",
    "outcome",
    "deliveries",
    "usage",
    "durable_result_ref",
    "generation",
    "pending_approval",
    "truncated",
    "cancelled_by",
)
# The summarizer named by an erased session's (empty) summary.
ERASED_SUMMARIZER = "erased"
_OF_TURNS = "turn_id IN (SELECT turn_id FROM turns WHERE session_id = ?)"


@dataclass(frozen=True, slots=True)
class ErasedSession:
    """What ``erase_session`` emptied: counts only, as its audit row records them."""

    session_id: str
    turns: int
    messages: int
    intents: int
    approvals: int
    attachments: int
    audit_id: int


def erase_rows(
    conn: sqlite3.Connection, scope: PrincipalScope, session_id: str, reason: str, now_epoch: float
) -> ErasedSession:
    """Erase ``session_id``'s content in the caller's transaction (see the module docstring);
    ``now_epoch`` is the store's clock, which claims' leases are in."""
    if conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", [session_id]).fetchone() is None:
        raise NotFoundOrUnauthorized("session")
    running = conn.execute(
        "SELECT turn_id FROM turns WHERE session_id = ? AND status = 'running' LIMIT 1",
        [session_id],
    ).fetchone()
    if running is not None:
        raise TurnInProgress(str(running[0]))
    # Only a live claim: a sender that died leaves its intent 'sending' until a delivery
    # worker claims it again, which may never come (no serve running).
    sending = conn.execute(
        "SELECT intent_id FROM outbox WHERE session_id = ? AND status = 'sending' "
        "AND next_attempt_at > ? LIMIT 1",
        [session_id, now_epoch],
    ).fetchone()
    if sending is not None:
        raise DeliveryInProgress(str(sending[0]))
    attachments = release_session(conn, session_id)
    _cut_history(conn, session_id)
    messages = conn.execute("DELETE FROM messages WHERE session_id = ?", [session_id]).rowcount
    turns = _erase_results(conn, session_id)
    conn.execute(f"UPDATE turn_events SET detail = '{{}}' WHERE {_OF_TURNS}", [session_id])
    conn.execute(
        "UPDATE inbox SET payload = NULL, payload_ref = NULL, artifacts = NULL, metadata = NULL "
        f"WHERE state = 'completed' AND {_OF_TURNS}",
        [session_id],
    )
    conn.execute("DELETE FROM context_decisions WHERE session_id = ?", [session_id])
    # Kept, empty: a bootstrap row says the session has its snapshot, so none is taken again.
    conn.execute(
        "UPDATE context_bootstrap SET snapshot = '', source = '' WHERE session_id = ?", [session_id]
    )
    conn.execute("DELETE FROM core_state WHERE scope = ?", [session_id])
    conn.execute("UPDATE tasks SET detail = '{}' WHERE session_id = ?", [session_id])
    conn.execute("UPDATE sessions SET title = NULL WHERE session_id = ?", [session_id])
    void_session(conn, session_id, ERASED, status="stale")
    approvals = conn.execute(
        "UPDATE approvals SET arguments = '{}', view = '{}' WHERE session_id = ?", [session_id]
    ).rowcount
    intents = _erase_intents(conn, session_id)
    erased = {
        "turns": turns,
        "messages": messages,
        "intents": intents,
        "approvals": approvals,
        "attachments": attachments,
    }
    audit_id = insert_audit(
        conn,
        "session.erased",
        scope=scope,
        session_id=session_id,
        subject=f"session:{session_id}",
        reason=reason,
        detail=erased,
    )
    return ErasedSession(session_id=session_id, audit_id=audit_id, **erased)


def _cut_history(conn: sqlite3.Connection, session_id: str) -> None:
    """An empty summary whose cutoff covers every erased message.

    Every Host's cached window of the session (``ContextManager``) then sees its
    cutoff move and reads the session again, and the session's next message comes
    after the cutoff (``next_message_seq``): nothing erased is read back, and no seq
    is given twice.
    """
    top = conn.execute(
        "SELECT MAX(seq) FROM messages WHERE session_id = ?", [session_id]
    ).fetchone()[0]
    summary = read_summary(conn, session_id)
    cutoff = max(int(top or 0), summary.cutoff_seq if summary is not None else 0)
    if cutoff == 0:
        return
    erased = CommittedSummary(session_id, "", cutoff, 0, ERASED_SUMMARIZER, now(conn))
    upsert_summary(conn, erased)


def _erase_results(conn: sqlite3.Connection, session_id: str) -> int:
    """Each turn's result reduced to ids, outcome and counts; how many turns the session had."""
    rows = conn.execute(
        "SELECT turn_id, result FROM turns WHERE session_id = ?", [session_id]
    ).fetchall()
    for turn_id, result in rows:
        if result is None:
            continue
        conn.execute("UPDATE turns SET result = ? WHERE turn_id = ?", [_stripped(result), turn_id])
    return len(rows)


def _stripped(result: str) -> str | None:
    """A stored result with its text, effects, error and output gone (None if unreadable)."""
    try:
        data: Any = json.loads(result)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    kept = {name: data[name] for name in _RESULT_KEEPS if name in data}
    return canonical_json({**kept, "text": ""})


def _erase_intents(conn: sqlite3.Connection, session_id: str) -> int:
    """The session's intents not known delivered go (pending ones would send an empty
    message, dead letters could never be retried or cleared, one 'sending' here has a
    claim that lapsed: its sender is gone); delivered ones lose their payload and stay
    as the record of what was sent. How many intents it touched."""
    gone = conn.execute(
        "DELETE FROM outbox WHERE session_id = ? "
        "AND status IN ('pending', 'sending', 'dead_lettered')",
        [session_id],
    ).rowcount
    return (
        gone
        + conn.execute(
            f"UPDATE outbox SET payload = '{PRUNED_PAYLOAD}' WHERE session_id = ?", [session_id]
        ).rowcount
    )
