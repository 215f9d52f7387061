"""How long waits for another process's lock may still last, once a store's owner limited them.

Both adapters keep one (``RuntimeStore.limit_waits``): a closing Host must not
wait a lock timeout per write for a stopped process that holds a lock.

An owner that may have to stop while a store is still opening (a command sent
SIGTERM while its Host migrates or recovers under another process's lock) has
no store to limit yet: it opens the store inside ``stores_opened_follow(limit)``
instead, and every store opened there follows ``limit`` from the start of its
opening (each lock wait of the opening too), so a limit set at any moment ends
them all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from hostkit.store._checks import check_wait

__all__ = ["WaitLimit", "follow_opening_limit", "stores_opened_follow"]

# What ``left_s`` is asked for when a limit is passed on (any bound above every wait).
_FOREVER_S = 86_400.0


class WaitLimit:
    """``until`` (monotonic): when every wait ends; None until ``limit`` is called."""

    __slots__ = ("_followers", "until")

    def __init__(self) -> None:
        self.until: float | None = None
        # Called with the seconds left at each ``limit`` (event loop only).
        self._followers: list[Callable[[float], None]] = []

    def limit(self, seconds: float) -> None:
        """End every wait ``seconds`` from now; an earlier limit stays (``InvalidValue``
        for a negative or non-finite number). Each follower is limited alike."""
        until = time.monotonic() + check_wait("seconds", seconds)
        self.until = until if self.until is None else min(self.until, until)
        for follower in tuple(self._followers):
            follower(self.left_s(_FOREVER_S))

    def left_s(self, bound_s: float) -> float:
        """What a wait beginning now may last: ``bound_s``, or less under the limit."""
        if self.until is None:
            return bound_s
        return max(0.0, min(bound_s, self.until - time.monotonic()))

    def follow(self, limit: Callable[[float], None]) -> None:
        """Call ``limit(seconds left)`` at this limit: now if it was set already, else
        when it is."""
        self._followers.append(limit)
        if self.until is not None:
            limit(self.left_s(_FOREVER_S))


# The limit the stores being opened in this context follow (``stores_opened_follow``).
_OPENING: ContextVar[WaitLimit | None] = ContextVar("hostkit_store_opening_limit", default=None)


@contextmanager
def stores_opened_follow(limit: WaitLimit) -> Iterator[WaitLimit]:
    """Every store opened in the block (by this task or one it starts) follows ``limit``
    from the moment its opening begins: its waits for another process's lock end by it,
    a wait under way when it is set too, as if ``limit_waits`` had been called."""
    token = _OPENING.set(limit)
    try:
        yield limit
    finally:
        _OPENING.reset(token)


def follow_opening_limit(limit: Callable[[float], None]) -> None:
    """For an adapter's opening: have ``limit`` called as ``stores_opened_follow``'s limit
    is set, if the store is being opened inside one."""
    opening = _OPENING.get()
    if opening is not None:
        opening.follow(limit)
