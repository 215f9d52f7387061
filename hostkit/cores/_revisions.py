"""What the revision commands show: a core's status, its commits, a diff between two revisions.

Plain frozen values built by ``CoreRegistry`` and rendered by the CLI and the
``CoreHistory`` widget; nothing in them is a secret (the security diff and
the patch are redacted before they get here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hostkit.freeze import FrozenMap, freeze

__all__ = ["ChangeKind", "CoreDiff", "CoreStatus", "FileChange", "RevisionInfo"]


ChangeKind = Literal["added", "modified", "deleted"]


@dataclass(frozen=True, slots=True)
class CoreStatus:
    """Where a core lives and which commit runs: ``live`` (the Host-owned ref) and ``head``.

    ``live`` None: never promoted (the core is not available); ``head`` None:
    the repository has no commit yet, or, with ``problem``, cannot be read
    (missing, not a Git repository, damaged): one core's broken repository
    is its own row, not the end of every core's status.
    """

    core_id: str
    path: Path
    ref: str
    live: str | None
    head: str | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class RevisionInfo:
    """One commit of a core's repository; ``live`` marks the one the Host-owned ref names."""

    sha: str
    summary: str
    author: str
    at: float
    live: bool


@dataclass(frozen=True, slots=True)
class FileChange:
    """A path that differs between two revisions, and how."""

    path: str
    change: ChangeKind


@dataclass(frozen=True, slots=True)
class CoreDiff:
    """What promoting ``target`` over ``base`` (None: nothing live yet) would change.

    ``patch`` is a bounded unified diff of the text files with secret values
    (MCP env values, URL credentials) redacted. ``security_diff`` is the
    secret-safe MCP declaration diff and ``review`` the ``mcp-review:`` token
    a promotion of exactly this change must carry (None: no MCP change).
    ``dependency_changes`` lists what promotion would flag for manual review
    and ``dependency_review`` is the ``deps-review:`` token that passes it
    (None: no dependency change).
    """

    core_id: str
    base: str | None
    target: str
    files: tuple[FileChange, ...]
    patch: str
    security_diff: Mapping[str, Any] = field(default_factory=FrozenMap)
    review: str | None = None
    dependency_changes: tuple[str, ...] = ()
    dependency_review: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", tuple(self.files))
        object.__setattr__(self, "security_diff", freeze(self.security_diff))
        object.__setattr__(self, "dependency_changes", tuple(self.dependency_changes))
