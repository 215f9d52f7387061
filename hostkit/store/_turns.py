"""The store's turns group: admission, session leases, fenced transcript writes, terminal records.

Same-session exclusion is durable: a turn holds its session's lease (owner,
fencing token, expiry, heartbeat) from the admission transaction to the
transaction of its terminal record, so two Host processes on one database
never run turns of one session at the same time. Every write of a running
turn carries its ``SessionLease`` and is refused with ``LeaseLost`` once
the lease no longer has that token.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, StoreError, StoreOutcomeUnknown
from hostkit.store import _lease_rows as leases
from hostkit.store import _turn_rows as rows
from hostkit.store._context_values import ObservedStep
from hostkit.store._lease import LeaseOwner
from hostkit.store._turn_values import (
    MAX_EXTENDED_INSTRUCTIONS_CHARS,
    TERMINAL,
    Admitted,
    CarriedContext,
    RecoveredTurn,
    SessionBusy,
    SessionLease,
    TranscriptEntry,
    TurnAdmission,
    TurnState,
    TurnWrite,
    check_digest,
    check_id,
    check_ttl,
)
from hostkit.types import (
    ModelMessage,
    PrincipalScope,
    TurnResult,
    check_key,
    check_route,
    is_message_text,
)

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = ["SqlTurnStore", "TurnStore"]

# Event kinds are dotted names ("provider.completed"); the bound keeps them short.
_MAX_EVENT_KIND = 100


class TurnStore(ABC):
    """What TurnExecution stores, grouped; every adapter implements it.

    Each method is one transaction. Bad input raises ``InvalidValue`` (bounded
    message) and nothing of the call is kept; a fenced write whose lease was
    taken over or released raises ``LeaseLost`` and writes nothing; database
    failures raise ``StoreError`` (``retryable`` set), ``StoreClosed`` after
    the store closed. Cancelling a write may still let it commit (the writer
    may already run it); callers that must know re-read.

    Lease rule (admission and recovery apply the same one, ``holder_gone``): a
    lease counts until a ttl after another Host first noticed it past its
    expiry — a live holder keeps it only by renewing, which voids a notice —
    or until its owner is provably dead on this machine (``LeaseOwner``).
    """

    @abstractmethod
    async def admit(
        self, admission: TurnAdmission, *, owner: LeaseOwner, ttl_s: float
    ) -> Admitted | TurnState | SessionBusy:
        """Admit a turn in one write transaction, or say why not.

        In order: the idempotency key ``(principal_id, request_id)`` — a
        repeat returns the existing ``TurnState`` and nothing else happens;
        the session — a ``ConversationTarget`` is resolved, created or
        switched (``NotFoundOrUnauthorized`` for a session this conversation
        does not own, ``ScopeError`` when the bound session has no durable
        conversation owner), a session id must exist and, for a ``system`` or
        ``delegated_agent`` session, be owned by ``admission.principal_id``
        (``NotFoundOrUnauthorized``, audited, otherwise); the session lease —
        held by a live holder gives ``SessionBusy`` (nothing of the turn is
        written; the binding stays), held by a dead or silent holder ends
        that turn ``lost`` (``cancelled`` if asked) and takes over with the
        next token; then the turn row with its admission lease and the
        ``turn.started`` event (seq 1); the turn row keeps ``admission.route``
        (``route_of``, and recovery's delivery intents). Returns ``Admitted`` with the
        ``SessionLease`` every later write of the turn carries.
        ``ttl_s`` must be in (0, ``MAX_LEASE_TTL_S``]. A COMMIT whose answer
        was lost (a connection that broke) is read back: the admission if it
        landed, else a retryable ``StoreError`` (the request id is still free);
        when it cannot be read back either, a retryable ``StoreOutcomeUnknown``:
        the turn may hold its session (its request id finds it).
        """

    @abstractmethod
    async def find(self, principal_id: str, request_id: str) -> TurnState | None:
        """The turn an idempotency key created, if any (a read; no owner check: Host-only)."""

    @abstractmethod
    async def find_repeat(
        self, principal_id: str, request_id: str, *, core_id: str, message: ModelMessage | None
    ) -> TurnState | None:
        """The turn an idempotency key created, when a request for ``core_id`` with the
        input ``message`` (None: a continuation) repeats it, as an admission checks;
        ``RequestConflict`` when the key named another request; None when it is unused.
        A running turn whose holder is gone is ended first, as an admission ends it.
        """

    @abstractmethod
    async def route_of(self, turn_id: str) -> Mapping[str, Any] | None:
        """The route ``turn_id`` captured at admission (frozen), or None when it was
        unrouted or no such turn exists (a read; no owner check: Host-only).

        An approval's continuation turn carries the paused turn's route with
        it, so its answer reaches the conversation that asked.
        """

    @abstractmethod
    async def session_lease(self, session_id: str) -> SessionLease | None:
        """The session's current holder (as stored now), or None when it is free."""

    @abstractmethod
    async def append_message(
        self,
        lease: SessionLease,
        *,
        event_seq: int,
        message: ModelMessage,
        event: str,
        detail: Mapping[str, Any] | None = None,
        observed: ObservedStep | None = None,
    ) -> TurnWrite:
        """Append one transcript message of the lease's turn with its event ``event_seq`` (fenced).

        The message takes the session's next seq. ``observed`` (the step's
        held decision, its usage and the calibration step) commits in the
        same transaction; ``TurnWrite.step`` says what it did. Returns the
        seq and whether a cancel was requested. ``LeaseLost`` when the lease no longer
        holds the session (the turn was taken over or has ended);
        ``InvalidValue`` when ``event_seq`` was used already by this turn.
        """

    @abstractmethod
    async def extend_instructions(self, lease: SessionLease, *, event_seq: int, text: str) -> bool:
        """Record what the lease's turn added to its pinned instructions (fenced).

        ``text`` (1 to ``MAX_EXTENDED_INSTRUCTIONS_CHARS`` characters of valid
        text) is kept whole with the ``instructions.extended`` event
        ``event_seq``, so a continuation of the turn — run by any process,
        after any restart — sends the instructions the turn sent
        (``extended_instructions``). Returns whether a cancel was requested.
        ``LeaseLost`` and ``InvalidValue`` as for ``append_message``.
        """

    @abstractmethod
    async def extended_instructions(self, turn_id: str) -> str | None:
        """What ``turn_id`` added to its instructions, or None when it added nothing
        (a read; no owner check: Host-only). A record that cannot be read is
        refused (``InvalidValue``), never taken as none.
        """

    @abstractmethod
    async def carried_context(self, turn_id: str) -> CarriedContext:
        """What ``turn_id``'s admission kept for a continuation: the context injected for
        it (``TurnAdmission.injected_context``, whole) and whether it left the bootstrap
        snapshot out (a read; no owner check: Host-only). An approval's continuation
        carries both, so its model calls get what the paused turn's got. A record that
        cannot be read is refused (``InvalidValue``), never taken as none.
        """

    @abstractmethod
    async def renew(self, lease: SessionLease) -> bool:
        """Heartbeat: move the lease's expiry to now + its ttl (fenced).

        Returns True when a cancel was requested for the turn. ``LeaseLost``
        when the lease no longer holds the session.
        """

    @abstractmethod
    async def finish(
        self,
        lease: SessionLease,
        result: TurnResult,
        *,
        event_seq: int,
        route: Mapping[str, Any] | None = None,
        final: TranscriptEntry | None = None,
        observed: ObservedStep | None = None,
    ) -> TurnResult:
        """Commit the terminal record, its event, the delivery intents; release the lease (fenced).

        ``final`` — the turn's last answer with its event — and ``observed``
        — that step's decision, usage and calibration — commit in the same
        transaction (``final.event_seq`` precedes ``event_seq``).
        Exactly one terminal record per turn. A ``completed`` or
        ``needs_user`` result with text and a ``route`` gets one outbox
        intent in the same transaction; a routed ``needs_user`` result paused
        on a pending approval also gets its approval prompt. Returns the
        result as persisted (its ``deliveries`` are the intent ids). ``LeaseLost`` when the lease no
        longer holds the session — whoever took it over recorded the turn.
        """

    @abstractmethod
    async def abandon(self, lease: SessionLease) -> RecoveredTurn:
        """End the lease's turn ``lost`` (``cancelled`` if asked) and free its session (fenced).

        For a holder that can no longer write its turn's own terminal record
        (``finish`` failed): the session is free again at once instead of
        after the lease expires. ``LeaseLost`` when the lease no longer holds
        the session (the turn was recorded already).
        """

    @abstractmethod
    async def request_cancel(
        self, scope: PrincipalScope, turn_id: str, *, token_digest: str | None = None
    ) -> TurnState:
        """Record a durable cancel request for a running turn the scope owns; its state.

        A terminal turn is returned unchanged. ``NotFoundOrUnauthorized``
        (same answer for missing and not yours; the reason is audited).
        With ``token_digest`` (the sha256 of a presented cancellation token's
        nonce) the turn must be the one that token was captured for: any other
        digest is refused the same way (``token_unbound`` in the audit).
        """

    @abstractmethod
    async def state(self, scope: PrincipalScope, turn_id: str) -> TurnState:
        """The durable state of a turn the scope owns, or ``NotFoundOrUnauthorized``."""

    @abstractmethod
    async def awaited_state(self, scope: PrincipalScope, turn_id: str) -> TurnState:
        """``state`` for a caller that waits on the turn, the lease rule applied to its holder.

        A running turn whose holder is gone (its owner provably dead, or a ttl
        past the noticed lapse of its lease) is ended first, as recovery ends
        it, and its record comes back: a waiter gets that record, not "still
        running" until someone else ran recovery. A running one whose holder
        lives says until when (``holder_expires_at``: its lease expiry, or the
        end of its noticed lapse). A read while the holder plainly holds; a
        write only when the rule must notice a lapse or end the turn.
        """

    @abstractmethod
    async def recover(self, *, instance: str | None = None) -> tuple[RecoveredTurn, ...]:
        """End running turns whose holder is gone, releasing their session leases.

        Without ``instance``: turns whose lease expired or whose owner is
        provably dead (the lease rule). With ``instance``: every running turn
        that Host instance holds (its shutdown). Each ends ``lost`` — or
        ``cancelled`` when a cancel was requested, or ``needs_user`` when it
        stopped while its approval was asked — with one terminal event;
        nothing is replayed. A routed turn gets, in the same transaction, its
        approval prompt (``needs_user``) or one notice that its message went
        unanswered (``lost``); ``cancelled`` sends nothing. A turn ends once:
        recovery run again, or by another process, writes nothing more.
        """


class SqlTurnStore(TurnStore):
    """The SQL adapters' TurnStore (lease times from the store's clock, ``RuntimeStore.now``)."""

    def __init__(self, db: RowStore) -> None:
        self._db = db
        self._clock: Callable[[], float] = db.now

    async def admit(
        self, admission: TurnAdmission, *, owner: LeaseOwner, ttl_s: float
    ) -> Admitted | TurnState | SessionBusy:
        if not isinstance(admission, TurnAdmission):
            raise InvalidValue("a TurnAdmission is required")
        if not isinstance(owner, LeaseOwner):
            raise InvalidValue("a LeaseOwner is required")
        ttl = check_ttl(ttl_s)
        clock = self._clock
        try:
            return await self._db.write(
                lambda conn: leases.admit(
                    conn, admission, owner=owner, ttl_s=ttl, now_epoch=clock()
                )
            )
        except NotFoundOrUnauthorized:
            if isinstance(admission.session, str):
                # A session id the principal does not own (a schedule's or child's session
                # is its principal's alone): the caller gets not-found, the audit the reason.
                await self._db.audit_denied_session(
                    admission.principal_id, admission.session, lookup="admit"
                )
            raise
        except StoreOutcomeUnknown:
            # The COMMIT's answer was lost (a connection that broke): read what landed. The
            # admission is ours to go on with if it did; if nothing of it did, admitting
            # again is safe (the request id is still free), so the error says retry.
            try:
                landed = await self._db.read(
                    lambda conn: leases.admitted_by(conn, admission, owner)
                )
            except StoreError as exc:
                # Still unknown (the database is down): the turn may hold its session now.
                unknown = StoreOutcomeUnknown(
                    "the connection broke during the admission's COMMIT and it could not be "
                    f"read back ({exc.message}): the turn may have been admitted; admitting "
                    "the request again is safe"
                )
                unknown.retryable = True
                raise unknown from None
            if landed is not None:
                return landed
            # Admission is idempotent by request id: a turn that landed is found again.
            raise StoreError(
                "the connection broke during the admission's COMMIT and this admission is "
                "not there to go on with; admitting the request again is safe",
                retryable=True,
            ) from None

    async def find(self, principal_id: str, request_id: str) -> TurnState | None:
        principal_id = check_key("principal_id", principal_id)
        request_id = check_id("request_id", request_id)
        return await self._db.read(lambda conn: rows.find_turn(conn, principal_id, request_id))

    async def find_repeat(
        self, principal_id: str, request_id: str, *, core_id: str, message: ModelMessage | None
    ) -> TurnState | None:
        principal_id = check_key("principal_id", principal_id)
        request_id = check_id("request_id", request_id)
        core_id = check_id("core_id", core_id)
        if message is not None and not isinstance(message, ModelMessage):
            raise InvalidValue("a ModelMessage is required")

        clock = self._clock
        return await self._db.write(
            lambda conn: leases.repeat_of(
                conn,
                principal_id,
                request_id,
                core_id=core_id,
                message=message,
                now_epoch=clock(),
            )
        )

    async def route_of(self, turn_id: str) -> Mapping[str, Any] | None:
        turn_id = check_id("turn_id", turn_id)
        return await self._db.read(lambda conn: rows.route_of(conn, turn_id))

    async def session_lease(self, session_id: str) -> SessionLease | None:
        session_id = check_id("session_id", session_id)
        return await self._db.read(lambda conn: leases.session_lease(conn, session_id))

    async def append_message(
        self,
        lease: SessionLease,
        *,
        event_seq: int,
        message: ModelMessage,
        event: str,
        detail: Mapping[str, Any] | None = None,
        observed: ObservedStep | None = None,
    ) -> TurnWrite:
        _check_lease(lease)
        _check_seq(event_seq)
        if not isinstance(message, ModelMessage):
            raise InvalidValue("a ModelMessage is required")
        event = check_id("event", event, limit=_MAX_EVENT_KIND)
        _check_observed(lease, observed)
        return await self._db.write(
            lambda conn: rows.append_message(
                conn,
                lease,
                event_seq=event_seq,
                message=message,
                event=event,
                detail=detail,
                observed=observed,
            )
        )

    async def extend_instructions(self, lease: SessionLease, *, event_seq: int, text: str) -> bool:
        _check_lease(lease)
        _check_seq(event_seq)
        if not is_message_text(text, limit=MAX_EXTENDED_INSTRUCTIONS_CHARS):
            raise InvalidValue(
                "the text added to a turn's instructions must be 1-"
                f"{MAX_EXTENDED_INSTRUCTIONS_CHARS} characters of valid text"
            )
        text = str.__str__(text)
        return await self._db.write(
            lambda conn: rows.extend_instructions(conn, lease, event_seq=event_seq, text=text)
        )

    async def extended_instructions(self, turn_id: str) -> str | None:
        turn_id = check_id("turn_id", turn_id)
        return await self._db.read(
            lambda conn: rows.extended_instructions(conn, turn_id, MAX_EXTENDED_INSTRUCTIONS_CHARS)
        )

    async def carried_context(self, turn_id: str) -> CarriedContext:
        turn_id = check_id("turn_id", turn_id)
        return await self._db.read(lambda conn: rows.carried_context(conn, turn_id))

    async def renew(self, lease: SessionLease) -> bool:
        _check_lease(lease)
        clock = self._clock
        return await self._db.write(lambda conn: leases.renew(conn, lease, now_epoch=clock()))

    async def finish(
        self,
        lease: SessionLease,
        result: TurnResult,
        *,
        event_seq: int,
        route: Mapping[str, Any] | None = None,
        final: TranscriptEntry | None = None,
        observed: ObservedStep | None = None,
    ) -> TurnResult:
        _check_lease(lease)
        _check_observed(lease, observed)
        _check_seq(event_seq)
        check_route(route)
        if not isinstance(result, TurnResult) or result.outcome not in TERMINAL:
            raise InvalidValue("a terminal TurnResult is required")
        if final is not None and (
            not isinstance(final, TranscriptEntry) or final.event_seq >= event_seq
        ):
            raise InvalidValue("final must be a TranscriptEntry whose event precedes the terminal")
        return await self._db.write(
            lambda conn: rows.finish(
                conn,
                lease,
                result,
                event_seq=event_seq,
                route=route,
                final=final,
                observed=observed,
            )
        )

    async def abandon(self, lease: SessionLease) -> RecoveredTurn:
        _check_lease(lease)
        return await self._db.write(lambda conn: rows.abandon(conn, lease))

    async def request_cancel(
        self, scope: PrincipalScope, turn_id: str, *, token_digest: str | None = None
    ) -> TurnState:
        turn_id = check_id("turn_id", turn_id)
        if token_digest is not None:
            check_digest(token_digest, "token_digest")
        return await self._db.owned(
            scope,
            "turn",
            turn_id,
            lambda conn: rows.request_cancel(conn, scope, turn_id, token_digest=token_digest),
            write=True,
            why=None
            if token_digest is None
            else lambda conn: _token_denial(conn, scope, turn_id, token_digest),
        )

    async def state(self, scope: PrincipalScope, turn_id: str) -> TurnState:
        turn_id = check_id("turn_id", turn_id)
        return await self._db.owned(
            scope, "turn", turn_id, lambda conn: rows.owned_state(conn, scope, turn_id)
        )

    async def awaited_state(self, scope: PrincipalScope, turn_id: str) -> TurnState:
        turn_id = check_id("turn_id", turn_id)
        clock = self._clock

        def held(conn: sqlite3.Connection) -> TurnState | None:
            state = rows.owned_state(conn, scope, turn_id)
            if state is None or state.status != "running":
                return state
            until = leases.held_until(conn, turn_id, clock())
            return state if until is None else dataclasses.replace(state, holder_expires_at=until)

        state = await self._db.owned(scope, "turn", turn_id, held)
        if state.status != "running" or state.holder_expires_at is not None:
            return state
        return await self._db.owned(
            scope,
            "turn",
            turn_id,
            lambda conn: leases.awaited_state(conn, scope, turn_id, now_epoch=clock()),
            write=True,
        )

    async def recover(self, *, instance: str | None = None) -> tuple[RecoveredTurn, ...]:
        if instance is not None:
            held = instance = check_id("instance", instance)
            # A read first: a Host that holds no turn (an operator's view) closes without
            # the write lock, which another process may hold.
            if not await self._db.read(lambda conn: leases.holds_running(conn, held)):
                return ()
        clock = self._clock
        return await self._db.write(
            lambda conn: leases.recover(conn, now_epoch=clock(), instance=instance)
        )


def _check_observed(lease: SessionLease, observed: ObservedStep | None) -> None:
    if observed is None:
        return
    if not isinstance(observed, ObservedStep):
        raise InvalidValue("observed must be an ObservedStep")
    observation = observed.observation
    if (observation.session_id, observation.turn_id) != (lease.session_id, lease.turn_id):
        raise InvalidValue("the observation is not of the lease's turn")


def _check_lease(lease: object) -> None:
    if not isinstance(lease, SessionLease):
        raise InvalidValue("a SessionLease is required")


def _check_seq(seq: object) -> None:
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq < 2**63:
        raise InvalidValue("event_seq must be a positive integer")


def _token_denial(
    conn: sqlite3.Connection, scope: PrincipalScope, turn_id: str, token_digest: str
) -> str | None:
    """``token_unbound`` when the scope owns the turn but the token is not its own."""
    if rows.owned_state(conn, scope, turn_id) is None:
        return None
    return rows.token_unbound(conn, turn_id, token_digest)
