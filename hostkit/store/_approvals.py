"""The store's approvals group: durable pending approvals and their answers.

An approval is the row an unanswered ``ask`` leaves behind: the frozen call
(its raw arguments, kept only until the one execution that needs them), the
redacted ``view`` approvers see and the typed security facts decisions read
(values in ``_approval_values``).

Reads and answers apply the approver predicate inside the same SQL statement:
the session's owner predicate and, unless the scope is an operator's, the
principal the paused call would run as — another principal who shares the
conversation sees nothing. A missing approval and someone else's look the same
(``NotFoundOrUnauthorized``, the real reason in the Host-only audit). An
accepted answer is audited (``approval.answered``; an operator's carries the
reason its scope was issued with). Every status change is one conditional
UPDATE, so two answers or two continuation turns can never both succeed.
"""

from __future__ import annotations

import json
import sqlite3
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, NoReturn, get_args

from hostkit.errors import (
    InvalidValue,
    LeaseLost,
    NotFoundOrUnauthorized,
    StoreError,
    bounded,
)
from hostkit.freeze import FrozenMap
from hostkit.store._approval_revocations import (
    ApprovalRevocation,
    RevocationPage,
    insert_revocation,
    latest_revocation,
    revocations_after,
)
from hostkit.store._approval_rows import (
    has_open_calls,
    open_approval,
    open_call,
    supersede_open,
    void_open,
)
from hostkit.store._approval_values import (
    MAX_APPROVAL_LIST,
    ApprovalAnswer,
    ApprovalDecision,
    ApprovalFilter,
    ApprovalPage,
    ApprovalStatus,
    ClaimedApproval,
    NewApproval,
    PendingApproval,
    check_id,
    decode_view,
    encode_approval,
)
from hostkit.store._checks import check_cursor
from hostkit.store._owned import (
    denial_reason,
    now,
    owner_predicate,
    session_authorized,
    turn_status,
)
from hostkit.store._rebound import void_if_rebound
from hostkit.store._sessions import insert_audit
from hostkit.types import PrincipalScope

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = [
    "MAX_APPROVAL_LIST",
    "ApprovalAnswer",
    "ApprovalDecision",
    "ApprovalFilter",
    "ApprovalPage",
    "ApprovalRevocation",
    "ApprovalStatus",
    "ApprovalStore",
    "ClaimedApproval",
    "NewApproval",
    "PendingApproval",
    "RevocationPage",
    "SqlApprovalStore",
]

_STATUSES: tuple[str, ...] = get_args(ApprovalStatus)
_FILTERS: tuple[str, ...] = (*_STATUSES, "open")
MAX_REASON_CHARS = 300
SUPERSEDED = "a newer turn ran in the session before this call ran"
STALE = "the agent's policy, revision, capabilities or conversation binding changed"
_DECISIONS: tuple[str, ...] = get_args(ApprovalDecision)


