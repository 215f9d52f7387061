"""The SQL of the turns group, run on the store's writer (or reader) thread.

Each function runs inside one transaction the adapter opened, so "persist X
with Y atomically" is literally one transaction. Rows are read by column name.

The session lease invariant: a turn is ``running`` exactly while its
session's row in ``session_leases`` names it. Admission takes the lease in the
transaction that inserts the turn; the terminal commit releases it in the
transaction that ends the turn; recovery and takeover end the turn and free
the lease together.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from hostkit.errors import InvalidValue, LeaseLost, NotFoundOrUnauthorized, ScopeError
from hostkit.freeze import thaw
from hostkit.store._lease import LeaseOwner, owner_is_dead
from hostkit.store._owned import now, owner_predicate
from hostkit.store._sessions import OwnerFacts, bind_conversation, owner_facts
from hostkit.store._turn_values import (
    Admitted,
    ConversationTarget,
    RecoveredTurn,
    SessionBusy,
    SessionLease,
    TurnAdmission,
    TurnState,
    TurnWrite,
)
from hostkit.types import (
    ModelMessage,
    PrincipalScope,
    TurnOutcome,
    TurnResult,
    bounded_metadata,
    new_id,
)

__all__ = [
    "abandon",
    "admit",
    "append_message",
    "find_turn",
    "finish",
    "owned_state",
    "recover",
    "renew",
    "request_cancel",
    "session_lease",
]

Gone = Literal["owner_dead", "lease_expired", "shutdown", "abandoned"]
_LOST_ERROR = "the Host stopped during this turn; nothing was replayed"
_LEASE_COLUMNS = "session_id, token, owner, turn_id, expires_at, ttl_s"


def _one(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> sqlite3.Row | None:
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    row: sqlite3.Row | None = cursor.execute(sql, params).fetchone()
    return row


def _all(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor.execute(sql, params).fetchall()


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _detail(detail: Mapping[str, Any] | None) -> str:
    return _json(thaw(bounded_metadata(detail)))


_STATE_COLUMNS = (
    "t.turn_id, t.session_id, t.status, t.result, t.cancel_requested_at, t.request_id, "
    "t.core_id, t.core_revision, t.generation"
)


def _state(row: sqlite3.Row) -> TurnState:
    result: TurnResult | None = None
    if row["status"] != "running":
        try:
            result = TurnResult.from_json(json.loads(row["result"] or "null"))
        except (TypeError, ValueError, AttributeError):
            # A terminal row whose result predates the current format (or is damaged):
            # answer with what the row itself says, never with an exception.
            result = TurnResult(
                request_id=row["request_id"],
                turn_id=row["turn_id"],
                session_id=row["session_id"],
                core_id=row["core_id"],
                core_revision=row["core_revision"],
                outcome=row["status"],
                text="",
                error="the recorded result could not be read",
                durable_result_ref=row["turn_id"],
                generation=row["generation"],
            )
    return TurnState(
        turn_id=row["turn_id"],
        session_id=row["session_id"],
        status=row["status"],
        result=result,
        cancel_requested=row["cancel_requested_at"] is not None,
    )


def holder_gone(owner: str | None, expires_at: float | None, now_epoch: float) -> Gone | None:
    """Why a lease holder no longer counts, or None while it does.

    The rule every adapter applies: a lease ends at its expiry (a live holder
    keeps it only by heartbeating), or at once when its owner is provably
    dead on this machine. ``owner_is_dead`` reads ``/proc``: this runs on the
    database thread, never on the event loop.
    """
    if expires_at is None or expires_at <= now_epoch:
        return "lease_expired"
    if owner_is_dead(owner):
        return "owner_dead"
    return None


# -- events and terminal records ----------------------------------------------------------


def _insert_event(
    conn: sqlite3.Connection,
    turn_id: str,
    seq: int | None,
    kind: str,
    detail: Mapping[str, Any] | None,
    *,
    at: str | None = None,
) -> None:
    """Append one turn event; ``seq`` None takes the next free one (recovery, takeover)."""
    if seq is None:
        row = _one(
            conn,
            "SELECT COALESCE(MAX(seq), 0) + 1 AS next FROM turn_events WHERE turn_id = ?",
            [turn_id],
        )
        seq = int(row["next"]) if row is not None else 1
    try:
        conn.execute(
            "INSERT INTO turn_events (turn_id, seq, kind, at, detail) VALUES (?, ?, ?, ?, ?)",
            [turn_id, seq, kind, at or now(conn), _detail(detail)],
        )
    except sqlite3.IntegrityError as exc:
        raise InvalidValue(f"event seq {seq} of this turn is already recorded") from exc


def _commit_terminal(
    conn: sqlite3.Connection,
    result: TurnResult,
    *,
    event_seq: int | None,
    route: Mapping[str, Any] | None,
    detail: Mapping[str, Any] | None,
) -> TurnResult:
    """The terminal state, its event and the delivery intents (the caller's transaction)."""
    deliver = route is not None and result.outcome in ("completed", "needs_user") and result.text
    intents = (new_id("out"),) if deliver else ()
    result = dataclasses.replace(result, deliveries=intents)
    at = now(conn)
    cursor = conn.execute(
        "UPDATE turns SET status = ?, result = ?, ended_at = ?, lease_owner = NULL, "
        "lease_expires_at = NULL WHERE turn_id = ? AND status = 'running'",
        [result.outcome, _json(result.to_json()), at, result.turn_id],
    )
    if cursor.rowcount != 1:
        raise InvalidValue("the turn already has a terminal record")
    _insert_event(
        conn,
        result.turn_id,
        event_seq,
        f"turn.{result.outcome}",
        {"error": result.error, **(detail or {})},
        at=at,
    )
    for intent_id in intents:
        conn.execute(
            "INSERT INTO outbox (intent_id, turn_id, session_id, route, payload, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                intent_id,
                result.turn_id,
                result.session_id,
                _json(thaw(route)),
                json.dumps({"text": result.text}),
                at,
            ],
        )
    return result


