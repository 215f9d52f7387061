"""Waiting for a busy session: an in-process fast path in front of the durable session lease.

Exclusion itself is the store's session lease (``TurnStore.admit``); this
module only decides how a turn that found its session busy waits before it
asks again. Turns of this process queue per session in arrival order and the
one at the front is woken the moment a local holder releases; a holder in
another process is polled with a jittered, growing backoff. Every wait is
bounded by the turn's admission deadline, and ``close()`` wakes everyone.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio

from hostkit.errors import TurnRejected

__all__ = ["AdmissionTicket", "SessionAdmission"]

_BUSY = "the session is busy with another turn"
_CLOSING = "the Host is shutting down"


@dataclass
class _Slot:
    """One session's local state: whether a local turn holds it, and who waits for it."""

    running: int = 0  # local turns holding it (one, unless a takeover overlapped)
    queue: deque[AdmissionTicket] = field(default_factory=deque)
    refs: int = 0


class AdmissionTicket:
    """One turn's passage through admission: its deadline, its place in a queue, its hold."""

    def __init__(self, table: SessionAdmission, deadline: float) -> None:
        self._table = table
        self.deadline = deadline
        self.held: str | None = None
        self._wake = anyio.Event()
        self._baton = False  # woken by a local release: must pass it on if it gives up
        self._queued_on: str | None = None
        self._polls = 0

    def hold(self, session_id: str) -> None:
        """The store admitted this turn: it now holds ``session_id`` (until the ticket ends)."""
        slot = self._table._slot(session_id)
        slot.running += 1
        slot.refs += 1
        self.held = session_id
        self._baton = False

    async def wait(self, session_id: str) -> None:
        """Wait until asking the store again for ``session_id`` is worth it.

        Raises ``TurnRejected`` when the admission deadline passed or the
        Host is closing.
        """
        table = self._table
        if table.closing:
            raise TurnRejected(_CLOSING)
        remaining = self.deadline - anyio.current_time()
        if remaining <= 0:
            # About now, not about the request: asking again later may well succeed.
            busy = TurnRejected(_BUSY)
            busy.retryable = True
            raise busy
        slot = table._slot(session_id)
        if self._queued_on != session_id:
            self._baton = False
        self._queued_on = session_id
        self._wake = anyio.Event()
        # A turn woken for its turn that lost the race keeps its place at the front.
        if self._baton:
            slot.queue.appendleft(self)
        else:
            slot.queue.append(self)
        slot.refs += 1
        if slot.running:
            # A local holder wakes the front of the queue on release; the recheck is
            # only a safety net.
            delay = min(remaining, table.local_recheck_s)
        else:
            delay = min(remaining, table.backoff(self._polls))
            self._polls += 1
        try:
            with anyio.move_on_after(delay):
                await self._wake.wait()
        finally:
            if self in slot.queue:
                slot.queue.remove(self)
            slot.refs -= 1
            table._tidy(session_id)
        if table.closing:
            raise TurnRejected(_CLOSING)

    def _woken(self) -> None:
        self._baton = True
        self._wake.set()

    def _leave(self) -> None:
        table = self._table
        if self.held is not None:
            slot = table._slots[self.held]
            slot.running -= 1
            slot.refs -= 1
            table._wake_next(self.held)
            table._tidy(self.held)
            self.held = None
            return
        if self._baton and self._queued_on is not None:
            # Woken for its turn but leaving without it (rejected, cancelled, failed):
            # hand the wake-up on to the next local waiter of that session.
            table._wake_next(self._queued_on)


class SessionAdmission:
    """The local waiting room of a TurnExecution: O(1) by session id, entries removed when idle.

    There is no process-wide lock: a turn waits only for turns of its own
    session, and only until its deadline (``wait_timeout_s`` after it
    arrived) before it is rejected.
    """

    def __init__(
        self,
        *,
        wait_timeout_s: float = 600.0,
        poll_initial_s: float = 0.01,
        poll_max_s: float = 0.25,
        local_recheck_s: float = 5.0,
    ) -> None:
        self._slots: dict[str, _Slot] = {}
        self._tickets: set[AdmissionTicket] = set()
        self.wait_timeout_s = wait_timeout_s
        self.poll_initial_s = poll_initial_s
        self.poll_max_s = poll_max_s
        self.local_recheck_s = local_recheck_s
        self.closing = False
        # Set when the last ticket leaves, for whoever waits in ``drained``.
        self._empty: anyio.Event | None = None

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def holders(self) -> int:
        """Turns inside or waiting for admission, across all sessions."""
        return len(self._tickets)

    @property
    def queued(self) -> int:
        """Turns queued behind a busy session, across all sessions."""
        return sum(len(slot.queue) for slot in self._slots.values())

    def backoff(self, polls: int) -> float:
        """The pause before the ``polls``-th re-check of a session another process holds."""
        base = min(self.poll_max_s, self.poll_initial_s * (1.5**polls))
        return base * random.uniform(0.8, 1.2)  # jitter, not security

    @asynccontextmanager
    async def enter(self) -> AsyncIterator[AdmissionTicket]:
        """A ticket for one turn; leaving releases its session to the next local waiter."""
        if self.closing:
            raise TurnRejected(_CLOSING)
        ticket = AdmissionTicket(self, anyio.current_time() + self.wait_timeout_s)
        self._tickets.add(ticket)
        try:
            yield ticket
        finally:
            self._tickets.discard(ticket)
            ticket._leave()
            if not self._tickets and self._empty is not None:
                self._empty.set()

    async def drained(self) -> None:
        """Until no turn holds a ticket: one whose admission was in flight ended too."""
        while self._tickets:
            if self._empty is None or self._empty.is_set():
                self._empty = anyio.Event()
            await self._empty.wait()

    def close(self) -> None:
        """Refuse new turns and wake every waiter (each then raises ``TurnRejected``)."""
        self.closing = True
        for slot in self._slots.values():
            for ticket in slot.queue:
                ticket._wake.set()

    def _slot(self, session_id: str) -> _Slot:
        slot = self._slots.get(session_id)
        if slot is None:
            slot = self._slots[session_id] = _Slot()
        return slot

    def _wake_next(self, session_id: str) -> None:
        slot = self._slots.get(session_id)
        if slot is not None and slot.queue and not slot.running:
            slot.queue[0]._woken()

    def _tidy(self, session_id: str) -> None:
        slot = self._slots.get(session_id)
        if slot is not None and slot.refs == 0 and not slot.running:
            del self._slots[session_id]
