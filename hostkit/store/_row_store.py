"""RowStore: the RuntimeStore methods both SQL adapters share, over ``write`` and ``read``.

Every group (turns, context, approvals, inbox, ...) and every owned query is a
function of one DB-API connection run inside a transaction. An adapter supplies
the transactions: ``RowStore`` on one SQLite file, ``PgStore`` on a
PostgreSQL database. The row functions are written in the SQL both engines
accept; PgStore's connection translates the few spellings that differ.
"""

from __future__ import annotations

import sqlite3
from abc import abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, ScopeError, StoreClosed
from hostkit.store import _owned, _sessions
from hostkit.store._approvals import SqlApprovalStore
from hostkit.store._attachments import SqlAttachmentStore, attached_refs, keep_attachments
from hostkit.store._checks import check_cursor, check_reason, check_ref
from hostkit.store._context import SqlContextStore
from hostkit.store._cores_sql import SqlCoreStore
from hostkit.store._delivery_sql import SqlDeliveryStore
from hostkit.store._erase import ErasedSession, erase_rows
from hostkit.store._inbox_sql import SqlInboxStore
from hostkit.store._inspect import SqlInspectQueries
from hostkit.store._interface import RuntimeStore
from hostkit.store._mcp import SqlMcpStatusStore
from hostkit.store._memory import SqlMemoryStore
from hostkit.store._owned import OwnedKind
from hostkit.store._scopes import ScopeKeys, ScopeMint
from hostkit.store._sessions import ConversationSelect, OwnerFacts
from hostkit.store._terminal_runs import SqlTerminalRunStore
from hostkit.store._turns import SqlTurnStore
from hostkit.types import (
    AuditRecord,
    LegacyRepairView,
    MessageRecord,
    OwnerKind,
    Page,
    PrincipalScope,
    SessionRecord,
    TaskRecord,
    check_key,
    is_text,
)

__all__ = ["MAX_REASON", "RowStore", "audit_reason"]

T = TypeVar("T")

MAX_PAGE = 500
MAX_REASON = 500


def _check_limit(limit: int) -> int:
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidValue(f"limit must be between 1 and {MAX_PAGE}")
    return limit


def audit_reason(reason: object) -> str:
    """A non-empty audit reason of at most ``MAX_REASON`` characters, or ``ScopeError``."""
    if not isinstance(reason, str) or not reason.strip():
        raise ScopeError("a non-empty audit reason is required")
    if len(reason) > MAX_REASON:
        raise ScopeError(f"the audit reason is limited to {MAX_REASON} characters")
    if not is_text(reason, limit=MAX_REASON):  # a lone surrogate: the audit row could not hold it
        raise ScopeError("the audit reason must be valid text (no undecodable bytes)")
    return reason.strip()


