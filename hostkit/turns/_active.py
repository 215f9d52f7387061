"""Admitted-turn state: the pinned context, live cancellation and what is in flight."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from hostkit.turns._core import PinnedCore
from hostkit.types import (
    EffectSummary,
    PrincipalScope,
    TurnExecutionContext,
    TurnRequest,
    TurnToken,
    Usage,
    new_id,
)

__all__ = ["ActiveTurn", "add_usage", "bind_context", "capability_snapshot"]


@dataclass
class ActiveTurn:
    """Private admitted-turn state: live cancellation and what is in flight."""

    context: TurnExecutionContext
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    in_flight: str | None = None
    cancel_reason: str = "cancelled on request"
    text: str = ""
    effects: list[EffectSummary] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    pending_approval: str | None = None


def bind_context(
    request: TurnRequest, scope: PrincipalScope, core: PinnedCore
) -> TurnExecutionContext:
    """Pin everything a turn runs with into one immutable TurnExecutionContext."""
    turn_id = new_id("turn")
    session_id = scope.session_id or ""

    def token(kind: str) -> TurnToken:
        return TurnToken(kind, request.request_id, turn_id, session_id, new_id("tok"))  # type: ignore[arg-type]

    return TurnExecutionContext(
        request_id=request.request_id,
        turn_id=turn_id,
        principal=scope,
        session_id=session_id,
        core_id=core.core_id,
        core_revision=core.core_revision,
        capability_snapshot=capability_snapshot(core),
        workspace_scope=str(core.workspace),
        route_token=token("route"),
        admission_lease_token=token("admission"),
        cancellation_token=token("cancellation"),
        trace_ids=(new_id("trace"),),
        interaction_metadata=request.metadata,
        generation=core.generation,
    )


def capability_snapshot(core: PinnedCore) -> dict[str, object]:
    """What the turn may do, pinned at admission (approval fingerprints cover it)."""
    return {
        "effects": core.effect_names,
        "secrets": core.secret_grants,
        "policy": core.policy_fingerprint,
        "provider": core.provider.name,
        "model": core.provider.model,
    }


def add_usage(total: Usage, more: Usage) -> Usage:
    return Usage(
        total.input_tokens + more.input_tokens,
        total.output_tokens + more.output_tokens,
        total.cache_read_tokens + more.cache_read_tokens,
        total.cache_write_tokens + more.cache_write_tokens,
    )
