"""How long waits for another process's lock may still last, once a store's owner limited them.

Both adapters keep one (``RuntimeStore.limit_waits``): a closing Host must not
wait a lock timeout per write for a stopped process that holds a lock.
"""

from __future__ import annotations

import time

from hostkit.store._checks import check_wait

__all__ = ["WaitLimit"]


class WaitLimit:
    """``until`` (monotonic): when every wait ends; None until ``limit`` is called."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until: float | None = None

    def limit(self, seconds: float) -> None:
        """End every wait ``seconds`` from now; an earlier limit stays (``InvalidValue``
        for a negative or non-finite number)."""
        until = time.monotonic() + check_wait("seconds", seconds)
        self.until = until if self.until is None else min(self.until, until)

    def left_s(self, bound_s: float) -> float:
        """What a wait beginning now may last: ``bound_s``, or less under the limit."""
        if self.until is None:
            return bound_s
        return max(0.0, min(bound_s, self.until - time.monotonic()))
