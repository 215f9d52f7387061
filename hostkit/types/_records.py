"""Frozen snapshots of owned rows, returned by the store's owned queries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from hostkit.freeze import FrozenMap

__all__ = [
    "AuditRecord",
    "LegacyRepairView",
    "MessageRecord",
    "OwnerKind",
    "Page",
    "SessionRecord",
    "TaskRecord",
]

OwnerKind = Literal["conversation", "operator", "system", "delegated_agent", "legacy_local"]
T = TypeVar("T")


def _frozen(instance: object, name: str) -> None:
    object.__setattr__(instance, name, FrozenMap(getattr(instance, name)))


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session as its owner may see it."""

    session_id: str
    created_at: str
    status: str
    title: str | None
    owner_kind: OwnerKind
    parent_session_id: str | None = None
    parent_turn_id: str | None = None


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One transcript entry; ``seq`` orders a session's messages."""

    message_id: str
    session_id: str
    seq: int
    role: str
    content: Mapping[str, Any]
    turn_id: str | None
    created_at: str

    def __post_init__(self) -> None:
        _frozen(self, "content")


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A runtime task owned through its session."""

    task_id: str
    session_id: str
    kind: str
    status: str
    detail: Mapping[str, Any]
    created_at: str
    updated_at: str

    def __post_init__(self) -> None:
        _frozen(self, "detail")


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """A Host-only audit entry (never shown to the principal it concerns)."""

    audit_id: int
    at: str
    kind: str
    principal_id: str | None
    authority: str | None
    session_id: str | None
    subject: str | None
    reason: str | None
    detail: Mapping[str, Any]

    def __post_init__(self) -> None:
        _frozen(self, "detail")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a keyset-paginated list; pass ``next_cursor`` back for the next."""

    items: tuple[T, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class LegacyRepairView:
    """What the operator repair path may see of a row with missing or ambiguous ownership."""

    session: SessionRecord | None
    task: TaskRecord | None
    owner_status: Literal["legacy_local", "missing"]
