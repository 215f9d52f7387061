"""The SQL of the session lease: admission, holder checks, renewal, recovery.

Run on the store's writer (or reader) thread inside one transaction the
adapter opened; rows are read by column name. See ``_turn_rows`` for the
lease invariant and the turn records these functions write.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from hostkit.errors import NotFoundOrUnauthorized, RequestConflict, ScopeError
from hostkit.store._approval_rows import OPEN_CALL, has_open_calls
from hostkit.store._attachments import attached_refs, keep_attachments
from hostkit.store._lease import LeaseOwner, owner_is_dead
from hostkit.store._owned import now
from hostkit.store._sessions import (
    OwnerFacts,
    bind_conversation,
    check_principal,
    owner_facts,
    owner_facts_of,
)
from hostkit.store._turn_rows import (
    RUNNING_COLUMNS,
    Gone,
    all_rows,
    encode_route,
    end_orphan,
    fence,
    find_turn,
    input_digest,
    insert_events,
    insert_message,
    one_row,
    owned_state,
    record_injected_context,
    same_request,
)
from hostkit.store._turn_values import (
    INTERRUPTED,
    Admitted,
    ConversationTarget,
    RecoveredTurn,
    SessionBusy,
    SessionLease,
    TurnAdmission,
    TurnState,
)
from hostkit.types import ModelMessage, PrincipalScope

__all__ = [
    "admit",
    "admitted_by",
    "awaited_state",
    "held_until",
    "holder_gone",
    "recover",
    "renew",
    "repeat_of",
    "session_lease",
    "shown_status",
]

_LEASE_COLUMNS = "session_id, token, owner, turn_id, expires_at, ttl_s, heartbeat_at"


def holder_gone(
    conn: sqlite3.Connection, held: sqlite3.Row, now_epoch: float, *, notice: bool = True
) -> Gone | float:
    """Why the holder of ``held`` (a lease row) no longer counts, or until when it does.

    The rule every adapter applies. A holder whose owner is provably dead on
    this machine loses its lease at once. Past its expiry, a lease ends only
    a ttl after its lapse was first *noticed*: the expiry alone cannot tell a
    silent holder from one that could not renew because the database was
    unreachable (a restart, a failover, a frozen server), and the first Host
    to reach the database again would take over every live turn. So the first
    look past the expiry records the notice (in the caller's write
    transaction), and the holder has a ttl of reachable database to renew; a
    renewal moves the expiry, which voids the notice. A holder that is gone
    (stopped, paused, cut off from the database alone) loses its lease a ttl
    after the notice.

    A turn older than the lease table (no lease row names it, or its row was
    migrated and never heartbeat) ends at its expiry. ``owner_is_dead`` reads
    ``/proc``: this runs on the database thread, never on the event loop.
    ``notice=False`` is the same rule for a read, which writes nothing: a lapse
    not noticed yet counts as noticed now (the holder still has its ttl).
    """
    expires_at = held["expires_at"]
    if expires_at is not None and expires_at > now_epoch:
        return "owner_dead" if owner_is_dead(held["owner"]) else float(expires_at)
    if owner_is_dead(held["owner"]):
        return "owner_dead"
    if expires_at is None or held["heartbeat_at"] is None:
        return "lease_expired"
    noticed = _lapse_noticed(conn, held, now_epoch, record=notice)
    if noticed + held["ttl_s"] <= now_epoch:
        return "lease_expired"
    return float(noticed + held["ttl_s"])


def _lapse_noticed(
    conn: sqlite3.Connection, held: sqlite3.Row, now_epoch: float, *, record: bool
) -> float:
    """When the lapse of ``held``'s current expiry was first noticed: now if never (recorded
    when ``record``)."""
    key = [held["session_id"], held["token"]]
    row = one_row(
        conn,
        "SELECT lapse_noticed_at FROM session_leases "
        "WHERE session_id = ? AND token = ? AND lapsed_expiry = expires_at",
        key,
    )
    if row is not None:
        return float(row["lapse_noticed_at"])
    if not record:
        return now_epoch
    conn.execute(
        "UPDATE session_leases SET lapse_noticed_at = ?, lapsed_expiry = expires_at "
        "WHERE session_id = ? AND token = ?",
        [now_epoch, *key],
    )
    return now_epoch


@dataclasses.dataclass(frozen=True, slots=True)
class _Bound:
    """A bound conversation's session as admission needs it, read in one statement."""

    target: ConversationTarget
    facts: OwnerFacts
    lease: sqlite3.Row | None
    open_calls: bool
    # Whether a turn with this request's key exists (``repeat_of`` then says which).
    repeated: bool


