"""This Host's side of the session lease: admitting, waiting, heartbeating, abandoning.

The lease itself lives in the store (``TurnStore``); ``LeaseHolder`` is what
TurnExecution does with it: build the admission, run it (through the
AuthorityResolver for conversations, which mints the scope), wait when the
session is busy, renew the lease while a turn runs, and end a turn this Host
can no longer record so its session does not stay blocked.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import anyio

from hostkit._boot_clock import boot_clock
from hostkit._renewal import RenewalPace
from hostkit.authority import AdmittedTurn, AuthorityResolver, conversation_principal
from hostkit.errors import (
    HostkitError,
    InvalidTurnRequest,
    InvalidValue,
    LeaseLost,
    NotFoundOrUnauthorized,
    ScopeError,
    StoreError,
    StoreOutcomeUnknown,
    TurnRejected,
)
from hostkit.store import (
    Admitted,
    ConversationTarget,
    LeaseOwner,
    RuntimeStore,
    SessionBusy,
    SessionLease,
    TurnAdmission,
    TurnState,
)
from hostkit.turns._active import ActiveTurn
from hostkit.turns._admission import AdmissionTicket, SessionAdmission
from hostkit.turns._attachments import input_message
from hostkit.turns._core import PinnedCore
from hostkit.types import ConversationFacts, PrincipalScope, TurnRequest, session_select

__all__ = ["Admission", "LeaseHolder"]

T = TypeVar("T")

_log = logging.getLogger("hostkit.turns")
_TAKEN_OVER = "the session was taken over by another Host (this Host's lease lapsed)"
ON_REQUEST = "cancelled on request"
_LAPSED_UNDER_EFFECT = (
    "this Host could not renew its session lease while an effect ran (the database was "
    "unreachable): the effect was stopped before another Host could take the session over"
)
# How long past the lease's lapse (on this Host's boot clock), in ttls, a running effect is
# cut when renewals keep failing: another Host takes the session over no sooner than a ttl
# after the lapse, and the renewal try in flight then may hold the cut back by a third of
# one (its own bound), leaving the last third for the effect to stop.
_EFFECT_CUT = 1 / 3
# Turns whose admission may have landed unseen, remembered at most (each is a COMMIT whose
# answer a broken connection lost while the database could not be read: rare).
_UNSEEN_KEPT = 1024
# Leases of turns whose end could not be written, remembered at most: a session never
# asked for again would keep its entry for the life of the process. One forgotten waits
# out its lease (or this Host's shutdown, or the next process's recovery), as before.
_ABANDONED_KEPT = 1024

Admission = AdmittedTurn | TurnState | SessionBusy


class LeaseHolder:
    """Admission and session leases for one TurnExecution (one Host instance).

    ``ttl_s`` is the session lease's time to live (renewed every third of
    it); ``admission_timeout_s`` bounds how long a turn waits for a busy
    session; ``abandon_timeout_s`` bounds ending a turn that lost its driver.
    """

    def __init__(
        self,
        *,
        store: RuntimeStore,
        authority: AuthorityResolver,
        instance_id: str,
        owner: LeaseOwner | None,
        ttl_s: float,
        admission_timeout_s: float,
        abandon_timeout_s: float,
    ) -> None:
        self._store = store
        self._authority = authority
        self.instance_id = instance_id
        self._owner = owner
        self.ttl_s = ttl_s
        self.waiting = SessionAdmission(wait_timeout_s=admission_timeout_s)
        self._abandon_timeout_s = abandon_timeout_s
        # Leases of turns this Host stopped driving without a terminal record (the store
        # failed): the next local admission of their session ends them first. In arrival
        # order, the oldest forgotten past ``_ABANDONED_KEPT``.
        self._abandoned: dict[str, SessionLease] = {}
        # Turns whose admission may have landed unseen (its COMMIT's answer was lost and
        # could not be read back): should one hold its session, nobody drives it, so the
        # next local admission of that session ends it as an abandoned one. In arrival
        # order, the oldest forgotten past ``_UNSEEN_KEPT`` (its session then waits out
        # the lease, as before).
        self._unseen: dict[str, None] = {}

    async def owner(self) -> LeaseOwner:
        """This Host as a lease owner (reads ``/proc`` once, off the event loop)."""
        if self._owner is None:
            self._owner = await anyio.to_thread.run_sync(LeaseOwner.current, self.instance_id)
        return self._owner

    # -- admission --------------------------------------------------------------------

    def principal_id(self, request: TurnRequest) -> str:
        """The idempotency principal of ``request``; ``TurnRejected`` for forged authority."""
        try:
            if isinstance(request.principal, ConversationFacts):
                return conversation_principal(request.principal)
            return self._authority.verify(request.principal).principal_id
        except ScopeError as exc:
            raise TurnRejected(exc.message) from exc

    def bound_scope(self, request: TurnRequest) -> PrincipalScope | None:
        """The verified scope of a non-conversation request (None for conversations)."""
        if isinstance(request.principal, ConversationFacts):
            return None
        try:
            scope = self._authority.verify(request.principal)
        except ScopeError as exc:
            raise TurnRejected(exc.message) from exc
        if request.session != "bound":
            raise TurnRejected("only conversations select a session; this scope is bound")
        if scope.session_id is None:
            raise TurnRejected("the principal is not bound to a session")
        return scope

    def admission(
        self,
        request: TurnRequest,
        principal_id: str,
        scope: PrincipalScope | None,
        core: PinnedCore,
        *,
        turn_id: str,
        trace_id: str,
        cancellation_digest: str,
    ) -> TurnAdmission:
        """What the admission transaction records for ``request`` pinned to ``core``."""
        try:
            session: ConversationTarget | str
            if isinstance(request.principal, ConversationFacts):
                session = ConversationTarget(
                    request.principal.channel,
                    request.principal.conversation_key,
                    session_select(request.session),
                )
            else:
                session = (scope.session_id if scope is not None else None) or ""
            return TurnAdmission(
                turn_id=turn_id,
                request_id=request.request_id,
                principal_id=principal_id,
                core_id=core.core_id,
                core_revision=core.core_revision,
                generation=core.generation,
                session=session,
                trace_id=trace_id,
                cancellation_digest=cancellation_digest,
                route=request.route,
                injected_context=request.injected_context,
                bootstrap=request.bootstrap,
                # An ordinary turn's input is durable with its admission (one transaction),
                # unless the core's input slot normalizes it first (persisted after it).
                input=input_message(request) if request.continues is None else None,
                input_deferred=core.slots is not None and core.slots.declared("input"),
            )
        except (ScopeError, InvalidValue) as exc:
            raise TurnRejected(exc.message) from exc

    async def admit(
        self, request: TurnRequest, admission: TurnAdmission, scope: PrincipalScope | None
    ) -> Admission:
        """Run the admission transaction; errors before ``turn.started`` become ``TurnRejected``."""
        owner = await self.owner()
        try:
            if scope is None:
                if not isinstance(request.principal, ConversationFacts):
                    raise TurnRejected("the principal is neither a scope nor conversation facts")
                return await self._authority.admit_conversation(
                    request.principal, admission, owner=owner, ttl_s=self.ttl_s
                )
            # A verified scope is bound to its session already: nothing is minted here.
            self._authority.verify(scope)
            outcome = await self._store.turns.admit(admission, owner=owner, ttl_s=self.ttl_s)
            return AdmittedTurn(outcome, scope) if isinstance(outcome, Admitted) else outcome
        except NotFoundOrUnauthorized as exc:
            raise TurnRejected("the requested session is not available") from exc
        except InvalidTurnRequest:
            raise  # an attachment reclaimed since the turn's check: refused as a missing one
        except (ScopeError, InvalidValue) as exc:
            raise TurnRejected(exc.message) from exc
        except StoreError as exc:
            # The admission transaction rolled back whole (a COMMIT whose answer was lost was
            # read back by the store first): nothing of the turn exists, so the request id
            # stays free for a retry (which the store's error says is worth it). Unless it
            # could not be read back: then the turn may hold its session, remembered here.
            if isinstance(exc, StoreOutcomeUnknown):
                self._unseen[admission.turn_id] = None
                if len(self._unseen) > _UNSEEN_KEPT:
                    del self._unseen[next(iter(self._unseen))]
            rejected = TurnRejected(f"the store could not admit the turn: {exc.message}")
            rejected.retryable = exc.retryable
            raise rejected from exc

    async def await_turn(self, busy: SessionBusy, ticket: AdmissionTicket) -> None:
        """After ``SessionBusy``: return when asking again is worth it (bounded by the ticket).

        A session held by a turn this Host abandoned is freed at once.
        """
        if await self.end_abandoned(busy.holder_turn_id, busy.session_id):
            return
        await ticket.wait(busy.session_id)

    async def end_abandoned(self, turn_id: str, session_id: str) -> bool:
        """End ``turn_id`` ``lost`` now if this Host gave up on recording it (``leave``)
        or never saw its admission land: True once its session is free. False for any
        other turn, or while the store still fails (the lease is left again)."""
        stale = self._abandoned.pop(turn_id, None)
        if stale is None and turn_id in self._unseen:
            stale = await self._landed_unseen(turn_id, session_id)
        return stale is not None and await self.abandon(stale)

    async def _landed_unseen(self, turn_id: str, session_id: str) -> SessionLease | None:
        """The lease of ``turn_id`` (whose admission this Host never saw land) if it holds
        ``session_id`` for this Host; None otherwise, or while the store still fails."""
        try:
            with anyio.fail_after(self._abandon_timeout_s):
                lease = await self._store.turns.session_lease(session_id)
        except (HostkitError, TimeoutError) as exc:
            _log.warning("turn %s: could not read its session's lease: %s", turn_id, _reason(exc))
            return None
        # Known now: it holds the session (ended next), or it never did, or no longer does.
        self._unseen.pop(turn_id, None)
        owner = await self.owner()
        if lease is None or (lease.turn_id, lease.owner) != (turn_id, owner.encode()):
            return None
        return lease

    # -- running turns ----------------------------------------------------------------

    async def heartbeating(
        self,
        active: ActiveTurn,
        body: Callable[[], Awaitable[T]],
        on_lost: Callable[[ActiveTurn], None],
    ) -> T:
        """Run ``body`` while the turn's session lease is renewed every third of its ttl.

        ``on_lost`` runs when a renewal finds the lease taken over, before the
        turn is stopped. ``body``'s exceptions propagate as themselves; the
        heartbeat never raises.
        """
        interval = active.lease.ttl_s / 3
        if active.held_until is None:  # as admitted: the store's expiry
            expires_at = active.lease.expires_at
            active.held_until = boot_clock() + expires_at - self._store.now()
            active.held_expiry = expires_at
        return await _beside(lambda: self._heartbeat(active, on_lost), body, after=interval)

    async def keeping(self, active: ActiveTurn, finish: Callable[[], Awaitable[T]]) -> T:
        """Run ``finish`` (the terminal write) while the session lease is kept alive.

        A terminal write slowed past the lease (a busy database, writes rerun after
        lost serialisation races) must not let another Host take over a turn this
        live Host is ending. The first renewal comes after a sixth of the ttl (the
        last heartbeat may be a third old), then every third; a renewal that finds
        the lease gone stops renewing: the terminal write's own fence then decides.
        Exceptions propagate as themselves.
        """
        interval = active.lease.ttl_s / 3
        return await _beside(lambda: self._keep_alive(active), finish, after=interval / 2)

    async def _keep_alive(self, active: ActiveTurn) -> None:
        """Renew now, then every ttl/3, until the terminal write ends; never raises."""
        pace = _pace(active.lease, self._store.now())
        said = _RenewalLog(active.context.turn_id)
        while True:
            start = anyio.current_time()
            try:
                with anyio.fail_after(pace.limit(start)):
                    await self._store.turns.renew(active.lease)
            except LeaseLost:
                return
            except Exception as exc:
                said.failed(exc)
                await anyio.sleep(pace.failed(exc))
            else:
                said.renewed()
                pace.renewed(start)
                await anyio.sleep(active.lease.ttl_s / 3)

    async def still_held(self, active: ActiveTurn) -> None:
        """Before an effect starts: ``LeaseLost`` if the session was taken over meanwhile.

        Free while the last renewal still holds the lease. Past it (this process
        was paused: a stalled VM, a stopped process, a blocked loop, a machine
        that slept) another Host may have taken the session over and ended this
        turn: the lease is renewed now, fenced, and an effect of a turn that lost
        it never starts. "Still holds" by two clocks, so neither alone can keep a
        lapsed lease: ``boot_clock`` (anyio's clock stops while the machine
        sleeps or its VM is paused) and the store's clock, the one the expiry
        was written in and other Hosts compare it with (it may step ahead).
        """
        if (
            active.held_until is not None
            and active.held_expiry is not None
            and boot_clock() < active.held_until
            and self._store.now() < active.held_expiry
        ):
            return
        since, at = boot_clock(), self._store.now()
        with anyio.fail_after(_renewal_bound(active.lease)):
            await self._store.turns.renew(active.lease)
        _renewed(active, since, at)

    async def _heartbeat(self, active: ActiveTurn, on_lost: Callable[[ActiveTurn], None]) -> None:
        """Renew now, then every ttl/3; stop the turn if it was lost or a cancel was recorded,
        or if an effect still runs when another Host may soon take the session over."""
        pace = _pace(active.lease, self._store.now())
        said = _RenewalLog(active.context.turn_id)
        while True:
            start = anyio.current_time()
            since, at = boot_clock(), self._store.now()
            try:
                with anyio.fail_after(pace.limit(start)):
                    cancel_requested = await self._store.turns.renew(active.lease)
            except LeaseLost:
                on_lost(active)
                active.stop(_TAKEN_OVER, "host")
                return
            except Exception as exc:
                # Transient (a busy writer, a slow disk, a database restarting): retried
                # promptly, while the lease still has a margin left, and past it (another
                # Host takes the session over only a ttl after noticing the lapse). Should
                # that happen, the next renewal says so and the fence refuses this turn's writes.
                said.failed(exc)
                if _effect_left(active) <= 0:
                    # This Host cannot tell an outage from a partition that cut only it off:
                    # another Host may take the session over a ttl after the lapse, and an
                    # effect still running here would act beside that Host's turn. It is
                    # cut while no takeover can have begun (a model step rides it out).
                    _log.warning(
                        "turn %s: its session lease lapsed and could not be renewed while an "
                        "effect ran: the effect is stopped before another Host can take the "
                        "session over",
                        active.context.turn_id,
                    )
                    active.stop(_LAPSED_UNDER_EFFECT, "host")
                    return
                await anyio.sleep(min(pace.failed(exc), _effect_left(active)))
            else:
                said.renewed()
                if cancel_requested:
                    active.stop(ON_REQUEST, "user")
                pace.renewed(start)
                _renewed(active, since, at)
                await anyio.sleep(active.lease.ttl_s / 3)

    async def abandon(self, lease: SessionLease, *, within_s: float | None = None) -> bool:
        """End a turn this Host can no longer record (``lost``); True once its session is free.

        Bounded (``within_s``: a turn's end passes what is left of its own bound)
        and quiet: when the store still fails, the lease is remembered (``leave``).
        """
        bound_s = (
            self._abandon_timeout_s if within_s is None else min(within_s, self._abandon_timeout_s)
        )
        with anyio.move_on_after(bound_s, shield=True):
            try:
                await self._store.turns.abandon(lease)
            except LeaseLost:
                return True  # recorded already (the terminal write did land, or a takeover)
            except HostkitError as exc:
                _log.warning("turn %s: could not end it lost: %s", lease.turn_id, exc)
            else:
                return True
        self.leave(lease)
        return False

    def leave(self, lease: SessionLease) -> None:
        """Remember a turn whose end could not be written, without trying now.

        The next local admission of its session, or a retry of its request, tries
        again; its expiry, this Host's shutdown and the next process's recovery are
        the other ways out.
        """
        self._abandoned.pop(lease.turn_id, None)  # re-inserted last: the newest
        self._abandoned[lease.turn_id] = lease
        while len(self._abandoned) > _ABANDONED_KEPT:
            del self._abandoned[next(iter(self._abandoned))]

    def stop_waiting(self) -> None:
        """Refuse new admissions and wake waiting turns (each raises ``TurnRejected``)."""
        self.waiting.close()

    async def end_remaining(self) -> None:
        """End every turn this instance still holds (``lost``) and free its session."""
        try:
            await self._store.turns.recover(instance=self.instance_id)
        except HostkitError as exc:
            _log.warning("could not end this Host's remaining turns: %s", exc)
        else:
            self._abandoned.clear()
            self._unseen.clear()


class _RenewalLog:
    """What one turn's renewals say: the first failure, then at most one line every
    ``_REPEAT_S`` while they keep failing (a database outage fails every try, several a
    second), and once when a renewal works again."""

    _REPEAT_S = 10.0

    __slots__ = ("_failures", "_said_at", "_turn_id")

    def __init__(self, turn_id: str) -> None:
        self._turn_id = turn_id
        self._failures = 0
        self._said_at: float | None = None

    def failed(self, exc: Exception) -> None:
        self._failures += 1
        now = time.monotonic()
        if self._said_at is not None and now - self._said_at < self._REPEAT_S:
            return
        self._said_at = now
        expected = isinstance(exc, HostkitError | TimeoutError)
        _log.warning(
            "turn %s: lease renewal failed (%d in a row): %s",
            self._turn_id,
            self._failures,
            _reason(exc),
            exc_info=None if expected else exc,
        )

    def renewed(self) -> None:
        if self._failures:
            _log.info(
                "turn %s: lease renewed again after %d failed tries",
                self._turn_id,
                self._failures,
            )
            self._failures, self._said_at = 0, None


def _reason(exc: Exception) -> str:
    """A one-line reason: a timeout has no text of its own."""
    if isinstance(exc, TimeoutError):
        return "the store did not answer in time"
    if isinstance(exc, HostkitError):
        return exc.message
    return type(exc).__name__


def _pace(lease: SessionLease, now: float) -> RenewalPace:
    """Renewals of a session lease: each takes at most ``max(ttl / 3, 1 s)``.

    ``now`` is the store's clock, the one the expiry as of admission is in.
    """
    return RenewalPace(lease.ttl_s, lease.expires_at - now, _renewal_bound(lease))


def _renewed(active: ActiveTurn, since: float, at: float) -> None:
    """A renewal begun at ``since`` (``boot_clock``), ``at`` (the store's clock) landed:
    the lease is held a ttl from then, on each clock."""
    active.held_until = since + active.lease.ttl_s
    active.held_expiry = at + active.lease.ttl_s


def _effect_left(active: ActiveTurn) -> float:
    """Seconds until an effect running now is cut (``_EFFECT_CUT`` past the lease's lapse,
    at least 0); unbounded while no effect runs or the lapse is not known yet."""
    if active.in_flight != "effect" or active.held_until is None:
        return math.inf
    return max(0.0, active.held_until + _EFFECT_CUT * active.lease.ttl_s - boot_clock())


def _renewal_bound(lease: SessionLease) -> float:
    """The most one renewal of ``lease`` may take."""
    return max(lease.ttl_s / 3, 1.0)


async def _beside(
    background: Callable[[], Coroutine[Any, Any, None]],
    body: Callable[[], Awaitable[T]],
    *,
    after: float,
) -> T:
    """Run ``body``; start ``background`` if it still runs ``after`` seconds later.

    Nearly every body ends first, so a turn pays for a timer, not for a task
    group and a task (a twentieth of the cost, twice per turn). A background
    task that did start is cancelled and awaited before this returns, so it
    never outlives ``body``. What ``body`` raises propagates as itself.
    """
    loop = asyncio.get_running_loop()
    started: list[asyncio.Task[None]] = []
    timer = loop.call_later(after, lambda: started.append(loop.create_task(background())))
    try:
        return await body()
    finally:
        timer.cancel()
        if started:
            await _stopped(started[0])


async def _stopped(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it to end; re-raise what it raised other than that."""
    task.cancel()
    with anyio.CancelScope(shield=True):
        await asyncio.wait((task,))
    if not task.cancelled():
        task.result()
