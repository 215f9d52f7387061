"""TurnExecution: the whole lifecycle of one turn, in the contract's order, in one place."""

from __future__ import annotations

import contextlib
import logging
import time

import anyio

from hostkit.authority import AuthorityResolver, conversation_principal
from hostkit.context import ContextManager
from hostkit.effects import PreparedEffectCatalog
from hostkit.errors import (
    HostkitError,
    InvalidValue,
    NotFoundOrUnauthorized,
    ProviderError,
    ScopeError,
    TurnInfrastructureError,
    TurnInProgress,
    TurnRejected,
    bounded,
)
from hostkit.store import LeaseOwner, RuntimeStore
from hostkit.turns import _records
from hostkit.turns._active import ActiveTurn, add_usage, bind_context
from hostkit.turns._admission import SessionAdmission
from hostkit.turns._core import CoreResolver, PinnedCore
from hostkit.turns._events import NullObserver, Observer, TurnEvent
from hostkit.types import (
    ContextRequest,
    ConversationFacts,
    EffectRequest,
    EffectResult,
    EffectSummary,
    FreshSession,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PrincipalScope,
    ResumeSession,
    ToolCall,
    TurnCancelResult,
    TurnExecutionContext,
    TurnOutcome,
    TurnRequest,
    TurnResult,
    UsageObservation,
    new_id,
)

__all__ = ["TurnExecution"]

_log = logging.getLogger("hostkit.turns")
_NOT_RUN = "[cancelled] not run: the turn paused for an approval before this call"


