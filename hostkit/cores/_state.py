"""StateRuntime: authored state (``ctx.state``, ``ctx.core_state``) on the transactional store.

A handle is bound to one (core, scope) and to the session lease of the turn
that opened it. Every ``set`` goes through ``store.cores.state_set``, which
checks that lease in the write's own transaction: a write from a turn that
has ended, or whose session another Host took over, is refused with
``LeaseLost`` from any process. The handle is also closed locally when its
turn ends, so a late write fails before it reaches the store.

``get()`` and ``set()`` are two steps, not one transaction: read the entry,
then pass its version as ``expected=`` to make the write conditional.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hostkit.errors import LeaseLost
from hostkit.freeze import thaw
from hostkit.store import ANY_VERSION, RuntimeStore, SessionLease
from hostkit.types import StateEntry

__all__ = ["CORE_SCOPE", "StateHandle", "StateRuntime", "StateScopes"]

# The scope of core-wide state: shared by every session of the core.
CORE_SCOPE = ""


class StateHandle:
    """One scope of authored state for one turn: ``get``, ``entry``, ``set``.

    Its only public attribute is ``kind`` (``"session"`` or ``"core"``); the
    store and the lease it writes with are private to it, never part of what
    authored code is handed as data.
    """

    __slots__ = ("_clock", "_closed", "_core_id", "_lease", "_scope", "_store", "kind")

    def __init__(
        self,
        store: RuntimeStore,
        *,
        core_id: str,
        scope: str,
        lease: SessionLease,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._core_id = core_id
        self._scope = scope
        self._lease = lease
        self._clock = clock
        self._closed = False
        self.kind = "core" if scope == CORE_SCOPE else "session"

    def __repr__(self) -> str:
        return f"<{self.kind} state of core {self._core_id!r}>"

    async def get(self, key: str) -> Any | None:
        """The current value of ``key`` as plain JSON data, or None when it is absent."""
        found = await self.entry(key)
        return None if found is None else thaw(found.value)

    async def entry(self, key: str) -> StateEntry | None:
        """The current value of ``key`` with its version (for ``set(..., expected=)``)."""
        return await self._store.cores.state_get(self._core_id, self._scope, key)

    async def set(self, key: str, value: Any, *, expected: int | None = ANY_VERSION) -> int:
        """Write ``value`` (JSON data) as the next version of ``key``; returns that version.

        ``expected``: omitted writes whatever version is current; None writes
        only if the key is absent; an int only if that is the current version.
        Otherwise ``StateConflict`` and nothing is written. ``LeaseLost`` once
        the turn that opened this handle has ended.
        """
        if self._closed:
            raise LeaseLost("session lease (the turn that opened this state has ended)")
        written = await self._store.cores.state_set(
            self._core_id,
            self._scope,
            key,
            value,
            lease=self._lease,
            expected=expected,
            now=self._clock(),
        )
        return written.version

    def close(self) -> None:
        """The turn ended: every later ``set`` raises ``LeaseLost`` here, before the store."""
        self._closed = True


@dataclass(frozen=True, slots=True)
class StateScopes:
    """The two state handles of one turn: its session's and its core's."""

    session: StateHandle
    core: StateHandle

    def close(self) -> None:
        self.session.close()
        self.core.close()


class StateRuntime:
    """Opens a turn's state handles on the store; ``clock`` stamps each write (the
    store's, ``RuntimeStore.now``, by default)."""

    def __init__(self, store: RuntimeStore, *, clock: Callable[[], float] | None = None) -> None:
        self._store = store
        self._clock = store.now if clock is None else clock

    def open(self, *, core_id: str, session_id: str, lease: SessionLease) -> StateScopes:
        """The handles of the turn holding ``lease``: session scope and core scope."""

        def handle(scope: str) -> StateHandle:
            return StateHandle(
                self._store, core_id=core_id, scope=scope, lease=lease, clock=self._clock
            )

        return StateScopes(session=handle(session_id), core=handle(CORE_SCOPE))
