"""Durable pending approvals: the rows an unanswered ``ask`` leaves behind.

``ApprovalLedger`` is the async face; each function below it runs inside one
store transaction on the database thread.
Reads and answers apply the owner predicate in the same SQL statement (an
approval is owned through its session), and every status change is a
conditional UPDATE, so two answers or two continuation turns can never both
succeed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hostkit.effects._approvals import ApprovalDecision
from hostkit.freeze import FrozenMap, freeze, thaw
from hostkit.store import RuntimeStore, now, owner_predicate
from hostkit.types import PrincipalScope, TurnExecutionContext

__all__ = [
    "ApprovalLedger",
    "ApprovalStatus",
    "ClaimedApproval",
    "PendingApproval",
    "answer",
    "claim",
    "insert_pending",
    "list_approvals",
    "mark_stale",
    "owned_approval",
    "supersede",
]

ApprovalStatus = Literal["pending", "approved", "denied", "executed", "stale", "superseded"]

_COLUMNS = (
    "a.approval_id, a.session_id, a.turn_id, a.principal_id, a.core_id, a.core_revision, "
    "a.effect, a.call_id, a.view, a.policy_fingerprint, a.rule_key, a.status, a.decision, "
    "a.decided_by, a.continuation_turn_id, a.created_at, a.decided_at"
)


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """An approval as approvers and operators see it: the redacted view, never the arguments."""

    approval_id: str
    session_id: str
    turn_id: str
    principal_id: str
    core_id: str
    core_revision: str
    effect: str
    call_id: str
    view: Mapping[str, Any]
    policy_fingerprint: str
    rule_key: str
    status: ApprovalStatus
    decision: str | None
    decided_by: str | None
    continuation_turn_id: str | None
    created_at: str
    decided_at: str | None


@dataclass(frozen=True, slots=True)
class ClaimedApproval:
    """What a continuation turn claimed: the decision and the frozen call to run once."""

    approval: PendingApproval
    arguments: Mapping[str, Any]


def _approval(row: tuple[Any, ...]) -> PendingApproval:
    values = list(row)
    values[8] = freeze(json.loads(values[8]))
    return PendingApproval(*values)


def insert_pending(
    conn: sqlite3.Connection,
    *,
    approval_id: str,
    context: TurnExecutionContext,
    effect: str,
    call_id: str,
    arguments: Mapping[str, Any],
    view: Mapping[str, Any],
    policy_fingerprint: str,
    rule_key: str,
) -> None:
    conn.execute(
        "INSERT INTO approvals (approval_id, session_id, turn_id, principal_id, core_id, "
        "core_revision, effect, call_id, arguments, view, policy_fingerprint, rule_key, status, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
        [
            approval_id,
            context.session_id,
            context.turn_id,
            context.principal.principal_id,
            context.core_id,
            context.core_revision,
            effect,
            call_id,
            json.dumps(arguments, sort_keys=True, default=str),
            json.dumps(view, sort_keys=True, default=str),
            policy_fingerprint,
            rule_key,
            now(conn),
        ],
    )


def owned_approval(
    conn: sqlite3.Connection, scope: PrincipalScope, approval_id: str
) -> PendingApproval | None:
    """The approval if ``scope`` owns its session (operators: any owned session)."""
    where, params = owner_predicate(scope)
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM approvals a JOIN session_owners o ON o.session_id = a.session_id "
        f"WHERE a.approval_id = ? AND {where}",
        [approval_id, *params],
    ).fetchone()
    return _approval(row) if row else None


def list_approvals(
    conn: sqlite3.Connection,
    scope: PrincipalScope,
    *,
    status: ApprovalStatus | None,
    limit: int,
) -> list[PendingApproval]:
    """Newest first, owner-filtered in SQL; ``status=None`` lists every status."""
    where, params = owner_predicate(scope)
    status_clause = "" if status is None else "AND a.status = ? "
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM approvals a JOIN session_owners o ON o.session_id = a.session_id "
        f"WHERE {where} {status_clause}ORDER BY a.id DESC LIMIT ?",
        [*params, *([] if status is None else [status]), limit],
    ).fetchall()
    return [_approval(row) for row in rows]


def answer(
    conn: sqlite3.Connection,
    scope: PrincipalScope,
    approval_id: str,
    *,
    decision: ApprovalDecision,
    decided_by: str,
    fingerprint: str | None,
) -> PendingApproval | ApprovalStatus | None:
    """Record the first answer; returns the answered approval.

    Otherwise returns the status that stops it (``stale`` when ``fingerprint``
    no longer matches: the row is marked stale here, in the same transaction)
    or None when ``scope`` does not own such an approval.
    """
    current = owned_approval(conn, scope, approval_id)
    if current is None:
        return None
    if current.status != "pending":
        return current.status
    if fingerprint is not None and fingerprint != current.policy_fingerprint:
        mark_stale(conn, approval_id)
        return "stale"
    status = "denied" if decision == "deny" else "approved"
    conn.execute(
        "UPDATE approvals SET status = ?, decision = ?, decided_by = ?, decided_at = ? "
        "WHERE approval_id = ? AND status = 'pending'",
        [status, decision, decided_by, now(conn), approval_id],
    )
    return owned_approval(conn, scope, approval_id)


def claim(
    conn: sqlite3.Connection, approval_id: str, *, session_id: str, turn_id: str
) -> ClaimedApproval | None:
    """Claim an answered approval for one continuation turn in its own session, once.

    An approved call becomes ``executed`` before it runs: a crash mid-run never
    leads to a second execution (at most once). None when there is nothing to
    claim (unanswered, already claimed, another session).
    """
    cursor = conn.execute(
        "UPDATE approvals SET continuation_turn_id = ?, "
        "status = CASE status WHEN 'approved' THEN 'executed' ELSE status END "
        "WHERE approval_id = ? AND session_id = ? AND status IN ('approved', 'denied') "
        "AND continuation_turn_id IS NULL",
        [turn_id, approval_id, session_id],
    )
    if cursor.rowcount != 1:
        return None
    row = conn.execute(
        f"SELECT {_COLUMNS}, a.arguments FROM approvals a WHERE a.approval_id = ?", [approval_id]
    ).fetchone()
    # Raw arguments are kept only until the one execution that needs them.
    conn.execute("UPDATE approvals SET arguments = '{}' WHERE approval_id = ?", [approval_id])
    return ClaimedApproval(_approval(row[:-1]), FrozenMap(json.loads(row[-1])))


def mark_stale(conn: sqlite3.Connection, approval_id: str) -> None:
    conn.execute(
        "UPDATE approvals SET status = 'stale', decided_at = COALESCE(decided_at, ?), "
        "arguments = '{}' WHERE approval_id = ? AND status IN ('pending', 'approved', 'executed')",
        [now(conn), approval_id],
    )


def supersede(conn: sqlite3.Connection, session_id: str) -> int:
    """A new ordinary turn runs in the session: its paused calls that have not run are void."""
    # Answered but not yet run counts too: its result would land after newer messages.
    cursor = conn.execute(
        "UPDATE approvals SET status = 'superseded', decided_at = COALESCE(decided_at, ?), "
        "arguments = '{}' WHERE session_id = ? AND (status = 'pending' OR "
        "(status IN ('approved', 'denied') AND continuation_turn_id IS NULL))",
        [now(conn), session_id],
    )
    return cursor.rowcount


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
    ) -> None:
        """Keep an unanswered ``ask`` under the id its prompt carried."""
        await self._store.write(
            lambda conn: insert_pending(
                conn,
                approval_id=approval_id,
                context=context,
                effect=effect,
                call_id=call_id,
                arguments=thaw(arguments),
                view=thaw(view),
                policy_fingerprint=policy_fingerprint,
                rule_key=rule_key,
            )
        )
        return approval_id

    async def get(self, scope: PrincipalScope, approval_id: str) -> PendingApproval | None:
        return await self._store.read(lambda conn: owned_approval(conn, scope, approval_id))

    async def list(
        self, scope: PrincipalScope, *, status: ApprovalStatus | None, limit: int
    ) -> list[PendingApproval]:
        return await self._store.read(
            lambda conn: list_approvals(conn, scope, status=status, limit=limit)
        )

    async def answer(
        self,
        scope: PrincipalScope,
        approval_id: str,
        *,
        decision: ApprovalDecision,
        fingerprint: str | None,
    ) -> PendingApproval | ApprovalStatus | None:
        return await self._store.write(
            lambda conn: answer(
                conn,
                scope,
                approval_id,
                decision=decision,
                decided_by=scope.principal_id,
                fingerprint=fingerprint,
            )
        )

    async def claim(
        self, approval_id: str, context: TurnExecutionContext
    ) -> ClaimedApproval | None:
        return await self._store.write(
            lambda conn: claim(
                conn, approval_id, session_id=context.session_id, turn_id=context.turn_id
            )
        )

    async def mark_stale(self, approval_id: str) -> None:
        await self._store.write(lambda conn: mark_stale(conn, approval_id))

    async def supersede(self, session_id: str) -> int:
        return await self._store.write(lambda conn: supersede(conn, session_id))
