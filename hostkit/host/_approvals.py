"""Host approvals: list, answer and revoke, and the continuation turn an answer starts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from hostkit.authority import AuthorityResolver
from hostkit.effects import (
    ApprovalDecision,
    ApprovalFilter,
    ApprovalKey,
    ApprovalLedger,
    ApprovalPage,
    ApprovalRuntime,
    PendingApproval,
)
from hostkit.errors import (
    ApprovalRefused,
    InvalidValue,
    ScopeError,
    TurnInProgress,
)
from hostkit.store import RuntimeStore
from hostkit.turns import TurnExecution
from hostkit.types import (
    ConversationFacts,
    PrincipalScope,
    TurnRequest,
    TurnResult,
    is_count,
    is_seconds,
    plain_text,
)

__all__ = ["MAX_LIST", "HostApprovals"]

MAX_LIST = 200
# How many continuation turns one answer may start whose Host stopped before claiming it.
MAX_CONTINUATIONS = 20
_DECISIONS = ("approve_once", "approve_session", "deny")
# The longest id, status or reason an approval call takes (the store's own limit).
_MAX_TEXT = 200
# How often the same answer again looks whether the continuation it waits for has ended.
_CONTINUATION_POLL_S = 0.25
_REFUSALS: dict[str, tuple[str, str]] = {
    "pending": ("pending", "it is not answered yet: approve or deny it"),
    "approved": ("answered", "it was already approved (resume runs its continuation)"),
    "denied": ("answered", "it was already denied (resume runs its continuation)"),
    "executed": ("answered", "it was already approved and run"),
    "stale": ("stale", "the agent's policy, revision or capabilities changed since it was asked"),
    "superseded": ("superseded", "a newer turn ran in the session; the paused call is void"),
    "indeterminate": ("indeterminate", "its call may have run and is never run again"),
}

Fingerprint = Callable[[PendingApproval], Awaitable[str | None]]


class HostApprovals:
    """Durable approvals as operators and owners see them (``host.approvals``).

    Every call takes a Host-issued ``PrincipalScope`` and the store applies
    its approver predicate in SQL: an operator (whose scope was issued with an
    audited reason, recorded again with each answer) sees every owned
    session's approvals; anyone else only the approvals of calls that would
    run as their own principal in their own session — not those of another
    principal sharing the conversation. Missing and foreign ids get the same
    ``NotFoundOrUnauthorized``. ``answer`` records the first answer, then
    runs the continuation turn in the approval's session, which executes
    exactly the approved call once (or tells the model it was denied).
    """

    def __init__(
        self,
        *,
        store: RuntimeStore,
        authority: AuthorityResolver,
        runtime: ApprovalRuntime,
        turns: TurnExecution,
        fingerprint: Fingerprint,
        wait_s: float = 30.0,
    ) -> None:
        self._store = store
        # How long the same answer again waits for the continuation another answer started.
        self._wait_s = wait_s
        self._ledger = ApprovalLedger(store)
        self._authority = authority
        self.runtime = runtime
        self._turns = turns
        self._fingerprint = fingerprint

    async def list(
        self,
        scope: PrincipalScope,
        *,
        status: ApprovalFilter | None = "pending",
        limit: int = 50,
    ) -> list[PendingApproval]:
        """Newest first; ``status=None`` lists every status, ``"open"`` the approvals whose
        call can still run (pending, or answered and not run yet: ``resume`` runs it)."""
        return list((await self.page(scope, status=status, limit=limit)).approvals)

    async def page(
        self,
        scope: PrincipalScope,
        *,
        status: ApprovalFilter | None = "pending",
        limit: int = 50,
        before: int | None = None,
    ) -> ApprovalPage:
        """As ``list``, and whether older approvals were left out (``truncated``); pass the
        page's ``next_before`` as ``before`` to list them."""
        self._verify(scope)
        if not is_count(limit, high=MAX_LIST):
            raise InvalidValue(f"limit must be an integer from 1 to {MAX_LIST}")
        if status is not None:
            status = _text("status", status)  # type: ignore[assignment]  # the store checks it
        return await self._ledger.page(scope, status=status, limit=limit, before=before)

    async def get(self, scope: PrincipalScope, approval_id: str) -> PendingApproval:
        """One owned approval; ``NotFoundOrUnauthorized`` for missing and foreign ids alike."""
        self._verify(scope)
        return await self._ledger.get(scope, _text("approval_id", approval_id))

    async def answer(
        self,
        approval_id: str,
        decision: ApprovalDecision,
        *,
        by: PrincipalScope,
        principal: PrincipalScope | None = None,
        wait_s: float | None = None,
        recorded: Callable[[], Awaitable[None]] | None = None,
    ) -> TurnResult:
        """Answer once and run the continuation turn; returns that turn's result.

        ``recorded`` is awaited once this call's answer is the one recorded,
        before its continuation runs (a channel tells the person who pressed a
        button then, not a model call later).

        The same answer again (a retry, or a second approver who clicked at
        the same moment) is idempotent: it finishes or reports the
        continuation the recorded answer started, exactly as ``resume`` does,
        waiting for one that still runs (here or in another process) up to
        ``wait_s`` (default ``[host] admission_timeout_s``; 0: not at all), then
        ``TurnInProgress`` (retryable, ``retry_at`` its holder's lease expiry).
        The wait applies the lease rule to the continuation's holder: one whose
        process provably died ends at once, a silent one between one and two
        ttls after its last renewal, and that record answers (a continuation
        that had claimed the call is refused ``indeterminate``).
        Raises ``ApprovalRefused`` for a different answer (``answered``), a changed
        policy/revision/capability or a conversation now bound elsewhere
        (``stale``), a session that moved on (``superseded``) or a call that
        may have run (``indeterminate``). Sessions not owned by a conversation
        need ``principal``: the owner's own scope.
        """
        if plain_text(decision, limit=_MAX_TEXT) not in _DECISIONS:
            raise InvalidValue(f"decision must be one of {', '.join(_DECISIONS)}")
        decision = str.__str__(decision)  # type: ignore[assignment]  # one of _DECISIONS
        approval_id = _text("approval_id", approval_id)
        if wait_s is not None and not is_seconds(wait_s, high=86_400, zero=True):
            raise InvalidValue("wait_s must be a number of seconds from 0 to 86400")
        approval = await self.get(by, approval_id)
        wait = self._wait_s if wait_s is None else wait_s
        if approval.status != "pending":
            again = self._answered_again(approval, decision, principal, by, recorded)
            return await self._waited(approval_id, by, principal, again, wait)
        continuation = await self._continuation_principal(approval, principal, by)
        fingerprint = await self._fingerprint(approval)
        if fingerprint == "":
            # The agent runs here and no longer offers the effect: as for a changed fingerprint.
            await self._ledger.mark_stale(approval_id)
            raise ApprovalRefused(approval_id, "stale", "the agent no longer offers this effect")
        # Ends recorded before this answer must not void it; those after it do.
        mark = await self.runtime.refresh()
        answered = await self._ledger.answer(
            by, approval_id, decision=decision, fingerprint=fingerprint
        )
        if not answered.accepted:
            # Another answer was recorded first (another process, the same moment).
            again = self._answered_again(answered.approval, decision, principal, by, recorded)
            return await self._waited(approval_id, by, principal, again, wait)
        await self._remember(answered.approval, decision, mark)
        if recorded is not None:
            await recorded()
        return await self._continue(answered.approval, continuation, by)

    async def _answered_again(
        self,
        approval: PendingApproval,
        decision: ApprovalDecision,
        principal: PrincipalScope | None,
        by: PrincipalScope,
        recorded: Callable[[], Awaitable[None]] | None = None,
    ) -> TurnResult:
        """An answer to an approval that already has one: the same answer finishes or
        reports its continuation; anything else is refused with the approval's state.

        A same answer that runs the continuation its first caller never ran (that
        caller interrupted after recording it) counts as ``recorded`` too: it is this
        call that runs the answered call."""
        same = approval.decision == decision
        if not same or approval.status not in ("approved", "denied", "executed"):
            if approval.awaiting_continuation:
                raise ApprovalRefused(
                    approval.approval_id,
                    "answered",
                    f"it was already answered {approval.decision}; a different answer is "
                    "refused (resume runs the continuation of the recorded answer)",
                )
            raise _refused(approval)
        if approval.awaiting_continuation:
            # Its continuation never ran (the first caller was interrupted, or is about to
            # run it: the durable claim lets only one of them run the call).
            continuation = await self._continuation_principal(approval, principal, by)
            await self._runs_here(approval)
            await self._remember(approval, decision, await self.runtime.refresh())
            if recorded is not None:
                await recorded()
            return await self._continue(approval, continuation, by)
        return await self.resume(approval.approval_id, by=by, principal=principal)

    async def _waited(
        self,
        approval_id: str,
        by: PrincipalScope,
        principal: PrincipalScope | None,
        again: Awaitable[TurnResult],
        wait_s: float,
    ) -> TurnResult:
        """``again``'s result; while the continuation it reports still runs, that
        continuation's result once it ended (``TurnInProgress`` after ``wait_s``)."""
        deadline = anyio.current_time() + wait_s
        try:
            return await again
        except TurnInProgress:
            if wait_s <= 0:
                raise
        while True:
            await anyio.sleep(_CONTINUATION_POLL_S)
            try:
                return await self.resume(approval_id, by=by, principal=principal)
            except TurnInProgress:
                if anyio.current_time() >= deadline:
                    raise

    async def _remember(
        self, approval: PendingApproval, decision: ApprovalDecision, mark: int | None
    ) -> None:
        # A call that binds secrets is approved once, whatever was answered.
        if decision == "approve_session" and not approval.binds_secret:
            await self.runtime.remember(
                ApprovalKey(
                    principal_id=approval.principal_id,
                    session_id=approval.session_id,
                    policy_fingerprint=approval.policy_fingerprint,
                    rule_key=approval.rule_key,
                    core_id=approval.core_id,
                ),
                since=mark,
            )

    async def resume(
        self, approval_id: str, *, by: PrincipalScope, principal: PrincipalScope | None = None
    ) -> TurnResult:
        """Finish an answered approval: run its continuation, or report the one that ran.

        Answered and not yet claimed (the caller was interrupted, or the
        continuation's Host stopped before claiming the call): a continuation
        turn runs it, once — the durable claim makes a second run impossible.
        Claimed: that continuation's recorded result is returned, nothing runs
        again (``TurnInProgress`` while its holder still holds it: one whose holder
        is gone is ended first, the lease rule). An approval that is
        pending, void (``stale``, ``superseded``) or ``indeterminate`` (its
        continuation stopped after claiming it: it may have run) is refused with
        its reason; one whose agent this Host does not run (a CLI without the
        Python agent's ``--agent``), as ``unavailable``, as an answer is.
        """
        approval_id = _text("approval_id", approval_id)
        approval = await self.get(by, approval_id)
        if approval.awaiting_continuation:
            continuation = await self._continuation_principal(approval, principal, by)
            await self._runs_here(approval)
            return await self._continue(approval, continuation, by)
        claimed_by = approval.continuation_turn_id
        if approval.status in ("executed", "denied") and claimed_by is not None:
            if claimed_by == approval.turn_id:
                raise ApprovalRefused(
                    approval_id, "answered", "it was answered inside its own turn, which ran it"
                )
            # The lease rule: a continuation whose holder is gone (its process died, or
            # went silent past the noticed lapse) is ended here, its record the answer.
            state = await self._store.turns.awaited_state(by, claimed_by)
            if state.result is None:
                # Retryable: its result is this call's answer once it ends.
                # When it started and when its holder's lease runs out: a channel
                # command deferred on it waits from then, not from its own receipt.
                raise TurnInProgress(
                    claimed_by,
                    running_since=state.started_at,
                    retry_at=state.holder_expires_at,
                )
            # Ended by that rule after it claimed the call, the approval is settled
            # (``indeterminate``): refused as it is after any recovery.
            approval = await self.get(by, approval_id)
            if approval.status in ("executed", "denied"):
                return state.result
        raise _refused(approval)

    async def _runs_here(self, approval: PendingApproval) -> None:
        """``ApprovalRefused`` (``unavailable``, the approval untouched) when this Host cannot
        run the agent that asked, as for a first answer: its continuation would otherwise be
        a bare turn rejection that never says the agent (a Python one's ``--agent``) is
        missing. What the effect fingerprints to now is the continuation's to judge."""
        await self._fingerprint(approval)

    async def _continue(
        self, approval: PendingApproval, principal: PrincipalScope, by: PrincipalScope
    ) -> TurnResult:
        """Run the continuation turn of an answered approval under a fresh request id.

        The first attempt's request id is derived from the approval; a turn of
        that id that ended without claiming the call (its Host stopped first)
        does not strand the answer: the next attempt gets the next id. That
        includes a turn still ``running`` whose Host died: running its id again
        ends it (its record comes back) and, the call still unclaimed, the next
        id runs the call.
        """
        approval_id = approval.approval_id
        route = await self._captured_route(approval)
        # What the embedder injected for the paused turn, and whether it left the bootstrap
        # snapshot out, hold for all of it: its continuation carries both (recorded with
        # it too, for a continuation that pauses again).
        carried = await self._store.turns.carried_context(approval.turn_id)
        for attempt in range(1, MAX_CONTINUATIONS + 1):
            request_id = f"continue:{approval_id}" + (f":{attempt}" if attempt > 1 else "")
            existing = await self._store.turns.find(principal.principal_id, request_id)
            if existing is not None and existing.status != "running":
                if not (await self.get(by, approval_id)).awaiting_continuation:
                    # It ended after claiming the call (another answer ran it meanwhile):
                    # its record is this answer's, and nothing runs again.
                    return await self.resume(approval_id, by=by)
                continue  # ended without claiming the call: this answer is still unclaimed
            # TurnInProgress when that continuation runs here or in another process:
            # retryable, and its result answers this call once it has ended.
            result = await self._turns.run(
                TurnRequest(
                    input=f"approval {approval_id}: {approval.decision}",
                    principal=principal,
                    request_id=request_id,
                    core_id=approval.core_id,
                    continues=approval_id,
                    route=route,
                    injected_context=carried.injected,
                    bootstrap=carried.bootstrap,
                )
            )
            if existing is None or not (await self.get(by, approval_id)).awaiting_continuation:
                # A turn of this id that ended without claiming the call is taken as it
                # ended (a cancel stands); only one left running by a Host that died,
                # which this repeat ended, hands the call to the next id.
                return result
        raise ApprovalRefused(
            approval_id, "answered", "too many of its continuation turns were interrupted"
        )

    async def _captured_route(self, approval: PendingApproval) -> Mapping[str, Any] | None:
        """The route the paused turn captured at admission, or None.

        Whoever answers (a channel reply, the CLI, a notebook), the
        continuation's answer goes where the conversation asked: the route is
        the paused turn's, never the answerer's. A turn with no route (a CLI or
        notebook turn) gets a continuation with none either.
        """
        return await self._store.turns.route_of(approval.turn_id)

    async def revoke(
        self, scope: PrincipalScope, session_id: str, *, reason: str = "revoked"
    ) -> int:
        """End the session's "approve for session" answers, in every Host process.

        An operator ends every principal's; anyone else only their own. The
        end is recorded in the store (owner-checked, audited) before this
        Host drops its own; other Hosts drop theirs before they next use one.
        Returns how many this Host dropped.
        """
        session_id = _text("session_id", session_id)
        if not isinstance(reason, str):
            raise InvalidValue("reason must be text")
        reason = str.__str__(reason)  # cut to the store's limit there
        revocation = await self._store.approvals.revoke(scope, session_id, reason=reason)
        dropped = self.runtime.invalidate(
            session_id=session_id, principal_id=revocation.principal_id
        )
        # Read past this end now, so an answer given after it is kept.
        await self.runtime.refresh()
        return dropped

    async def _continuation_principal(
        self, approval: PendingApproval, principal: PrincipalScope | None, by: PrincipalScope
    ) -> PrincipalScope:
        """The scope the continuation runs under: always the approval's owner's own.

        ``principal`` when given (it must be that owner's). Otherwise a
        conversation's is resolved again from its binding; a scheduled run's or a
        child agent's is the answerer's own when the owner answers, or rebuilt by
        the resolver from the session's durable owner row when an operator
        answers (in any process, after the Host that minted it closed).
        """
        if (
            principal is None
            and by.authority in ("system", "delegated_agent")
            and self._owns(by, approval)
        ):
            principal = by  # the owner answering its own: no binding to look up again
        if principal is not None:
            scope = self._verify(principal)
            if not self._owns(scope, approval):
                raise ScopeError("principal must be the approval's owner in its session")
            return scope
        owner = await self._store.owner_facts(approval.session_id)
        if (
            owner is not None
            and owner.owner_kind in ("system", "delegated_agent")
            and owner.principal_id == approval.principal_id
            and self._verify(by).authority == "operator"
        ):
            return await self._authority.owner_of_answered(by, approval.approval_id)
        if owner is None or owner.owner_kind != "conversation" or owner.channel is None:
            raise InvalidValue(
                "this approval's session is not a conversation's: pass the owner's scope"
            )
        channel = owner.channel
        facts = ConversationFacts(
            channel=channel,
            conversation_key=owner.conversation_key or "",
            principal_key=approval.principal_id.removeprefix(f"{channel}:"),
        )
        scope = await self._authority.for_conversation(facts, session="bound")
        if scope.session_id != approval.session_id:
            await self._ledger.mark_stale(approval.approval_id)
            raise ApprovalRefused(
                approval.approval_id, "stale", "the conversation is now bound to another session"
            )
        return scope

    def _verify(self, scope: PrincipalScope) -> PrincipalScope:
        return self._authority.verify(scope)

    @staticmethod
    def _owns(scope: PrincipalScope, approval: PendingApproval) -> bool:
        return (
            scope.principal_id == approval.principal_id and scope.session_id == approval.session_id
        )


def _text(name: str, value: object) -> str:
    """``value`` as a plain ``str``, or ``InvalidValue`` naming ``name``: checked before
    it is compared, hashed or quoted, none of which may run a caller's own code."""
    text = plain_text(value, limit=_MAX_TEXT)
    if text is None:
        raise InvalidValue(f"{name} must be 1-{_MAX_TEXT} characters of valid text")
    return text


def _refused(approval: PendingApproval) -> ApprovalRefused:
    status = approval.status
    reason, detail = _REFUSALS.get(status, ("answered", f"it is {status}"))
    claimed_by = approval.continuation_turn_id
    if status in ("approved", "denied") and claimed_by is not None:
        # Its continuation took it already: resume would only show what that turn did.
        detail = (
            f"it was already {status} and its continuation turn {claimed_by} took it "
            "(resume shows that turn's result)"
        )
    if approval.void_reason:
        # The recorded reason says what changed; the generic line would only repeat it.
        detail = f"it is {status}: {approval.void_reason}"
    return ApprovalRefused(approval.approval_id, reason, detail)
