"""The context view: one turn's ``prepare()`` decisions, from their typed records."""

from __future__ import annotations

from dataclasses import dataclass

from hostkit.errors import InvalidValue
from hostkit.inspect._source import MAX_STEPS, Source, bounded, id_arg, store_of
from hostkit.store import RecordedDecision
from hostkit.types import CompactionKind, DecisionKind, LayerSummary, OverflowReason, PrincipalScope

__all__ = ["ContextStep", "ContextView", "context_view"]


@dataclass(frozen=True, slots=True)
class ContextStep:
    """One ``prepare()`` decision of a turn, as its ``ContextDecision`` recorded it.

    Overflow decisions record only their reason, their budgets and the tokens
    needed before history (``estimated_input_tokens``); their layers are
    empty. ``reported_input_tokens`` is the provider's count once usage was
    observed.
    """

    step_id: int
    decision_id: str
    kind: DecisionKind
    at: str
    layers: tuple[LayerSummary, ...]
    estimated_input_tokens: int | None
    raw_input_tokens: int | None
    framing_tokens: int | None
    hard_budget: int | None
    output_budget: int | None
    context_window: int | None
    summary_used: bool
    cutoff: int | None
    pruned_results: int
    dropped_messages: int
    protected_dropped: bool
    compaction: CompactionKind | None
    estimator: str | None
    exact_estimator: bool
    calibration: float | None
    overflow_reason: OverflowReason | None
    reported_input_tokens: int | None

    @classmethod
    def of(cls, recorded: RecordedDecision) -> ContextStep:
        """The step a recorded decision describes."""
        d = recorded.decision
        return cls(
            step_id=d.step_id,
            decision_id=d.decision_id,
            kind=d.kind,
            at=recorded.at,
            layers=d.layers,
            estimated_input_tokens=d.estimated_input_tokens,
            raw_input_tokens=d.raw_input_tokens,
            framing_tokens=d.framing_tokens,
            hard_budget=d.hard_budget,
            output_budget=d.output_budget,
            context_window=d.context_window,
            summary_used=d.summary_used,
            cutoff=d.cutoff,
            pruned_results=d.pruned_results,
            dropped_messages=d.dropped_messages,
            protected_dropped=d.protected_dropped,
            compaction=d.compaction,
            estimator=d.estimator,
            exact_estimator=d.exact_estimator,
            calibration=d.calibration,
            overflow_reason=d.overflow_reason,
            reported_input_tokens=recorded.reported_input_tokens,
        )

    @property
    def badges(self) -> tuple[str, ...]:
        """What happened to the step's context, as short labels (CLI and notebook alike)."""
        badges = []
        if self.summary_used:
            badges.append("summary used")
        if self.pruned_results:
            badges.append(f"pruned {self.pruned_results}")
        if self.dropped_messages:
            badges.append(f"dropped {self.dropped_messages}")
        if self.compaction:
            badges.append(f"compaction {self.compaction}")
        if self.overflow_reason:
            badges.append(f"overflow {self.overflow_reason}")
        return tuple(badges)


@dataclass(frozen=True, slots=True)
class ContextView:
    """The context decisions of one turn (``turn_id`` None: the session has no turns yet)."""

    session_id: str
    turn_id: str | None
    turn_status: str | None
    core_id: str | None
    started_at: str | None
    steps: tuple[ContextStep, ...]
    steps_truncated: bool


async def context_view(
    source: Source,
    scope: PrincipalScope,
    *,
    session_id: str | None = None,
    turn_id: str | None = None,
    steps: int = MAX_STEPS,
) -> ContextView:
    """One turn's decisions (``turn_id``), or those of the session's latest turn.

    Given both, the turn must belong to the session. Raises
    ``NotFoundOrUnauthorized`` for a missing or foreign id, ``InvalidValue``
    when neither id is given or ``steps`` is outside 1..``MAX_STEPS``.
    """
    if session_id is None and turn_id is None:
        raise InvalidValue("context_view needs a session_id or a turn_id")
    session_id = None if session_id is None else id_arg("session_id", session_id)
    turn_id = None if turn_id is None else id_arg("turn_id", turn_id)
    limit = bounded("steps", steps, MAX_STEPS)
    found = await store_of(source).inspect.turn_decisions(
        scope, session_id=session_id, turn_id=turn_id, limit=limit
    )
    turn = found.turn
    return ContextView(
        session_id=found.session_id,
        turn_id=turn.turn_id if turn is not None else None,
        turn_status=turn.status if turn is not None else None,
        core_id=turn.core_id if turn is not None else None,
        started_at=turn.started_at if turn is not None else None,
        steps=tuple(ContextStep.of(recorded) for recorded in found.decisions),
        steps_truncated=found.truncated,
    )
