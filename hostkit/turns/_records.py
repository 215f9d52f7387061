"""Durable turn records: admission row, events, transcript writes, terminal commit, recovery.

Every function runs on the store's writer (or reader) thread inside one
transaction, so "persist X with Y atomically" is literally one transaction.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hostkit.errors import InvalidValue
from hostkit.freeze import thaw
from hostkit.store import LeaseOwner, now, owner_predicate
from hostkit.types import (
    ModelMessage,
    PrincipalScope,
    TurnExecutionContext,
    TurnOutcome,
    TurnResult,
    bounded_metadata,
    new_id,
)

__all__ = [
    "TERMINAL",
    "ExistingTurn",
    "append_event",
    "append_turn_message",
    "find_turn",
    "finish_turn",
    "insert_turn",
    "owned_turn",
    "recover_orphans",
    "renew_lease",
    "request_cancel",
]

TERMINAL: frozenset[str] = frozenset(
    {"completed", "needs_user", "failed", "cancelled", "lost", "indeterminate"}
)


@dataclass(frozen=True, slots=True)
class ExistingTurn:
    turn_id: str
    status: str
    result: TurnResult | None


def _detail(detail: Mapping[str, Any] | None) -> str:
    return json.dumps(thaw(bounded_metadata(detail)), sort_keys=True, separators=(",", ":"))


def append_event(
    conn: sqlite3.Connection, turn_id: str, kind: str, detail: Mapping[str, Any] | None = None
) -> int:
    """Append one persisted turn event; returns its per-turn sequence number."""
    seq = conn.execute(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM turn_events WHERE turn_id = ?", [turn_id]
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO turn_events (turn_id, seq, kind, at, detail) VALUES (?, ?, ?, ?, ?)",
        [turn_id, seq, kind, now(conn), _detail(detail)],
    )
    return int(seq)


def find_turn(conn: sqlite3.Connection, principal_id: str, request_id: str) -> ExistingTurn | None:
    """The turn an idempotency key already created, if any."""
    row = conn.execute(
        "SELECT turn_id, status, result FROM turns WHERE principal_id = ? AND request_id = ?",
        [principal_id, request_id],
    ).fetchone()
    if row is None:
        return None
    result = TurnResult.from_json(json.loads(row[2])) if row[2] else None
    return ExistingTurn(row[0], row[1], result)


def insert_turn(
    conn: sqlite3.Connection,
    context: TurnExecutionContext,
    *,
    lease_owner: LeaseOwner,
    lease_expires_at: float,
) -> ExistingTurn | None:
    """Persist the idempotency key, the lease and ``turn.started`` in one transaction.

    Returns the existing turn instead when the key was already used (a racing
    duplicate), so a key never creates a second turn.
    """
    principal_id = context.principal.principal_id
    existing = find_turn(conn, principal_id, context.request_id)
    if existing is not None:
        return existing
    conn.execute(
        "INSERT INTO turns (turn_id, request_id, principal_id, session_id, core_id, core_revision, "
        "generation, status, lease_owner, lease_expires_at, started_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
        [
            context.turn_id,
            context.request_id,
            principal_id,
            context.session_id,
            context.core_id,
            context.core_revision,
            context.generation,
            lease_owner.encode(),
            lease_expires_at,
            now(conn),
        ],
    )
    append_event(
        conn,
        context.turn_id,
        "turn.started",
        {
            "request_id": context.request_id,
            "core_id": context.core_id,
            "core_revision": context.core_revision,
            "generation": context.generation,
            "trace_id": context.trace_ids[0] if context.trace_ids else None,
        },
    )
    return None


def _require_running(conn: sqlite3.Connection, turn_id: str) -> None:
    row = conn.execute("SELECT status FROM turns WHERE turn_id = ?", [turn_id]).fetchone()
    if row is None or row[0] != "running":
        raise InvalidValue("the turn has ended; late writes are refused")


def append_turn_message(
    conn: sqlite3.Connection,
    *,
    session_id: str,
    turn_id: str,
    message: ModelMessage,
    event: str,
    detail: Mapping[str, Any] | None = None,
) -> int:
    """Append a transcript message of a running turn together with its event."""
    _require_running(conn, turn_id)
    seq = conn.execute(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?", [session_id]
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO messages (message_id, session_id, seq, role, content, turn_id, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            new_id("msg"),
            session_id,
            seq,
            message.role,
            json.dumps(message.to_json(), sort_keys=True, separators=(",", ":")),
            turn_id,
            now(conn),
        ],
    )
    append_event(conn, turn_id, event, detail)
    return int(seq)


def renew_lease(
    conn: sqlite3.Connection, turn_id: str, expires_at: float
) -> Literal["renewed", "cancel_requested", "gone"]:
    """Extend a running turn's lease and report whether it should go on."""
    cursor = conn.execute(
        "UPDATE turns SET lease_expires_at = ? WHERE turn_id = ? AND status = 'running'",
        [expires_at, turn_id],
    )
    if cursor.rowcount != 1:
        return "gone"
    row = conn.execute("SELECT cancel_requested_at FROM turns WHERE turn_id = ?", [turn_id])
    return "cancel_requested" if row.fetchone()[0] else "renewed"