class RowStore(RuntimeStore):
    """The shared half of the SQL adapters: groups, ownership, owned queries, the audit log.

    Subclasses implement ``write`` (one committed transaction, serialisable
    with every other write) and ``read`` (one consistent snapshot), plus
    opening and closing. Every owned query verifies that the scope was issued
    by *this* open of the store and applies the owner predicate in SQL.
    """

    def __init__(self) -> None:
        self._keys = ScopeKeys()
        self._closed = False
        self.turns = SqlTurnStore(self)
        self.context = SqlContextStore(self)
        self.approvals = SqlApprovalStore(self)
        self.memory = SqlMemoryStore(self)
        self.attachments = SqlAttachmentStore(self)
        self.inspect = SqlInspectQueries(self)
        self.terminal_runs = SqlTerminalRunStore(self)
        self.mcp_servers = SqlMcpStatusStore(self)
        self.inbox = SqlInboxStore(self)
        self.delivery = SqlDeliveryStore(self)
        self.cores = SqlCoreStore(self)

    @property
    def closed(self) -> bool:
        return self._closed

    @abstractmethod
    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in one committed write transaction; its error rolls it back.

        ``fn`` may run more than once (each earlier run rolled back), so it must
        be a function of the database only: both adapters rerun writes.
        """

    @abstractmethod
    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in one read-only transaction (a consistent snapshot)."""

    @property
    def local_directory(self) -> Path | None:
        """The directory of a database file on this machine, whose disk the Host keeps
        free space on (``InboxLimits.reserve_bytes``); None when the disk is a server's."""
        return None

    async def watch_inbox(self, wake: Callable[[], None]) -> None:
        """See ``InboxStore.watch``: this adapter cannot be told, so it returns at once."""
        return

    async def fold_after_retention(self) -> None:
        """After a retention pass deleted finished rows: fold their tallies' deltas where
        the engine does not fold as it counts (``_tallies``). SQLite's trigger does, so
        this default, SQLite's, opens no transaction for it (one would wait for another
        process's write lock, for nothing); PostgreSQL's adapter folds."""
        return

    # -- authority -------------------------------------------------------------------

    def bind_authority(self) -> ScopeMint:
        """Hand the scope-signing capability to the one AuthorityResolver of this open.

        A second call raises ``ScopeError``: there is exactly one scope issuer per
        store open, and reopening the file yields a new store with a new key.
        """
        if self._closed:
            raise StoreClosed()
        return self._keys.take_mint()

    def verify_scope(self, scope: object) -> PrincipalScope:
        """Return ``scope`` if this open issued it and it is still live; else ``ScopeError``."""
        return self._keys.verify(scope)

    # -- durable ownership facts (grant nothing; used by the AuthorityResolver) --------

    async def bind_conversation(
        self,
        *,
        channel: str,
        conversation_key: str,
        principal_id: str,
        owner_kind: OwnerKind = "conversation",
        select: ConversationSelect = "bound",
    ) -> tuple[str, bool]:
        """Atomically resolve, create or switch a conversation's session.

        ``select`` is ``"bound"`` (the bound session, created on first contact),
        ``"fresh"`` (a new session, bound from now on) or a session id the same
        conversation owns (resume). Returns (session id, created). A key over
        ``MAX_KEY_CHARS`` is ``InvalidValue`` before anything is written: no binding
        exists that a scope or an admission would refuse.
        """
        conversation_key = check_key("conversation_key", conversation_key)
        principal_id = check_key("principal_id", principal_id)

        def bound_owner(raw: sqlite3.Connection) -> tuple[str, _sessions.OwnerFacts | None] | None:
            bound = _sessions.bound_session(raw, channel, conversation_key)
            return None if bound is None else (bound, _sessions.owner_facts(raw, bound))

        try:
            if select == "bound":
                # The common case (an already bound conversation) needs no writer slot.
                found = await self.read(bound_owner)
                if found is not None:
                    # A schedule's or child's session is its own principal's alone.
                    _sessions.check_principal(found[1], principal_id)
                    return found[0], False
            return await self.write(
                lambda raw: _sessions.bind_conversation(
                    raw,
                    channel=channel,
                    conversation_key=conversation_key,
                    principal_id=principal_id,
                    owner_kind=owner_kind,
                    select=select,
                )
            )
        except NotFoundOrUnauthorized:
            # A resume of a session this conversation does not own, or a bound session
            # another principal owns: the caller gets the not-found answer, the Host-only
            # audit the real reason.
            if select in ("bound", "fresh"):
                found = await self.read(bound_owner)
                session_id, lookup = (found[0] if found else select), "bind"
            else:
                session_id, lookup = select, "resume"
            await self.audit(
                "principal_scope.owner_lookup_denied",
                principal_id=principal_id,
                authority=owner_kind,
                subject=f"session:{session_id}"[:300],
                reason=await self.read(
                    lambda raw: _owned.denial_reason(raw, "session", session_id)
                ),
                detail={"lookup": lookup, "channel": channel},
            )
            raise NotFoundOrUnauthorized("session") from None

    async def create_session(
        self,
        *,
        owner_kind: OwnerKind,
        principal_id: str,
        parent_session_id: str | None = None,
        parent_turn_id: str | None = None,
        title: str | None = None,
    ) -> str:
        """Create an unbound session with its owner row (children, scheduled runs).

        A child's ``parent_turn_id`` must be a turn of ``parent_session_id``:
        ``InvalidValue`` for an id that is not bounded text, ``NotFoundOrUnauthorized``
        (audited with its real reason) for a turn of any other session or none.
        """
        principal_id = check_key("principal_id", principal_id)
        try:
            return await self.write(
                lambda raw: _sessions.create_session(
                    raw,
                    owner_kind=owner_kind,
                    principal_id=principal_id,
                    parent_session_id=parent_session_id,
                    parent_turn_id=parent_turn_id,
                    title=title,
                )
            )
        except NotFoundOrUnauthorized:
            turn_id = str(parent_turn_id)
            reason = await self.read(lambda raw: _owned.denial_reason(raw, "turn", turn_id))
            await self.audit(
                "principal_scope.owner_lookup_denied",
                principal_id=principal_id,
                authority=owner_kind,
                session_id=parent_session_id,
                subject=f"turn:{turn_id}"[:300],
                # A turn that exists in another session is not this parent's: unauthorized.
                reason="unauthorized" if reason != "missing" else reason,
                detail={"lookup": "parent_turn"},
            )
            raise NotFoundOrUnauthorized("turn") from None

    async def owner_facts(self, session_id: str) -> OwnerFacts | None:
        return await self.read(lambda raw: _sessions.owner_facts(raw, session_id))

    async def audit(self, kind: str, **fields: Any) -> int:
        """Append a Host-only audit row (see ``_sessions.insert_audit`` for fields)."""
        return await self.write(lambda raw: _sessions.insert_audit(raw, kind, **fields))

    async def audit_denied_session(
        self, principal_id: str, session_id: str, *, lookup: str, authority: str | None = None
    ) -> None:
        """Audit a refused use of ``session_id`` with its real reason (Host-only)."""

        def record(raw: sqlite3.Connection) -> None:
            _sessions.insert_audit(
                raw,
                "principal_scope.owner_lookup_denied",
                principal_id=principal_id,
                authority=authority,
                subject=f"session:{session_id}"[:300],
                reason=_owned.denial_reason(raw, "session", session_id),
                detail={"lookup": lookup},
            )

        await self.write(record)

    async def read_audit(
        self,
        scope: PrincipalScope,
        *,
        kind: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> tuple[AuditRecord, ...]:
        """Host-only audit rows, in order; requires a live operator scope."""
        self._require_operator(scope)
        _check_limit(limit)
        after_id = check_cursor("after_id", after_id)
        kind = None if kind is None else check_ref("kind", kind)
        return await self.read(
            lambda raw: _sessions.read_audit(raw, kind=kind, after_id=after_id, limit=limit)
        )

    async def erase_session(
        self, scope: PrincipalScope, session_id: str, reason: str
    ) -> ErasedSession:
        self._require_operator(scope)
        why = check_reason(reason, "erasing a session")
        session = check_key("session_id", session_id)
        clock = self.now
        return await self.write(lambda raw: erase_rows(raw, scope, session, why, clock()))

    # -- owned queries ---------------------------------------------------------------

    async def owned(
        self,
        scope: PrincipalScope,
        kind: OwnedKind,
        object_id: str,
        fn: Callable[[sqlite3.Connection], T | None],
        *,
        write: bool = False,
        why: Callable[[sqlite3.Connection], str | None] | None = None,
    ) -> T:
        """Run an owned operation ``fn`` (which applies ``owner_predicate`` in its SQL).

        ``fn`` returns None when the scope does not own ``object_id``; then the
        real reason goes to the Host-only audit and ``NotFoundOrUnauthorized``
        is raised, the same answer as for a missing object. ``why`` names a
        reason the generic one cannot see (a lookup narrower than ownership);
        None falls back to it.
        """
        self.verify_scope(scope)
        result = await (self.write(fn) if write else self.read(fn))
        if result is not None:
            return result

        def record_denial(raw: sqlite3.Connection) -> None:
            reason = (why(raw) if why is not None else None) or _owned.denial_reason(
                raw, kind, object_id
            )
            _sessions.insert_audit(
                raw,
                "principal_scope.owner_lookup_denied",
                scope=scope,
                subject=f"{kind}:{object_id}"[:300],
                reason=reason,
            )

        await self.write(record_denial)
        raise NotFoundOrUnauthorized(kind)

    async def get_session(self, scope: PrincipalScope, session_id: str) -> SessionRecord:
        """One owned session, or ``NotFoundOrUnauthorized`` (same answer for both cases)."""
        return await self.owned(
            scope, "session", session_id, lambda raw: _owned.get_session(raw, scope, session_id)
        )

    async def list_sessions(
        self, scope: PrincipalScope, *, cursor: str | None = None, limit: int = 50
    ) -> Page[SessionRecord]:
        """The scope's sessions, newest first, keyset-paginated."""
        self.verify_scope(scope)
        _check_limit(limit)
        return await self.read(
            lambda raw: _owned.list_sessions(raw, scope, cursor=cursor, limit=limit)
        )

    async def list_messages(
        self,
        scope: PrincipalScope,
        session_id: str,
        *,
        after_seq: int = 0,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page[MessageRecord]:
        """An owned session's messages in order, starting after ``after_seq`` (or ``cursor``)."""
        _check_limit(limit)
        after_seq = check_cursor("after_seq", after_seq)
        return await self.owned(
            scope,
            "session",
            session_id,
            lambda raw: _owned.list_messages(
                raw, scope, session_id, after_seq=after_seq, cursor=cursor, limit=limit
            ),
        )

    async def append_message(
        self,
        scope: PrincipalScope,
        session_id: str,
        *,
        role: str,
        content: Mapping[str, Any],
        turn_id: str | None = None,
    ) -> MessageRecord:
        """Append to an owned session's transcript (owner predicate inside the INSERT); the
        scope's attachments the content names are kept, as a turn's transcript keeps them."""

        def append(raw: sqlite3.Connection) -> MessageRecord | None:
            record = _owned.append_message(
                raw, scope, session_id, role=role, content=content, turn_id=turn_id
            )
            if record is not None:
                refs = attached_refs(content)
                keep_attachments(raw, scope.principal_id, session_id, refs, required=False)
            return record

        return await self.owned(scope, "session", session_id, append, write=True)

    async def get_task(self, scope: PrincipalScope, task_id: str) -> TaskRecord:
        return await self.owned(
            scope, "task", task_id, lambda raw: _owned.get_task(raw, scope, task_id)
        )

    async def list_tasks(
        self,
        scope: PrincipalScope,
        *,
        session_id: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Page[TaskRecord]:
        """The scope's tasks (optionally of one session), newest first."""
        self.verify_scope(scope)
        _check_limit(limit)
        return await self.read(
            lambda raw: _owned.list_tasks(
                raw, scope, session_id=session_id, cursor=cursor, limit=limit
            )
        )

    async def create_task(
        self,
        scope: PrincipalScope,
        session_id: str,
        *,
        kind: str,
        detail: Mapping[str, Any] | None = None,
    ) -> TaskRecord:
        """Create a pending task in an owned session."""
        return await self.owned(
            scope,
            "session",
            session_id,
            lambda raw: _owned.create_task(raw, scope, session_id, kind=kind, detail=detail or {}),
            write=True,
        )

    def _require_operator(self, scope: PrincipalScope) -> None:
        self.verify_scope(scope)
        if scope.authority != "operator":
            raise ScopeError("this operation requires operator authority")

    async def query_legacy_for_repair(
        self,
        scope: PrincipalScope,
        *,
        session_id: str | None = None,
        task_id: str | None = None,
        reason: str,
    ) -> LegacyRepairView:
        """The only path to rows with missing or ambiguous ownership.

        Requires a live operator scope, exactly one exact id and a bounded
        reason; every access is audited as ``principal_scope.legacy_repair_accessed``.
        Rows with a normal owner are not served here (use the owned queries).
        """
        self._require_operator(scope)
        text = audit_reason(reason)
        if (session_id is None) == (task_id is None):
            raise InvalidValue("give exactly one of session_id or task_id")
        kind: OwnedKind = "session" if session_id is not None else "task"
        object_id = session_id if session_id is not None else str(task_id)

        def lookup(raw: sqlite3.Connection) -> LegacyRepairView | None:
            _sessions.insert_audit(
                raw,
                "principal_scope.legacy_repair_accessed",
                scope=scope,
                subject=f"{kind}:{object_id}"[:300],
                reason=text,
            )
            return _owned.legacy_view(raw, kind, object_id)

        view = await self.write(lookup)
        if view is None:
            raise NotFoundOrUnauthorized(kind)
        return view
