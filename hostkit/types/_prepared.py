"""The ContextManager's values: request, prepared context, decision record, usage observation."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from hostkit.errors import InvalidValue
from hostkit.types._context import TurnExecutionContext
from hostkit.types._model import ModelLimits, ModelMessage, ToolDefinition, Usage

__all__ = [
    "MAX_DECISION_TEXT",
    "CompactionKind",
    "ContextDecision",
    "ContextEvents",
    "ContextOverflowed",
    "ContextReady",
    "ContextRequest",
    "DecisionKind",
    "LayerSummary",
    "OverflowReason",
    "PreparedContext",
    "UsageObservation",
]

OverflowReason = Literal[
    "current_input_too_large", "instructions_too_large", "schema_too_large", "unsafe_estimate"
]
# What a compaction attempt inside ``prepare()`` came to (see ``CompactionOutcome``).
CompactionKind = Literal["committed", "reread", "busy", "cooldown", "stale"]
# ``summary``: a summarizer call a compaction made, recorded so its usage is counted.
DecisionKind = Literal["ready", "overflow", "summary"]
# Where ``prepare()`` reports a provider call of its own (a compaction's summarizer): the
# event kind (``provider.started`` / ``provider.responded`` / ``provider.failed``) and data.
ContextEvents = Callable[[str, Mapping[str, Any]], None]
# Ids, estimator, provider and model names in a decision record are at most this long.
MAX_DECISION_TEXT = 300


@dataclass(frozen=True, slots=True)
class ContextRequest:
    """Everything ``prepare()`` may use besides what it reads through the session.

    ``messages`` are the current turn's messages (input, then this turn's
    assistant/tool messages so far); ``definitions`` are the catalog's final
    effect definitions, whose schema size is budgeted. Callers never pass a
    precomputed reservation: the ContextManager chooses the budget.
    ``on_event`` hears the live events of a summarizer call ``prepare()`` makes
    (TurnExecution turns them into the turn's events and spans).
    """

    context: TurnExecutionContext
    step_id: int
    limits: ModelLimits
    messages: tuple[ModelMessage, ...]
    definitions: tuple[ToolDefinition, ...] = ()
    instructions: str = ""
    contributions: tuple[str, ...] = ()
    bootstrap: bool = False
    on_event: ContextEvents | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.step_id < 0:
            raise InvalidValue("step_id cannot be negative")
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "definitions", tuple(self.definitions))
        object.__setattr__(self, "contributions", tuple(self.contributions))


@dataclass(frozen=True, slots=True)
class LayerSummary:
    """Tokens and items one context layer contributed; no message content."""

    name: str
    tokens: int
    items: int
    pruned: int = 0


@dataclass(frozen=True, slots=True)
class ContextReady:
    """A prepared provider request's messages and budget.

    ``summary_usage`` is what the summarizer call of a compaction made while
    preparing cost (None: no summarizer call answered); it is already recorded,
    and belongs in the turn's usage.
    """

    messages: tuple[ModelMessage, ...]
    output_budget: int
    estimated_input_tokens: int
    hard_budget: int
    decision_id: str
    layers: tuple[LayerSummary, ...]
    summary_used: bool = False
    summary_usage: Usage | None = None
    kind: Literal["ready"] = "ready"


@dataclass(frozen=True, slots=True)
class ContextOverflowed:
    """No provider request can be built safely; ``reason`` is bounded and typed."""

    decision_id: str
    reason: OverflowReason
    detail: str
    estimated_input_tokens: int
    hard_budget: int
    kind: Literal["overflow"] = "overflow"


PreparedContext = ContextReady | ContextOverflowed

_KINDS: frozenset[str] = frozenset(get_args(DecisionKind))
_REASONS: frozenset[str] = frozenset(get_args(OverflowReason))
_COMPACTIONS: frozenset[str] = frozenset(get_args(CompactionKind))


@dataclass(frozen=True, slots=True)
class ContextDecision:
    """What one ``prepare()`` decided, as the store records it: numbers and names, never content.

    A ``ready`` decision has its layers, what was pruned or dropped, the
    estimator and calibration factor it used and the compaction outcome (None:
    no compaction was attempted). An ``overflow`` decision has its
    ``overflow_reason`` and, as ``estimated_input_tokens``, the tokens needed
    before any history; it has no layers. A ``summary`` decision is a
    compaction's summarizer call, made while preparing step ``step_id``: its
    estimate, output budget, window, provider and model are the summarizer
    request's; it has no layers and never moves the calibration.

    ``raw_input_tokens`` is the uncalibrated estimate of the whole request
    (what calibration compares the provider's count with); ``provider`` and
    ``model`` are the pinned ones calibration is keyed by. The budgets are
    None only on overflow decisions recorded before they were kept. Raises
    ``InvalidValue`` for a value of the wrong type or out of range.
    """

    decision_id: str
    session_id: str
    turn_id: str
    step_id: int
    kind: DecisionKind
    estimated_input_tokens: int
    hard_budget: int | None
    output_budget: int | None
    context_window: int | None
    layers: tuple[LayerSummary, ...] = ()
    raw_input_tokens: int | None = None
    framing_tokens: int | None = None
    estimator: str | None = None
    exact_estimator: bool = False
    provider: str | None = None
    model: str | None = None
    calibration: float | None = None
    summary_used: bool = False
    cutoff: int | None = None
    pruned_results: int = 0
    dropped_messages: int = 0
    protected_dropped: bool = False
    compaction: CompactionKind | None = None
    overflow_reason: OverflowReason | None = None

    def __post_init__(self) -> None:
        for name in ("decision_id", "session_id", "turn_id"):
            _text(name, getattr(self, name), required=True)
        for name in ("estimator", "provider", "model"):
            _text(name, getattr(self, name), required=False)
        for name in ("step_id", "estimated_input_tokens", "pruned_results", "dropped_messages"):
            _count(name, getattr(self, name))
        for name in ("output_budget", "context_window", "raw_input_tokens", "framing_tokens"):
            if getattr(self, name) is not None:
                _count(name, getattr(self, name))
        for name in ("hard_budget", "cutoff"):  # a tiny window can leave a negative budget
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise InvalidValue(f"{name} must be an integer or None")
        for name in ("exact_estimator", "summary_used", "protected_dropped"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidValue(f"{name} must be a bool")
        factor = self.calibration
        if factor is not None and (
            not isinstance(factor, int | float)
            or isinstance(factor, bool)
            or not math.isfinite(factor)
            or factor <= 0
        ):
            raise InvalidValue("calibration must be a positive finite number or None")
        if self.kind not in _KINDS:
            raise InvalidValue("kind must be 'ready', 'overflow' or 'summary'")
        if self.compaction is not None and self.compaction not in _COMPACTIONS:
            raise InvalidValue(f"compaction must be one of {', '.join(sorted(_COMPACTIONS))}")
        if self.kind == "overflow":
            if self.overflow_reason not in _REASONS:
                raise InvalidValue(
                    f"an overflow decision needs a reason: {', '.join(sorted(_REASONS))}"
                )
        elif self.overflow_reason is not None:
            raise InvalidValue("only an overflow decision has an overflow_reason")
        layers = tuple(self.layers)
        if not all(isinstance(layer, LayerSummary) for layer in layers):
            raise InvalidValue("layers must be LayerSummary values")
        object.__setattr__(self, "layers", layers)


def _text(name: str, value: object, *, required: bool) -> None:
    if value is None and not required:
        return
    if not isinstance(value, str) or not value or len(value) > MAX_DECISION_TEXT:
        raise InvalidValue(
            f"{name} must be a non-empty string of at most {MAX_DECISION_TEXT} characters"
        )


def _count(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidValue(f"{name} must be a non-negative integer")


@dataclass(frozen=True, slots=True)
class UsageObservation:
    """What the provider reported for one prepared step, correlated by decision id."""

    decision_id: str
    session_id: str
    turn_id: str
    step_id: int
    provider: str
    model: str
    usage: Usage
    finish_reason: str | None = None
    provider_request_id: str | None = None
