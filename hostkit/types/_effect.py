"""EffectRequest, EffectResult and the opaque resolved reference: the EffectRuntime's values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hostkit.errors import InvalidValue
from hostkit.freeze import FrozenMap
from hostkit.types._arguments import MalformedArguments

__all__ = [
    "EffectOrigin",
    "EffectRequest",
    "EffectResult",
    "EffectStatus",
    "EffectViews",
    "ResolvedEffectRef",
]

EffectStatus = Literal[
    "succeeded",
    "denied",
    "invalid",
    "not_found",
    "failed",
    "timed_out",
    "cancelled",
    "indeterminate",
]
EffectOrigin = Literal["model", "authored", "host"]


@dataclass(frozen=True, slots=True)
class ResolvedEffectRef:
    """An opaque reference into one turn's prepared catalog.

    Only the catalog that produced it resolves it back to an effect entry;
    ``execute()`` never looks a tool up by name again.
    """

    catalog_id: str
    entry_id: str
    effect: str


@dataclass(frozen=True, slots=True)
class EffectRequest:
    """One invocation: a unique call id, a resolved reference and frozen arguments.

    ``MalformedArguments`` (what a model sent that is no JSON object) stay that
    type: the runtime refuses them as ``invalid`` before anything else.
    """

    call_id: str
    ref: ResolvedEffectRef
    arguments: Mapping[str, Any]
    origin: EffectOrigin = "model"

    def __post_init__(self) -> None:
        if not self.call_id or len(self.call_id) > 200:
            raise InvalidValue("call_id must be 1-200 characters")
        if not isinstance(self.ref, ResolvedEffectRef):
            raise InvalidValue("ref must come from the turn's prepared catalog")
        if self.origin not in ("model", "authored", "host"):
            raise InvalidValue("origin must be model, authored or host")
        if not isinstance(self.arguments, MalformedArguments):
            object.__setattr__(self, "arguments", FrozenMap(self.arguments))


@dataclass(frozen=True, slots=True)
class EffectViews:
    """Independently bounded, redacted views of one result, one per audience."""

    model: str
    operator: Mapping[str, Any] = field(default_factory=FrozenMap)
    event: Mapping[str, Any] = field(default_factory=FrozenMap)
    durable: Mapping[str, Any] = field(default_factory=FrozenMap)
    debug: Mapping[str, Any] = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        for name in ("operator", "event", "durable", "debug"):
            object.__setattr__(self, name, FrozenMap(getattr(self, name)))


@dataclass(frozen=True, slots=True)
class EffectResult:
    """The typed outcome of one effect; raw adapter output never leaves the runtime.

    ``pending_approval`` is set when an ``ask`` went unanswered: the effect did
    not start (``denied``, ``started=False``) and the turn pauses ``needs_user``
    until the durable approval is answered.
    """

    call_id: str
    effect: str
    status: EffectStatus
    started: bool
    views: EffectViews
    error: str | None = None
    pending_approval: str | None = None