def _end_orphan(conn: sqlite3.Connection, row: sqlite3.Row, reason: Gone) -> RecoveredTurn:
    """End a running turn whose holder is gone: ``lost``, or ``cancelled`` if one was asked.

    Nothing is replayed: its provider or effect step may or may not have
    happened, and the terminal record says so. Frees its session lease.
    """
    outcome: TurnOutcome = "cancelled" if row["cancel_requested_at"] else "lost"
    result = TurnResult(
        request_id=row["request_id"],
        turn_id=row["turn_id"],
        session_id=row["session_id"],
        core_id=row["core_id"],
        core_revision=row["core_revision"],
        outcome=outcome,
        text="",
        error=_LOST_ERROR,
        durable_result_ref=row["turn_id"],
        generation=row["generation"],
    )
    _commit_terminal(
        conn, result, event_seq=None, route=None, detail={"recovered": True, "reason": reason}
    )
    _free(conn, row["session_id"], turn_id=row["turn_id"])
    return RecoveredTurn(row["turn_id"], row["session_id"], outcome)


def _free(conn: sqlite3.Connection, session_id: str, *, turn_id: str) -> int:
    """Release the session lease if ``turn_id`` holds it; the token stays for the next holder."""
    return conn.execute(
        "UPDATE session_leases SET owner = NULL, turn_id = NULL, expires_at = NULL, "
        "ttl_s = NULL, updated_at = ? WHERE session_id = ? AND turn_id = ?",
        [now(conn), session_id, turn_id],
    ).rowcount


_RUNNING_COLUMNS = (
    "t.turn_id, t.request_id, t.session_id, t.core_id, t.core_revision, t.generation, "
    "t.cancel_requested_at"
)


# -- admission ----------------------------------------------------------------------------


def find_turn(conn: sqlite3.Connection, principal_id: str, request_id: str) -> TurnState | None:
    """The turn an idempotency key already created, if any."""
    row = _one(
        conn,
        f"SELECT {_STATE_COLUMNS} FROM turns t WHERE t.principal_id = ? AND t.request_id = ?",
        [principal_id, request_id],
    )
    return _state(row) if row is not None else None


def _resolve_session(
    conn: sqlite3.Connection, admission: TurnAdmission
) -> tuple[str, bool, OwnerFacts]:
    target = admission.session
    if isinstance(target, ConversationTarget):
        session_id, created = bind_conversation(
            conn,
            channel=target.channel,
            conversation_key=target.conversation_key,
            principal_id=admission.principal_id,
            owner_kind=target.owner_kind,
            select=target.select,
        )
        owner = owner_facts(conn, session_id)
        if owner is None or (owner.owner_kind, owner.channel, owner.conversation_key) != (
            target.owner_kind,
            target.channel,
            target.conversation_key,
        ):
            raise ScopeError("the conversation's session has no durable conversation owner")
        return session_id, created, owner
    owner = owner_facts(conn, target)
    if owner is None or owner.owner_kind == "legacy_local":
        raise NotFoundOrUnauthorized("session")
    return target, False, owner