def finish_turn(
    conn: sqlite3.Connection,
    result: TurnResult,
    *,
    route: Mapping[str, Any] | None,
    detail: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Commit the terminal state, its event and the delivery intents in one transaction.

    Exactly one terminal record per turn: a second attempt finds the turn no
    longer running and raises. Returns the result as persisted (with the
    outbox intent ids as its deliveries).
    """
    deliver = route is not None and result.outcome in ("completed", "needs_user") and result.text
    intents = (new_id("out"),) if deliver else ()
    result = dataclasses.replace(result, deliveries=intents)
    cursor = conn.execute(
        "UPDATE turns SET status = ?, result = ?, ended_at = ?, lease_owner = NULL, "
        "lease_expires_at = NULL WHERE turn_id = ? AND status = 'running'",
        [
            result.outcome,
            json.dumps(result.to_json(), sort_keys=True),
            now(conn),
            result.turn_id,
        ],
    )
    if cursor.rowcount != 1:
        raise InvalidValue("the turn already has a terminal record")
    append_event(
        conn,
        result.turn_id,
        f"turn.{result.outcome}",
        {"error": result.error, **(detail or {})},
    )
    for intent_id in intents:
        conn.execute(
            "INSERT INTO outbox (intent_id, turn_id, session_id, route, payload, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                intent_id,
                result.turn_id,
                result.session_id,
                json.dumps(thaw(route), sort_keys=True),
                json.dumps({"text": result.text}),
                now(conn),
            ],
        )
    return result


def request_cancel(conn: sqlite3.Connection, turn_id: str) -> None:
    conn.execute(
        "UPDATE turns SET cancel_requested_at = COALESCE(cancel_requested_at, ?) "
        "WHERE turn_id = ? AND status = 'running'",
        [now(conn), turn_id],
    )


def owned_turn(
    conn: sqlite3.Connection, scope: PrincipalScope, turn_id: str
) -> tuple[str, str] | None:
    """(status, session id) of a turn the scope owns through its session, else None."""
    where, params = owner_predicate(scope)
    row = conn.execute(
        "SELECT t.status, t.session_id FROM turns t "
        f"JOIN session_owners o ON o.session_id = t.session_id WHERE t.turn_id = ? AND {where}",
        [turn_id, *params],
    ).fetchone()
    return (row[0], row[1]) if row else None


def recover_orphans(
    conn: sqlite3.Connection,
    *,
    now_epoch: float,
    orphaned: Callable[[str | None, bool], bool],
) -> list[tuple[str, TurnOutcome]]:
    """Mark turns whose Host died explicitly ended.

    ``orphaned(lease_owner, lease_expired)`` decides per running turn.

    A recorded cancel request makes the outcome ``cancelled``, otherwise
    ``lost``. Nothing is replayed: the turn's provider or effect step may or
    may not have happened, and the terminal record says so.
    """
    rows = conn.execute(
        "SELECT turn_id, request_id, session_id, core_id, core_revision, generation, "
        "lease_owner, lease_expires_at, cancel_requested_at FROM turns WHERE status = 'running'"
    ).fetchall()
    recovered: list[tuple[str, TurnOutcome]] = []
    for turn_id, request_id, session_id, core_id, revision, gen, owner, expires, cancel in rows:
        if not orphaned(owner, expires is None or expires < now_epoch):
            continue
        outcome: TurnOutcome = "cancelled" if cancel else "lost"
        result = TurnResult(
            request_id=request_id,
            turn_id=turn_id,
            session_id=session_id,
            core_id=core_id,
            core_revision=revision,
            outcome=outcome,
            text="",
            error="the Host stopped during this turn; nothing was replayed",
            durable_result_ref=turn_id,
            generation=gen,
        )
        finish_turn(conn, result, route=None, detail={"recovered": True})
        recovered.append((turn_id, outcome))
    return recovered