def _bound_session(conn: sqlite3.Connection, admission: TurnAdmission) -> _Bound | None:
    """The session a conversation already bound (``select="bound"``), its owner, its lease,
    whether it has an open call and whether the request's key was used, in one statement;
    None on any other path.

    Every turn after a conversation's first takes this path: one statement where
    ``repeat_of``, ``_resolve_session``, the lease and ``has_open_calls`` take five
    (each one a hand-over of the interpreter lock between the writer's thread and the
    loop). The owner is checked by the caller, after a repeat was answered.
    """
    target = admission.session
    if not isinstance(target, ConversationTarget) or target.select != "bound":
        return None
    row = one_row(
        conn,
        "SELECT b.session_id, o.owner_kind, o.principal_id, o.channel, o.conversation_key, "
        "o.parent_session_id, o.parent_turn_id, l.token, l.owner, l.turn_id, l.expires_at, "
        "l.ttl_s, l.heartbeat_at, EXISTS (SELECT 1 FROM approvals WHERE "
        f"approvals.session_id = b.session_id AND {OPEN_CALL}) AS open_calls, "
        "EXISTS (SELECT 1 FROM turns WHERE turns.principal_id = ? AND turns.request_id = ?) "
        "AS repeated FROM conversation_bindings b "
        "LEFT JOIN session_owners o ON o.session_id = b.session_id "
        "LEFT JOIN session_leases l ON l.session_id = b.session_id "
        "WHERE b.channel = ? AND b.conversation_key = ?",
        [admission.principal_id, admission.request_id, target.channel, target.conversation_key],
    )
    if row is None:
        return None
    lease = row if row["token"] is not None else None
    facts = owner_facts_of(row)
    return _Bound(target, facts, lease, bool(row["open_calls"]), bool(row["repeated"]))


def _owned_by(facts: OwnerFacts, target: ConversationTarget) -> OwnerFacts:
    """``facts``, when they name ``target`` as the session's durable owner."""
    if (facts.owner_kind, facts.channel, facts.conversation_key) != (
        target.owner_kind,
        target.channel,
        target.conversation_key,
    ):
        raise ScopeError("the conversation's session has no durable conversation owner")
    return facts


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
        if owner is None:
            raise ScopeError("the conversation's session has no durable conversation owner")
        return session_id, created, _owned_by(owner, target)
    owner = owner_facts(conn, target)
    if owner is None or owner.owner_kind == "legacy_local":
        raise NotFoundOrUnauthorized("session")
    # A schedule's or child's session admits only its own principal's turns.
    check_principal(owner, admission.principal_id)
    return target, False, owner


