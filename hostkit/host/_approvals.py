"""Host approvals: list, answer and revoke, and the continuation turn an answer starts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from hostkit.authority import AuthorityResolver
from hostkit.effects import (
    ApprovalDecision,
    ApprovalKey,
    ApprovalLedger,
    ApprovalRuntime,
    ApprovalStatus,
    PendingApproval,
)
from hostkit.errors import ApprovalRefused, InvalidValue, ScopeError
from hostkit.store import RuntimeStore
from hostkit.turns import TurnExecution
from hostkit.types import ConversationFacts, PrincipalScope, TurnRequest, TurnResult

__all__ = ["MAX_LIST", "HostApprovals"]

MAX_LIST = 200
_DECISIONS = ("approve_once", "approve_session", "deny")
_REFUSALS: dict[str, tuple[str, str]] = {
    "approved": ("answered", "it was already approved (resume runs its continuation)"),
    "denied": ("answered", "it was already denied (resume runs its continuation)"),
    "executed": ("answered", "it was already approved and run"),
    "stale": ("stale", "the agent's policy, revision or capabilities changed since it was asked"),
    "superseded": ("superseded", "a newer turn ran in the session; the paused call is void"),
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
    ) -> None:
        self._store = store
        self._ledger = ApprovalLedger(store)
        self._authority = authority
        self.runtime = runtime
        self._turns = turns
        self._fingerprint = fingerprint

    async def list(
        self,
        scope: PrincipalScope,
        *,
        status: ApprovalStatus | None = "pending",
        limit: int = 50,
    ) -> list[PendingApproval]:
        """Newest first; ``status=None`` lists every status."""
        self._verify(scope)
        if not 0 < limit <= MAX_LIST:
            raise InvalidValue(f"limit must be 1-{MAX_LIST}")
        return list(await self._ledger.list(scope, status=status, limit=limit))

    async def get(self, scope: PrincipalScope, approval_id: str) -> PendingApproval:
        """One owned approval; ``NotFoundOrUnauthorized`` for missing and foreign ids alike."""
        self._verify(scope)
        return await self._ledger.get(scope, approval_id)

    async def answer(
        self,
        approval_id: str,
        decision: ApprovalDecision,
        *,
        by: PrincipalScope,
        principal: PrincipalScope | None = None,
    ) -> TurnResult:
        """Answer once and run the continuation turn; returns that turn's result.

        Raises ``ApprovalRefused`` for a second answer (``answered``), a changed
        policy/revision/capability or a conversation now bound elsewhere
        (``stale``), or a session that moved on (``superseded``). Sessions not
        owned by a conversation need ``principal``: the owner's own scope.
        """
        if decision not in _DECISIONS:
            raise InvalidValue(f"decision must be one of {', '.join(_DECISIONS)}")
        approval = await self.get(by, approval_id)
        if approval.status != "pending":
            raise _refused(approval_id, approval.status)
        continuation = await self._continuation_principal(approval, principal)
        fingerprint = await self._fingerprint(approval)
        answered = await self._ledger.answer(
            by, approval_id, decision=decision, fingerprint=fingerprint
        )
        if not answered.accepted:
            raise _refused(approval_id, answered.approval.status)
        # A call that binds secrets is approved once, whatever was answered.
        if decision == "approve_session" and not answered.approval.binds_secret:
            self.runtime.remember(
                ApprovalKey(
                    principal_id=approval.principal_id,
                    session_id=approval.session_id,
                    policy_fingerprint=approval.policy_fingerprint,
                    rule_key=approval.rule_key,
                    core_id=approval.core_id,
                )
            )
        return await self._continue(answered.approval, continuation)

    async def resume(
        self, approval_id: str, *, by: PrincipalScope, principal: PrincipalScope | None = None
    ) -> TurnResult:
        """Run (or replay) the continuation of an answered approval.

        For when ``answer`` recorded the decision but its continuation turn
        never ran (the caller was interrupted). The continuation's request id
        is derived from the approval, so a turn that already ran is replayed,
        not repeated, and the durable claim still runs the call at most once.
        """
        approval = await self.get(by, approval_id)
        if approval.status not in ("approved", "denied", "executed"):
            raise _refused(approval_id, approval.status)
        return await self._continue(
            approval, await self._continuation_principal(approval, principal)
        )

    async def _continue(self, approval: PendingApproval, principal: PrincipalScope) -> TurnResult:
        return await self._turns.run(
            TurnRequest(
                input=f"approval {approval.approval_id}: {approval.decision}",
                principal=principal,
                request_id=f"continue:{approval.approval_id}",
                core_id=approval.core_id,
                continues=approval.approval_id,
            )
        )

    async def revoke(self, scope: PrincipalScope, session_id: str) -> int:
        """Drop the session's cached "approve for session" answers (owner-checked).

        An operator drops every principal's; anyone else only their own.
        """
        await self._store.get_session(scope, session_id)  # owner-checked; raises if not
        if scope.authority == "operator":
            return self.runtime.invalidate(session_id=session_id)
        return self.runtime.invalidate(session_id=session_id, principal_id=scope.principal_id)

    async def _continuation_principal(
        self, approval: PendingApproval, principal: PrincipalScope | None
    ) -> PrincipalScope:
        if principal is not None:
            scope = self._verify(principal)
            if (
                scope.principal_id != approval.principal_id
                or scope.session_id != approval.session_id
            ):
                raise ScopeError("principal must be the approval's owner in its session")
            return scope
        owner = await self._store.owner_facts(approval.session_id)
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


def _refused(approval_id: str, status: str) -> ApprovalRefused:
    reason, detail = _REFUSALS.get(status, ("answered", f"it is {status}"))
    return ApprovalRefused(approval_id, reason, detail)
