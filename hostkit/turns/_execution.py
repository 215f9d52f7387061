"""TurnExecution: the whole lifecycle of one turn, in the contract's order, in one place."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from hostkit._cancellation import finished, is_cancellation, uninterrupted
from hostkit.authority import AdmittedTurn, AuthorityResolver
from hostkit.context import ContextManager
from hostkit.cores import AuthorTurn, SlotFailed, StateRuntime
from hostkit.effects import AuthorHandles, PreparedEffectCatalog
from hostkit.errors import (
    ContextOverflow,
    HostkitError,
    InvalidValue,
    LeaseLost,
    NotFoundOrUnauthorized,
    ProviderError,
    StoreClosed,
    StoreError,
    StoreOutcomeUnknown,
    TurnInfrastructureError,
    TurnInProgress,
    TurnRejected,
    UnboundToken,
    bounded,
    type_name,
    unbounded_message,
)
from hostkit.providers import open_stream
from hostkit.store import (
    MAX_EXTENDED_INSTRUCTIONS_CHARS,
    MAX_LEASE_TTL_S,
    Admitted,
    LeaseOwner,
    ObservedStep,
    RuntimeStore,
    SessionBusy,
    TranscriptEntry,
    TurnState,
)
from hostkit.turns._active import (
    ActiveTurn,
    KnownResult,
    add_usage,
    bind_context,
    capability_snapshot,
)
from hostkit.turns._attachments import check_attachments, input_message, loaded_input
from hostkit.turns._calls import accepted, effect_of, tool_name, with_kept
from hostkit.turns._core import CoreResolver, PinnedCore
from hostkit.turns._events import NullObserver, Observer, TurnEvent, listening, notify_observer
from hostkit.turns._holder import ON_REQUEST, LeaseHolder
from hostkit.turns._tokens import TurnTokens, new_nonces, token_digest
from hostkit.types import (
    UNKNOWN_EFFECT,
    AttachmentPart,
    ContextReady,
    ContextRequest,
    EffectRequest,
    EffectResult,
    EffectSummary,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PrincipalScope,
    StreamEvent,
    ToolCall,
    TurnCancelResult,
    TurnExecutionContext,
    TurnOutcome,
    TurnRequest,
    TurnResult,
    TurnToken,
    UsageObservation,
    is_seconds,
    new_id,
    plain_text,
    redact_secret_fields,
)

__all__ = ["TurnExecution"]

# The longest turn id a caller may name (the store's own limit).
_MAX_TURN_ID = 200

T = TypeVar("T")

_log = logging.getLogger("hostkit.turns")
_NOT_RUN = "[cancelled] not run: the turn paused for an approval before this call"
_UNKNOWN = (
    "[indeterminate] this call may have run, but the turn ended before its result was "
    "recorded: its outcome is unknown"
)
_NOT_REACHED = "[cancelled] not run: the turn ended before this call"
# The outcomes of a turn stopped by a cancellation (its result says who stopped it).
_CANCELLED: tuple[TurnOutcome, ...] = ("cancelled", "indeterminate")
_CLOSING = "the Host is shutting down"
_CALLER_CANCELLED = "the caller was cancelled"
# The longest any of a turn's own deadlines may be (as hostkit.toml allows).
_MAX_TIMEOUT_S = 86_400.0


class TurnExecution:
    """``run(TurnRequest) -> TurnResult`` and ``cancel(turn_id, scope) -> TurnCancelResult``.

    Order of one ``run``: validate (the request froze itself); pin core
    revision, capabilities and generation; check the attachments (owned as
    declared, accepted by the pinned provider); admit in one write transaction —
    idempotency key, conversation binding, the session lease, the turn row
    and ``turn.started`` (a busy session is waited for, up to
    ``admission_timeout_s``, then ``TurnRejected``); the AuthorityResolver
    mints the turn's scope from what that transaction read; prepare the
    effect catalog; persist the input; for each step prepare context, call
    the provider, observe usage, run effects; commit the terminal state with
    its delivery intents and the lease release in one transaction; release
    everything in ``finally``. A background heartbeat renews the session
    lease every ``lease_ttl_s / 3`` while the turn runs, and every write of
    the turn is fenced by the lease's token.

    Failures before ``turn.started`` raise ``TurnRejected``. Provider and
    effect failures after it return ``outcome="failed"``. Explicit cancel
    returns ``cancelled``; cancelling the caller records ``cancelled`` (or
    ``indeterminate`` when an effect was running) and re-raises. A turn whose
    lease another Host took over stops and returns the record that Host
    wrote (``lost``). If the terminal record cannot be written,
    ``TurnInfrastructureError`` is raised and the turn is ended ``lost`` at
    once if the store allows, else by the next local turn of its session,
    this Host's shutdown or the lease's expiry.
    """

    def __init__(
        self,
        *,
        store: RuntimeStore,
        authority: AuthorityResolver,
        context: ContextManager,
        cores: CoreResolver,
        observer: Observer | None = None,
        instance_id: str | None = None,
        lease_owner: LeaseOwner | None = None,
        lease_ttl_s: float = 60.0,
        admission_timeout_s: float = 600.0,
        turn_timeout_s: float = 900.0,
        cancel_timeout_s: float = 30.0,
        terminal_timeout_s: float = 30.0,
    ) -> None:
        if not is_seconds(lease_ttl_s, high=MAX_LEASE_TTL_S):
            raise InvalidValue(f"lease_ttl_s must be in (0, {MAX_LEASE_TTL_S:g}] seconds")
        # NaN fails every deadline with a raw ValueError; inf never ends a turn or a wait.
        for name, seconds in (
            ("admission_timeout_s", admission_timeout_s),
            ("turn_timeout_s", turn_timeout_s),
            ("cancel_timeout_s", cancel_timeout_s),
            ("terminal_timeout_s", terminal_timeout_s),
        ):
            if not is_seconds(seconds, high=_MAX_TIMEOUT_S):
                raise InvalidValue(f"{name} must be in (0, {_MAX_TIMEOUT_S:g}] seconds")
        self._store = store
        self._context = context
        self._cores = cores
        # Authored state (``ctx.state``) of the turns' slots and tools, fenced by their leases.
        self._state = StateRuntime(store)
        self._observer = observer or NullObserver()
        # turn id -> the observer of the generation the turn was pinned with
        self._observers: dict[str, Observer] = {}
        self._leases = LeaseHolder(
            store=store,
            authority=authority,
            instance_id=lease_owner.instance if lease_owner else instance_id or new_id("host"),
            owner=lease_owner,
            ttl_s=lease_ttl_s,
            admission_timeout_s=admission_timeout_s,
            abandon_timeout_s=terminal_timeout_s,
        )
        self._turn_timeout_s = turn_timeout_s
        self._cancel_timeout_s = cancel_timeout_s
        self._terminal_timeout_s = terminal_timeout_s
        self._active: dict[str, ActiveTurn] = {}
        self._tokens = TurnTokens()
        self._closing = False

    @property
    def active_turns(self) -> int:
        return len(self._active)

    @property
    def admission_holders(self) -> int:
        """Turns holding or waiting for their session's admission in this process."""
        return self._leases.waiting.holders

    @property
    def admission_waiters(self) -> int:
        """Turns of this process queued behind their busy session (in arrival order)."""
        return self._leases.waiting.queued

    @property
    def admitted_sessions(self) -> int:
        """Sessions with a local admission entry (idle entries are removed)."""
        return len(self._leases.waiting)

    async def recover(self) -> list[tuple[str, TurnOutcome]]:
        """End turns whose Host died or went silent, ``lost`` (or ``cancelled``); replay nothing."""
        recovered = await self._store.turns.recover()
        return [(turn.turn_id, turn.outcome) for turn in recovered]

    # -- run ---------------------------------------------------------------------------

    async def run(self, request: TurnRequest) -> TurnResult:
        if not isinstance(request, TurnRequest):
            raise TurnRejected("a TurnRequest is required")
        principal_id = self._leases.principal_id(request)
        try:
            return await self._run(request, principal_id)
        except TurnRejected as refused:
            if not self._closing:
                raise
            # Closing refuses new turns, not the record of one that ran: a retry, or a
            # Stop reading how its turn ended, still gets it.
            return await self._recorded(request, principal_id, refused)

    async def _run(self, request: TurnRequest, principal_id: str) -> TurnResult:
        if self._closing:
            raise TurnRejected(_CLOSING)
        leases = self._leases
        scope = leases.bound_scope(request)
        turn_id, trace_id, nonces = new_id("turn"), new_id("trace"), new_nonces()
        # The holder this turn last said it waits for: said once per holder, not per look.
        awaited: str | None = None
        async with leases.waiting.enter() as ticket:
            while True:
                if self._closing:
                    raise TurnRejected(_CLOSING)
                try:
                    core = await self._cores.pin(request.core_id, request.core_revision)
                except TurnRejected as refused:
                    # A repeated request whose agent has gone since still gets its record.
                    return await self._recorded(request, principal_id, refused)
                try:
                    try:
                        # Owned, as declared, and accepted by the pinned provider; else refused.
                        await check_attachments(self._store, request, principal_id, core.provider)
                    except TurnRejected as refused:
                        # A repeated request that ran before the provider changed gets its record.
                        return await self._recorded(request, principal_id, refused)
                    # Read from the provider before admission: once the turn is admitted,
                    # nothing may raise before the region that always ends it (_drive).
                    snapshot = _pinned_snapshot(core)
                    admission = leases.admission(
                        request,
                        principal_id,
                        scope,
                        core,
                        turn_id=turn_id,
                        trace_id=trace_id,
                        cancellation_digest=token_digest(nonces["cancellation"]),
                    )
                    # Uninterrupted: once turn.started may have committed, _drive must run so
                    # the turn gets its terminal record. A caller cancelled meanwhile stops
                    # the turn at once; the cancellation is raised once it is recorded.
                    outcome, caught = await finished(leases.admit(request, admission, scope))
                    if caught is not None and not isinstance(outcome, AdmittedTurn):
                        raise caught
                    if isinstance(outcome, TurnState):
                        if outcome.status == "running" and await leases.end_abandoned(
                            outcome.turn_id, outcome.session_id
                        ):
                            # A retry of a turn whose end this Host could not write (the
                            # store failed then): ended lost now, so the retry reads that.
                            continue
                        return self._existing(outcome)
                    if isinstance(outcome, AdmittedTurn):
                        admitted = outcome.admitted
                        ticket.hold(admitted.session_id)
                        for ended in admitted.recovered:
                            _log.warning(
                                "turn %s of a dead or silent Host ended %s; session taken over",
                                ended.turn_id,
                                ended.outcome,
                            )
                        context = bind_context(
                            request,
                            outcome.scope,
                            core,
                            snapshot,
                            turn_id=turn_id,
                            trace_id=trace_id,
                            nonces=nonces,
                        )
                        result = await self._drive(
                            request, context, core, admitted, caller_cancelled=caught is not None
                        )
                        if caught is not None:
                            raise caught
                        return result
                finally:
                    await uninterrupted(self._cores.release(core))
                # Busy. The pinned generation was released: the turn pins the generation
                # current when it is finally admitted.
                assert isinstance(outcome, SessionBusy)
                if outcome.holder_turn_id != awaited:
                    awaited = outcome.holder_turn_id
                    self._emit_waiting(request, turn_id, outcome)
                await leases.await_turn(outcome, ticket)

    async def _recorded(
        self, request: TurnRequest, principal_id: str, refused: TurnRejected
    ) -> TurnResult:
        """The record of a request already run, when no new turn may start (the Host is
        closing, its agent is gone). ``refused`` is raised for a request never seen,
        or once the store has closed."""
        message = input_message(request) if request.continues is None else None
        try:
            existing = await self._store.turns.find_repeat(
                principal_id, request.request_id, core_id=request.core_id, message=message
            )
        except StoreClosed:
            raise refused from None
        if existing is None:
            raise refused
        return self._existing(existing)

    @staticmethod
    def _existing(existing: TurnState) -> TurnResult:
        if existing.status == "running" or existing.result is None:
            raise TurnInProgress(
                existing.turn_id,
                running_since=existing.started_at,
                retry_at=existing.holder_expires_at,
            )
        return existing.result

    # -- drive -------------------------------------------------------------------------

    async def _drive(
        self,
        request: TurnRequest,
        context: TurnExecutionContext,
        core: PinnedCore,
        admitted: Admitted,
        *,
        caller_cancelled: bool = False,
    ) -> TurnResult:
        """Run the admitted turn to its one terminal record.

        ``caller_cancelled``: the caller was cancelled while the admission
        committed; the turn is stopped before it starts, and recorded so. A
        ``BaseException`` that is no cancellation (``KeyboardInterrupt``,
        ``SystemExit`` from a provider, an observer, an approver) is raised
        once the turn's end saying so is recorded.
        """
        if core.observer is not None:
            self._observers[context.turn_id] = core.observer
        active = ActiveTurn(
            context,
            admitted.lease,
            route=request.route,
            next_seq=admitted.next_event_seq,
            open_approvals=admitted.open_approvals,
        )
        self._active[context.turn_id] = active
        self._tokens.bind(active)
        if self._closing:
            # Admitted while the Host began to shut down (the session came free as the
            # turn before it ended): it stops at once and records that, like the others.
            active.stop("the Host shut down", "host")
        elif caller_cancelled:
            active.stop(_CALLER_CANCELLED, "caller")
        try:
            self._emit(context, "turn.started", {"core_id": core.core_id})
            outcome, error = await self._leases.heartbeating(
                active,
                lambda: self._body(request, context, core, active),
                on_lost=lambda lost: self._tokens.lease_lost(lost.context),
            )
            return await self._leases.keeping(
                active, lambda: self._finish(request, context, active, outcome, error)
            )
        except anyio.get_cancelled_exc_class() as exc:
            if not is_cancellation(exc):
                # An adapter's own CancelledError (nobody cancelled this task): its failure,
                # or, past the turn's own stop, that stop.
                leaked = exc
                return await self._leases.keeping(
                    active, lambda: self._unexpected(request, context, core, active, leaked)
                )
            await uninterrupted(self._cut_short(request, context, core, active, None))
            raise
        except TurnInfrastructureError:
            raise
        except HostkitError as exc:
            # A store failure mid-turn: try to record it; if even that fails, say so.
            message = exc.message
            return await self._leases.keeping(
                active, lambda: self._finish(request, context, active, "failed", message)
            )
        except Exception as exc:
            # An adapter or embedder bug: never leak it and never leave the turn running.
            bug = exc
            return await self._leases.keeping(
                active, lambda: self._unexpected(request, context, core, active, bug)
            )
        except BaseException as exc:
            # KeyboardInterrupt, SystemExit, GeneratorExit: recorded as what interrupted
            # the turn (not as a store that refused its end), shielded, then raised. A
            # group holding the caller's cancellation is that cancellation.
            interrupted = None
            if not is_cancellation(exc):
                interrupted = f"the turn was interrupted by {type_name(exc)}"
            await uninterrupted(self._cut_short(request, context, core, active, interrupted))
            raise
        finally:
            await uninterrupted(self._released(context, core, active))

    async def _cut_short(
        self,
        request: TurnRequest,
        context: TurnExecutionContext,
        core: PinnedCore,
        active: ActiveTurn,
        interrupted: str | None,
    ) -> None:
        """Record the end of a turn stopped by what its caller will raise (best effort,
        bounded): its cancellation (``interrupted`` None: ``cancelled``), else the
        exception ``interrupted`` names (``failed``). Paused on an approval it ends
        ``needs_user``; with an effect that may have run, ``indeterminate``. Nothing
        is written for a turn whose record is durable already."""
        if active.recorded:
            return
        with contextlib.suppress(HostkitError, TimeoutError):
            outcome: TurnOutcome = "cancelled" if interrupted is None else "failed"
            error: str | None = interrupted or _CALLER_CANCELLED
            active.cancelled_by = "caller"
            paused = await self._end_write(active, lambda: self._paused_on(context, active))
            if paused is not None:
                outcome = "needs_user"
                error = paused if interrupted is None else f"{paused} ({interrupted})"
            elif _maybe_ran(core, context, active):
                outcome = "indeterminate"
            await self._leases.keeping(
                active, lambda: self._finish(request, context, active, outcome, error)
            )

    async def _unexpected(
        self,
        request: TurnRequest,
        context: TurnExecutionContext,
        core: PinnedCore,
        active: ActiveTurn,
        exc: BaseException,
    ) -> TurnResult:
        """Record a turn ended by an exception no seam expects (an adapter or embedder bug).

        A ``CancelledError`` an adapter raised past the turn's own stop (a cancel,
        the deadline, shutdown) ends it as that stop would have.
        """
        if isinstance(exc, anyio.get_cancelled_exc_class()) and active.scope.cancel_called:
            outcome, error = await self._stopped(context, core, active)
        else:
            _log.error("turn %s failed unexpectedly", context.turn_id, exc_info=exc)
            outcome, error = "failed", f"internal error ({type(exc).__name__})"
        return await self._finish(request, context, active, outcome, error)

    async def _released(
        self, context: TurnExecutionContext, core: PinnedCore, active: ActiveTurn
    ) -> None:
        """Close the turn's catalog, write what its end still owes and forget it."""
        try:
            if active.catalog is not None:
                await core.effects.close_catalog(active.catalog)
        finally:
            try:
                await self._after_end(context, active)
            finally:
                if active.author is not None:
                    active.author.close()
                self._tokens.unbind(context)
                self._active.pop(context.turn_id, None)
                self._observers.pop(context.turn_id, None)
                active.done.set()

    async def _body(
        self,
        request: TurnRequest,
        context: TurnExecutionContext,
        core: PinnedCore,
        active: ActiveTurn,
    ) -> tuple[TurnOutcome, str | None]:
        outcome: TurnOutcome = "completed"
        error: str | None = None
        with active.scope:
            try:
                with anyio.move_on_after(self._turn_timeout_s) as deadline:
                    active.catalog = await core.effects.prepare_catalog(
                        context, window_tokens=core.provider.limits.context_window
                    )
                    self._announce_unavailable(context, active.catalog)
                    active.redactor = core.effects.turn_redactor(context, active.catalog)
                    active.author = AuthorTurn.of(
                        self._state,
                        context,
                        active.lease,
                        lambda kind, data: self._emit(context, kind, dict(data)),
                    )
                    first = await self._first_message(request, context, core, active)
                    outcome, error = await self._steps(request, context, core, active, first)
                if deadline.cancelled_caught:
                    outcome, error = "failed", "the turn exceeded its deadline"
                    # A person still deciding is not a failure: the approval stays
                    # pending (answerable elsewhere) and the turn waits for it.
                    paused = await self._paused_on(context, active)
                    if paused is not None:
                        outcome, error = "needs_user", paused
            except ProviderError as exc:
                outcome, error = "failed", f"provider failed: {exc.message}"
                if exc.retryable:
                    # Unreachable after the adapter's retries (no response arrived): typed,
                    # so an inbox worker can wait the outage out without reading the text.
                    untouched = not active.responses and not active.effects
                    active.provider_unavailable = "before_output" if untouched else "after_output"
                    active.provider_retry_after_s = exc.retry_after
            except SlotFailed as exc:
                self._emit(context, "slot_runtime.failed", {"slot": exc.slot, "error": exc.message})
                outcome, error = "failed", exc.message
            except InvalidValue as exc:
                outcome, error = "failed", exc.message
        if active.scope.cancelled_caught:
            return await self._stopped(context, core, active)
        return outcome, error

    async def _stopped(
        self, context: TurnExecutionContext, core: PinnedCore, active: ActiveTurn
    ) -> tuple[TurnOutcome, str | None]:
        """How a turn its own scope stopped ends: paused, cancelled or indeterminate."""
        paused = await self._paused_on(context, active)
        if paused is not None:
            return "needs_user", paused
        # An effect running, or returned but not yet recorded, may have happened.
        outcome: TurnOutcome = "indeterminate" if _maybe_ran(core, context, active) else "cancelled"
        return outcome, active.cancel_reason

    async def _paused_on(self, context: TurnExecutionContext, active: ActiveTurn) -> str | None:
        """The turn stopped while a person decided on its durable approval: pause on it.

        Shutdown, a crash-free kernel stop or the caller's cancellation (Ctrl-C)
        leave the approval pending and answerable elsewhere, so the turn ends
        ``needs_user`` (its error names the approval) rather than ``cancelled``.
        An explicit ``cancel()`` is a person asking to stop: the turn is
        ``cancelled`` and its terminal write voids the approval.
        """
        explicit = active.scope.cancel_called and active.cancel_reason == ON_REQUEST
        if active.in_flight != "effect" or explicit:
            return None
        paused = await self._store.approvals.open_for_turn(context.turn_id)
        if paused is None:
            return None
        active.pending_approval = paused.approval_id
        active.in_flight = None
        # The paused call is answered by its continuation; any after it never ran.
        active.unanswered = [c for c in active.unanswered if c.call_id != paused.call_id]
        self._emit(
            context,
            "approval.pending",
            {"approval_id": paused.approval_id, "effect": paused.effect},
        )
        return f"waiting for approval {paused.approval_id}"

    async def _steps(
        self,
        request: TurnRequest,
        context: TurnExecutionContext,
        core: PinnedCore,
        active: ActiveTurn,
        first: ModelMessage,
    ) -> tuple[TurnOutcome, str | None]:
        catalog = active.catalog
        assert catalog is not None
        messages: list[ModelMessage] = [first]
        provider = core.provider
        for step in range(core.max_steps):
            context_request = ContextRequest(
                context=context,
                step_id=step,
                limits=provider.limits,
                messages=tuple(messages),
                definitions=catalog.definitions,
                instructions=active.instructions or core.instructions,
                contributions=request.injected_context,
                bootstrap=request.bootstrap,
                # A compaction's summarizer call is reported as the turn's model calls are.
                on_event=lambda kind, data: self._emit(context, kind, dict(data)),
            )
            answered = await self._prepared_call(context, core, active, context_request)
            if isinstance(answered, str):
                return "failed", answered
            prepared, response = answered
            active.responses += 1
            # Ids the Host would not keep (one holding a secret) are replaced before any
            # record, event or span repeats them.
            response = accepted(response, active.redactor)
            active.usage = add_usage(active.usage, response.usage)
            # The observation commits with this step's transcript write: one transaction.
            staged = self._stage(context, step, prepared.decision_id, response)
            # Kept and replayed without what the model put in secret-named arguments; the
            # calls themselves run with the arguments as sent.
            assistant = ModelMessage("assistant", response.text, _as_recorded(response.tool_calls))
            if response.tool_calls:
                # A call the turn's next request could not hold is refused, never run: run,
                # its step would overflow the window and fail the turn after the effect.
                # Counted with the calibration this step's usage moves once it commits.
                kept = await self._context.kept_calls(context_request, prepared, assistant, staged)
                if kept is not None:
                    response = with_kept(response, assistant.tool_calls, kept)
                    assistant = ModelMessage(
                        "assistant", response.text, _as_recorded(response.tool_calls)
                    )
            messages.append(assistant)
            detail: dict[str, Any] = {
                "step": step,
                "decision_id": prepared.decision_id,
                "finish_reason": response.finish_reason,
                # A name no tool has is the model's text, never repeated: UNKNOWN_EFFECT.
                "tool_calls": [tool_name(catalog, call.name) for call in response.tool_calls],
                # What a person reads: the effects called (files.write), not the names the
                # provider was given for them (files_write).
                "effects_called": [effect_of(catalog, call.name) for call in response.tool_calls],
                "input_tokens": response.usage.input_tokens,
                "output_tokens": response.usage.output_tokens,
            }
            if step == 0:
                detail["effects"] = list(catalog.effects)  # what the model could call
            if not response.tool_calls and core.output is not None:
                invalid = await self._check_output(context, core, active, assistant, detail, staged)
                if isinstance(invalid, str):
                    return "failed", invalid
                if invalid is not None:
                    messages.append(invalid)
                    continue
            if not response.tool_calls:
                final = await self._output_slot(context, core, active, assistant)
                # The answer is written with the terminal record: one transaction.
                active.final = TranscriptEntry(
                    final, "provider.completed", active.take_seq(), detail
                )
                active.final_step = staged
                active.text = final.content
                return "completed", None
            await self._persist(
                context, active, assistant, "provider.completed", detail, observed=staged
            )
            active.unanswered = list(assistant.tool_calls)
            for index, call in enumerate(response.tool_calls):
                ref = catalog.resolve(call.name)
                if ref is None:
                    outcome = None
                else:
                    # In flight until its result is durable: a cancellation between the
                    # two leaves an effect that may have happened (indeterminate).
                    active.in_flight = "effect"
                    self._emit(
                        context,
                        "effect.started",
                        {
                            "step": step,
                            "call_id": call.call_id,
                            "tool": call.name,
                            "effect": ref.effect,
                        },
                    )
                    # Paused past its lease (another Host may run the session now):
                    # the effect of a turn that lost it never starts.
                    await self._leases.still_held(active)
                    outcome = await core.effects.execute(
                        EffectRequest(call.call_id, ref, call.arguments, "model"),
                        context,
                        author=_lent(active),
                    )
                if outcome is not None and outcome.pending_approval is not None:
                    # Paused: the approved call is answered by the continuation turn; the
                    # calls after it never ran and say so.
                    for skipped in response.tool_calls[index + 1 :]:
                        await self._record_effect(context, active, skipped, None, _NOT_RUN)
                    active.in_flight = None
                    active.pending_approval = outcome.pending_approval
                    active.unanswered = [c for c in active.unanswered if c.call_id != call.call_id]
                    self._emit(
                        context,
                        "approval.pending",
                        {"approval_id": outcome.pending_approval, **outcome.views.event},
                    )
                    return "needs_user", f"waiting for approval {outcome.pending_approval}"
                messages.append(await self._record_effect(context, active, call, outcome))
        return "failed", f"the turn reached its step limit ({core.max_steps})"

    async def _check_output(
        self,
        context: TurnExecutionContext,
        core: PinnedCore,
        active: ActiveTurn,
        assistant: ModelMessage,
        detail: dict[str, Any],
        staged: ObservedStep | None,
    ) -> ModelMessage | str | None:
        """Validate a final answer against the agent's output type.

        None: valid (``active.output`` holds it). Otherwise the answer is kept
        in the transcript and a ``user`` message saying what was wrong is
        returned for the model, or, once ``core.output.retries`` are spent,
        the turn's error.
        """
        assert core.output is not None
        try:
            active.output = core.output.check(assistant.content)
            return None
        except InvalidValue as exc:
            problem = exc.message
        await self._persist(
            context, active, assistant, "provider.completed", detail, observed=staged
        )
        if active.output_retries >= core.output.retries:
            return (
                f"the answer did not match the output type after {active.output_retries + 1} "
                f"attempts: {problem}"
            )
        active.output_retries += 1
        feedback = ModelMessage(
            "user",
            f"Your answer did not match the required JSON schema: {problem}. "
            "Answer again with only the JSON object.",
        )
        await self._persist(
            context,
            active,
            feedback,
            "output.invalid",
            {"step": detail["step"], "attempt": active.output_retries, "error": problem},
        )
        return feedback

    async def _first_message(
        self,
        request: TurnRequest,
        context: TurnExecutionContext,
        core: PinnedCore,
        active: ActiveTurn,
    ) -> ModelMessage:
        """The user's input; or, for a continuation, the approved call's result.

        An ordinary turn voids the session's unanswered approvals first (the
        user moved on). A continuation runs the answered approval once; its
        result answers the paused call.
        """
        catalog = active.catalog
        assert catalog is not None
        if request.continues is None:
            # The input was persisted by the admission transaction (input.persisted),
            # unless the core's input slot normalizes it first (_input_slots persists it).
            if active.open_approvals:
                await core.effects.supersede_pending(context)
            message = await loaded_input(self._store, request, context.principal.principal_id)
            message = await self._input_slots(context, core, active, message)
            self._emit(context, "input.persisted", {})
            return message
        # A continuation resumes the paused turn's work: bootstrap and input do not run again,
        # but what bootstrap added then stays in its instructions.
        approval_id = request.continues
        await self._resumed_instructions(context, core, active, approval_id)
        active.in_flight = "effect"
        self._emit(context, "effect.started", {"approval_id": approval_id})
        call_id, name, outcome = await core.effects.execute_approved(
            approval_id, catalog, context, author=_lent(active)
        )
        active.unanswered = [ToolCall(call_id, name, {})]
        return await self._record_effect(
            context, active, active.unanswered[0], outcome, approval_id=approval_id
        )

    async def _input_slots(
        self,
        context: TurnExecutionContext,
        core: PinnedCore,
        active: ActiveTurn,
        message: ModelMessage,
    ) -> ModelMessage:
        """Run the bootstrap and input slots against the prepared catalog.

        Bootstrap text joins this turn's instructions. With an input slot, the
        normalized input is what the transcript keeps (appended now: admission
        recorded only the input's digest) and what the model sees.
        """
        if core.slots is None or active.author is None:
            return message
        ctx = active.author.context
        extra = await core.slots.bootstrap(ctx)
        if extra is not None:
            await self._extend_instructions(context, core, active, extra)
        if not core.slots.declared("input"):
            return message
        lease = self._tokens.lease(context.admission_lease_token)
        try:
            normalized = await core.slots.input(ctx, message.content)
        except SlotFailed:
            # The turn fails, but the person's message stays in the transcript as sent.
            stored = ModelMessage("user", message.content, attachments=_references(message))
            await self._store.turns.append_message(
                lease,
                event_seq=active.take_seq(),
                message=stored,
                event="input.persisted",
                detail={"normalized": False, "slot_failed": True},
            )
            raise
        # Step 7 of the contract: the normalized input is persisted now, appended (the
        # admission kept only its digest), before the first model call.
        stored = ModelMessage("user", normalized, attachments=_references(message))
        detail = {"normalized": normalized != message.content, "chars": len(normalized)}
        await self._store.turns.append_message(
            lease,
            event_seq=active.take_seq(),
            message=stored,
            event="input.persisted",
            detail=detail,
        )
        if normalized != message.content:
            self._emit(context, "input.normalized", detail)
        return dataclasses.replace(message, content=normalized)

    async def _extend_instructions(
        self, context: TurnExecutionContext, core: PinnedCore, active: ActiveTurn, extra: str
    ) -> None:
        """Join ``extra`` to this turn's instructions, recorded before any model call sees it.

        Masked with the turn's redactor first, as any text the turn keeps that no
        tool produced: the model and the store get the same text. Recorded so
        that the turn's continuation, run by whichever process answers its
        approval, sends exactly these instructions again.
        """
        extra = active.redactor.text(extra)[:MAX_EXTENDED_INSTRUCTIONS_CHARS]
        cancel_requested = await self._store.turns.extend_instructions(
            self._tokens.lease(context.admission_lease_token),
            event_seq=active.take_seq(),
            text=extra,
        )
        active.instructions = f"{core.instructions}\n\n{extra}" if core.instructions else extra
        self._emit(context, "instructions.extended", {"chars": len(extra)})
        if cancel_requested:
            # Another Host process recorded a cancel request: stop before the model call.
            active.stop(ON_REQUEST, "user")
            await anyio.lowlevel.checkpoint()

    async def _resumed_instructions(
        self, context: TurnExecutionContext, core: PinnedCore, active: ActiveTurn, approval_id: str
    ) -> None:
        """A continuation's instructions are its paused turn's: what bootstrap added there.

        Read back from the store (the answer may come from another process,
        after a restart) and recorded for this turn too, so the continuation of
        a continuation that paused again finds it as well.
        """
        asked = await self._store.approvals.peek(approval_id)
        if asked is None or asked.session_id != context.session_id:
            return  # not this session's: execute_approved refuses it
        extra = await self._store.turns.extended_instructions(asked.turn_id)
        if extra is not None:
            await self._extend_instructions(context, core, active, extra)

    async def _output_slot(
        self,
        context: TurnExecutionContext,
        core: PinnedCore,
        active: ActiveTurn,
        answer: ModelMessage,
    ) -> ModelMessage:
        """The final answer after the output slot: what is persisted and returned."""
        if core.slots is None or active.author is None:
            return answer
        text = await core.slots.output(active.author.context, answer.content)
        if text == answer.content:
            return answer
        self._emit(context, "output.transformed", {"chars": len(text)})
        return dataclasses.replace(answer, content=text)

    async def _record_effect(
        self,
        context: TurnExecutionContext,
        active: ActiveTurn,
        call: ToolCall,
        outcome: EffectResult | None,
        not_run: str | None = None,
        *,
        approval_id: str | None = None,
    ) -> ModelMessage:
        """Persist one call's result as the tool message answering it."""
        if outcome is None:
            status = "not_found" if not_run is None else "cancelled"
            effect, view = self._effect_named(active, call), not_run or "[not_found] no such tool"
        else:
            status, effect, view = outcome.status, outcome.effect, outcome.views.model
        return await self._answer(
            context, active, call, status, effect, view, approval_id=approval_id
        )

    async def _answer(
        self,
        context: TurnExecutionContext,
        active: ActiveTurn,
        call: ToolCall,
        status: str,
        effect: str,
        view: str,
        *,
        approval_id: str | None = None,
        listed: bool = False,
    ) -> ModelMessage:
        """Persist the tool message that answers ``call``; it is answered from then on.

        Should the write fail, the result stays known (``active.known``) and listed in
        the turn's effects: the turn's ending writes it again (``listed``: not listed a
        second time). Call ids are unique per step only, so the list is never searched
        by id.
        """
        summary = EffectSummary(call.call_id, effect, status, bounded(view, 200))
        if not listed:
            active.effects.append(summary)
        # The name as the model wrote it, so it reads which call this answers; a name no
        # tool has passes through the turn's redactor first.
        name = call.name if effect != UNKNOWN_EFFECT else active.redactor.text(call.name)
        message = ModelMessage("tool", view, tool_call_id=call.call_id, name=name)
        detail: dict[str, object] = {"call_id": call.call_id, "effect": effect, "status": status}
        if approval_id is not None:
            detail["approval_id"] = approval_id

        durable = False

        def answered() -> None:
            # Durable now: whatever happens next, this call's outcome is known.
            nonlocal durable
            durable = True
            active.unanswered = [c for c in active.unanswered if c.call_id != call.call_id]
            active.known.pop(call.call_id, None)
            active.in_flight = None

        try:
            await self._persist(
                context, active, message, "effect.completed", detail, on_durable=answered
            )
        except HostkitError:
            if not durable:
                active.known[call.call_id] = KnownResult(status, effect, view, approval_id)
            raise
        except BaseException:
            # Not written (a bug, a cancellation): the turn's ending answers the call anew.
            if not durable and not listed:
                active.effects.remove(summary)
            raise
        return message

    async def _answer_the_rest(self, context: TurnExecutionContext, active: ActiveTurn) -> None:
        """A turn ending early answers every call of its step still without a result, so
        the next turn's model reads what happened: a call whose result the Host holds
        (its write failed) gets that result, the one in flight may have run
        (``indeterminate``), the ones after it never did."""
        maybe_ran = active.in_flight == "effect"
        for call in list(active.unanswered):
            known = active.known.get(call.call_id)
            if known is not None:
                await self._answer(
                    context,
                    active,
                    call,
                    known.status,
                    known.effect,
                    known.view,
                    approval_id=known.approval_id,
                    listed=True,
                )
            else:
                status, view = (
                    ("indeterminate", _UNKNOWN) if maybe_ran else ("cancelled", _NOT_REACHED)
                )
                effect = self._effect_named(active, call)
                await self._answer(context, active, call, status, effect, view)
            maybe_ran = False

    @staticmethod
    def _effect_named(active: ActiveTurn, call: ToolCall) -> str:
        """The effect ``call`` names in the turn's catalog, or ``UNKNOWN_EFFECT``."""
        return UNKNOWN_EFFECT if active.catalog is None else effect_of(active.catalog, call.name)

    async def _prepared_call(
        self,
        context: TurnExecutionContext,
        core: PinnedCore,
        active: ActiveTurn,
        request: ContextRequest,
    ) -> tuple[ContextReady, ModelResponse] | str:
        """Prepare the step's context and call the provider; the overflow's error instead.

        A provider that refuses the request as too long before any text arrived
        generated nothing: the estimate that let it through was low, so the
        ContextManager raises the session's calibration and the step is
        prepared once more, smaller (``_call_provider`` turns a refusal after
        text into a plain ``ProviderError``). A second refusal fails the turn,
        as any provider failure does.
        """
        for attempt in range(2):
            prepared = await self._context.prepare(request)
            if prepared.kind == "overflow":
                return f"context overflow ({prepared.reason}): {prepared.detail}"
            if prepared.summary_usage is not None:
                # Paid while preparing (a compaction's summary): the turn's usage too.
                active.usage = add_usage(active.usage, prepared.summary_usage)
            active.in_flight = "provider"
            model_request = ModelRequest(
                prepared.messages, request.definitions, prepared.output_budget
            )
            try:
                response = await self._call_provider(context, core, model_request, request.step_id)
            except ContextOverflow:
                if attempt:
                    raise
                active.in_flight = None
                await self._context.refused(prepared.decision_id)
                continue
            active.in_flight = None
            return prepared, response
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _call_provider(
        self, context: TurnExecutionContext, core: PinnedCore, request: ModelRequest, step: int
    ) -> ModelResponse:
        provider = core.provider
        name = provider.name
        # Live only, for tracing: when the call began and ended, and with what usage.
        self._emit(
            context,
            "provider.started",
            {
                "step": step,
                "provider": name,
                "model": provider.model,
                "max_tokens": request.max_output_tokens,
            },
        )
        response: ModelResponse | None = None
        # With an output slot, the answer is what the slot returns (it may rewrite, redact
        # or refuse the model's text): the model's own words are never streamed.
        streams = core.slots is None or not core.slots.declared("output")
        generated = False
        try:
            async with open_stream(provider, request) as events:
                async for event in events:
                    if not isinstance(event, StreamEvent):
                        raise _not_a(event, "StreamEvent", name)
                    if event.kind == "done":
                        # The last event: a stream kept open after it (a proxy that never
                        # closes) would hold the complete answer back until the deadline.
                        response = event.response
                        break
                    if event.text:
                        generated = True
                        if streams:
                            self._emit(context, "text.delta", {"text": event.text, "step": step})
            if response is None:
                raise ProviderError("the stream ended without a response", provider=name)
            if not isinstance(response, ModelResponse):
                raise _not_a(response, "ModelResponse", name)
        except Exception as exc:
            # Whatever the provider raised, the turn's record says the provider failed.
            failure = exc if isinstance(exc, ProviderError) else _provider_raised(exc, name)
            error_type = _error_type(failure)
            self._emit(context, "provider.failed", {"step": step, "error_type": error_type})
            if isinstance(failure, ContextOverflow) and generated:
                # Text arrived before the refusal: no request that yielded any is sent again
                # (the turn fails, as for any provider failure after the first chunk).
                raise ProviderError(
                    failure.message.removeprefix(f"{failure.provider}: "),
                    provider=failure.provider,
                    status=failure.status,
                ) from exc
            if failure is exc:
                raise
            raise failure from exc
        self._emit(context, "provider.responded", response.reported(step))
        return response

    def _stage(
        self, context: TurnExecutionContext, step: int, decision_id: str, response: ModelResponse
    ) -> ObservedStep:
        """The step's observation, staged with the ContextManager for the next write."""
        observation = UsageObservation(
            decision_id=decision_id,
            session_id=context.session_id,
            turn_id=context.turn_id,
            step_id=step,
            provider=response.provider,
            model=response.model,
            usage=response.usage,
            finish_reason=response.finish_reason,
            provider_request_id=response.provider_request_id,
        )
        return self._context.stage(observation)

    async def _write_observed(
        self,
        context: TurnExecutionContext,
        observed: ObservedStep | None,
        write: Callable[[ObservedStep | None], Awaitable[T]],
    ) -> tuple[T, ObservedStep | None]:
        """Run ``write`` carrying the staged observation; returns its result and what committed.

        Should that write fail for anything but a lost lease, telemetry
        degrades and the answer is written again without the observation:
        the provider call is never repeated and its response never discarded.
        """
        if observed is None:
            return await write(None), None
        try:
            return await write(observed), observed
        except HostkitError as exc:
            if isinstance(exc, LeaseLost):
                raise
            await self._context.settle(observed, None, committed=False)
            step = observed.observation.step_id
            self._emit(context, "telemetry.degraded", {"step": step, "error": exc.message})
            return await write(None), None

    async def _persist(
        self,
        context: TurnExecutionContext,
        active: ActiveTurn,
        message: ModelMessage,
        event: str,
        detail: dict[str, Any],
        *,
        observed: ObservedStep | None = None,
        on_durable: Callable[[], None] | None = None,
    ) -> None:
        """Append a transcript message with its event (and a staged observation), fenced.

        ``on_durable`` runs the moment the write committed, before anything can
        deliver a cancellation.
        """
        seq = active.take_seq()
        written, committed = await self._write_observed(
            context,
            observed,
            lambda step: self._store.turns.append_message(
                self._tokens.lease(context.admission_lease_token),
                event_seq=seq,
                message=message,
                event=event,
                detail=detail,
                observed=step,
            ),
        )
        if on_durable is not None:
            on_durable()
        if committed is not None:
            await self._context.settle(committed, written.step)
        self._emit(context, event, detail)
        if written.cancel_requested:
            # Another Host process recorded a cancel request: stop here, before the next
            # step (the writes that follow are shielded and would not deliver it).
            active.stop(ON_REQUEST, "user")
            await anyio.lowlevel.checkpoint()

    async def _finish(
        self,
        request: TurnRequest,
        context: TurnExecutionContext,
        active: ActiveTurn,
        outcome: TurnOutcome,
        error: str | None,
    ) -> TurnResult:
        if active.author is not None:
            # Foreground completion: authored writes from here on are refused (LeaseLost).
            active.author.close()
        if outcome in ("cancelled", "indeterminate", "failed", "needs_user") and active.unanswered:
            with contextlib.suppress(HostkitError, TimeoutError):
                await self._end_write(
                    active, lambda: self._answer_the_rest(context, active), share=_ANSWERS_SHARE
                )
        result = TurnResult(
            request_id=context.request_id,
            turn_id=context.turn_id,
            session_id=context.session_id,
            core_id=context.core_id,
            core_revision=context.core_revision,
            outcome=outcome,
            text=active.text if outcome == "completed" else "",
            output=active.output if outcome == "completed" else None,
            effects=tuple(active.effects),
            usage=active.usage,
            error=bounded(error, 300) if error else None,
            durable_result_ref=context.turn_id,
            generation=context.generation,
            pending_approval=active.pending_approval if outcome == "needs_user" else None,
            truncated=outcome == "completed" and _hit_output_limit(active.final),
            cancelled_by=active.cancelled_by if outcome in _CANCELLED else None,
            provider_unavailable=active.provider_unavailable if outcome == "failed" else None,
            provider_retry_after_s=(active.provider_retry_after_s if outcome == "failed" else None),
        )
        seq, proposed = active.take_seq(), result

        async def record() -> TurnResult:
            try:
                written, committed = await self._write_observed(
                    context,
                    active.final_step,
                    lambda step: self._store.turns.finish(
                        self._tokens.lease(context.admission_lease_token),
                        proposed,
                        event_seq=seq,
                        route=self._tokens.route(context.route_token),
                        final=active.final,
                        observed=step,
                    ),
                )
                if committed is not None:
                    await self._context.settle(committed, None)
            except LeaseLost:
                # Another Host took the session over and recorded this turn's end.
                written = await self._recorded_elsewhere(context)
            active.recorded = True
            return written

        try:
            result = await self._end_write(active, record)
        except (HostkitError, TimeoutError) as exc:
            raise TurnInfrastructureError(
                context.request_id, durable_result_ref=context.turn_id
            ) from exc
        if active.final is not None:
            self._emit(context, active.final.event, dict(active.final.detail or {}))
        self._emit(context, f"turn.{result.outcome}", {"error": result.error})
        return result

    async def _end_write(
        self, active: ActiveTurn, write: Callable[[], Awaitable[T]], *, share: float = 1.0
    ) -> T:
        """Run one write of the turn's end within what is left of the end's one bound.

        ``TimeoutError`` when nothing is left, the bound runs out, or an earlier
        write of the end found the store busy: a write that waited out another
        process's lock is not followed by more, each waiting it out again. A
        write given a ``share`` of the bound (the answers to unanswered calls,
        many writes on a slow store) that runs out of it leaves the rest to the
        turn's record: the store was slow, not found busy.
        """
        left = active.end_left_s(self._terminal_timeout_s)
        if active.store_busy or left <= 0:
            raise TimeoutError("the store was busy when the turn ended")
        within = min(left, self._terminal_timeout_s * share)
        try:
            with anyio.fail_after(within):
                return await write()
        except TimeoutError:
            if within >= left:
                active.store_busy = True
            raise
        except StoreError as exc:
            # Retryable: a lock waited out, a server not answering in time. A COMMIT whose
            # answer was lost is not "busy": the next write may tell whether it landed.
            if exc.retryable and not isinstance(exc, StoreOutcomeUnknown):
                active.store_busy = True
            raise

    async def _after_end(self, context: TurnExecutionContext, active: ActiveTurn) -> None:
        """What the turn's end writes after its record, within what is left of its bound.

        A turn whose record was not written is ended ``lost`` (its session must
        not stay blocked), and its step decisions that were never observed (a
        failed or cancelled provider call) become durable. Once the store was
        found busy, or the bound is spent, neither is tried: the lease is left to
        this Host's next admission of the session, its shutdown or the next
        process's recovery, the decisions to the next flush.
        """
        left = active.end_left_s(self._terminal_timeout_s)
        if not active.recorded and not active.store_busy and left > 0:
            if not await self._leases.abandon(active.lease, within_s=left):
                active.store_busy = True  # the lease is left already; so are the decisions
            left = active.end_left_s(self._terminal_timeout_s)
        elif not active.recorded:
            self._leases.leave(active.lease)
        if active.store_busy or left <= 0:
            self._context.defer(context.turn_id)
            return
        with anyio.move_on_after(left):
            await self._context.flush(context.turn_id)

    async def _recorded_elsewhere(self, context: TurnExecutionContext) -> TurnResult:
        state = await self._store.turns.state(context.principal, context.turn_id)
        if state.result is None:
            raise TurnInfrastructureError(context.request_id, durable_result_ref=context.turn_id)
        return state.result

    # -- cancel ------------------------------------------------------------------------

    async def _cancel(
        self, scope: PrincipalScope, turn_id: str, digest: str | None
    ) -> TurnCancelResult:
        try:
            turn_id = _turn_id(turn_id)
            state = await self._store.turns.request_cancel(scope, turn_id, token_digest=digest)
        except InvalidValue as exc:
            raise NotFoundOrUnauthorized("turn") from exc
        if state.terminal:
            return TurnCancelResult(turn_id, "already_terminal", state.status)  # type: ignore[arg-type]
        active = self._active.get(turn_id)
        if active is None:
            return TurnCancelResult(turn_id, "requested", None)
        # The live cancellation is what the turn's own captured token resolves to.
        active = self._tokens.resolve(active.context.cancellation_token)
        active.stop(ON_REQUEST, "user")
        with anyio.move_on_after(self._cancel_timeout_s):
            await active.done.wait()
        state = await self._store.turns.state(scope, turn_id)
        if state.status in ("cancelled", "indeterminate"):
            return TurnCancelResult(turn_id, "cancelled", state.status)
        if state.terminal:
            return TurnCancelResult(turn_id, "already_terminal", state.status)  # type: ignore[arg-type]
        return TurnCancelResult(turn_id, "requested", None)

    def resolve(self, token: TurnToken) -> TurnExecutionContext:
        """The running turn a captured token names; ``UnboundToken`` once it has ended.

        For whoever acts on a turn's behalf after the turn handed them its
        token (a delivery, a prompt, a task it started): they act only while
        the turn runs, and a forged or stale token fails closed.
        """
        return self._tokens.resolve(token).context

    async def cancellation_token(self, turn_id: str, scope: PrincipalScope) -> TurnToken:
        """The cancellation token of a turn running in this Host, for its owner.

        What a Stop button or a channel's stop command holds on to: it cancels
        exactly this turn, from any Host process, and nothing once the turn
        has ended. Owner-checked like ``cancel``; ``UnboundToken`` when the
        turn is not running here.
        """
        turn_id = _turn_id(turn_id)
        state = await self._store.turns.state(scope, turn_id)
        active = self._active.get(turn_id)
        if state.terminal or active is None:
            raise UnboundToken()
        return active.context.cancellation_token

    async def cancel_token(self, token: TurnToken, scope: PrincipalScope) -> TurnCancelResult:
        """``cancel`` through the turn's captured cancellation token, from any Host process.

        The token must be the very one the turn captured: the store checks it
        against the digest its admission recorded, and any other token, a
        someone else's turn gets ``NotFoundOrUnauthorized`` (the reason,
        ``token_unbound``, is audited), a token of another kind
        ``InvalidValue``. A token of an ended turn changes nothing
        (``already_terminal``).
        """
        if not isinstance(token, TurnToken) or token.kind != "cancellation":
            raise InvalidValue("a cancellation TurnToken is required")
        return await self._cancel(scope, token.turn_id, token_digest(token.nonce))

    async def cancel(self, turn_id: str, scope: PrincipalScope) -> TurnCancelResult:
        """Owner-checked, idempotent cancel; returns once the turn's terminal state is durable.

        The wrong owner gets ``NotFoundOrUnauthorized``, the same answer as for
        a turn that does not exist. The request is recorded durably, so a turn
        running in another Host process stops at its next write or heartbeat.
        Detached tasks are not cancelled.
        """
        return await self._cancel(scope, turn_id, None)

    async def shutdown(self) -> None:
        """Refuse new turns, cancel running ones and wait (bounded) for their terminal records."""
        self._closing = True
        self._leases.stop_waiting()
        for active in list(self._active.values()):
            active.stop("the Host shut down", "host")
        with anyio.move_on_after(self._cancel_timeout_s):
            for active in list(self._active.values()):
                await active.done.wait()
            # A turn whose admission was on its way commits as the session comes free:
            # it stops at once (see _drive) and is waited for here, before the store closes.
            await self._leases.waiting.drained()
        # Turns of this instance still running now have no owner left (their terminal
        # write failed, or they did not stop in time): end them and free their sessions.
        await self._leases.end_remaining()

    def _announce_unavailable(
        self, context: TurnExecutionContext, catalog: PreparedEffectCatalog
    ) -> None:
        """One ``mcp.unavailable`` event per declared MCP server that gives this turn no
        tools (denied, failing, not approved), so a front end can say why they are missing.
        The detail is already bounded and free of declared secrets."""
        for found in catalog.discoveries:
            if found.state != "connected":
                data: dict[str, Any] = {
                    "server": found.server,
                    "state": found.state,
                    "detail": found.detail,
                }
                if found.failing_until is not None:
                    data["failing_until"] = found.failing_until
                self._emit(context, "mcp.unavailable", data)

    def _emit_waiting(self, request: TurnRequest, turn_id: str, busy: SessionBusy) -> None:
        """Live ``turn.waiting``: the session runs another turn, which this one waits for
        (once per holder).

        Before admission (no turn exists yet, so only the Host's observer hears
        it): a front end can say why nothing happens instead of blaming the model.
        """
        observer = self._observer
        if not listening(observer):
            return
        data = {"holder_turn_id": busy.holder_turn_id}
        event = TurnEvent("turn.waiting", request.request_id, turn_id, busy.session_id, data)
        notify_observer(observer, event)

    def _emit(self, context: TurnExecutionContext, kind: str, data: dict[str, Any]) -> None:
        observer = self._observer if listening(self._observer) else None
        pinned = self._observers.get(context.turn_id)
        if pinned is not None and not listening(pinned):
            pinned = None
        if observer is None and pinned is None:
            return  # nobody would see it: a dozen events per turn not built (and frozen)
        event = TurnEvent(kind, context.request_id, context.turn_id, context.session_id, data)
        if observer is not None:
            notify_observer(observer, event)
        if pinned is not None:
            notify_observer(pinned, event)


