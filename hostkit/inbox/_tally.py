"""How the turns of a worker's inbound messages ended: answered, or not.

A model provider that fails every call (an outage, a revoked key) leaves the
daemons, the store and admission healthy, and every message still gets a
reply (the Host's failure notice), so nothing else a serve shows would tell
it: this tally counts the turns that ended without an answer and keeps the
last reason, for the status line and ``/readyz``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from hostkit.errors import bounded

__all__ = ["FAILING_AFTER", "RECENT_TURNS", "TurnTally", "TurnsEnded"]

# The turns "of the last N" a serve speaks of.
RECENT_TURNS = 40
# This many failed turns in a row, and none answered since, is "failing".
FAILING_AFTER = 3
_REASON_CHARS = 200


@dataclass(frozen=True, slots=True)
class TurnsEnded:
    """A snapshot: ``failed`` turns ended without an answer since the worker was made
    (failed, lost, cut off), ``recent_failed`` of the last ``recent`` ended turns,
    ``last_failure`` the latest one's reason (bounded, redacted), ``failing`` whether
    the latest ``FAILING_AFTER`` turns or more failed in a row."""

    failed: int = 0
    recent_failed: int = 0
    recent: int = 0
    last_failure: str | None = None
    failing: bool = False

    def check(self) -> str | None:
        """The ``/readyz`` check of the turns; None while none of this process failed."""
        if not self.failed:
            return None
        last = f", last: {self.last_failure}" if self.last_failure else ""
        if self.failing:
            return f"failing: {self.recent_failed} of the last {self.recent} turns{last}"
        return f"answering: {self.recent_failed} of the last {self.recent} turns failed{last}"


class TurnTally:
    """``answered()`` or ``failed(reason)`` once per ended turn; ``snapshot()`` reads it."""

    def __init__(self) -> None:
        self._failed = 0
        self._recent: deque[bool] = deque(maxlen=RECENT_TURNS)
        self._in_a_row = 0
        self._last: str | None = None

    def answered(self) -> None:
        self._recent.append(True)
        self._in_a_row = 0

    def failed(self, reason: str) -> None:
        self._failed += 1
        self._recent.append(False)
        self._in_a_row += 1
        self._last = bounded(reason, _REASON_CHARS)

    def snapshot(self) -> TurnsEnded:
        return TurnsEnded(
            failed=self._failed,
            recent_failed=sum(1 for answered in self._recent if not answered),
            recent=len(self._recent),
            last_failure=self._last,
            failing=self._in_a_row >= FAILING_AFTER,
        )