def admit(
    conn: sqlite3.Connection,
    admission: TurnAdmission,
    *,
    owner: LeaseOwner,
    ttl_s: float,
    now_epoch: float,
) -> Admitted | TurnState | SessionBusy:
    """One transaction: idempotency check, session binding, session lease, turn, ``turn.started``.

    A repeated key returns the existing turn before anything else happens. A
    session held by a live holder returns ``SessionBusy`` (the binding stays).
    A holder whose lease expired, or whose owner is provably dead, has its
    turn ended first and the session taken over with the next token.
    """
    existing = find_turn(conn, admission.principal_id, admission.request_id)
    if existing is not None:
        return existing
    session_id, created, facts = _resolve_session(conn, admission)
    held = _one(
        conn,
        f"SELECT {_LEASE_COLUMNS} FROM session_leases WHERE session_id = ?",
        [session_id],
    )
    recovered: tuple[RecoveredTurn, ...] = ()
    if held is not None and held["owner"] is not None:
        gone = holder_gone(held["owner"], held["expires_at"], now_epoch)
        if gone is None:
            return SessionBusy(session_id, held["turn_id"], held["expires_at"])
        orphan = _one(
            conn,
            f"SELECT {_RUNNING_COLUMNS} FROM turns t WHERE t.turn_id = ? AND t.status = 'running'",
            [held["turn_id"]],
        )
        if orphan is not None:
            recovered = (_end_orphan(conn, orphan, gone),)
    token = (held["token"] if held is not None else 0) + 1
    expires_at = now_epoch + ttl_s
    encoded = owner.encode()
    at = now(conn)
    conn.execute(
        "INSERT INTO session_leases (session_id, token, owner, turn_id, expires_at, ttl_s, "
        "heartbeat_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (session_id) DO UPDATE SET token = excluded.token, owner = excluded.owner, "
        "turn_id = excluded.turn_id, expires_at = excluded.expires_at, ttl_s = excluded.ttl_s, "
        "heartbeat_at = excluded.heartbeat_at, updated_at = excluded.updated_at",
        [session_id, token, encoded, admission.turn_id, expires_at, ttl_s, now_epoch, at],
    )
    conn.execute(
        "INSERT INTO turns (turn_id, request_id, principal_id, session_id, core_id, core_revision, "
        "generation, status, lease_owner, lease_expires_at, started_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
        [
            admission.turn_id,
            admission.request_id,
            admission.principal_id,
            session_id,
            admission.core_id,
            admission.core_revision,
            admission.generation,
            encoded,
            expires_at,
            at,
        ],
    )
    _insert_event(
        conn,
        admission.turn_id,
        1,
        "turn.started",
        {
            "request_id": admission.request_id,
            "core_id": admission.core_id,
            "core_revision": admission.core_revision,
            "generation": admission.generation,
            "trace_id": admission.trace_id,
            "lease_token": token,
        },
        at=at,
    )
    lease = SessionLease(session_id, admission.turn_id, token, encoded, expires_at, ttl_s)
    return Admitted(lease=lease, owner=facts, created=created, recovered=recovered)


def session_lease(conn: sqlite3.Connection, session_id: str) -> SessionLease | None:
    """The session's current holder, or None when the session is free."""
    row = _one(
        conn,
        f"SELECT {_LEASE_COLUMNS} FROM session_leases WHERE session_id = ? AND owner IS NOT NULL",
        [session_id],
    )
    if row is None:
        return None
    return SessionLease(
        row["session_id"],
        row["turn_id"],
        row["token"],
        row["owner"],
        row["expires_at"],
        row["ttl_s"],
    )


# -- fenced writes of a running turn ------------------------------------------------------


def _fence(conn: sqlite3.Connection, lease: SessionLease) -> bool:
    """Refuse (``LeaseLost``) unless ``lease`` still holds its session; True if cancel was asked."""
    row = _one(
        conn,
        "SELECT t.cancel_requested_at FROM session_leases l JOIN turns t ON t.turn_id = l.turn_id "
        "WHERE l.session_id = ? AND l.token = ? AND l.turn_id = ? AND t.status = 'running'",
        [lease.session_id, lease.token, lease.turn_id],
    )
    if row is None:
        raise LeaseLost("session lease")
    return row["cancel_requested_at"] is not None


def append_message(
    conn: sqlite3.Connection,
    lease: SessionLease,
    *,
    event_seq: int,
    message: ModelMessage,
    event: str,
    detail: Mapping[str, Any] | None,
) -> TurnWrite:
    """Append a transcript message of the lease's turn together with its event (fenced)."""
    cancel_requested = _fence(conn, lease)
    row = _one(
        conn,
        "SELECT COALESCE(MAX(seq), 0) + 1 AS next FROM messages WHERE session_id = ?",
        [lease.session_id],
    )
    seq = int(row["next"]) if row is not None else 1
    at = now(conn)
    conn.execute(
        "INSERT INTO messages (message_id, session_id, seq, role, content, turn_id, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            new_id("msg"),
            lease.session_id,
            seq,
            message.role,
            _json(message.to_json()),
            lease.turn_id,
            at,
        ],
    )
    _insert_event(conn, lease.turn_id, event_seq, event, detail, at=at)
    return TurnWrite(seq, cancel_requested)