def _pinned_snapshot(core: PinnedCore) -> dict[str, object]:
    """The turn's capability snapshot, or ``TurnRejected``: it reads the provider (an
    embedder's object), so what that raises refuses the turn before it is admitted."""
    try:
        return capability_snapshot(core)
    except Exception as exc:
        raised = type_name(exc)
        raise TurnRejected(f"the agent's model provider could not be read ({raised})") from exc


def _turn_id(value: object) -> str:
    """A turn id argument as a plain ``str`` (checked before it is hashed), or ``InvalidValue``."""
    text = plain_text(value, limit=_MAX_TURN_ID)
    if text is None:
        raise InvalidValue(f"turn_id must be 1-{_MAX_TURN_ID} characters of valid text")
    return text


def _error_type(exc: HostkitError) -> str:
    """A low-cardinality class of a failed provider call: its HTTP status, else the error."""
    status = getattr(exc, "status", None)
    return str(status) if isinstance(status, int) else type(exc).__name__


def _provider_raised(exc: Exception, provider: str) -> ProviderError:
    """What a provider raised that is no ``ProviderError``, as one naming the provider
    and the exception's type (its message bounded: its ``__str__`` may fail or be huge)."""
    raised = bounded(f"{type(exc).__name__}: {unbounded_message(exc)}")
    return ProviderError(raised, provider=provider)


