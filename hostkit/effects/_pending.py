"""Durable approvals: the row every ``ask`` writes before anyone is asked.

``ApprovalLedger`` is the effects-side face of the store's approvals group
(``RuntimeStore.approvals``): it turns a turn's execution context into the
store's typed values. The store applies owner predicates and makes every
status change a conditional write, so two answers or two continuation turns
can never both succeed. The row values live in ``hostkit.store`` and are
re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hostkit.errors import HostkitError
from hostkit.store import (
    ApprovalAnswer,
    ApprovalDecision,
    ApprovalFilter,
    ApprovalPage,
    ApprovalStatus,
    ClaimedApproval,
    NewApproval,
    PendingApproval,
    RuntimeStore,
)
from hostkit.types import PrincipalScope, TurnExecutionContext

__all__ = [
    "INLINE",
    "ApprovalAnswer",
    "ApprovalFilter",
    "ApprovalLedger",
    "ApprovalPage",
    "ApprovalStatus",
    "AskedCall",
    "ClaimedApproval",
    "DurableAsk",
    "PendingApproval",
]


# ``decided_by`` of an answer given to a prompt inside the asking turn (console, widget,
# script): the provider, not a principal scope, answered it.
INLINE = "inline-approver"


class ApprovalLedger:
    """The durable approvals of one store, as async calls (each one transaction)."""

    def __init__(self, store: RuntimeStore) -> None:
        self._store = store

    async def record(
        self,
        *,
        approval_id: str,
        context: TurnExecutionContext,
        effect: str,
        call_id: str,
        arguments: Mapping[str, Any],
        view: Mapping[str, Any],
        policy_fingerprint: str,
        rule_key: str,
        secret_names: Sequence[str],
        target_digest: str | None = None,
    ) -> PendingApproval:
        """Keep an ``ask`` of ``context``'s turn, before it is asked, under its prompt's id.

        ``secret_names`` are the Host secrets the call binds (a typed fact the
        answer reads; ``view`` is display only); ``target_digest`` is what the
        tool's pre-approval check found (its continuation must find the same).
        """
        return await self._store.approvals.insert(
            NewApproval(
                approval_id=approval_id,
                session_id=context.session_id,
                turn_id=context.turn_id,
                principal_id=context.principal.principal_id,
                core_id=context.core_id,
                core_revision=context.core_revision,
                effect=effect,
                call_id=call_id,
                arguments=arguments,
                view=view,
                policy_fingerprint=policy_fingerprint,
                rule_key=rule_key,
                secret_names=tuple(secret_names),
                target_digest=target_digest,
            )
        )

    async def get(self, scope: PrincipalScope, approval_id: str) -> PendingApproval:
        """One owned approval, or ``NotFoundOrUnauthorized``."""
        return await self._store.approvals.get(scope, approval_id)

    async def page(
        self,
        scope: PrincipalScope,
        *,
        status: ApprovalFilter | None,
        limit: int,
        before: int | None = None,
    ) -> ApprovalPage:
        """The scope's newest approvals (``status=None``: every status; ``"open"``: those
        whose call can still run) recorded before ``before``, and whether older ones were
        left out."""
        return await self._store.approvals.page(scope, status=status, limit=limit, before=before)

    async def answer(
        self,
        scope: PrincipalScope,
        approval_id: str,
        *,
        decision: ApprovalDecision,
        fingerprint: str | None,
    ) -> ApprovalAnswer:
        """Record the first answer, decided by ``scope`` (see ``ApprovalStore.answer``)."""
        return await self._store.approvals.answer(
            scope, approval_id, decision=decision, fingerprint=fingerprint
        )

    async def answer_inline(
        self, approval_id: str, context: TurnExecutionContext, decision: ApprovalDecision
    ) -> ApprovalAnswer:
        """Record the answer a provider gave inside the asking turn, unless another won."""
        return await self._store.approvals.answer_inline(
            approval_id, turn_id=context.turn_id, decision=decision, decided_by=INLINE
        )

    async def peek(self, approval_id: str) -> PendingApproval | None:
        return await self._store.approvals.peek(approval_id)

    async def claim(
        self, approval_id: str, context: TurnExecutionContext
    ) -> ClaimedApproval | None:
        """Claim an answered approval for ``context``'s continuation turn, once."""
        return await self._store.approvals.claim(
            approval_id, session_id=context.session_id, turn_id=context.turn_id
        )

    async def mark_stale(self, approval_id: str, *, claimed_by: str | None = None) -> bool:
        return await self._store.approvals.mark_stale(approval_id, claimed_by=claimed_by)

    async def supersede(self, context: TurnExecutionContext) -> int:
        return await self._store.approvals.supersede(context.session_id, turn_id=context.turn_id)


@dataclass(frozen=True, slots=True)
class AskedCall:
    """What the durable row of one ask keeps about the call being asked."""

    effect: str
    call_id: str
    arguments: Mapping[str, Any]
    view: Mapping[str, Any]
    policy_fingerprint: str
    rule_key: str
    target_digest: str | None = None


class DurableAsk:
    """The ``AskRecord`` of one ask: its row in the ledger, written before anyone is asked.

    ``recorded`` turns True once the pending row is durable: from then on the
    turn can pause on it whatever happens to the prompt.
    """

    def __init__(
        self,
        ledger: ApprovalLedger,
        approval_id: str,
        context: TurnExecutionContext,
        call: AskedCall,
        *,
        secret_names: Sequence[str],
    ) -> None:
        self._ledger = ledger
        self._approval_id = approval_id
        self._context = context
        self._call = call
        self._secret_names = tuple(secret_names)
        self.recorded = False
        self.void_reason: str | None = None  # why the row was stored void, when it was

    async def asked(self) -> bool:
        call = self._call
        row = await self._ledger.record(
            approval_id=self._approval_id,
            context=self._context,
            effect=call.effect,
            call_id=call.call_id,
            arguments=call.arguments,
            view=call.view,
            policy_fingerprint=call.policy_fingerprint,
            rule_key=call.rule_key,
            secret_names=self._secret_names,
            target_digest=call.target_digest,
        )
        self.recorded = True
        self.void_reason = None if row.status == "pending" else row.void_reason
        return row.status == "pending"

    async def answered(self, decision: ApprovalDecision) -> bool:
        answer = await self._ledger.answer_inline(self._approval_id, self._context, decision)
        return answer.accepted

    async def status(self) -> ApprovalStatus | None:
        try:
            row = await self._ledger.peek(self._approval_id)
        except HostkitError:
            return None  # a store hiccup is no reason to withdraw a person's prompt
        return None if row is None else row.status