class ApprovalStore(ABC):
    """Durable pending approvals; every adapter implements this group.

    Owned operations (``get``, ``list``, ``page``, ``answer``) take a ``PrincipalScope``
    this store issued (else ``ScopeError``) and apply its approver predicate in
    the statement that touches the row: an operator scope, or a scope of the
    principal the call would run as that owns the approval's session. The
    others (``insert``, ``answer_inline``, ``peek``, ``open_for_turn``,
    ``claim``, ``void``, ``mark_stale``, ``supersede``) are the Host's
    own bookkeeping for a turn it runs and are keyed by that turn's session. Bad input raises
    ``InvalidValue`` (bounded message) and changes nothing.
    """

    @abstractmethod
    async def insert(self, approval: NewApproval) -> PendingApproval:
        """Record a ``pending`` approval; returns it as stored.

        ``approval.turn_id`` must be a turn of ``approval.session_id`` and the id
        unused, else ``InvalidValue`` and nothing is written. One asked after its
        session's conversation moved to another session is stored ``stale``.
        """

    @abstractmethod
    async def get(self, scope: PrincipalScope, approval_id: str) -> PendingApproval:
        """One owned approval; ``NotFoundOrUnauthorized`` when missing or not the scope's."""

    async def list(
        self, scope: PrincipalScope, *, status: ApprovalFilter | None = "pending", limit: int = 50
    ) -> tuple[PendingApproval, ...]:
        """The scope's approvals, newest first: ``page`` without saying whether it was cut."""
        return (await self.page(scope, status=status, limit=limit)).approvals

    @abstractmethod
    async def page(
        self,
        scope: PrincipalScope,
        *,
        status: ApprovalFilter | None = "pending",
        limit: int = 50,
        before: int | None = None,
    ) -> ApprovalPage:
        """The scope's newest ``limit`` approvals of ``status``, newest first, and whether
        older ones were left out.

        ``status=None`` lists every status; ``"open"`` the approvals whose call can
        still run (pending, or answered and not yet claimed by a continuation turn),
        selected in the statement, so closed ones never take an open one's place.
        ``limit`` is 1..``MAX_APPROVAL_LIST`` (else ``InvalidValue``). ``before`` (the
        page's ``next_before``) lists the approvals recorded before that one: the
        next page, which approvals recorded since never shift. It is an integer
        from 0 to 2**63 - 1 (else ``InvalidValue``).
        """

    @abstractmethod
    async def answer(
        self,
        scope: PrincipalScope,
        approval_id: str,
        *,
        decision: ApprovalDecision,
        fingerprint: str | None,
    ) -> ApprovalAnswer:
        """Record the first answer to an owned ``pending`` approval, decided by the scope.

        Exactly one of any number of concurrent answers is accepted. When
        ``fingerprint`` is given and differs from the recorded policy
        fingerprint, the approval becomes ``stale`` in the same transaction and
        the answer is not accepted. ``NotFoundOrUnauthorized`` when the scope
        does not own it.
        """

    @abstractmethod
    async def claim(
        self, approval_id: str, *, session_id: str, turn_id: str
    ) -> ClaimedApproval | None:
        """Claim an answered approval for continuation turn ``turn_id`` of its session, once.

        An approved call becomes ``executed`` before it runs, so a crash never
        runs it twice; the raw arguments are returned here and dropped from the
        store. None when there is nothing to claim (unanswered, already
        claimed, another session, ``turn_id`` not a turn of that session or
        not one of the principal the call runs as).
        """

    @abstractmethod
    async def answer_inline(
        self, approval_id: str, *, turn_id: str, decision: ApprovalDecision, decided_by: str
    ) -> ApprovalAnswer:
        """Record the answer a provider gave inside ``turn_id`` (the turn that asked), once.

        One conditional UPDATE from ``pending``: an approved call is claimed by the
        asking turn at once (``executed``, arguments dropped), a denial is closed
        the same way. Not accepted when the approval was answered (another process
        won), voided or is not ``turn_id``'s; the row as it is now is returned.
        """

    @abstractmethod
    async def peek(self, approval_id: str) -> PendingApproval | None:
        """The approval as stored (Host bookkeeping, no owner check), or None."""

    @abstractmethod
    async def open_for_turn(self, turn_id: str) -> PendingApproval | None:
        """The approval ``turn_id`` paused on that can still run (pending, or answered
        and not yet claimed), or None."""

    @abstractmethod
    async def void(self, approval_id: str, reason: str) -> bool:
        """Make an approval that can still run ``superseded`` with ``reason`` (bounded).

        True when it was open (pending, or answered and unclaimed).
        """

    @abstractmethod
    async def mark_stale(self, approval_id: str, *, claimed_by: str | None = None) -> bool:
        """Void an approval whose policy, revision or binding changed; drops its arguments.

        Without ``claimed_by``: a ``pending`` or answered, unclaimed row (its
        call cannot have run). With it: the row that continuation turn claimed
        (``executed``) and found stale before running it. Any other row is left
        as it is: one another continuation claimed may have run meanwhile, and
        its record must not say it did not. True when a row became ``stale``.
        """

    @abstractmethod
    async def supersede(self, session_id: str, *, turn_id: str) -> int:
        """A new ordinary turn, ``turn_id``, runs in the session: void its calls that have
        not run.

        Pending approvals and answered ones not yet claimed become
        ``superseded`` and lose their arguments; returns how many. Fenced like
        the turn's other writes: ``LeaseLost`` when ``turn_id`` no longer runs
        (a takeover ended it), so a holder that paused past its lease cannot
        void the approval the turn after it is waiting on.
        """

    @abstractmethod
    async def revoke(
        self, scope: PrincipalScope, session_id: str, *, reason: str
    ) -> ApprovalRevocation:
        """End "approve for session" answers in an owned session, in every Host process.

        An operator ends every principal's answers there; anyone else only
        their own. Recorded (and audited, ``approval.revoked``) in one
        transaction; ``NotFoundOrUnauthorized`` when the scope does not own
        the session, and nothing is recorded.
        """

    @abstractmethod
    async def revocations_after(self, cursor: int | None) -> RevocationPage:
        """The revocations recorded after ``cursor``, oldest first and bounded.

        ``None``: a new reader, which starts after the newest one (its page is
        empty). A reader further behind than one page gets ``overflow``. The
        store records revocations itself where an end happens: a conversation
        moved to another session, a core's live revision moved, ``revoke``.
        A cursor is an integer from 0 to 2**63 - 1 (else ``InvalidValue``).
        """