def admit(
    conn: sqlite3.Connection,
    admission: TurnAdmission,
    *,
    owner: LeaseOwner,
    ttl_s: float,
    now_epoch: float,
) -> Admitted | TurnState | SessionBusy:
    """One transaction: idempotency check, the input's attachments kept (``InvalidTurnRequest``
    when one is gone), session binding, session lease, turn (with the route it
    captured), ``turn.started``.

    A repeated key returns the existing turn before anything else happens (a
    running one whose holder is gone ended first, as recovery would), or
    raises ``RequestConflict`` when it was used for a different request. A
    session held by a live holder returns ``SessionBusy`` (the binding stays).
    A holder that is gone (``holder_gone``: its owner provably dead, or a ttl
    past the notice that its lease lapsed) has its turn ended first and the
    session taken over with the next token.
    """
    bound = _bound_session(conn, admission)
    if bound is None or bound.repeated:
        existing = repeat_of(
            conn,
            admission.principal_id,
            admission.request_id,
            core_id=admission.core_id,
            message=admission.input,
            now_epoch=now_epoch,
        )
        if existing is not None:
            return existing
    open_calls: bool | None  # None: not read yet
    if bound is not None:
        session_id, created = bound.facts.session_id, False
        facts = _owned_by(bound.facts, bound.target)
        check_principal(facts, admission.principal_id)
        held, open_calls = bound.lease, bound.open_calls
    else:
        session_id, created, facts = _resolve_session(conn, admission)
        held = one_row(
            conn,
            f"SELECT {_LEASE_COLUMNS} FROM session_leases WHERE session_id = ?",
            [session_id],
        )
        open_calls = False if created else None
    recovered: tuple[RecoveredTurn, ...] = ()
    if held is not None and held["owner"] is not None:
        gone = holder_gone(conn, held, now_epoch)
        if not isinstance(gone, str):
            return SessionBusy(session_id, held["turn_id"], gone)
        orphan = one_row(
            conn,
            f"SELECT {RUNNING_COLUMNS} FROM turns t WHERE t.turn_id = ? AND t.status = 'running'",
            [held["turn_id"]],
        )
        if orphan is not None:
            recovered = (end_orphan(conn, orphan, gone),)
    # Admitted: the session references the turn's attachments from here on, also while
    # its input waits for the core's input slot (not before: a busy session's answer
    # commits, and an upload it took would be neither pending nor referenced). One
    # reclaimed since the turn's check refuses it; the transaction rolls back.
    refs = attached_refs(admission.input, unique=False)
    keep_attachments(conn, admission.principal_id, session_id, refs, required=True)
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
        "generation, status, lease_owner, lease_expires_at, started_at, cancellation_digest, "
        "route) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
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
            admission.cancellation_digest,
            encode_route(admission.route),
        ],
    )
    started = {
        "request_id": admission.request_id,
        "core_id": admission.core_id,
        "core_revision": admission.core_revision,
        "generation": admission.generation,
        "trace_id": admission.trace_id,
        "lease_token": token,
    }
    events: list[tuple[int, str, Mapping[str, Any] | None]] = [(1, "turn.started", started)]
    if admission.input is not None and admission.input_deferred:
        # Persisted after the core's input slot (normalized); only its digest now, so a
        # repeat of this request is still recognised.
        events.append((2, "input.admitted", {"sha256": input_digest(admission.input)}))
    elif admission.input is not None:
        insert_message(conn, session_id, admission.turn_id, admission.input, at=at)
        events.append((2, "input.persisted", None))
    insert_events(conn, admission.turn_id, events, at=at)
    next_event_seq = len(events) + 1
    if admission.injected_context or not admission.bootstrap:
        # Kept whole (not cut as event details are): an approval's continuation carries it.
        record_injected_context(
            conn,
            admission.turn_id,
            next_event_seq,
            admission.injected_context,
            bootstrap=admission.bootstrap,
            at=at,
        )
        next_event_seq += 1
    lease = SessionLease(session_id, admission.turn_id, token, encoded, expires_at, ttl_s)
    return Admitted(
        lease=lease,
        owner=facts,
        created=created,
        recovered=recovered,
        next_event_seq=next_event_seq,
        # Recovery above may have settled calls: then the read before it is stale.
        open_approvals=has_open_calls(conn, session_id)
        if open_calls is None or recovered
        else open_calls,
    )


