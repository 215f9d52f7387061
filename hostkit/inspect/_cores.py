"""The operator's view of one Agent Core: its revisions, promotion history and session pins.

Built from the Host's ``CoreRegistry`` (the Host-owned ref, the live and HEAD
commits, the commits from HEAD) and the store's cores group (every recorded
promotion, rollback and refused promotion with its gates and secret-safe
security diff; per session, the revision its latest turn ran on). Reading it
moves nothing and runs no gate. The CLI's ``hostkit core log`` and the
notebook's ``CoreHistory`` draw from these values alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hostkit.cores import CoreStatus, RevisionInfo
from hostkit.inspect._source import bounded
from hostkit.store import MAX_CORE_HISTORY, RuntimeStore
from hostkit.types import CoreEvent, SessionPin

if TYPE_CHECKING:
    from hostkit.cores import CoreRegistry
    from hostkit.host import Host

__all__ = ["CoreHistoryView", "PinRow", "core_history", "core_history_of"]


@dataclass(frozen=True, slots=True)
class PinRow:
    """A session and the revision it is pinned to; ``live``: that is the live revision now."""

    pin: SessionPin
    live: bool


@dataclass(frozen=True, slots=True)
class CoreHistoryView:
    """One core as the operator sees it.

    ``revisions`` are the commits from HEAD, newest first, each marked
    ``live`` when the Host-owned ref points at it; ``events`` every recorded
    move of the ref (and refused promotion), newest first; ``pins`` each
    session's revision, newest first. ``truncated`` names the lists that hit
    the limit.
    """

    status: CoreStatus
    revisions: tuple[RevisionInfo, ...]
    events: tuple[CoreEvent, ...]
    pins: tuple[PinRow, ...]
    truncated: tuple[str, ...] = ()

    @property
    def core_id(self) -> str:
        return self.status.core_id

    @property
    def live(self) -> str | None:
        """The live commit (None: never promoted, the core is not available)."""
        return self.status.live

    def summary_of(self, revision: str | None) -> str | None:
        """The first line of ``revision``'s commit message, when it is among ``revisions``."""
        return next((r.summary for r in self.revisions if r.sha == revision), None)


async def core_history(host: Host, core_id: str, *, limit: int = 50) -> CoreHistoryView:
    """The history of ``core_id`` on ``host`` (its ``cores`` registry and its store)."""
    return await core_history_of(host.cores, host.store, core_id, limit=limit)


async def core_history_of(
    registry: CoreRegistry, store: RuntimeStore, core_id: str, *, limit: int = 50
) -> CoreHistoryView:
    """The history of ``core_id``: at most ``limit`` revisions, events and session pins each.

    An unknown core is the registry's error (``NotFoundOrUnauthorized``); a
    ``limit`` outside 1..``MAX_CORE_HISTORY - 1`` is ``InvalidValue``.
    """
    bounded("limit", limit, MAX_CORE_HISTORY - 1)
    status = await registry.status(core_id)
    revisions = await registry.log(core_id, limit=limit + 1)
    events = await store.cores.history(core_id, limit=limit + 1)
    pins = await store.cores.session_pins(core_id, limit=limit + 1)
    truncated = tuple(
        name
        for name, rows in (("revisions", revisions), ("events", events), ("pins", pins))
        if len(rows) > limit
    )
    return CoreHistoryView(
        status=status,
        revisions=tuple(revisions[:limit]),
        events=tuple(events[:limit]),
        pins=tuple(PinRow(pin, pin.core_revision == status.live) for pin in pins[:limit]),
        truncated=truncated,
    )