_COLUMNS = (
    "a.approval_id, a.session_id, a.turn_id, a.principal_id, a.core_id, a.core_revision, "
    "a.effect, a.call_id, a.view, a.policy_fingerprint, a.rule_key, a.status, a.decision, "
    "a.decided_by, a.continuation_turn_id, a.created_at, a.decided_at, a.void_reason"
)


def _approval(row: sqlite3.Row) -> PendingApproval:
    view, secret_names, target_digest = decode_view(row["view"], row["approval_id"])
    return PendingApproval(
        approval_id=row["approval_id"],
        session_id=row["session_id"],
        turn_id=row["turn_id"],
        principal_id=row["principal_id"],
        core_id=row["core_id"],
        core_revision=row["core_revision"],
        effect=row["effect"],
        call_id=row["call_id"],
        view=view,
        policy_fingerprint=row["policy_fingerprint"],
        rule_key=row["rule_key"],
        status=row["status"],
        decision=row["decision"],
        decided_by=row["decided_by"],
        continuation_turn_id=row["continuation_turn_id"],
        created_at=row["created_at"],
        decided_at=row["decided_at"],
        secret_names=secret_names,
        void_reason=row["void_reason"],
        target_digest=target_digest,
    )


def _query(raw: sqlite3.Connection, sql: str, params: list[Any]) -> sqlite3.Cursor:
    """Execute with rows addressable by column name (this cursor only)."""
    cursor = raw.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor.execute(sql, params)


def approver_predicate(scope: PrincipalScope, table: str = "a") -> tuple[str, list[Any]]:
    """SQL true exactly for the approvals ``scope`` may see and answer (needs ``session_owners o``).

    The session's owner predicate, plus, for anyone but an operator, the
    principal the paused call would run as: a conversation shared by several
    principals does not let one answer for another.
    """
    where, params = owner_predicate(scope)
    if scope.authority == "operator":
        return where, params
    return f"{where} AND {table}.principal_id = ?", [*params, scope.principal_id]


def _status_clause(status: str | None) -> tuple[str, list[Any]]:
    """The listing's status predicate (after ``WHERE``'s owner predicate), with its params."""
    if status is None:
        return "", []
    if status == "open":
        return f"AND {open_call('a')} ", []
    return "AND a.status = ? ", [status]


def _owned_row(
    raw: sqlite3.Connection, scope: PrincipalScope, approval_id: str
) -> PendingApproval | None:
    where, params = approver_predicate(scope)
    row = _query(
        raw,
        f"SELECT {_COLUMNS} FROM approvals a JOIN session_owners o ON o.session_id = a.session_id "
        f"WHERE a.approval_id = ? AND {where}",
        [approval_id, *params],
    ).fetchone()
    return _approval(row) if row is not None else None


