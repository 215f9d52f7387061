"""Session creation, conversation bindings, ownership facts and the audit log.

These run on the writer thread inside a (possibly shared) transaction. They
record durable facts; they grant nothing. Only the AuthorityResolver turns
those facts into a PrincipalScope.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized
from hostkit.store._approval_revocations import insert_revocation
from hostkit.store._json import canonical_json
from hostkit.store._owned import now
from hostkit.store._rebound import void_rebound
from hostkit.types import AuditRecord, OwnerKind, PrincipalScope, bounded_data, is_text, new_id

__all__ = [
    "PRINCIPAL_OWNED",
    "ConversationSelect",
    "OwnerFacts",
    "bind_conversation",
    "bound_session",
    "check_principal",
    "create_session",
    "insert_audit",
    "owner_facts",
    "owner_facts_of",
    "read_audit",
    "read_effect_audit",
]


ConversationSelect = Literal["bound", "fresh"] | str
_MAX_SELECT = 200
# Owner kinds whose session belongs to exactly one principal (a schedule, a child agent):
# only that principal may bind, resume or admit a turn in it. A conversation's session is
# shared by whoever speaks in that conversation (a group chat), so it is not in here.
PRINCIPAL_OWNED: frozenset[str] = frozenset({"system", "delegated_agent"})
# Bound as ``turn_id`` is bound everywhere a turn id is taken.
_MAX_TURN_ID = 128
# Above every audit id (a 64-bit integer on both engines): paging back starts here.
_NO_ROW_YET = 2**63 - 1


@dataclass(frozen=True, slots=True)
class OwnerFacts:
    """The durable owner row of one session."""

    session_id: str
    owner_kind: OwnerKind
    principal_id: str | None
    channel: str | None
    conversation_key: str | None
    parent_session_id: str | None
    parent_turn_id: str | None


def insert_audit(
    conn: sqlite3.Connection,
    kind: str,
    *,
    scope: PrincipalScope | None = None,
    principal_id: str | None = None,
    authority: str | None = None,
    session_id: str | None = None,
    subject: str | None = None,
    reason: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> int:
    """Append one Host-only audit row; ``detail`` is bounded and field-name redacted."""
    if scope is not None:
        principal_id = principal_id or scope.principal_id
        authority = authority or scope.authority
    body = canonical_json(bounded_data(detail))
    cursor = conn.execute(
        "INSERT INTO audit (at, kind, principal_id, authority, session_id, subject, reason, "
        "detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        [now(conn), kind, principal_id, authority, session_id, subject, reason, body],
    )
    return int(cursor.fetchone()[0])


def create_session(
    conn: sqlite3.Connection,
    *,
    owner_kind: OwnerKind,
    principal_id: str,
    channel: str | None = None,
    conversation_key: str | None = None,
    parent_session_id: str | None = None,
    parent_turn_id: str | None = None,
    title: str | None = None,
) -> str:
    """Create a session with its immutable owner row and ``session.created`` in one go.

    A child's lineage is checked in the same transaction: ``parent_turn_id`` must be a
    turn of ``parent_session_id`` (``NotFoundOrUnauthorized("turn")`` otherwise, and
    nothing is written), so an owner row never claims another session's turn.
    """
    if parent_turn_id is not None:
        if not is_text(parent_turn_id, limit=_MAX_TURN_ID):
            raise InvalidValue(
                f"parent_turn_id must be 1 to {_MAX_TURN_ID} characters of valid text"
            )
        if parent_session_id is None or (
            conn.execute(
                "SELECT 1 FROM turns WHERE turn_id = ? AND session_id = ?",
                [parent_turn_id, parent_session_id],
            ).fetchone()
            is None
        ):
            raise NotFoundOrUnauthorized("turn")
    session_id = new_id("ses")
    at = now(conn)
    conn.execute(
        "INSERT INTO sessions (session_id, created_at, status, title) VALUES (?, ?, 'active', ?)",
        [session_id, at, title],
    )
    conn.execute(
        "INSERT INTO session_owners (session_id, owner_kind, principal_id, channel, "
        "conversation_key, parent_session_id, parent_turn_id, recorded_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            session_id,
            owner_kind,
            principal_id,
            channel,
            conversation_key,
            parent_session_id,
            parent_turn_id,
            at,
        ],
    )
    insert_audit(
        conn,
        "session.created",
        principal_id=principal_id,
        authority=owner_kind,
        session_id=session_id,
        detail={"parent_session_id": parent_session_id, "parent_turn_id": parent_turn_id},
    )
    return session_id


def bound_session(conn: sqlite3.Connection, channel: str, conversation_key: str) -> str | None:
    """The session a conversation is bound to, or None before its first contact."""
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    row = cursor.execute(
        "SELECT session_id FROM conversation_bindings WHERE channel = ? AND conversation_key = ?",
        [channel, conversation_key],
    ).fetchone()
    return str(row["session_id"]) if row else None


def bind_conversation(
    conn: sqlite3.Connection,
    *,
    channel: str,
    conversation_key: str,
    principal_id: str,
    owner_kind: OwnerKind,
    select: ConversationSelect = "bound",
) -> tuple[str, bool]:
    """Resolve the conversation's session, creating or switching it as ``select`` says.

    Runs inside one writer transaction, so two first messages of the same
    conversation racing each other get the same session. A resumed session
    must be owned by this very conversation (same owner kind, channel and key).
    Moving to another session voids the previous one's open calls in the same
    transaction (``void_rebound``): nobody can answer them any more.
    """
    if not is_text(select, limit=_MAX_SELECT):
        raise InvalidValue(
            f"session must be 'bound', 'fresh' or a session id (at most {_MAX_SELECT} chars)"
        )
    previous = bound_session(conn, channel, conversation_key)
    if previous is not None and select == "bound":
        check_principal(owner_facts(conn, previous), principal_id)
        return previous, False
    created = False
    if select in ("bound", "fresh"):
        session_id = create_session(
            conn,
            owner_kind=owner_kind,
            principal_id=principal_id,
            channel=channel,
            conversation_key=conversation_key,
        )
        created = True
    else:
        owner = owner_facts(conn, select)
        if owner is None or (owner.owner_kind, owner.channel, owner.conversation_key) != (
            owner_kind,
            channel,
            conversation_key,
        ):
            raise NotFoundOrUnauthorized("session")
        check_principal(owner, principal_id)
        session_id = select
    conn.execute(
        "INSERT INTO conversation_bindings (channel, conversation_key, principal_id, session_id, "
        "bound_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (channel, conversation_key) DO UPDATE SET "
        "session_id = excluded.session_id, principal_id = excluded.principal_id, "
        "bound_at = excluded.bound_at",
        [channel, conversation_key, principal_id, session_id, now(conn)],
    )
    if previous is not None and previous != session_id:
        # Nobody can answer the previous session's open calls any more: void them now.
        voided = void_rebound(conn, previous, session_id)
        # The previous session's "approve for session" answers end in every Host process.
        insert_revocation(
            conn,
            actor=principal_id,
            reason="the conversation moved to another session",
            session_id=previous,
        )
        insert_audit(
            conn,
            "conversation.rebound",
            principal_id=principal_id,
            session_id=session_id,
            detail={
                "previous_session_id": previous,
                "channel": channel,
                "voided_approvals": voided,
            },
        )
    return session_id, created


def check_principal(owner: OwnerFacts | None, principal_id: str) -> None:
    """``NotFoundOrUnauthorized("session")`` when ``owner`` is one principal's own session
    (``PRINCIPAL_OWNED``) and ``principal_id`` is not that principal.

    A binding key or a session id alone never hands one schedule's or child's session to
    another principal; conversation sessions are shared by their conversation's speakers.
    """
    if (
        owner is not None
        and owner.owner_kind in PRINCIPAL_OWNED
        and owner.principal_id != principal_id
    ):
        raise NotFoundOrUnauthorized("session")


def owner_facts(conn: sqlite3.Connection, session_id: str) -> OwnerFacts | None:
    """The durable owner row of ``session_id``, or None."""
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    row = cursor.execute(
        "SELECT session_id, owner_kind, principal_id, channel, conversation_key, "
        "parent_session_id, parent_turn_id FROM session_owners WHERE session_id = ?",
        [session_id],
    ).fetchone()
    return None if row is None else owner_facts_of(row)


def owner_facts_of(row: sqlite3.Row) -> OwnerFacts:
    """The owner facts of a row holding ``session_owners``' columns by their names."""
    return OwnerFacts(
        session_id=row["session_id"],
        owner_kind=row["owner_kind"],
        principal_id=row["principal_id"],
        channel=row["channel"],
        conversation_key=row["conversation_key"],
        parent_session_id=row["parent_session_id"],
        parent_turn_id=row["parent_turn_id"],
    )


