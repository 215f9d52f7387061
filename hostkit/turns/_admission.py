"""Per-session admission: same-session turns serialize, different sessions run concurrently."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio

from hostkit.errors import TurnRejected

__all__ = ["SessionAdmission"]


@dataclass
class _Slot:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    holders: int = 0


class SessionAdmission:
    """A keyed lock table: O(1) lookup by session id, entries removed when idle.

    There is no process-wide lock: a turn waits only for turns of its own
    session, and only up to ``wait_timeout_s`` before it is rejected.
    """

    def __init__(self, *, wait_timeout_s: float = 600.0) -> None:
        self._slots: dict[str, _Slot] = {}
        self._wait_timeout_s = wait_timeout_s

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def holders(self) -> int:
        """Turns inside or waiting for admission, across all sessions."""
        return sum(slot.holders for slot in self._slots.values())

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        slot = self._slots.setdefault(session_id, _Slot())
        slot.holders += 1
        try:
            try:
                with anyio.fail_after(self._wait_timeout_s):
                    await slot.lock.acquire()
            except TimeoutError as exc:
                raise TurnRejected("the session is busy with another turn") from exc
            try:
                yield
            finally:
                slot.lock.release()
        finally:
            slot.holders -= 1
            if slot.holders == 0:
                del self._slots[session_id]