def _row(raw: sqlite3.Connection, approval_id: str) -> PendingApproval:
    row = _query(
        raw, f"SELECT {_COLUMNS} FROM approvals a WHERE a.approval_id = ?", [approval_id]
    ).fetchone()
    return _approval(row)


class SqlApprovalStore(ApprovalStore):
    """The SQLite adapter of ApprovalStore (one writer transaction per write)."""

    def __init__(self, db: RowStore) -> None:
        self._db = db

    async def insert(self, approval: NewApproval) -> PendingApproval:
        arguments, view = encode_approval(approval)

        def insert(raw: sqlite3.Connection) -> PendingApproval:
            if raw.execute(
                "SELECT 1 FROM approvals WHERE approval_id = ?", [approval.approval_id]
            ).fetchone():
                raise InvalidValue("an approval with this id is already recorded")
            # INSERT ... SELECT: the row exists only if the turn is one of that session's,
            # and still running. Fenced like its transcript writes: a takeover ends the
            # turn it took the session from (lost) in its own transaction, so a holder
            # that paused past its lease cannot leave an approval a later answer would
            # run after the session moved on.
            cursor = raw.execute(
                "INSERT INTO approvals (approval_id, session_id, turn_id, principal_id, core_id, "
                "core_revision, effect, call_id, arguments, view, policy_fingerprint, rule_key, "
                "status, created_at) "
                "SELECT ?, t.session_id, t.turn_id, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ? "
                "FROM turns t WHERE t.turn_id = ? AND t.session_id = ? AND t.status = 'running'",
                [
                    approval.approval_id,
                    approval.principal_id,
                    approval.core_id,
                    approval.core_revision,
                    approval.effect,
                    approval.call_id,
                    arguments,
                    view,
                    approval.policy_fingerprint,
                    approval.rule_key,
                    now(raw),
                    approval.turn_id,
                    approval.session_id,
                ],
            )
            if cursor.rowcount != 1:
                if raw.execute(
                    "SELECT 1 FROM turns WHERE turn_id = ? AND session_id = ?",
                    [approval.turn_id, approval.session_id],
                ).fetchone():
                    raise LeaseLost("session lease")
                raise InvalidValue("an approval's turn must be a turn of its session")
            # Asked after its conversation moved to another session: nobody can answer it,
            # so it is recorded void at once (lists, prompts and the asker see that now).
            void_if_rebound(raw, approval.session_id, approval.approval_id)
            return _row(raw, approval.approval_id)

        return await self._db.write(insert)

    async def get(self, scope: PrincipalScope, approval_id: str) -> PendingApproval:
        self._db.verify_scope(scope)
        approval_id = check_id("id", approval_id)
        found = await self._db.read(lambda raw: _owned_row(raw, scope, approval_id))
        if found is None:
            await self._deny(scope, approval_id)
        return found

    async def page(
        self,
        scope: PrincipalScope,
        *,
        status: ApprovalFilter | None = "pending",
        limit: int = 50,
        before: int | None = None,
    ) -> ApprovalPage:
        self._db.verify_scope(scope)
        if status is not None and (not isinstance(status, str) or status not in _FILTERS):
            raise InvalidValue(f"status must be one of {', '.join(_FILTERS)} (or None)")
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise InvalidValue(f"limit must be an integer 1-{MAX_APPROVAL_LIST}")
        if not 1 <= limit <= MAX_APPROVAL_LIST:
            raise InvalidValue(f"limit must be an integer 1-{MAX_APPROVAL_LIST}")
        below = [] if before is None else [check_cursor("before", before)]
        where, params = approver_predicate(scope)
        selected, selected_params = _status_clause(status)
        # Keyset on the row id (unique, in recording order), never an offset: a page
        # walks the primary key down from where the last one stopped.
        older = "AND a.id < ? " if below else ""

        def select(raw: sqlite3.Connection) -> ApprovalPage:
            # One row past the page says whether it was cut.
            rows = _query(
                raw,
                f"SELECT a.id AS row_id, {_COLUMNS} FROM approvals a "
                f"JOIN session_owners o ON o.session_id = a.session_id "
                f"WHERE {where} {selected}{older}ORDER BY a.id DESC LIMIT ?",
                [*params, *selected_params, *below, limit + 1],
            ).fetchall()
            shown = rows[:limit]
            more = len(rows) > limit
            return ApprovalPage(
                tuple(_approval(row) for row in shown),
                more,
                int(shown[-1]["row_id"]) if more else None,
            )

        return await self._db.read(select)

    async def answer(
        self,
        scope: PrincipalScope,
        approval_id: str,
        *,
        decision: ApprovalDecision,
        fingerprint: str | None,
    ) -> ApprovalAnswer:
        self._db.verify_scope(scope)
        approval_id = check_id("id", approval_id)
        if decision not in _DECISIONS:
            raise InvalidValue(f"decision must be one of {', '.join(_DECISIONS)}")
        if fingerprint is not None:
            fingerprint = check_id("fingerprint", fingerprint)
        where, params = approver_predicate(scope, "approvals")
        status = "denied" if decision == "deny" else "approved"

        def answer(raw: sqlite3.Connection) -> ApprovalAnswer | None:
            reason: str | None = None
            if scope.authority == "operator":
                reason = _operator_reason(raw, scope)
                if reason is None:  # an operator answers only with an audited reason
                    return None
            # One conditional UPDATE carries the approver predicate, the pending check and
            # the fingerprint check: of concurrent answers, exactly one changes the row.
            cursor = raw.execute(
                "UPDATE approvals SET status = ?, decision = ?, decided_by = ?, decided_at = ? "
                "WHERE approval_id = ? AND status = 'pending' "
                "AND (? IS NULL OR policy_fingerprint = ?) "
                "AND EXISTS (SELECT 1 FROM session_owners o "
                f"WHERE o.session_id = approvals.session_id AND {where})",
                [
                    status,
                    decision,
                    scope.principal_id,
                    now(raw),
                    approval_id,
                    fingerprint,
                    fingerprint,
                    *params,
                ],
            )
            current = _owned_row(raw, scope, approval_id)
            if current is None:
                return None
            if cursor.rowcount == 1:
                insert_audit(
                    raw,
                    "approval.answered",
                    scope=scope,
                    session_id=current.session_id,
                    subject=f"approval:{approval_id}",
                    reason=reason,
                    detail={"decision": decision, "runs_as": current.principal_id},
                )
                return ApprovalAnswer(current, accepted=True)
            if current.status == "pending":  # only the fingerprint can have stopped it
                _stale(raw, approval_id)
                current = _row(raw, approval_id)
            return ApprovalAnswer(current, accepted=False)

        answered = await self._db.write(answer)
        if answered is None:
            await self._deny(scope, approval_id)
        return answered

    async def claim(
        self, approval_id: str, *, session_id: str, turn_id: str
    ) -> ClaimedApproval | None:
        for name, value in (("id", approval_id), ("session_id", session_id), ("turn_id", turn_id)):
            check_id(name, value)

        def claim(raw: sqlite3.Connection) -> ClaimedApproval | None:
            row = _query(
                raw,
                "SELECT arguments FROM approvals WHERE approval_id = ? AND session_id = ? "
                "AND status IN ('approved', 'denied') AND continuation_turn_id IS NULL "
                # Only a turn of the principal the call runs as may run it: another
                # principal sharing the conversation cannot continue it.
                "AND EXISTS (SELECT 1 FROM turns t WHERE t.turn_id = ? "
                "AND t.session_id = approvals.session_id "
                "AND t.principal_id = approvals.principal_id "
                # A turn already ended (recovered from a stalled process) runs nothing.
                "AND t.status = 'running')",
                [approval_id, session_id, turn_id],
            ).fetchone()
            if row is None:
                return None
            # Raw arguments are kept only until the one execution that needs them.
            cursor = raw.execute(
                "UPDATE approvals SET continuation_turn_id = ?, arguments = '{}', "
                "status = CASE status WHEN 'approved' THEN 'executed' ELSE status END "
                "WHERE approval_id = ? AND status IN ('approved', 'denied') "
                "AND continuation_turn_id IS NULL",
                [turn_id, approval_id],
            )
            if cursor.rowcount != 1:
                return None
            try:
                arguments = json.loads(row["arguments"])
            except ValueError as exc:
                raise StoreError(f"approval {approval_id}: unreadable arguments") from exc
            return ClaimedApproval(_row(raw, approval_id), FrozenMap(arguments))

        return await self._db.write(claim)

    async def answer_inline(
        self, approval_id: str, *, turn_id: str, decision: ApprovalDecision, decided_by: str
    ) -> ApprovalAnswer:
        for name, value in (("id", approval_id), ("turn_id", turn_id), ("by", decided_by)):
            check_id(name, value)
        if decision not in _DECISIONS:
            raise InvalidValue(f"decision must be one of {', '.join(_DECISIONS)}")
        status = "denied" if decision == "deny" else "executed"

        def answer(raw: sqlite3.Connection) -> ApprovalAnswer | None:
            cursor = raw.execute(
                "UPDATE approvals SET status = ?, decision = ?, decided_by = ?, decided_at = ?, "
                "continuation_turn_id = turn_id, arguments = '{}' "
                "WHERE approval_id = ? AND turn_id = ? AND status = 'pending' "
                # Only while the asking turn runs: one ended meanwhile (a stalled process
                # recovered elsewhere) would record the call executed and never run it.
                "AND EXISTS (SELECT 1 FROM turns t "
                "WHERE t.turn_id = approvals.turn_id AND t.status = 'running')",
                [status, decision, decided_by, now(raw), approval_id, turn_id],
            )
            found = raw.execute(
                "SELECT 1 FROM approvals WHERE approval_id = ?", [approval_id]
            ).fetchone()
            if found is None:
                return None
            return ApprovalAnswer(_row(raw, approval_id), accepted=cursor.rowcount == 1)

        answered = await self._db.write(answer)
        if answered is None:
            raise InvalidValue("no approval with this id is recorded")
        return answered

    async def peek(self, approval_id: str) -> PendingApproval | None:
        approval_id = check_id("id", approval_id)

        def select(raw: sqlite3.Connection) -> PendingApproval | None:
            row = _query(
                raw, f"SELECT {_COLUMNS} FROM approvals a WHERE a.approval_id = ?", [approval_id]
            ).fetchone()
            return None if row is None else _approval(row)

        return await self._db.read(select)

    async def open_for_turn(self, turn_id: str) -> PendingApproval | None:
        turn_id = check_id("turn_id", turn_id)

        def select(raw: sqlite3.Connection) -> PendingApproval | None:
            found = open_approval(raw, turn_id)
            return None if found is None else _row(raw, found.approval_id)

        return await self._db.read(select)

    async def void(self, approval_id: str, reason: str) -> bool:
        approval_id = check_id("id", approval_id)
        if not isinstance(reason, str) or not reason:
            raise InvalidValue("say why the approval is void")
        text = bounded(reason, MAX_REASON_CHARS)
        return await self._db.write(lambda raw: void_open(raw, approval_id, text))

    async def mark_stale(self, approval_id: str, *, claimed_by: str | None = None) -> bool:
        approval_id = check_id("id", approval_id)
        if claimed_by is not None:
            claimed_by = check_id("claimed_by", claimed_by)
        return await self._db.write(lambda raw: _stale(raw, approval_id, claimed_by))

    async def supersede(self, session_id: str, *, turn_id: str) -> int:
        session_id = check_id("session_id", session_id)
        turn_id = check_id("turn_id", turn_id)
        # Most turns have nothing to void: a read on the reader connection, no write
        # transaction. Nothing read is trusted: the write checks, in its transaction,
        # that the turn still runs (a takeover ends it), then voids what is open.
        if not await self._db.read(lambda raw: has_open_calls(raw, session_id)):
            return 0

        def supersede(raw: sqlite3.Connection) -> int:
            status = turn_status(raw, turn_id, session_id)
            if status is None:
                raise InvalidValue("a superseding turn must be a turn of its session")
            if status != "running":
                raise LeaseLost("session lease")
            return supersede_open(raw, session_id, SUPERSEDED)

        return await self._db.write(supersede)

    async def revoke(
        self, scope: PrincipalScope, session_id: str, *, reason: str
    ) -> ApprovalRevocation:
        self._db.verify_scope(scope)
        session_id = check_id("session_id", session_id)
        if not isinstance(reason, str):
            raise InvalidValue("a revocation's reason must be text")
        text = bounded(str.__str__(reason), MAX_REASON_CHARS)
        principal_id = None if scope.authority == "operator" else scope.principal_id

        def revoke(raw: sqlite3.Connection) -> ApprovalRevocation | None:
            if not session_authorized(raw, scope, session_id):
                insert_audit(
                    raw,
                    "principal_scope.owner_lookup_denied",
                    scope=scope,
                    subject=f"session:{session_id}",
                    reason=denial_reason(raw, "session", session_id),
                )
                return None
            revocation = insert_revocation(
                raw,
                actor=scope.principal_id,
                reason=text,
                session_id=session_id,
                principal_id=principal_id,
            )
            insert_audit(
                raw,
                "approval.revoked",
                scope=scope,
                session_id=session_id,
                reason=text,
                detail={"revocation": revocation.id, "every_principal": principal_id is None},
            )
            return revocation

        done = await self._db.write(revoke)
        if done is None:
            raise NotFoundOrUnauthorized("session")
        return done

    async def revocations_after(self, cursor: int | None) -> RevocationPage:
        if cursor is None:
            return RevocationPage(await self._db.read(latest_revocation), ())
        after = check_cursor("a revocation cursor", cursor)
        return await self._db.read(lambda raw: revocations_after(raw, after))

    async def _deny(self, scope: PrincipalScope, approval_id: str) -> NoReturn:
        """Record why an owned lookup found nothing (Host-only audit), then refuse.

        The caller gets the same ``NotFoundOrUnauthorized`` for a missing
        approval and another owner's.
        """

        def record(raw: sqlite3.Connection) -> None:
            insert_audit(
                raw,
                "principal_scope.owner_lookup_denied",
                scope=scope,
                subject=f"approval:{approval_id}",
                reason=_denial(raw, scope, approval_id),
            )

        await self._db.write(record)
        raise NotFoundOrUnauthorized("approval")


