"""Whether a serve's store works, as every store user of that serve last found it.

Readiness must not say "ready" while every store call is refused: the
inbox's claims, delivery's claims, the pollers and the webhook accepts each
report here (``failed`` / ``worked``), and ``/readyz`` reads it. A replaced
database file is no passing trouble: only a restart on the right file ends
it, so it is ``lasting`` and ``/healthz`` fails too (liveness restarts).
"""

from __future__ import annotations

import math
import time

from hostkit.errors import DatabaseReplaced

__all__ = ["StoreHealth"]


class StoreHealth:
    """The last store outcome reported (monotonic clock: no wall steps).

    ``cooldown_s``: a passing failure counts this long when nothing reports
    again (an ingress with no worker polling the store); None: until a store
    call works (a serve, whose claims poll the store every second or so).
    """

    def __init__(self, *, cooldown_s: float | None = None) -> None:
        self._cooldown_s = cooldown_s
        self._failing_until = 0.0
        self._lasting = False

    def failed(self, exc: BaseException) -> None:
        """A store call failed (a ``StoreError``, or its deadline passed)."""
        self._lasting = self._lasting or isinstance(exc, DatabaseReplaced)
        if self._lasting or self._cooldown_s is None:
            self._failing_until = math.inf
        else:
            self._failing_until = time.monotonic() + self._cooldown_s

    def worked(self) -> None:
        """A store call worked: the store is usable again."""
        self._failing_until, self._lasting = 0.0, False

    @property
    def failing(self) -> bool:
        return time.monotonic() < self._failing_until

    @property
    def lasting(self) -> bool:
        """The database file was replaced: failing until a restart on the right file."""
        return self._lasting

    @property
    def state(self) -> str | None:
        """What readiness shows: ``"replaced"``, ``"failing"``, or None (it works)."""
        if not self.failing:
            return None
        return "replaced" if self._lasting else "failing"