class TurnExecution:
    """``run(TurnRequest) -> TurnResult`` and ``cancel(turn_id, scope) -> TurnCancelResult``.

    Order of one ``run``: validate (the request froze itself); authenticate
    and resolve the conversation binding; take the per-session admission;
    pin core revision, capabilities, generation, workspace, route and trace;
    persist ``turn.started`` with the idempotency key and lease; prepare the
    effect catalog; persist the input; for each step prepare context, call
    the provider, observe usage, run effects; commit the terminal state with
    its delivery intents in one transaction; release everything in
    ``finally``.

    Failures before ``turn.started`` raise ``TurnRejected``. Provider and
    effect failures after it return ``outcome="failed"``. Explicit cancel
    returns ``cancelled``; cancelling the caller records ``cancelled`` (or
    ``indeterminate`` when an effect was running) and re-raises. If the
    terminal record cannot be written, ``TurnInfrastructureError`` is raised
    and the next Host open marks the turn ``lost``.
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
        lease_ttl_s: float = 120.0,
        admission_timeout_s: float = 600.0,
        turn_timeout_s: float = 900.0,
        cancel_timeout_s: float = 30.0,
        terminal_timeout_s: float = 30.0,
    ) -> None:
        self._store = store
        self._authority = authority
        self._context = context
        self._cores = cores
        self._observer = observer or NullObserver()
        self._instance_id = lease_owner.instance if lease_owner else instance_id or new_id("host")
        self._owner: LeaseOwner | None = lease_owner
        self._lease_ttl_s = lease_ttl_s
        self._admission = SessionAdmission(wait_timeout_s=admission_timeout_s)
        self._turn_timeout_s = turn_timeout_s
        self._cancel_timeout_s = cancel_timeout_s
        self._terminal_timeout_s = terminal_timeout_s
        self._active: dict[str, ActiveTurn] = {}
        self._closing = False

    @property
    def active_turns(self) -> int:
        return len(self._active)

    @property
    def admission_holders(self) -> int:
        """Turns holding or waiting for their session's admission."""
        return self._admission.holders

    @property
    def admitted_sessions(self) -> int:
        """Sessions with a lock entry (idle entries are removed)."""
        return len(self._admission)

    async def recover(self) -> list[tuple[str, TurnOutcome]]:
        """Mark turns left running by a dead Host ``lost`` (or ``cancelled``); replay nothing."""

        def orphaned(owner: str | None, expired: bool) -> bool:
            # A live owner on this machine keeps its turn even past lease expiry (a long
            # provider call); a dead one loses it at once; elsewhere the lease decides.
            parsed = LeaseOwner.decode(owner or "")
            if parsed is None:
                return True
            liveness = parsed.liveness()
            return liveness == "dead" or (liveness == "unknown" and expired)

        return await self._store.write(
            lambda conn: _records.recover_orphans(conn, now_epoch=time.time(), orphaned=orphaned)
        )

    # -- run ---------------------------------------------------------------------------

    async def run(self, request: TurnRequest) -> TurnResult:
        if not isinstance(request, TurnRequest):
            raise TurnRejected("a TurnRequest is required")
        if self._closing:
            raise TurnRejected("the Host is shutting down")
        principal_id = self._principal_id(request)
        replay = await self._replay(principal_id, request.request_id)
        if replay is not None:
            return replay
        scope = await self._authenticate(request)
        session_id = scope.session_id or ""
        async with self._admission.hold(session_id):
            if self._closing:
                raise TurnRejected("the Host is shutting down")
            replay = await self._replay(principal_id, request.request_id)
            if replay is not None:
                return replay
            owner = await self._lease_owner()
            core = await self._cores.pin(request.core_id, request.core_revision)
            context = bind_context(request, scope, core)
            try:
                # Shielded: once turn.started may have committed, _drive must run so the
                # turn gets its terminal record; a pending cancellation is delivered there.
                with anyio.CancelScope(shield=True):
                    existing = await self._store.write(
                        lambda conn: _records.insert_turn(
                            conn,
                            context,
                            lease_owner=owner,
                            lease_expires_at=time.time() + self._lease_ttl_s,
                        )
                    )
                if existing is not None:
                    return self._existing(existing)
                self._emit(context, "turn.started", {"core_id": core.core_id})
                return await self._drive(request, context, core)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._cores.release(core)

    async def _lease_owner(self) -> LeaseOwner:
        # Reading the process start time touches /proc: do it once, off the event loop.
        if self._owner is None:
            self._owner = await anyio.to_thread.run_sync(LeaseOwner.current, self._instance_id)
        return self._owner

    def _principal_id(self, request: TurnRequest) -> str:
        try:
            if isinstance(request.principal, ConversationFacts):
                return conversation_principal(request.principal)
            return self._authority.verify(request.principal).principal_id
        except ScopeError as exc:
            raise TurnRejected(exc.message) from exc

    async def _replay(self, principal_id: str, request_id: str) -> TurnResult | None:
        existing = await self._store.read(
            lambda conn: _records.find_turn(conn, principal_id, request_id)
        )
        return None if existing is None else self._existing(existing)

    @staticmethod
    def _existing(existing: _records.ExistingTurn) -> TurnResult:
        if existing.status == "running" or existing.result is None:
            raise TurnInProgress(existing.turn_id)
        return existing.result

    async def _authenticate(self, request: TurnRequest) -> PrincipalScope:
        selected = request.session
        try:
            if isinstance(request.principal, ConversationFacts):
                if isinstance(selected, FreshSession):
                    select = "fresh"
                elif isinstance(selected, ResumeSession):
                    select = selected.session_id
                else:
                    select = "bound"
                return await self._authority.for_conversation(request.principal, session=select)
            scope = self._authority.verify(request.principal)
        except NotFoundOrUnauthorized as exc:
            raise TurnRejected("the requested session is not available") from exc
        except (ScopeError, InvalidValue) as exc:
            raise TurnRejected(exc.message) from exc
        if selected != "bound":
            raise TurnRejected("only conversations select a session; this scope is bound")
        if scope.session_id is None:
            raise TurnRejected("the principal is not bound to a session")
        return scope

    async def _drive(
        self, request: TurnRequest, context: TurnExecutionContext, core: PinnedCore
    ) -> TurnResult:
        active = ActiveTurn(context)
        self._active[context.turn_id] = active
        catalog: PreparedEffectCatalog | None = None
        try:
            outcome: TurnOutcome = "completed"
            error: str | None = None
            with active.scope:
                try:
                    with anyio.move_on_after(self._turn_timeout_s) as deadline:
                        catalog = await core.effects.prepare_catalog(context)
                        first = await self._first_message(request, context, core, catalog, active)
                        outcome, error = await self._steps(
                            request, context, core, catalog, active, first
                        )
                    if deadline.cancelled_caught:
                        outcome, error = "failed", "the turn exceeded its deadline"
                except ProviderError as exc:
                    outcome, error = "failed", f"provider failed: {exc.message}"
                except InvalidValue as exc:
                    outcome, error = "failed", exc.message
            if active.scope.cancelled_caught:
                outcome, error = "cancelled", active.cancel_reason
            return await self._finish(request, context, active, outcome, error)
        except anyio.get_cancelled_exc_class():
            outcome = "indeterminate" if active.in_flight == "effect" else "cancelled"
            with anyio.CancelScope(shield=True), contextlib.suppress(HostkitError, TimeoutError):
                await self._finish(request, context, active, outcome, "the caller was cancelled")
            raise
        except TurnInfrastructureError:
            raise
        except HostkitError as exc:
            # A store failure mid-turn: try to record it; if even that fails, say so.
            return await self._finish(request, context, active, "failed", exc.message)
        except Exception as exc:
            # An adapter or embedder bug: never leak it and never leave the turn running.
            _log.exception("turn %s failed unexpectedly", context.turn_id)
            error = f"internal error ({type(exc).__name__})"
            return await self._finish(request, context, active, "failed", error)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    if catalog is not None:
                        await core.effects.close_catalog(catalog)
                finally:
                    self._context.release(context.turn_id)
                    self._active.pop(context.turn_id, None)
                    active.done.set()

    async def _steps(
        self,
        request: TurnRequest,
        context: TurnExecutionContext,
        core: PinnedCore,
        catalog: PreparedEffectCatalog,
        active: ActiveTurn,
        first: ModelMessage,
    ) -> tuple[TurnOutcome, str | None]:
        messages: list[ModelMessage] = [first]
        provider = core.provider
        for step in range(core.max_steps):
            await self._renew_lease(context, active)
            prepared = await self._context.prepare(
                ContextRequest(
                    context=context,
                    step_id=step,
                    limits=provider.limits,
                    messages=tuple(messages),
                    definitions=catalog.definitions,
                    instructions=core.instructions,
                    contributions=request.injected_context,
                    bootstrap=request.bootstrap,
                )
            )
            if prepared.kind == "overflow":
                return "failed", f"context overflow ({prepared.reason}): {prepared.detail}"
            active.in_flight = "provider"
            response = await self._call_provider(
                context,
                core,
                ModelRequest(prepared.messages, catalog.definitions, prepared.output_budget),
                step,
            )
            active.in_flight = None
            active.usage = add_usage(active.usage, response.usage)
            await self._observe(context, step, prepared.decision_id, response)
            assistant = ModelMessage("assistant", response.text, response.tool_calls)
            messages.append(assistant)
            await self._persist(
                context,
                assistant,
                "provider.completed",
                {
                    "step": step,
                    "decision_id": prepared.decision_id,
                    "finish_reason": response.finish_reason,
                    "tool_calls": [call.name for call in response.tool_calls],
                    "input_tokens": response.usage.input_tokens,
                    "output_tokens": response.usage.output_tokens,
                },
            )
            if not response.tool_calls:
                active.text = response.text
                return "completed", None
            for index, call in enumerate(response.tool_calls):
                ref = catalog.resolve(call.name)
                if ref is None:
                    outcome = None
                else:
                    active.in_flight = "effect"
                    outcome = await core.effects.execute(
                        EffectRequest(call.call_id, ref, call.arguments, "model"), context
                    )
                    active.in_flight = None
                if outcome is not None and outcome.pending_approval is not None:
                    # Paused: the approved call is answered by the continuation turn; the
                    # calls after it never ran and say so.
                    for skipped in response.tool_calls[index + 1 :]:
                        await self._record_effect(context, active, skipped, None, _NOT_RUN)
                    active.pending_approval = outcome.pending_approval
                    self._emit(
                        context,
                        "approval.pending",
                        {"approval_id": outcome.pending_approval, **outcome.views.event},
                    )
                    return "needs_user", f"waiting for approval {outcome.pending_approval}"
                messages.append(await self._record_effect(context, active, call, outcome))
        return "failed", f"the turn reached its step limit ({core.max_steps})"

    async def _first_message(
        self,
        request: TurnRequest,
        context: TurnExecutionContext,
        core: PinnedCore,
        catalog: PreparedEffectCatalog,
        active: ActiveTurn,
    ) -> ModelMessage:
        """The user's input; or, for a continuation, the approved call's result.

        An ordinary turn voids the session's unanswered approvals first (the
        user moved on). A continuation runs the answered approval once; its
        result answers the paused call.
        """
        if request.continues is None:
            await core.effects.supersede_pending(context)
            message = ModelMessage("user", request.input)
            detail = {"effects": list(catalog.effects)}
            await self._persist(context, message, "input.persisted", detail)
            return message
        approval_id = request.continues
        active.in_flight = "effect"
        call_id, name, outcome = await core.effects.execute_approved(approval_id, catalog, context)
        active.in_flight = None
        return await self._record_effect(
            context, active, ToolCall(call_id, name, {}), outcome, approval_id=approval_id
        )

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
            effect, view = call.name, not_run or "[not_found] no such tool"
        else:
            status, effect, view = outcome.status, outcome.effect, outcome.views.model
        active.effects.append(EffectSummary(call.call_id, effect, status, bounded(view, 200)))
        message = ModelMessage("tool", view, tool_call_id=call.call_id, name=call.name)
        detail: dict[str, object] = {"call_id": call.call_id, "effect": effect, "status": status}
        if approval_id is not None:
            detail["approval_id"] = approval_id
        await self._persist(context, message, "effect.completed", detail)
        return message

    async def _call_provider(
        self, context: TurnExecutionContext, core: PinnedCore, request: ModelRequest, step: int
    ) -> ModelResponse:
        response: ModelResponse | None = None
        async with contextlib.aclosing(core.provider.stream(request)) as events:
            async for event in events:
                if event.kind == "text" and event.text:
                    self._emit(context, "text.delta", {"text": event.text, "step": step})
                elif event.kind == "done":
                    response = event.response
        if response is None:
            raise ProviderError("the stream ended without a response", provider=core.provider.name)
        return response

    async def _observe(
        self, context: TurnExecutionContext, step: int, decision_id: str, response: ModelResponse
    ) -> None:
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
        try:
            await self._context.observe(observation)
        except HostkitError as exc:
            # Never repeat or discard the provider call: record degraded telemetry only.
            self._emit(context, "telemetry.degraded", {"step": step, "error": exc.message})

    async def _persist(
        self, context: TurnExecutionContext, message: ModelMessage, event: str, detail: dict
    ) -> None:
        await self._store.write(
            lambda conn: _records.append_turn_message(
                conn,
                session_id=context.session_id,
                turn_id=context.turn_id,
                message=message,
                event=event,
                detail=detail,
            )
        )
        self._emit(context, event, detail)

    async def _renew_lease(self, context: TurnExecutionContext, active: ActiveTurn) -> None:
        """Extend the lease; stop if another Host ended the turn or a cancel was recorded."""
        expires = time.time() + self._lease_ttl_s
        state = await self._store.write(
            lambda conn: _records.renew_lease(conn, context.turn_id, expires)
        )
        if state == "gone":
            raise InvalidValue("the turn was ended by another Host; not continuing")
        if state == "cancel_requested":
            active.cancel_reason = "cancelled on request"
            active.scope.cancel()
            await anyio.lowlevel.checkpoint()

    async def _finish(
        self,
        request: TurnRequest,
        context: TurnExecutionContext,
        active: ActiveTurn,
        outcome: TurnOutcome,
        error: str | None,
    ) -> TurnResult:
        result = TurnResult(
            request_id=context.request_id,
            turn_id=context.turn_id,
            session_id=context.session_id,
            core_id=context.core_id,
            core_revision=context.core_revision,
            outcome=outcome,
            text=active.text if outcome == "completed" else "",
            effects=tuple(active.effects),
            usage=active.usage,
            error=bounded(error, 300) if error else None,
            durable_result_ref=context.turn_id,
            generation=context.generation,
            pending_approval=active.pending_approval if outcome == "needs_user" else None,
        )
        try:
            with anyio.fail_after(self._terminal_timeout_s):
                result = await self._store.write(
                    lambda conn: _records.finish_turn(conn, result, route=request.route)
                )
        except (HostkitError, TimeoutError) as exc:
            raise TurnInfrastructureError(
                context.request_id, durable_result_ref=context.turn_id
            ) from exc
        self._emit(context, f"turn.{outcome}", {"error": result.error})
        return result

    # -- cancel ------------------------------------------------------------------------

    async def cancel(self, turn_id: str, scope: PrincipalScope) -> TurnCancelResult:
        """Owner-checked, idempotent cancel; returns once the turn's terminal state is durable.

        The wrong owner gets ``NotFoundOrUnauthorized``, the same answer as for
        a turn that does not exist. Detached tasks are not cancelled.
        """
        status, _ = await self._store.owned(
            scope, "turn", turn_id, lambda conn: _records.owned_turn(conn, scope, turn_id)
        )
        if status in _records.TERMINAL:
            return TurnCancelResult(turn_id, "already_terminal", status)  # type: ignore[arg-type]
        await self._store.write(lambda conn: _records.request_cancel(conn, turn_id))
        active = self._active.get(turn_id)
        if active is None:
            return TurnCancelResult(turn_id, "requested", None)
        active.scope.cancel()
        with anyio.move_on_after(self._cancel_timeout_s):
            await active.done.wait()
        status, _ = await self._store.read(
            lambda conn: _records.owned_turn(conn, scope, turn_id) or ("running", "")
        )
        if status == "cancelled":
            return TurnCancelResult(turn_id, "cancelled", "cancelled")
        if status in _records.TERMINAL:
            return TurnCancelResult(turn_id, "already_terminal", status)  # type: ignore[arg-type]
        return TurnCancelResult(turn_id, "requested", None)

    async def shutdown(self) -> None:
        """Refuse new turns, cancel running ones and wait (bounded) for their terminal records."""
        self._closing = True
        for active in list(self._active.values()):
            active.cancel_reason = "the Host shut down"
            active.scope.cancel()
        with anyio.move_on_after(self._cancel_timeout_s):
            for active in list(self._active.values()):
                await active.done.wait()
        # Turns of this instance still running now have no owner left (their terminal
        # write failed, or they did not stop in time): end them explicitly as lost.
        mine = self._instance_id

        def owned_here(owner: str | None, expired: bool) -> bool:
            parsed = LeaseOwner.decode(owner or "")
            return parsed is not None and parsed.instance == mine

        with contextlib.suppress(HostkitError):
            await self._store.write(
                lambda conn: _records.recover_orphans(
                    conn, now_epoch=time.time(), orphaned=owned_here
                )
            )

    def _emit(self, context: TurnExecutionContext, kind: str, data: dict) -> None:
        event = TurnEvent(kind, context.request_id, context.turn_id, context.session_id, data)
        with contextlib.suppress(Exception):
            self._observer.notify(event)
