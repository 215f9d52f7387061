"""What effects really did: persisted audit views and durable background terminal runs."""

from __future__ import annotations

from dataclasses import dataclass

from hostkit.inspect._source import Source, bounded, id_arg, store_of
from hostkit.store import MAX_INSPECT_ROWS, MAX_TERMINAL_RUN_LIST, TerminalRunRecord
from hostkit.types import AuditRecord, PrincipalScope

__all__ = ["EffectAuditRows", "TerminalRunRows", "effect_audit_rows", "terminal_run_rows"]


@dataclass(frozen=True, slots=True)
class EffectAuditRows:
    """A session's (or one turn's) newest effect audit views, in order; ``truncated`` when
    older ones were left out."""

    session_id: str
    audits: tuple[AuditRecord, ...]
    truncated: bool


async def effect_audit_rows(
    source: Source,
    scope: PrincipalScope,
    session_id: str,
    *,
    turn_id: str | None = None,
    limit: int = 100,
) -> EffectAuditRows:
    """Through ``store.inspect.effect_audits`` (operator only; ``limit`` 1..499)."""
    bounded("limit", limit, MAX_INSPECT_ROWS - 1)
    session_id = id_arg("session_id", session_id)
    turn_id = None if turn_id is None else id_arg("turn_id", turn_id)
    found = await store_of(source).inspect.effect_audits(
        scope, session_id, turn_id=turn_id, limit=limit + 1
    )
    # The newest limit + 1 in order: a cut drops the oldest, never the latest calls.
    return EffectAuditRows(session_id, found[-limit:], len(found) > limit)


@dataclass(frozen=True, slots=True)
class TerminalRunRows:
    """Background terminal runs newest first; ``truncated`` when there are more."""

    runs: tuple[TerminalRunRecord, ...]
    truncated: bool


async def terminal_run_rows(
    source: Source, scope: PrincipalScope, *, session_id: str | None = None, limit: int = 50
) -> TerminalRunRows:
    """Through the owner-checked ``store.terminal_runs.list`` (``limit`` 1..499)."""
    bounded("limit", limit, MAX_TERMINAL_RUN_LIST - 1)
    session_id = None if session_id is None else id_arg("session_id", session_id)
    found = await store_of(source).terminal_runs.list(scope, session_id=session_id, limit=limit + 1)
    return TerminalRunRows(found[:limit], len(found) > limit)
