"""Admitted-turn state: the pinned context, live cancellation and what is in flight."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from hostkit.cores import AuthorTurn
from hostkit.effects import PreparedEffectCatalog, Redactor
from hostkit.store import ObservedStep, SessionLease, TranscriptEntry
from hostkit.turns._core import PinnedCore
from hostkit.types import (
    MAX_TOKEN_COUNT,
    EffectSummary,
    PrincipalScope,
    ProviderUnavailable,
    TokenKind,
    ToolCall,
    TurnCanceller,
    TurnExecutionContext,
    TurnRequest,
    TurnToken,
    Usage,
)

__all__ = ["ActiveTurn", "KnownResult", "add_usage", "bind_context", "capability_snapshot"]


@dataclass(frozen=True, slots=True)
class KnownResult:
    """A call's result as the Host holds it, until the tool message answering it is durable."""

    status: str
    effect: str
    view: str
    approval_id: str | None


@dataclass
class ActiveTurn:
    """Private admitted-turn state: its session lease, live cancellation, what is in flight.

    ``next_seq`` is the turn's next event seq, carried in memory: only the
    lease holder writes this turn's events (every write is fenced), so no
    other writer can take a seq from under it.
    """

    context: TurnExecutionContext
    lease: SessionLease
    # Where the turn's replies go, captured at admission; resolved through the route token.
    route: Mapping[str, Any] | None = None
    next_seq: int = 2  # turn.started is 1, written by the admission
    # The session had calls to supersede when admitted (none can appear while it holds).
    open_approvals: bool = True
    # Until when the last renewal holds the session lease, on two clocks: ``held_until``
    # on ``boot_clock`` (which counts a suspend and a paused VM), ``held_expiry`` on the
    # store's (the expiry that renewal wrote, at least). Past either, the lease may have
    # been taken over while this process was paused (None: not yet known).
    held_until: float | None = None
    held_expiry: float | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    in_flight: str | None = None
    cancel_reason: str = "cancelled on request"
    cancelled_by: TurnCanceller = "user"
    text: str = ""
    # The validated structured answer (an agent with an output type), JSON-able.
    output: Any = None
    output_retries: int = 0  # how often an invalid structured answer was fed back
    effects: list[EffectSummary] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    pending_approval: str | None = None
    catalog: PreparedEffectCatalog | None = None
    # Masks what the turn keeps or reports that no tool produced (``turn_redactor``).
    redactor: Redactor = field(default_factory=Redactor)
    # The last answer, written with the terminal record (None until the model answers).
    final: TranscriptEntry | None = None
    final_step: ObservedStep | None = None  # its observation, committed with it
    recorded: bool = False  # the turn's terminal record is durable (here or by a takeover)
    # When (anyio's clock) the turn's end runs out of time: its writes (the record, ending
    # it lost, its context decisions) share one bound, set when the end begins.
    end_by: float | None = None
    # A write of the end found the store busy (its lock wait or the bound ran out): the
    # end's later writes are not tried, each would wait out the same lock again.
    store_busy: bool = False
    # The model's calls of the current step whose results are not durable yet, in order.
    # While ``in_flight == "effect"`` the first of them may have run.
    unanswered: list[ToolCall] = field(default_factory=list)
    # Results the Host holds for calls whose answer could not be made durable (status,
    # effect, view, approval id): a turn ending early writes these, not "may have run".
    known: dict[str, KnownResult] = field(default_factory=dict)
    # The authored-code SDK of the turn (slots' ctx, tools' state); closed when it ends.
    author: AuthorTurn | None = None
    # The pinned instructions plus what the bootstrap slot added (None: the pinned ones).
    instructions: str | None = None
    # Model responses received so far: none, and no effect, means nothing happened yet.
    responses: int = 0
    # The turn failed as its provider could not be reached (TurnResult.provider_unavailable).
    provider_unavailable: ProviderUnavailable | None = None
    # How long that provider asked to be left alone (ProviderError.retry_after), if it did.
    provider_retry_after_s: float | None = None

    def stop(self, reason: str, by: TurnCanceller) -> None:
        """Cancel the turn's work with ``reason`` (the first reason and canceller win)."""
        if not self.scope.cancel_called:
            self.cancel_reason, self.cancelled_by = reason, by
            self.scope.cancel()

    def end_left_s(self, bound_s: float) -> float:
        """What is left of the end's bound; the first call begins the end (``bound_s``)."""
        now = anyio.current_time()
        if self.end_by is None:
            self.end_by = now + bound_s
        return max(0.0, self.end_by - now)

    def take_seq(self) -> int:
        """The seq of the turn's next persisted event."""
        seq = self.next_seq
        self.next_seq += 1
        return seq


def bind_context(
    request: TurnRequest,
    scope: PrincipalScope,
    core: PinnedCore,
    snapshot: Mapping[str, object],
    *,
    turn_id: str,
    trace_id: str,
    nonces: Mapping[TokenKind, str],
) -> TurnExecutionContext:
    """Pin everything a turn runs with into one immutable TurnExecutionContext.

    ``turn_id``, ``trace_id`` and the tokens' ``nonces`` are the ones the
    admission transaction recorded; ``snapshot`` is the ``capability_snapshot``
    taken before it (it reads the provider, which may raise: never after the
    turn was admitted).
    """
    session_id = scope.session_id or ""

    def token(kind: TokenKind) -> TurnToken:
        return TurnToken(kind, request.request_id, turn_id, session_id, nonces[kind])

    return TurnExecutionContext(
        request_id=request.request_id,
        turn_id=turn_id,
        principal=scope,
        session_id=session_id,
        core_id=core.core_id,
        core_revision=core.core_revision,
        capability_snapshot=snapshot,
        workspace_scope=str(core.workspace),
        route_token=token("route"),
        admission_lease_token=token("admission"),
        cancellation_token=token("cancellation"),
        trace_ids=(trace_id,),
        interaction_metadata=request.metadata,
        generation=core.generation,
    )


def capability_snapshot(core: PinnedCore) -> dict[str, object]:
    """What the turn may do, pinned at admission (approval fingerprints cover it)."""
    return {
        "effects": core.effect_names,
        "secrets": core.secret_grants,
        "policy": core.policy_fingerprint,
        # Where its file and process effects act, and what its processes may consume: an
        # approval given under one workspace or limits is not one for another.
        "workspace": str(core.workspace),
        "process_limits": dict(core.process_limits),
        "provider": core.provider.name,
        "model": core.provider.model,
    }


def add_usage(total: Usage, more: Usage) -> Usage:
    """The turn's usage with one more call's; each bucket stops at ``MAX_TOKEN_COUNT``.

    Only a provider reporting absurd counts reaches the bound (a million tokens is
    2**20): its turn keeps going, and the per-call rows the store sums stay exact.
    """
    return Usage(
        *(
            min(mine + theirs, MAX_TOKEN_COUNT)
            for mine, theirs in (
                (total.input_tokens, more.input_tokens),
                (total.output_tokens, more.output_tokens),
                (total.cache_read_tokens, more.cache_read_tokens),
                (total.cache_write_tokens, more.cache_write_tokens),
            )
        )
    )
