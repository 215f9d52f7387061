"""Session and approval lists, through the store's and the Host's owner-checked calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hostkit.effects import ApprovalFilter, PendingApproval
from hostkit.inspect._source import Source, bounded, store_of
from hostkit.store import SessionActivity
from hostkit.types import PrincipalScope, SessionRecord

if TYPE_CHECKING:
    from hostkit.host import Host

__all__ = [
    "MAX_APPROVALS",
    "ActivityRows",
    "ApprovalRows",
    "SessionRows",
    "activity_rows",
    "approval_rows",
    "latest_session",
    "session_rows",
]

# The Host's own bound on one page of approvals (``host.approvals.list``).
MAX_APPROVALS = 200


@dataclass(frozen=True, slots=True)
class SessionRows:
    """The scope's newest sessions; ``truncated`` when there are more."""

    sessions: tuple[SessionRecord, ...]
    truncated: bool


async def session_rows(source: Source, scope: PrincipalScope, *, limit: int = 50) -> SessionRows:
    """Newest first, through the store's owned ``list_sessions`` (``limit`` 1..500)."""
    page = await store_of(source).list_sessions(scope, limit=limit)
    return SessionRows(page.items, page.next_cursor is not None)


@dataclass(frozen=True, slots=True)
class ActivityRows:
    """The scope's sessions, most recent activity first, with their agent, turns and outcome;
    ``truncated`` when less recent ones were left out, and then ``next_before``: the
    ``before`` that lists them."""

    sessions: tuple[SessionActivity, ...]
    truncated: bool
    next_before: str | None = None


async def activity_rows(
    source: Source, scope: PrincipalScope, *, limit: int = 50, before: str | None = None
) -> ActivityRows:
    """Through the store's owner-checked ``inspect.session_page`` (``limit`` 1..499), from
    ``before`` (a page's ``next_before``) on."""
    bounded("limit", limit, 499)
    page = await store_of(source).inspect.session_page(scope, cursor=before, limit=limit)
    return ActivityRows(page.items, page.next_cursor is not None, page.next_cursor)


async def latest_session(source: Source, scope: PrincipalScope) -> str | None:
    """The scope's session with the most recent activity, or None before the first."""
    found = await store_of(source).inspect.recent_sessions(scope, limit=1)
    return found[0].session.session_id if found else None


@dataclass(frozen=True, slots=True)
class ApprovalRows:
    """Approvals newest first with their redacted views (``status`` None: every status;
    ``"open"``: those whose call can still run); ``truncated`` when older ones were left out,
    and then ``next_before``: the ``before`` that lists them."""

    approvals: tuple[PendingApproval, ...]
    status: ApprovalFilter | None
    truncated: bool
    next_before: int | None = None


async def approval_rows(
    host: Host,
    scope: PrincipalScope,
    *,
    status: ApprovalFilter | None = "pending",
    limit: int = 50,
    before: int | None = None,
) -> ApprovalRows:
    """Through ``host.approvals.page`` (owner-checked; ``limit`` 1..``MAX_APPROVALS``), from
    ``before`` (a page's ``next_before``) on."""
    bounded("limit", limit, MAX_APPROVALS)
    found = await host.approvals.page(scope, status=status, limit=limit, before=before)
    return ApprovalRows(found.approvals, status, found.truncated, found.next_before)