def repeat_of(
    conn: sqlite3.Connection,
    principal_id: str,
    request_id: str,
    *,
    core_id: str,
    message: ModelMessage | None,
    now_epoch: float,
) -> TurnState | None:
    """The turn a repeated key created (None while the key is unused), or
    ``RequestConflict`` when the key named another request.

    A turn still ``running`` whose holder is gone is ended first, as recovery
    would end it: every repeat gets that record, not a "still running" that
    would last until someone else ran recovery. A running turn whose holder
    lives comes back with when asking again can tell more (``holder_expires_at``:
    its lease expiry, or the end of its noticed lapse).
    """
    existing = find_turn(conn, principal_id, request_id)
    if existing is None:
        return None
    if not same_request(conn, existing, core_id, message):
        raise RequestConflict(request_id)
    return _lease_ruled(
        conn, existing, now_epoch, lambda: find_turn(conn, principal_id, request_id)
    )


def awaited_state(
    conn: sqlite3.Connection, scope: PrincipalScope, turn_id: str, *, now_epoch: float
) -> TurnState | None:
    """The state of a turn the scope owns, for a caller waiting on it (None: not owned).

    The lease rule applied, as a repeat's admission applies it: a running
    turn whose holder is gone is ended first and its record comes back; one
    whose holder lives says until when (``holder_expires_at``).
    """
    state = owned_state(conn, scope, turn_id)
    if state is None:
        return None
    return _lease_ruled(conn, state, now_epoch, lambda: owned_state(conn, scope, turn_id))


def held_until(conn: sqlite3.Connection, turn_id: str, now_epoch: float) -> float | None:
    """The lease expiry of a running turn's holder while it plainly still holds (not past its
    expiry, owner not provably dead); None when only the lease rule can tell (a write)."""
    holder = one_row(conn, _RUNNING_HOLDERS.format(turn=" AND t.turn_id = ?"), [turn_id])
    if holder is None or holder["expires_at"] is None or holder["expires_at"] <= now_epoch:
        return None
    return None if owner_is_dead(holder["owner"]) else float(holder["expires_at"])


def shown_status(conn: sqlite3.Connection, turn_id: str, status: str, now_epoch: float) -> str:
    """``status`` as a read shows it: ``INTERRUPTED`` for a running turn the lease rule
    (``holder_gone``) would end now: its owner provably dead, or its lapse noticed a ttl ago.

    A read writes nothing (an operator's view works while another process holds the write
    lock), so it cannot end the turn or notice a lapse; a holder merely late to renew (the
    database was locked or unreachable) still runs, and is shown running, as the rule keeps
    it. Recovery, or the session's next admission, ends an interrupted one.
    """
    if status != "running":
        return status
    holder = one_row(conn, _RUNNING_HOLDERS.format(turn=" AND t.turn_id = ?"), [turn_id])
    if holder is None or not isinstance(holder_gone(conn, holder, now_epoch, notice=False), str):
        return status
    return INTERRUPTED


def _lease_ruled(
    conn: sqlite3.Connection,
    state: TurnState,
    now_epoch: float,
    reread: Callable[[], TurnState | None],
) -> TurnState:
    """``state`` after the lease rule: ended first when its holder is gone (``reread`` gives
    its record), else with its holder's expiry (``holder_expires_at``)."""
    if state.status != "running":
        return state
    holder = one_row(conn, _RUNNING_HOLDERS.format(turn=" AND t.turn_id = ?"), [state.turn_id])
    if holder is None:
        return state
    gone = holder_gone(conn, holder, now_epoch)
    if not isinstance(gone, str):
        return dataclasses.replace(state, holder_expires_at=gone)
    end_orphan(conn, holder, gone)
    return reread() or state