def _not_a(value: object, expected: str, provider: str) -> ProviderError:
    """A provider handed the turn ``value`` where a value of type ``expected`` belongs."""
    got = type_name(value)
    return ProviderError(f"stream() gave {got}, not a {expected}", provider=provider)


def _hit_output_limit(final: TranscriptEntry | None) -> bool:
    """The final answer's step ended at the output limit (normalised finish reason ``length``)."""
    return final is not None and (final.detail or {}).get("finish_reason") == "length"


def _as_recorded(calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """``calls`` as the transcript keeps them: secret-named argument strings redacted."""
    recorded = []
    for call in calls:
        arguments = redact_secret_fields(call.arguments)
        same = arguments is call.arguments
        recorded.append(call if same else ToolCall(call.call_id, call.name, arguments))
    return tuple(recorded)


def _lent(active: ActiveTurn) -> AuthorHandles | None:
    """What the turn lends the authored tools it calls: its state and its events."""
    return None if active.author is None else active.author.tools


def _references(message: ModelMessage) -> tuple[AttachmentPart, ...]:
    """``message``'s attachments as the transcript keeps them: references, no bytes."""
    return tuple(AttachmentPart(part.attachment) for part in message.attachments)


# Of a turn's end bound, what answering its unanswered calls may take: the rest is the record's.
_ANSWERS_SHARE = 0.5


def _maybe_ran(core: PinnedCore, context: TurnExecutionContext, active: ActiveTurn) -> bool:
    """Whether the effect in flight when the turn was cancelled may have happened: its
    tool was invoked and its result is not durable. Clears ``in_flight`` when not, so
    the call is answered as not run."""
    if active.in_flight != "effect":
        return False
    invoked = core.effects.invoked(context.turn_id)
    # A continuation's approved call has no id here until it returns: any invocation counts.
    ran = active.unanswered[0].call_id in invoked if active.unanswered else bool(invoked)
    if not ran:
        active.in_flight = None
    return ran