def renew(conn: sqlite3.Connection, lease: SessionLease, *, now_epoch: float) -> bool:
    """Move the lease's expiry to now + ttl (fenced); True if a cancel was requested."""
    cancel_requested = _fence(conn, lease)
    conn.execute(
        "UPDATE session_leases SET expires_at = ? + ttl_s, heartbeat_at = ?, updated_at = ? "
        "WHERE session_id = ? AND token = ?",
        [now_epoch, now_epoch, now(conn), lease.session_id, lease.token],
    )
    return cancel_requested


def finish(
    conn: sqlite3.Connection,
    lease: SessionLease,
    result: TurnResult,
    *,
    event_seq: int,
    route: Mapping[str, Any] | None,
) -> TurnResult:
    """Commit the terminal state with its event and delivery intents; release the lease (fenced)."""
    if (result.turn_id, result.session_id) != (lease.turn_id, lease.session_id):
        raise InvalidValue("the result is not the lease's turn")
    _fence(conn, lease)
    committed = _commit_terminal(conn, result, event_seq=event_seq, route=route, detail=None)
    _free(conn, lease.session_id, turn_id=lease.turn_id)
    return committed


def abandon(conn: sqlite3.Connection, lease: SessionLease) -> RecoveredTurn:
    """End the lease's turn ``lost`` (or ``cancelled``) and free its session (fenced)."""
    _fence(conn, lease)
    row = _one(
        conn,
        f"SELECT {_RUNNING_COLUMNS} FROM turns t WHERE t.turn_id = ? AND t.status = 'running'",
        [lease.turn_id],
    )
    if row is None:  # the fence joins a running turn; kept for a clear failure
        raise LeaseLost("session lease")
    return _end_orphan(conn, row, "abandoned")


# -- cancel and owned reads ---------------------------------------------------------------


def owned_state(conn: sqlite3.Connection, scope: PrincipalScope, turn_id: str) -> TurnState | None:
    """The state of a turn the scope owns through its session, else None."""
    where, params = owner_predicate(scope)
    row = _one(
        conn,
        f"SELECT {_STATE_COLUMNS} FROM turns t "
        f"JOIN session_owners o ON o.session_id = t.session_id WHERE t.turn_id = ? AND {where}",
        [turn_id, *params],
    )
    return _state(row) if row is not None else None


def request_cancel(
    conn: sqlite3.Connection, scope: PrincipalScope, turn_id: str
) -> TurnState | None:
    """Record a cancel request on a running turn the scope owns; its state, or None."""
    state = owned_state(conn, scope, turn_id)
    if state is None or state.terminal:
        return state
    conn.execute(
        "UPDATE turns SET cancel_requested_at = COALESCE(cancel_requested_at, ?) "
        "WHERE turn_id = ? AND status = 'running'",
        [now(conn), turn_id],
    )
    return dataclasses.replace(state, cancel_requested=True)


# -- recovery -----------------------------------------------------------------------------


def recover(
    conn: sqlite3.Connection, *, now_epoch: float, instance: str | None
) -> tuple[RecoveredTurn, ...]:
    """End running turns whose holder is gone; with ``instance``, every turn that instance holds.

    The holder of a running turn is its session lease when the lease names
    it, else the turn's own admission columns (turns older than the lease).
    """
    rows = _all(
        conn,
        f"SELECT {_RUNNING_COLUMNS}, COALESCE(l.owner, t.lease_owner) AS owner, "
        "CASE WHEN l.turn_id IS NULL THEN t.lease_expires_at ELSE l.expires_at END AS expires_at "
        "FROM turns t LEFT JOIN session_leases l "
        "ON l.session_id = t.session_id AND l.turn_id = t.turn_id "
        "WHERE t.status = 'running' ORDER BY t.id",
        [],
    )
    recovered: list[RecoveredTurn] = []
    for row in rows:
        gone: Gone | None
        if instance is not None:
            holder = LeaseOwner.decode(row["owner"] or "")
            gone = "shutdown" if holder is not None and holder.instance == instance else None
        else:
            gone = holder_gone(row["owner"], row["expires_at"], now_epoch)
        if gone is not None:
            recovered.append(_end_orphan(conn, row, gone))
    return tuple(recovered)