def admitted_by(
    conn: sqlite3.Connection, admission: TurnAdmission, owner: LeaseOwner
) -> Admitted | None:
    """``admission`` as its transaction left it, if that committed and ``owner`` still holds
    the session for it; None when nothing of it landed (or it was taken over since).

    Read back after a COMMIT whose answer was lost. The turn of a dead holder
    the admission may have ended is not known here (``recovered`` is empty);
    that turn's own record says how it ended.
    """
    encoded = owner.encode()
    held = one_row(
        conn,
        f"SELECT {_LEASE_COLUMNS} FROM session_leases WHERE turn_id = ? AND owner = ?",
        [admission.turn_id, encoded],
    )
    turn = one_row(
        conn,
        "SELECT status FROM turns WHERE turn_id = ? AND principal_id = ? AND request_id = ?",
        [admission.turn_id, admission.principal_id, admission.request_id],
    )
    if held is None or turn is None or turn["status"] != "running":
        return None
    session_id = str(held["session_id"])
    facts = owner_facts(conn, session_id)
    if facts is None:
        return None
    last = conn.execute(
        "SELECT MAX(seq) FROM turn_events WHERE turn_id = ?", [admission.turn_id]
    ).fetchone()[0]
    lease = SessionLease(
        session_id, admission.turn_id, held["token"], encoded, held["expires_at"], held["ttl_s"]
    )
    return Admitted(
        lease=lease,
        owner=facts,
        next_event_seq=int(last or 1) + 1,
        open_approvals=has_open_calls(conn, session_id),
    )


def session_lease(conn: sqlite3.Connection, session_id: str) -> SessionLease | None:
    """The session's current holder, or None when the session is free."""
    row = one_row(
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


def renew(conn: sqlite3.Connection, lease: SessionLease, *, now_epoch: float) -> bool:
    """Move the lease's expiry to now + ttl (fenced); True if a cancel was requested."""
    cancel_requested = fence(conn, lease)
    conn.execute(
        "UPDATE session_leases SET expires_at = ? + ttl_s, heartbeat_at = ?, updated_at = ? "
        "WHERE session_id = ? AND token = ?",
        [now_epoch, now_epoch, now(conn), lease.session_id, lease.token],
    )
    return cancel_requested


# -- recovery -----------------------------------------------------------------------------


def recover(
    conn: sqlite3.Connection, *, now_epoch: float, instance: str | None
) -> tuple[RecoveredTurn, ...]:
    """End running turns whose holder is gone; with ``instance``, every turn that instance holds.

    The holder of a running turn is its session lease when the lease names
    it, else the turn's own admission columns (turns older than the lease).
    """
    if instance is None:
        return _end_gone(conn, now_epoch)
    return tuple(end_orphan(conn, row, "shutdown") for row in _held_by(conn, instance))


def holds_running(conn: sqlite3.Connection, instance: str) -> bool:
    """Whether ``instance`` holds a running turn (a read: a Host that ran none closes
    without the write lock, so a read-only view ends while another process writes)."""
    return bool(_held_by(conn, instance))


def _held_by(conn: sqlite3.Connection, instance: str) -> list[sqlite3.Row]:
    """The running turns ``instance`` holds, with their holder."""
    return [
        row
        for row in all_rows(conn, _RUNNING_HOLDERS.format(turn=""), [])
        if (holder := LeaseOwner.decode(row["owner"] or "")) is not None
        and holder.instance == instance
    ]


# Running turns with their holder: the session lease when it names the turn, else the
# turn's own admission columns.
_RUNNING_HOLDERS = (
    f"SELECT {RUNNING_COLUMNS}, COALESCE(l.owner, t.lease_owner) AS owner, "
    "CASE WHEN l.turn_id IS NULL THEN t.lease_expires_at ELSE l.expires_at END AS expires_at, "
    "l.token, l.ttl_s, l.heartbeat_at "
    "FROM turns t LEFT JOIN session_leases l "
    "ON l.session_id = t.session_id AND l.turn_id = t.turn_id "
    "WHERE t.status = 'running'{turn} ORDER BY t.id"
)


def _end_gone(conn: sqlite3.Connection, now_epoch: float) -> tuple[RecoveredTurn, ...]:
    """End the running turns whose holder is gone (the lease rule)."""
    recovered: list[RecoveredTurn] = []
    for row in all_rows(conn, _RUNNING_HOLDERS.format(turn=""), []):
        gone = holder_gone(conn, row, now_epoch)
        if isinstance(gone, str):
            recovered.append(end_orphan(conn, row, gone))
    return tuple(recovered)
