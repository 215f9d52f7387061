"""InboxWorker: claimed inbounds become turns, each message answered by at most one turn.

Per claimed inbound, in this order: refuse content it cannot give a turn
yet (``payload_ref``, artifacts: a permanent ``unsupported_content``
failure); decide whether it needs a turn at all (``ignored`` if not);
build the ``TurnRequest`` from the envelope's *authenticated* fields only
(channel instance, conversation key, principal key; never ``payload`` or
``metadata``) with the inbound's stable ``turn_request_id`` and the reply
route the caller derives (where the answer is delivered: no authority);
durably
reserve that id (``reserve_turn``), unless its agent's provider is known to be
unreachable (then it is deferred, ``ProviderOutages``); run the turn while a keepalive renews
the claim every third of its lease; record the result (``complete``) or
the typed failure (``fail``).

The request id is the reconciliation: an attempt after a crash runs the same
id, so ``TurnExecution`` answers with the turn the crashed attempt started
(its recorded result, or ``TurnInProgress`` while it still runs) and never
starts a second one.

An inbound of kind ``command`` (a channel user's ``approve CODE``) is no
message for the model: it goes to ``run_command``, whose ``InboundResult``
ends it (``ignored`` without one). The command's own durable state (the
approval it answers) is its reconciliation, so it reserves no turn id.

The worker takes the turn runner as a callable (``Host`` passes its own), so
this package depends on no turn machinery.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup, TaskStatus

from hostkit._background import Background
from hostkit._cancellation import uninterrupted
from hostkit._dead_claims import DEAD_CLAIMS_EVERY_S
from hostkit._failed_claims import FailedClaims, claim_failure
from hostkit._renewal import RenewalPace
from hostkit._store_health import StoreHealth
from hostkit._streaks import FailureStreak
from hostkit.errors import (
    HostkitError,
    InvalidValue,
    StaleClaim,
    StoreError,
    TurnInProgress,
    bounded,
)
from hostkit.inbox._inbox import ChannelInbox
from hostkit.inbox._outage import ProviderOutages, Verdict, Wake
from hostkit.inbox._outcomes import (
    failure_of,
    needs_no_turn,
    result_of,
    unsupported_content,
)
from hostkit.inbox._tally import TurnTally
from hostkit.store import MAX_CLAIM_BATCH
from hostkit.types import (
    UNPROCESSABLE,
    ClaimedInbound,
    CompletionDecision,
    ConversationFacts,
    InboundEnvelope,
    InboundFailure,
    InboundResult,
    RetryDecision,
    TurnRequest,
    TurnResult,
    finite_seconds,
    plural,
)

__all__ = [
    "FindTurn",
    "InboxWorker",
    "ReplyRoute",
    "Route",
    "RunCommand",
    "RunTurn",
    "TellUnread",
]

_log = logging.getLogger("hostkit.inbox")

RunTurn = Callable[[TurnRequest], Awaitable[TurnResult]]
# The turn an earlier attempt started for this request, if any (for logs and
# ClaimedInbound.existing_turn_id; the request id itself does the reconciling).
FindTurn = Callable[[TurnRequest], Awaitable[str | None]]
# Channel instance id -> the agent (core id) that answers it.
Route = Callable[[str], str]
# An inbound -> where its turn's answer is delivered (TurnRequest.route), or None (no delivery).
ReplyRoute = Callable[[InboundEnvelope], Mapping[str, Any] | None]
# A command inbound -> its business result (the Host answers approvals with it).
RunCommand = Callable[[ClaimedInbound], Awaitable[InboundResult]]
# An inbound the channel accepted without its text -> tell its sender (best effort).
TellUnread = Callable[[ClaimedInbound], Awaitable[None]]
Clock = Callable[[], float]

# complete/fail tried this often when the store fails; after that the lease's
# expiry brings the inbound back and the same request id reconciles it.
_SETTLE_TRIES = 3
_Decision = TypeVar("_Decision", CompletionDecision, RetryDecision, bool)
_Result = TypeVar("_Result", TurnResult, InboundResult)


def _assistant(channel_instance_id: str) -> str:
    return "assistant"


class InboxWorker(Background):
    """Claims due inbounds of one ``ChannelInbox`` and turns each into (at most) one turn.

    ``run()`` serves until cancelled or ``stop()``; ``drain()`` serves until
    nothing is due and nothing is in flight (tests, notebooks, batch jobs),
    and raises ``StoreError`` when its claims keep failing (``FailedClaims``);
    ``async with worker:`` runs ``run()`` in the background. Up to
    ``concurrency`` claims are in flight at once; idle, the worker looks for
    due inbounds every ``idle_poll_s`` (``wake()`` looks at once, after an
    accept in this process). Each serve starts with
    ``ChannelInbox.recover_dead_claims``, and runs it again every
    ``DEAD_CLAIMS_EVERY_S``: a killed Host's claims (one killed while this
    worker serves too) are taken over then instead of when their leases run out.

    Shutdown (cancellation, ``stop()``, ``aclose()``) stops claiming, gives
    the turns in flight ``grace_s`` to finish and record their results, cuts
    off the rest, and releases every claim still held: those inbounds are due
    again at once, their attempt not spent (a turn cut off is recorded by its
    ``TurnExecution``, and the next attempt gets that record). Every store
    call is bounded by ``op_timeout_s``, every turn by ``turn_timeout_s``.
    ``clock`` is the inbox's clock (``ChannelInbox.now``, the default): the
    lease times it reads come from it.

    ``reply_route`` gives each turn's ``TurnRequest.route`` (None: the turn
    writes no outbox intent); ``run_command`` answers inbounds of kind
    ``command`` (without it they are ``ignored``); ``tell_unread`` tells the
    sender of an inbound the channel accepted without its text that it could
    not be read, before it is dead-lettered; ``tell_dropped`` tells the sender
    of one dead-lettered after its last transient failure (a session busy past
    the admission deadline, a store or service that never came back) that it
    will not be answered, rather than the next message being answered as if it
    had never been sent. ``store_health`` hears of each claim's outcome (a serve's
    readiness reads it).

    ``outages`` (``ProviderOutages``) holds, per agent, the breaker a turn
    that found its provider unreachable opens (``TurnResult.provider_unavailable``):
    that agent's inbounds are then deferred, their attempt not spent, one probe
    at a time, for up to ``RetryPolicy.provider_wait_s`` after each was received,
    instead of each failing into the same outage.
    """

    def __init__(
        self,
        inbox: ChannelInbox,
        run_turn: RunTurn,
        *,
        route: Route = _assistant,
        find_turn: FindTurn | None = None,
        reply_route: ReplyRoute | None = None,
        run_command: RunCommand | None = None,
        tell_unread: TellUnread | None = None,
        tell_dropped: TellUnread | None = None,
        concurrency: int = 4,
        idle_poll_s: float = 1.0,
        grace_s: float = 10.0,
        op_timeout_s: float = 30.0,
        turn_timeout_s: float = 3_600.0,
        clock: Clock | None = None,
        store_health: StoreHealth | None = None,
    ) -> None:
        if not isinstance(inbox, ChannelInbox):
            raise InvalidValue("InboxWorker needs a ChannelInbox")
        if not callable(run_turn) or not callable(route):
            raise InvalidValue("run_turn and route must be callables")
        if any(
            f is not None and not callable(f)
            for f in (find_turn, reply_route, run_command, tell_unread, tell_dropped)
        ):
            raise InvalidValue(
                "find_turn, reply_route, run_command, tell_unread and tell_dropped must be "
                "callables"
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise InvalidValue("concurrency must be an integer")
        if not 1 <= concurrency <= MAX_CLAIM_BATCH:
            raise InvalidValue(f"concurrency must be between 1 and {MAX_CLAIM_BATCH}")
        _seconds("idle_poll_s", idle_poll_s, 3_600.0)
        _seconds("grace_s", grace_s, 3_600.0, zero=True)
        _seconds("op_timeout_s", op_timeout_s, 3_600.0)
        _seconds("turn_timeout_s", turn_timeout_s, 86_400.0)
        self.inbox = inbox
        self._run_turn = run_turn
        self._route = route
        self._find_turn = find_turn
        self._reply_route = reply_route
        self._run_command = run_command
        self._tell_unread = tell_unread
        self._tell_dropped = tell_dropped
        self._concurrency = concurrency
        self._idle_poll_s = float(idle_poll_s)
        self._grace_s = float(grace_s)
        self._op_timeout_s = float(op_timeout_s)
        # Claims failing at every poll (the store unusable) are logged once per streak.
        self._claims_failing = FailureStreak(_log, "inbox claim")
        self._recovery_failing = FailureStreak(_log, "recovering dead owners' inbox claims")
        self._store_health = StoreHealth() if store_health is None else store_health
        # The current serve's failed claims in a row: a drain never takes one for "idle".
        self._failed_claims = FailedClaims(self._op_timeout_s)
        self._turn_timeout_s = float(turn_timeout_s)
        self._clock = inbox.now if clock is None else clock
        # inbound id -> the claim this worker holds and has not ended (released on shutdown)
        self._claims: dict[str, ClaimedInbound] = {}
        # inbound id -> the cancel scope of its handler (shielded from the worker's own
        # cancellation, so a shutdown can give it a grace period first)
        self._inflight: dict[str, anyio.CancelScope] = {}
        self._nudge = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self._stop = anyio.Event()
        self._stopped = anyio.Event()
        self._stopped.set()
        self._running = False
        self._stopping = False
        self._handled = 0
        # How this worker's turns ended (a serve's status line and readiness show it).
        self.turns = TurnTally()
        # The agents whose provider is unreachable: their inbounds wait (readiness shows it).
        self.outages = ProviderOutages(inbox.policy)

    # -- observation ------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Claims being worked on now."""
        return len(self._inflight)

    @property
    def handled(self) -> int:
        """Claims this worker took to an end (result, failure, or loss) since it was made."""
        return self._handled

    @property
    def running(self) -> bool:
        return self._running

    # -- serving ----------------------------------------------------------------------

    def wake(self) -> None:
        """Look for due inbounds now instead of at the next poll."""
        self._nudge.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled or ``stop()``; then wind down (grace, release)."""
        await self._serve(until_idle=False, task_status=task_status)

    async def drain(self) -> int:
        """Serve until nothing is due and nothing is in flight; how many claims were handled.

        A claim that failed proves nothing: claims that keep failing (``FailedClaims``) end
        the drain with a ``StoreError`` instead, every inbound still stored and due.
        """
        before = self._handled
        await self._serve(until_idle=True, task_status=anyio.TASK_STATUS_IGNORED)
        return self._handled - before

    def stop(self) -> None:
        """Ask the worker to wind down (one not yet serving ends as soon as it starts);
        ``aclose()`` also waits for it."""
        self._stop.set()
        self._nudge.set()

    async def aclose(self) -> None:
        """Stop and wait (bounded) until the worker released what it held; idempotent.

        A ``run()`` scheduled but not yet begun gets to begin first: it sees the
        stop and ends at once (a stop is remembered until a serve ends).
        """
        self.stop()
        await anyio.lowlevel.checkpoint()
        with anyio.move_on_after(self._wind_down_bound() + self._op_timeout_s, shield=True):
            await self._stopped.wait()

    def _end_background(self) -> None:
        self.stop()

    @property
    def _winding_down(self) -> bool:
        """Stopping, or asked to: a handler that ends between ``stop()`` and the claim
        loop noticing it (a closing Host refusing its turn) gives its claim back too."""
        return self._stopping or self._stop.is_set()

    async def _serve(self, *, until_idle: bool, task_status: TaskStatus[None]) -> None:
        if self._running:
            raise InvalidValue("this worker is already running")
        self._running, self._stopping = True, False
        # ``_stop`` is kept: a stop asked for before this serve began is honoured.
        self._stopped = anyio.Event()
        self._failed_claims = FailedClaims(self._op_timeout_s)
        gave_up: StoreError | None = None
        try:
            async with anyio.create_task_group() as work:
                task_status.started()
                # Woken by another process's accept where the store can say so (PostgreSQL's
                # NOTIFY); the idle poll below stays the fallback.
                watching = anyio.CancelScope()
                work.start_soon(self._watch, watching)
                try:
                    await self._recover_dead_claims()
                    gave_up = await self._claim_loop(work, until_idle=until_idle)
                finally:
                    watching.cancel()
                    self._stopping = True
                    await uninterrupted(self._wind_down())
        finally:
            self._running = False
            # The stop is spent: a later run() or drain() serves again.
            self._stop = anyio.Event()
            self._stopped.set()
        if gave_up is not None:
            # Raised here, not in the task group: the caller sees the error itself.
            raise gave_up

    async def _claim_loop(self, work: TaskGroup, *, until_idle: bool) -> StoreError | None:
        """Claim and start handlers until stopped, or (``until_idle``) until a claim begun
        with nothing in flight finds nothing; the error a drain whose claims kept failing
        ends with (None: it ended idle or stopped)."""
        next_sweep = anyio.current_time() + DEAD_CLAIMS_EVERY_S
        while not self._stop.is_set():
            if anyio.current_time() >= next_sweep:
                await self._recover_dead_claims()
                next_sweep = anyio.current_time() + DEAD_CLAIMS_EVERY_S
            free = self._concurrency - len(self._inflight)
            claimed: tuple[ClaimedInbound, ...] = ()
            if free > 0:
                # Only a claim begun with nothing in flight can prove the inbox idle: one
                # that ran while a handler ended may have read the rows before that end
                # committed (a conversation's next message still behind its claimed one).
                settled = not self._inflight
                claimed = await self._claim(free)
                for item in claimed:
                    if self._stop.is_set():
                        # Came back after stop() (the Host closing meanwhile): never
                        # started, so the wind-down releases it, attempt not spent.
                        self._claims[item.inbound_id] = item
                        continue
                    self._start(work, item)
                if until_idle and settled and not claimed:
                    # A claim that failed found nothing out: claim again, within a bound.
                    if not self._failed_claims.count:
                        return None
                    if self._failed_claims.exhausted():
                        return self._failed_claims.error("the inbox", "the due inbounds")
                if claimed and len(claimed) == free:
                    continue
            await self._pause()
        return None

    async def _watch(self, scope: anyio.CancelScope) -> None:
        with scope:
            try:
                await self.inbox.watch(self.wake)
            except HostkitError as exc:
                _log.warning("watching the inbox for new inbounds failed (polling): %s", _text(exc))

    async def _recover_dead_claims(self) -> None:
        """A killed Host's claims are due now, not at lease expiry: before the first claim,
        then every ``DEAD_CLAIMS_EVERY_S`` while serving."""
        try:
            with anyio.fail_after(self._op_timeout_s):
                recovered = await self.inbox.recover_dead_claims()
        except (HostkitError, TimeoutError) as exc:
            # Those claims then wait out their leases, as they did before.
            self._recovery_failing.failed(claim_failure(exc, self._op_timeout_s))
            self._store_health.failed(exc)
            return
        self._recovery_failing.succeeded()
        if recovered:
            _log.info("made %s of dead owners due now", plural(recovered, "inbox claim"))

    async def _claim(self, limit: int) -> tuple[ClaimedInbound, ...]:
        """Up to ``limit`` due inbounds; none when the claim failed (``_failed_claims``
        then counts it, so a drain does not take it for an idle inbox)."""
        began = anyio.current_time()
        try:
            with anyio.fail_after(self._op_timeout_s):
                claimed = await self.inbox.claim_batch(limit)
        except (HostkitError, TimeoutError) as exc:
            # Nothing was handed out (a claim that committed late expires and is reclaimed).
            text = claim_failure(exc, self._op_timeout_s)
            self._claims_failing.failed(text)
            self._failed_claims.failed(exc, text, began=began)
            self._store_health.failed(exc)
            return ()
        self._claims_failing.succeeded()
        self._failed_claims.succeeded()
        self._store_health.worked()
        return claimed

    async def _pause(self) -> None:
        """Until a slot frees, ``wake()``, ``stop()``, or the idle poll interval passes."""
        with anyio.move_on_after(self._idle_poll_s):
            await self._nudge.wait()
        self._nudge = anyio.Event()

    def _start(self, work: TaskGroup, claimed: ClaimedInbound) -> None:
        scope = anyio.CancelScope(shield=True)
        self._claims[claimed.inbound_id] = claimed
        self._inflight[claimed.inbound_id] = scope
        self._idle = anyio.Event()
        work.start_soon(self._handle, claimed, scope)

    async def _handle(self, claimed: ClaimedInbound, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                try:
                    await self._process(claimed)
                except Exception as exc:
                    # A bug must not end the worker: the attempt fails (retried, then
                    # dead-lettered), and the request id reconciles any turn it started.
                    _log.exception("inbound %s: the worker failed handling it", claimed.inbound_id)
                    if claimed.inbound_id in self._claims:
                        await self._fail(claimed, failure_of(exc))
        finally:
            self._inflight.pop(claimed.inbound_id, None)
            self._handled += 1
            self._nudge.set()
            if not self._inflight:
                self._idle.set()

    async def _wind_down(self) -> None:
        """Grace for the turns in flight, then cut them off and release every held claim."""
        with anyio.move_on_after(self._grace_s):
            await self._idle.wait()
        for scope in list(self._inflight.values()):
            scope.cancel()
        # A cut-off turn records its own end (bounded inside TurnExecution).
        with anyio.move_on_after(self._op_timeout_s):
            await self._idle.wait()
        # Every held claim at once, under one bound: a write lock another process holds
        # must not cost one bound per claim. A claim left held is recovered at the next
        # start (its owner is gone) or when it expires.
        released: list[bool] = []
        ended = 0

        async def release(claimed: ClaimedInbound) -> None:
            nonlocal ended
            try:
                released.append(await self.inbox.release(claimed))
            except HostkitError as exc:
                _log.warning("inbound %s: release failed: %s", claimed.inbound_id, _text(exc))
            ended += 1  # not when cut off by the window: that one is still held

        with anyio.move_on_after(self._op_timeout_s) as window:
            async with anyio.create_task_group() as group:
                for claimed in list(self._claims.values()):
                    group.start_soon(release, claimed)
        if window.cancelled_caught:
            left = len(self._claims) - ended
            _log.warning(
                "inbox worker: %s not released within %gs at shutdown (recovered at the "
                "next start, or when they expire)",
                plural(left, "claim"),
                self._op_timeout_s,
            )
        self._claims.clear()
        if any(released):
            _log.info("inbox worker released %s at shutdown", plural(sum(released), "claim"))

    def _wind_down_bound(self) -> float:
        return self._grace_s + self._op_timeout_s * 3

    # -- one inbound ------------------------------------------------------------------

    async def _process(self, claimed: ClaimedInbound) -> None:
        unsupported = unsupported_content(claimed.envelope)
        if unsupported is not None:
            if unsupported.code == UNPROCESSABLE and self._tell_unread is not None:
                await self._tell(claimed, self._tell_unread)
            await self._fail(claimed, unsupported)
            return
        if claimed.envelope.kind == "command" and self._run_command is not None:
            await self._command(claimed, self._run_command)
            return
        reason = needs_no_turn(claimed.envelope)
        if reason is not None:
            await self._complete(claimed, InboundResult("ignored", detail=reason))
            return
        try:
            request = self._request(claimed)
        except Exception as exc:
            await self._fail(claimed, failure_of(exc) if isinstance(exc, HostkitError) else None)
            return
        agent = request.core_id
        due, probe = self.outages.admit(agent, self._clock())
        if due is not None and (self._winding_down or self.inbox.outwaits(claimed)):
            # The agent's provider is unreachable: wait it out, the attempt not spent
            # (winding down, the claim is released instead). Past the wait, it runs.
            if not self._winding_down:
                await self._wait_out(claimed, agent, due)
            return
        owed = probe is not None  # a probe owes its breaker a verdict, whatever ends it
        wakes: list[Wake] = []

        def ended(result: TurnResult | None) -> None:
            nonlocal owed
            owed = False
            reason = "no reason recorded" if result is None else result.error or ""
            wake = self.outages.ended(
                agent,
                self._clock(),
                _verdict(result),
                probe=probe,
                reason=reason,
                retry_after=None if result is None else result.provider_retry_after_s,
            )
            if wake is not None:
                wakes.append(wake)

        try:
            await self._answer(claimed, request, ended)
        finally:
            if owed:
                ended(None)
        for wake in wakes:
            await self._wake(agent, wake)

    async def _answer(
        self,
        claimed: ClaimedInbound,
        request: TurnRequest,
        ended: Callable[[TurnResult | None], None],
    ) -> None:
        """Reserve the request id, run the turn, record how it ended. ``ended`` hears of
        the turn's result before the inbound's end is recorded: the breaker it opens
        defers the next claims, not only those after this one's record."""
        reserved_before = claimed.turn_reserved
        try:
            with anyio.fail_after(self._op_timeout_s):
                claimed = await self.inbox.reserve_turn(claimed)
        except StaleClaim:
            self._lost(claimed, "before its turn started")
            return
        except (HostkitError, TimeoutError) as exc:
            await self._fail(claimed, failure_of(exc))
            return
        if reserved_before:
            claimed = await self._reconcile(claimed, request)
        result, error, lost = await self._run(claimed, request)
        if lost:
            self._lost(claimed, "while its turn ran")
            return
        self._count(result, error)
        # Only a turn this attempt ran tells of the provider now: an earlier attempt's
        # turn, found recorded, is an old verdict.
        ended(None if _replayed(claimed, result) else result)
        if result is not None:
            if result.outcome not in ("completed", "needs_user", "cancelled"):
                # The message is answered (the sender gets the Host's notice), yet an
                # operator should hear of it: after a bad reload every turn may fail. A
                # cancel was someone's decision (or a shutdown's, which says so itself).
                _log.warning(
                    "inbound %s: turn %s ended %s: %s",
                    claimed.inbound_id,
                    result.turn_id,
                    result.outcome,
                    bounded(result.error or "no reason recorded", 300),
                )
            await self._complete(claimed, result_of(result))
        else:
            assert error is not None
            await self._failed(claimed, error)

    async def providers_changed(self, agents: Collection[str]) -> None:
        """A new configuration changed ``agents``' model providers: an open breaker of one
        probes the new provider at once, with the inbounds it deferred due again
        (``ProviderOutages.probe_now``), instead of after a backoff of up to
        ``max_delay_s``. A wake that fails leaves them due at their deferral's end."""
        for agent, wake in self.outages.probe_now(agents, self._clock()):
            await self._wake(agent, wake)

    async def _wait_out(self, claimed: ClaimedInbound, agent: str, due: float) -> None:
        """Defer an inbound of an agent whose provider is unreachable until ``due``."""
        deferred = await self._settle(
            claimed, "defer", lambda: self.inbox.postpone(claimed, until=due)
        )
        if deferred:
            self.outages.waited(agent, claimed.inbound_id)
            _log.debug(
                "inbound %s deferred: agent %s's provider is unreachable", claimed.inbound_id, agent
            )

    async def _wake(self, agent: str, wake: Wake) -> None:
        """Make the inbounds deferred for ``agent``'s outage due as its verdict says; one
        that fails waits out its deferral (at most the policy's longest delay)."""
        try:
            with anyio.fail_after(self._op_timeout_s):
                woken = await self.inbox.bring_forward(wake.inbound_ids, due_at=wake.due_at)
        except (HostkitError, TimeoutError) as exc:
            _log.warning("agent %s: waking its deferred inbounds failed: %s", agent, _text(exc))
            return
        if woken:
            self.wake()
            _log.debug("agent %s: %s due again", agent, plural(woken, "deferred inbound"))

    def _count(self, result: TurnResult | None, error: BaseException | None) -> None:
        """Tally how a turn ended (``turns``): answered, or not (failed, lost, cut off or
        raised). A cancel is someone's decision, also when it stopped a tool mid-call (the
        turn ends indeterminate, cancelled by the user), and waiting for an earlier
        attempt's turn or giving a turn back at shutdown ends nothing."""
        if result is not None:
            if result.outcome in ("completed", "needs_user"):
                self.turns.answered()
            elif result.outcome != "cancelled" and result.cancelled_by != "user":
                self.turns.failed(f"{result.outcome}: {result.error or 'no reason recorded'}")
        elif isinstance(error, TimeoutError):
            self.turns.failed(f"cut off: no result within {self._turn_timeout_s:g} s")
        elif error is not None and not (isinstance(error, TurnInProgress) or self._winding_down):
            name = type(error).__name__
            self.turns.failed(
                f"{name}: {error.message}" if isinstance(error, HostkitError) else name
            )

    async def _tell(self, claimed: ClaimedInbound, tell: TellUnread) -> None:
        """Tell the sender their message will not be answered; the dead letter comes either
        way (a reply is written once per inbound, so a repeat of this attempt writes none)."""
        try:
            with anyio.fail_after(self._op_timeout_s):
                await tell(claimed)
        except (HostkitError, TimeoutError) as exc:
            _log.warning(
                "inbound %s: telling its sender failed: %s", claimed.inbound_id, _text(exc)
            )

    def _request(self, claimed: ClaimedInbound) -> TurnRequest:
        """The turn request of an inbound: authority from the authenticated fields only."""
        envelope = claimed.envelope
        facts = ConversationFacts(
            channel=envelope.channel_instance_id,
            conversation_key=envelope.conversation_key,
            principal_key=envelope.principal_key,
        )
        core_id = self._route(envelope.channel_instance_id)
        route = None if self._reply_route is None else self._reply_route(envelope)
        return TurnRequest(
            input=envelope.payload,
            principal=facts,
            request_id=claimed.turn_request_id,
            core_id=core_id,
            route=route,
        )

    async def _command(self, claimed: ClaimedInbound, run_command: RunCommand) -> None:
        """A command inbound: its runner's result ends it, its failure is typed like a turn's.

        A repeat (a crash after the command took effect) runs the same command
        again: the runner answers it from the durable state it changed.
        """
        result, error, lost = await self._kept(claimed, lambda: run_command(claimed))
        if lost:
            self._lost(claimed, "while its command ran")
        elif result is not None:
            await self._complete(claimed, result)
        else:
            assert error is not None
            await self._failed(claimed, error)

    async def _reconcile(self, claimed: ClaimedInbound, request: TurnRequest) -> ClaimedInbound:
        """An earlier attempt reserved the request id: name the turn it started, if any."""
        if self._find_turn is None:
            return claimed
        try:
            with anyio.fail_after(self._op_timeout_s):
                existing = await self._find_turn(request)
        except (HostkitError, TimeoutError) as exc:
            _log.warning("inbound %s: turn lookup failed: %s", claimed.inbound_id, _text(exc))
            return claimed
        if existing is None:
            return claimed
        _log.info(
            "inbound %s: attempt %d reconciles with turn %s",
            claimed.inbound_id,
            claimed.attempt,
            existing,
        )
        return replace(claimed, existing_turn_id=existing)

    async def _run(
        self, claimed: ClaimedInbound, request: TurnRequest
    ) -> tuple[TurnResult | None, BaseException | None, bool]:
        """Run the turn while keeping the claim; (result, error, claim lost)."""
        return await self._kept(claimed, lambda: self._run_turn(request))

    async def _kept(
        self, claimed: ClaimedInbound, work: Callable[[], Awaitable[_Result]]
    ) -> tuple[_Result | None, BaseException | None, bool]:
        """Run ``work`` (bounded by the turn timeout) while keeping the claim."""
        result: _Result | None = None
        error: BaseException | None = None
        lost = anyio.Event()
        async with anyio.create_task_group() as keeper:
            keeper.start_soon(self._keep, claimed, lost)
            try:
                with anyio.fail_after(self._turn_timeout_s):
                    result = await work()
            except Exception as exc:
                error = exc
            finally:
                keeper.cancel_scope.cancel()
        return result, error, lost.is_set()

    async def _keep(self, claimed: ClaimedInbound, lost: anyio.Event) -> None:
        """Renew the claim every third of its lease until cancelled, or until it is lost.

        A lost claim is someone else's now: the turn goes on (its record is what
        the current claimant gets for the same request id), this worker stops caring.
        A renewal that fails is retried promptly, each try bounded by a third of the
        lease still left, so no try starts at the lease's expiry (``RenewalPace``).
        """
        lease_s = self.inbox.policy.lease_s
        left = claimed.lease_expires_at - self._clock()
        pace = RenewalPace(lease_s, left, min(self._op_timeout_s, lease_s / 3))
        # A third of the lease after it was last set; never a tight loop, even when
        # the clock given here disagrees with the inbox's.
        due = claimed.lease_expires_at - lease_s * 2 / 3
        pause = min(lease_s / 3, max(due - self._clock(), lease_s / 6))
        while True:
            await anyio.sleep(pause)
            start = anyio.current_time()
            try:
                with anyio.fail_after(pace.limit(start)):
                    claimed = await self.inbox.extend(claimed)
            except StaleClaim:
                lost.set()
                return
            except (HostkitError, TimeoutError) as exc:
                # Transient: retried promptly while the lease has a margin left; should it
                # lapse anyway, the fencing token refuses this worker's complete.
                _log.warning("inbound %s: lease renewal failed: %s", claimed.inbound_id, _text(exc))
                pause = pace.failed(exc)
            else:
                pace.renewed(start)
                due = claimed.lease_expires_at - lease_s * 2 / 3
                pause = min(lease_s / 3, max(due - self._clock(), lease_s / 6))

    # -- ending a claim ---------------------------------------------------------------

    async def _complete(self, claimed: ClaimedInbound, result: InboundResult) -> None:
        decision = await self._settle(
            claimed, "complete", lambda: self.inbox.complete(claimed, result)
        )
        if decision is not None and decision.disposition != "completed":
            _log.warning(
                "inbound %s: complete refused (%s)", claimed.inbound_id, decision.disposition
            )

    async def _failed(self, claimed: ClaimedInbound, error: BaseException) -> None:
        """An attempt that ended with ``error`` and no result. ``TurnInProgress``: the
        earlier attempt's turn still runs under a live holder (another Host, or one
        whose death cannot be proven until its lease expires): waiting for it is not
        failing, so the inbound is deferred without spending the attempt, for as long
        as the policy waits for a turn (``turn_wait_s``); past that, or any other
        error, the attempt fails."""
        if (
            isinstance(error, TurnInProgress)
            and not self._winding_down
            and self.inbox.waits(claimed, since=error.running_since)
        ):
            running = error
            deferred = await self._settle(
                claimed,
                "defer",
                lambda: self.inbox.defer(
                    claimed, since=running.running_since, until=running.retry_at
                ),
            )
            if deferred:
                _log.info("inbound %s deferred: %s", claimed.inbound_id, error.message)
            return
        await self._fail(claimed, failure_of(error))

    async def _fail(self, claimed: ClaimedInbound, failure: InboundFailure | None) -> None:
        if failure is None:
            failure = InboundFailure("permanent", "unroutable", "no agent answers this channel")
        if self._winding_down and failure.kind == "transient":
            # Shutting down (the Host is closing): give it back without spending the attempt.
            return
        ended = failure
        decision = await self._settle(claimed, "fail", lambda: self.inbox.fail(claimed, ended))
        if (
            decision is not None
            and decision.disposition == "dead_lettered"
            and failure.kind == "transient"
            and self._tell_dropped is not None
        ):
            await self._tell(claimed, self._tell_dropped)
        if decision is not None:
            _log.info(
                "inbound %s attempt %d failed (%s, %s): %s",
                claimed.inbound_id,
                claimed.attempt,
                failure.code,
                decision.disposition,
                failure.message,
            )

    async def _settle(
        self, claimed: ClaimedInbound, what: str, end: Callable[[], Awaitable[_Decision]]
    ) -> _Decision | None:
        """Record a claim's end, retrying a store hiccup a few times; None if it never went.

        Either way the claim is no longer this worker's: left unrecorded, its lease
        expires, the inbound comes back and its request id reconciles the turn.
        """
        try:
            for attempt in range(_SETTLE_TRIES):
                try:
                    with anyio.fail_after(self._op_timeout_s):
                        return await end()
                except (HostkitError, TimeoutError) as exc:
                    _log.warning("inbound %s: %s failed: %s", claimed.inbound_id, what, _text(exc))
                    await anyio.sleep(0.1 * 2**attempt)
            return None
        finally:
            self._claims.pop(claimed.inbound_id, None)

    def _lost(self, claimed: ClaimedInbound, when: str) -> None:
        self._claims.pop(claimed.inbound_id, None)
        _log.warning("inbound %s: the claim was lost %s", claimed.inbound_id, when)


def _verdict(result: TurnResult | None) -> Verdict:
    """What a turn's end tells its agent's outage breaker."""
    if result is None:
        return None
    if result.provider_unavailable is not None:
        return "unavailable"
    return "reached" if result.outcome in ("completed", "needs_user") else None


def _replayed(claimed: ClaimedInbound, result: TurnResult | None) -> bool:
    """Whether ``result`` is the turn an earlier attempt ran (reconciled), not this one's."""
    return result is not None and result.turn_id == claimed.existing_turn_id


def _text(exc: BaseException) -> str:
    return exc.message if isinstance(exc, HostkitError) else type(exc).__name__


def _seconds(name: str, value: float, limit: float, *, zero: bool = False) -> None:
    value = finite_seconds(name, value)
    if value < 0 or (value == 0 and not zero) or value > limit:
        raise InvalidValue(f"{name} must be in {'[' if zero else '('}0, {limit:g}] seconds")