def read_audit(
    conn: sqlite3.Connection, *, kind: str | None, after_id: int, limit: int
) -> tuple[AuditRecord, ...]:
    kind_clause = "AND kind = ?" if kind is not None else ""
    return _audit_rows(
        conn,
        f"WHERE id > ? {kind_clause} ORDER BY id LIMIT ?",
        [after_id, *([kind] if kind is not None else []), limit],
    )


def read_effect_audit(
    conn: sqlite3.Connection, *, session_id: str, turn_id: str | None, limit: int
) -> tuple[AuditRecord, ...]:
    """The newest ``limit`` audit views (``effect.<name>`` rows) of a session's calls, or of
    one turn's, oldest of them first.

    The newest, not the oldest: a cut list must keep the calls an operator looks
    for, the latest. A turn's rows are found by the text of their canonical detail,
    not by parsing it in SQL: PostgreSQL's JSON operators refuse a whole document for
    one ``\\u0000`` in any of its strings, which failed the read for every turn of
    that session. The text match is confirmed on the parsed detail (``_`` in the id
    is a LIKE wildcard).
    """
    if turn_id is None:
        newest = _audit_rows(
            conn,
            "WHERE kind LIKE 'effect.%' AND session_id = ? ORDER BY id DESC LIMIT ?",
            [session_id, limit],
        )
        return newest[::-1]
    pattern = f'%"turn_id":{canonical_json(turn_id)}%'
    kept: list[AuditRecord] = []
    before = _NO_ROW_YET
    while len(kept) < limit:
        # Paged back past rows the text matched but the parse refused (a nested "turn_id",
        # a LIKE wildcard or case match), so they never take a confirmed row's place.
        page = _audit_rows(
            conn,
            "WHERE kind LIKE 'effect.%' AND session_id = ? AND detail LIKE ? AND id < ? "
            "ORDER BY id DESC LIMIT ?",
            [session_id, pattern, before, limit],
        )
        kept.extend(record for record in page if record.detail.get("turn_id") == turn_id)
        if len(page) < limit:
            break
        before = page[-1].audit_id
    return tuple(kept[:limit])[::-1]


def _audit_rows(conn: sqlite3.Connection, where: str, params: list[Any]) -> tuple[AuditRecord, ...]:
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    rows = cursor.execute(
        "SELECT id, at, kind, principal_id, authority, session_id, subject, reason, detail "
        f"FROM audit {where}",
        params,
    ).fetchall()
    return tuple(
        AuditRecord(
            audit_id=row["id"],
            at=row["at"],
            kind=row["kind"],
            principal_id=row["principal_id"],
            authority=row["authority"],
            session_id=row["session_id"],
            subject=row["subject"],
            reason=row["reason"],
            detail=json.loads(row["detail"]),
        )
        for row in rows
    )
