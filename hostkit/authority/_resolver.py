"""AuthorityResolver: the only constructor of PrincipalScope."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio
from anyio.abc import AsyncResource

from hostkit.authority._operator import OPERATOR_CHANNEL, OperatorIssuer
from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, ScopeError
from hostkit.store import (
    Admitted,
    ConversationSelect,
    ConversationTarget,
    LeaseOwner,
    RuntimeStore,
    ScopeMint,
    SessionBusy,
    TurnAdmission,
    TurnState,
)
from hostkit.types import (
    Authority,
    ConversationFacts,
    FreshSession,
    PrincipalScope,
    ResumeSession,
    TurnResult,
    is_text,
    joined_key,
    new_id,
    principal_id_of,
    session_select,
)

__all__ = ["AdmittedTurn", "AuthorityResolver", "BindingListener", "conversation_principal"]

SCHEDULE_CHANNEL = "schedule"
AGENT_CHANNEL = "agent"
# Channels the Host uses for its own bindings; a transport cannot claim them.
RESERVED_CHANNELS = frozenset({OPERATOR_CHANNEL, SCHEDULE_CHANNEL, AGENT_CHANNEL})

# (channel, conversation_key, session_id): the session a conversation is bound to now.
BindingListener = Callable[[str, str, str], None]


@dataclass(frozen=True, slots=True)
class AdmittedTurn:
    """An admitted turn with the scope it runs under (minted by the resolver, or verified)."""

    admitted: Admitted
    scope: PrincipalScope


def conversation_principal(facts: ConversationFacts) -> str:
    """The principal id a conversation's facts resolve to (known before any binding).

    Raises ``ScopeError`` for the Host's own channels, so no lookup keyed by a
    principal id (idempotent replay, memory) ever runs for a forged Host channel.
    """
    if facts.channel in RESERVED_CHANNELS:
        raise ScopeError(f"channel {facts.channel!r} is reserved for the Host")
    return principal_id_of(facts.channel, facts.principal_key)


class AuthorityResolver(AsyncResource):
    """Derives PrincipalScopes from authenticated facts plus durable bindings.

    Bound to one store open (``AuthorityResolver.bind(store)``); scopes it
    issues verify only against that store. Transport adapters contribute
    ``ConversationFacts``; nothing in a payload can produce operator or system
    authority. Use as an async context manager: closing revokes operator
    issuance even when another shutdown step fails.
    """

    def __init__(self, store: RuntimeStore, mint: ScopeMint) -> None:
        self._store = store
        self._mint = mint
        self._issuer: OperatorIssuer | None = None
        self._issuer_taken = False
        self._listeners: list[BindingListener] = []

    @classmethod
    def bind(cls, store: RuntimeStore) -> AuthorityResolver:
        """Bind the one resolver of ``store``; a second bind raises ``ScopeError``."""
        return cls(store, store.bind_authority())

    async def aclose(self) -> None:
        """Revoke operator issuance; idempotent."""
        if self._issuer is not None:
            self._issuer.revoke()

    def operator_issuer(self) -> OperatorIssuer:
        """The in-memory operator issuer, handed out once (to the Host that owns this store)."""
        if self._issuer_taken:
            raise ScopeError("the operator issuer was already taken")
        self._issuer_taken = True
        self._issuer = OperatorIssuer(self._store, self._mint)
        return self._issuer

    def watch_bindings(self, listener: BindingListener) -> None:
        """Call ``listener`` with every conversation binding this resolver resolves or changes.

        The Host's approval cache listens: a conversation moved to another
        session (fresh, resumed, or by another principal sharing it) ends the
        previous session's "approve for session" answers. Listeners must not
        block or raise.
        """
        self._listeners.append(listener)

    def _bound(self, channel: str, conversation_key: str, session_id: str) -> None:
        for listener in self._listeners:
            listener(channel, conversation_key, session_id)

    def verify(self, scope: object) -> PrincipalScope:
        """Return ``scope`` if it is a live scope of this store, else ``ScopeError``."""
        return self._store.verify_scope(scope)

    async def for_conversation(
        self,
        facts: ConversationFacts,
        *,
        session: ConversationSelect | FreshSession | ResumeSession = "bound",
    ) -> PrincipalScope:
        """The scope of an authenticated conversation, bound to exactly its session.

        The binding is created atomically on first contact, so concurrent first
        messages of one conversation resolve to the same session. ``session``
        may instead start a fresh session (``FreshSession()`` or ``"fresh"``) or
        resume one this conversation owns (``ResumeSession(id)`` or the id);
        either rebinds the conversation for future requests too.
        """
        if not isinstance(facts, ConversationFacts):
            raise InvalidValue("ConversationFacts are required")
        if isinstance(session, FreshSession | ResumeSession):
            session = session_select(session)
        principal_id = conversation_principal(facts)
        session_id, _ = await self._store.bind_conversation(
            channel=facts.channel,
            conversation_key=facts.conversation_key,
            principal_id=principal_id,
            select=session,
        )
        owner = await self._store.owner_facts(session_id)
        if owner is None or owner.owner_kind != "conversation":
            raise ScopeError("the conversation's session has no durable conversation owner")
        self._bound(facts.channel, facts.conversation_key, session_id)
        return self._conversation_scope(principal_id, facts, session_id)

    def _conversation_scope(
        self, principal_id: str, facts: ConversationFacts, session_id: str
    ) -> PrincipalScope:
        """The signed scope of a conversation bound to exactly its ``session_id``."""
        return self._mint.sign(
            PrincipalScope(
                principal_id=principal_id,
                authority="conversation",
                channel=facts.channel,
                conversation_key=facts.conversation_key,
                session_id=session_id,
                allowed_session_ids=frozenset({session_id}),
                issuer_id=self._mint.issuer_id,
            )
        )

    async def admit_conversation(
        self,
        facts: ConversationFacts,
        admission: TurnAdmission,
        *,
        owner: LeaseOwner,
        ttl_s: float,
    ) -> AdmittedTurn | TurnState | SessionBusy:
        """Admit a conversation's turn and, once admitted, the scope of its session.

        The conversation binding is resolved inside the admission transaction
        (``TurnStore.admit``); ``admission.session`` must be a
        ``ConversationTarget`` naming exactly these facts and
        ``admission.principal_id`` the facts' principal. The scope is minted
        here, from the durable owner row that transaction read — never from
        the caller's word. A repeated request (``TurnState``) and a busy
        session (``SessionBusy``) are the store's answers, unchanged.
        """
        if not isinstance(facts, ConversationFacts):
            raise InvalidValue("ConversationFacts are required")
        principal_id = conversation_principal(facts)
        target = admission.session
        if (
            not isinstance(target, ConversationTarget)
            or (target.channel, target.conversation_key, target.owner_kind)
            != (facts.channel, facts.conversation_key, "conversation")
            or admission.principal_id != principal_id
        ):
            raise ScopeError("the admission does not name this conversation")
        try:
            outcome = await self._store.turns.admit(admission, owner=owner, ttl_s=ttl_s)
        except NotFoundOrUnauthorized:
            await self._resume_denied(principal_id, target)
            raise NotFoundOrUnauthorized("session") from None
        if isinstance(outcome, SessionBusy):
            self._bound(facts.channel, facts.conversation_key, outcome.session_id)
        if not isinstance(outcome, Admitted):
            return outcome
        self._bound(facts.channel, facts.conversation_key, outcome.session_id)
        session_id = outcome.session_id
        row = outcome.owner
        if (row.session_id, row.owner_kind, row.channel, row.conversation_key) != (
            session_id,
            "conversation",
            facts.channel,
            facts.conversation_key,
        ):
            # The store checks this inside the admission transaction; should an adapter
            # ever disagree, the admitted turn still gets its one terminal record.
            reason = "the conversation's session has no durable conversation owner"
            with anyio.CancelScope(shield=True):
                await self._store.turns.finish(
                    outcome.lease,
                    TurnResult(
                        request_id=admission.request_id,
                        turn_id=admission.turn_id,
                        session_id=session_id,
                        core_id=admission.core_id,
                        core_revision=admission.core_revision,
                        outcome="failed",
                        text="",
                        error=reason,
                        durable_result_ref=admission.turn_id,
                        generation=admission.generation,
                    ),
                    event_seq=outcome.next_event_seq,
                )
            raise ScopeError(reason)
        scope = self._conversation_scope(principal_id, facts, session_id)
        return AdmittedTurn(outcome, scope)

    async def _resume_denied(self, principal_id: str, target: ConversationTarget) -> None:
        """Audit a refused resume with its real reason; the caller sees only not-found."""
        session_id = target.select if target.select not in ("bound", "fresh") else ""
        owner = await self._store.owner_facts(session_id) if session_id else None
        if owner is None:
            reason = "missing"
        elif owner.owner_kind == "legacy_local":
            reason = "legacy_repair_required"
        else:
            reason = "unauthorized"
        await self._store.audit(
            "principal_scope.owner_lookup_denied",
            principal_id=principal_id,
            authority=target.owner_kind,
            subject=f"session:{session_id}"[:300],
            reason=reason,
            detail={"lookup": "resume", "channel": target.channel},
        )

    async def for_scheduled_run(self, *, schedule_id: str, run_id: str) -> PrincipalScope:
        """System authority limited to one scheduled run's own session (idempotent per run).

        The run's binding key is ``schedule_id/run_id``; ``run_id`` may not contain
        ``/`` (``InvalidValue``), so the key splits at its last ``/`` into exactly one
        pair and two schedules never share a key (every accepted pair keeps the key it
        always had). The key is checked whole (at most ``MAX_KEY_CHARS``) before
        anything is written. The store also refuses a bound session another principal
        owns.
        """
        for name, value in (("schedule_id", schedule_id), ("run_id", run_id)):
            if not is_text(value, limit=128):
                raise InvalidValue(f"{name} must be 1 to 128 characters of valid text")
        key = joined_key("/", ("schedule_id", schedule_id), ("run_id", run_id))
        principal_id = f"schedule:{schedule_id}"
        session_id, _ = await self._store.bind_conversation(
            channel=SCHEDULE_CHANNEL,
            conversation_key=key,
            principal_id=principal_id,
            owner_kind="system",
        )
        return self._mint.sign(
            PrincipalScope(
                principal_id=principal_id,
                authority="system",
                channel=SCHEDULE_CHANNEL,
                conversation_key=key,
                session_id=session_id,
                allowed_session_ids=frozenset({session_id}),
                issuer_id=self._mint.issuer_id,
            )
        )

    async def for_child_agent(
        self, parent: PrincipalScope, *, parent_turn_id: str, agent: str
    ) -> PrincipalScope:
        """A delegated-agent scope owning a fresh child session, and nothing of the parent's.

        The parent scope must verify and own its session; lineage (parent
        session and turn) is recorded on the child's immutable owner row.
        ``parent_turn_id`` must be bounded text (``InvalidValue``) naming a turn of
        the parent's session, checked in the same write (``NotFoundOrUnauthorized``
        otherwise, audited; nothing is created).
        """
        self.verify(parent)
        if parent.session_id is None:
            raise ScopeError("a child agent needs a parent scope bound to a session")
        if not isinstance(agent, str) or not agent or len(agent) > 128:
            raise InvalidValue("agent must be a non-empty string of at most 128 characters")
        if not is_text(parent_turn_id, limit=128):
            raise InvalidValue("parent_turn_id must be 1 to 128 characters of valid text")
        principal_id = f"agent:{agent}:{new_id('child')}"
        session_id = await self._store.create_session(
            owner_kind="delegated_agent",
            principal_id=principal_id,
            parent_session_id=parent.session_id,
            parent_turn_id=parent_turn_id,
        )
        return self._mint.sign(
            PrincipalScope(
                principal_id=principal_id,
                authority="delegated_agent",
                channel=AGENT_CHANNEL,
                conversation_key=None,
                session_id=session_id,
                allowed_session_ids=frozenset({session_id}),
                issuer_id=self._mint.issuer_id,
            )
        )

    async def owner_of_answered(self, operator: PrincipalScope, approval_id: str) -> PrincipalScope:
        """The owner's scope of a scheduled run's or child agent's session, for the
        continuation of ``approval_id``, an approval of that owner an operator answers
        (Host-internal: only ``host.approvals`` calls it).

        A conversation's scope comes back through ``for_conversation``; these owners
        cannot be minted again by their own methods (a child's always gets a new
        session), so an answer given after the minting Host closed would otherwise
        strand its approval. Only for a live operator scope and an approval of that
        very owner that can still run (pending, or answered and not yet continued):
        never a way to act as the owner otherwise. The scope is rebuilt from the
        durable ``session_owners`` row alone, exactly as it was issued (principal,
        authority, channel, that one session); the rebuild is audited with the approval.
        """
        operator = self.verify(operator)
        if operator.authority != "operator":
            raise ScopeError("only an operator answers for another owner")
        approval = await self._store.approvals.get(operator, approval_id)
        if approval.status != "pending" and not approval.awaiting_continuation:
            raise ScopeError("only an approval that can still run is continued by its owner")
        session_id = approval.session_id
        owner = await self._store.owner_facts(session_id)
        if owner is None or owner.principal_id != approval.principal_id:
            raise NotFoundOrUnauthorized("session")
        if owner.owner_kind == "system" and owner.channel == SCHEDULE_CHANNEL:
            authority: Authority = "system"
            channel, key = SCHEDULE_CHANNEL, owner.conversation_key
        elif owner.owner_kind == "delegated_agent":
            authority, channel, key = "delegated_agent", AGENT_CHANNEL, None
        else:
            raise ScopeError("the session is not a scheduled run's or a child agent's")
        await self._store.audit(
            "principal_scope.owner_rebuilt",
            scope=operator,
            session_id=session_id,
            subject=f"session:{session_id}",
            reason="approval answered by an operator",
            detail={
                "owner_principal_id": owner.principal_id,
                "authority": authority,
                "approval_id": approval.approval_id,
            },
        )
        return self._mint.sign(
            PrincipalScope(
                principal_id=owner.principal_id,
                authority=authority,
                channel=channel,
                conversation_key=key,
                session_id=session_id,
                allowed_session_ids=frozenset({session_id}),
                issuer_id=self._mint.issuer_id,
            )
        )
