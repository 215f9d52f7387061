"""The store's cores group: promotion history, session pins and authored state.

This group is the authority on which revision of a core is live: the
newest recorded promotion or rollback (``live_revision``). The Git ref in
the core's repository is only a mirror of it, because the repository is the
author's to write. Every move (``move_live``, a compare-and-swap on the live
revision) and every refused promotion (``record_event``) is one row with its
gates, so ``hostkit core log`` and the ``CoreHistory`` widget read one table. Authored
state (``ctx.state``) is versioned for compare-and-set, and a write is
fenced by the writing turn's session lease: a slot or tool that writes after
its turn ended (or after another Host took the session over) is refused with
``LeaseLost`` and changes nothing. Every method is one transaction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from hostkit.store._turn_values import SessionLease
from hostkit.types import CoreEvent, SessionPin, StateEntry

__all__ = ["ANY_VERSION", "MAX_CORE_HISTORY", "CoreStore"]

MAX_CORE_HISTORY = 1_000


class _AnyVersion:
    """The default ``expected`` of ``state_set``: write whatever version is current."""

    def __repr__(self) -> str:
        return "ANY_VERSION"


ANY_VERSION: Any = _AnyVersion()


class CoreStore(ABC):
    """Core history and authored state; every adapter implements this group.

    Bad input (a malformed core id, an empty key, a value that is not JSON
    or too large, a non-positive limit) raises ``InvalidValue`` and writes
    nothing.
    """

    @abstractmethod
    async def record_event(self, event: CoreEvent) -> CoreEvent:
        """Append a ``refused`` event; returns it with its ``event_id``.

        A ``promote`` or ``rollback`` is a move: ``InvalidValue`` here (use
        ``move_live``, which checks what it moves from).
        """

    @abstractmethod
    async def move_live(self, event: CoreEvent) -> CoreEvent:
        """Make ``event.revision`` the live revision of ``event.core_id`` (a promote or rollback).

        One transaction: the current live revision must equal ``event.previous``
        (None: nothing live yet), else ``StaleClaim(core_id, subject="core live
        revision")`` and nothing is written; then the event and its
        ``core.<action>`` audit row (actor, reason, revisions) are appended.
        Two movers (two processes) from the same revision: exactly one wins.
        """

    @abstractmethod
    async def live_revision(self, core_id: str) -> str | None:
        """The revision of ``core_id``'s newest promote or rollback (None: never promoted)."""

    @abstractmethod
    async def history(
        self, core_id: str | None = None, *, limit: int = 100, moves_only: bool = False
    ) -> tuple[CoreEvent, ...]:
        """Events newest first, of one core or of all; at most ``limit``.

        ``moves_only``: only the promotions and rollbacks that moved the live
        revision (however many refused promotions came after them).
        """

    @abstractmethod
    async def was_live(self, core_id: str, revision: str) -> bool:
        """Whether ``revision`` was ever the live revision of ``core_id`` (all of history)."""

    @abstractmethod
    async def session_pins(self, core_id: str, *, limit: int = 100) -> tuple[SessionPin, ...]:
        """Per session, the revision its latest turn of ``core_id`` ran on; newest first."""

    @abstractmethod
    async def state_get(self, core_id: str, scope: str, key: str) -> StateEntry | None:
        """The current value of ``key`` in ``scope`` ('' = core-wide, else a session id)."""

    @abstractmethod
    async def state_set(
        self,
        core_id: str,
        scope: str,
        key: str,
        value: Any,
        *,
        lease: SessionLease,
        expected: int | None = ANY_VERSION,
        now: float,
    ) -> StateEntry:
        """Write ``value`` (JSON data, ``state_json``) as the next version of ``key``.

        ``expected``: ``ANY_VERSION`` writes unconditionally; None requires the
        key to be absent; an int requires that exact current version, else
        ``StateConflict`` (and nothing is written). ``lease`` is the writing
        turn's session lease: if it is no longer the session's current lease
        (the turn ended, or another Host took over), or if ``scope`` is neither
        core-wide ('') nor that turn's session, or ``core_id`` is not that turn's
        core, ``LeaseLost``: a turn writes its own session's and its core's state only.
        """

    @abstractmethod
    async def state_keys(
        self, core_id: str, scope: str, *, limit: int = 100
    ) -> tuple[StateEntry, ...]:
        """The entries of one scope, by key; at most ``limit`` (operator views, tests)."""