def _denial(raw: sqlite3.Connection, scope: PrincipalScope, approval_id: str) -> str:
    """The real reason an approver lookup found nothing (Host-only audit)."""
    row = raw.execute(
        "SELECT session_id, principal_id FROM approvals WHERE approval_id = ?", [approval_id]
    ).fetchone()
    if row is None:
        return "missing"
    session_id, principal_id = row
    if session_authorized(raw, scope, session_id):
        if scope.authority == "operator":
            return "operator_unaudited"
        if principal_id != scope.principal_id:
            return "other_principal"
    return denial_reason(raw, "session", session_id)


def _operator_reason(raw: sqlite3.Connection, scope: PrincipalScope) -> str | None:
    """The reason the operator's scope was issued with, from its issuance audit row."""
    row = raw.execute(
        "SELECT reason FROM audit WHERE kind = 'principal_scope.operator_issued' "
        "AND principal_id = ? AND json_extract(detail, '$.grant_id') = ? "
        "ORDER BY id DESC LIMIT 1",
        [scope.principal_id, scope.grant_id],
    ).fetchone()
    return None if row is None or not row[0] else str(row[0])


def _stale(raw: sqlite3.Connection, approval_id: str, claimed_by: str | None = None) -> bool:
    if claimed_by is None:
        which = "status IN ('pending', 'approved') AND continuation_turn_id IS NULL"
        values = [STALE, now(raw), approval_id]
    else:
        which = "status = 'executed' AND continuation_turn_id = ?"
        values = [STALE, now(raw), approval_id, claimed_by]
    cursor = raw.execute(
        "UPDATE approvals SET status = 'stale', void_reason = ?, "
        "decided_at = COALESCE(decided_at, ?), arguments = '{}' "
        f"WHERE approval_id = ? AND {which}",
        values,
    )
    return cursor.rowcount == 1
