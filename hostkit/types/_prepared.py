"""ContextRequest, PreparedContext and UsageObservation: the ContextManager's values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hostkit.errors import InvalidValue
from hostkit.types._context import TurnExecutionContext
from hostkit.types._model import ModelLimits, ModelMessage, ToolDefinition, Usage

__all__ = [
    "ContextOverflowed",
    "ContextReady",
    "ContextRequest",
    "LayerSummary",
    "PreparedContext",
    "UsageObservation",
]


@dataclass(frozen=True, slots=True)
class ContextRequest:
    """Everything ``prepare()`` may use besides what it reads through the session.

    ``messages`` are the current turn's messages (input, then this turn's
    assistant/tool messages so far); ``definitions`` are the catalog's final
    effect definitions, whose schema size is budgeted. Callers never pass a
    precomputed reservation: the ContextManager chooses the budget.
    """

    context: TurnExecutionContext
    step_id: int
    limits: ModelLimits
    messages: tuple[ModelMessage, ...]
    definitions: tuple[ToolDefinition, ...] = ()
    instructions: str = ""
    contributions: tuple[str, ...] = ()
    bootstrap: bool = False

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
    """A prepared provider request's messages and budget."""

    messages: tuple[ModelMessage, ...]
    output_budget: int
    estimated_input_tokens: int
    hard_budget: int
    decision_id: str
    layers: tuple[LayerSummary, ...]
    summary_used: bool = False
    kind: Literal["ready"] = "ready"


@dataclass(frozen=True, slots=True)
class ContextOverflowed:
    """No provider request can be built safely; ``reason`` is bounded and typed."""

    decision_id: str
    reason: Literal["current_input_too_large", "schema_too_large", "unsafe_estimate"]
    detail: str
    estimated_input_tokens: int
    hard_budget: int
    kind: Literal["overflow"] = "overflow"


PreparedContext = ContextReady | ContextOverflowed


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
