"""How a lease keeper paces its renewals, so that no renewal starts at the lease's expiry.

Shared by the keepers of a durable lease: a turn's session lease
(``hostkit.turns``), an inbox claim (``hostkit.inbox``), a delivery claim
(``hostkit.delivery``) and a background run's (``hostkit.builtins.process``). A renewal may take
a third of the lease still left (at least ``lease_s / 30``, at most
``bound_s``; ``bound_s`` once the lease is believed expired), so one that
stalls to its limit leaves two thirds of that for the retry. The retry
starts at once after a timeout, and after a short backoff (doubling from
``lease_s / 30``, capped by a third of the lease and of what is left) after
an error. Only the store decides the lease is lost: a renewal that lands
after the expiry still keeps a lease nobody took over.

Times are ``anyio.current_time()``; a renewal that started at ``s`` moved the
expiry to at least ``s + lease_s``.
"""

from __future__ import annotations

import anyio

__all__ = ["RenewalPace"]


class RenewalPace:
    """The limit of each renewal of one lease, and the pause before a retry."""

    __slots__ = ("_backoff", "_bound", "_expires", "_floor", "_lease_s")

    def __init__(self, lease_s: float, left_s: float, bound_s: float) -> None:
        """``left_s``: what is left of the lease now; ``bound_s``: the most one renewal takes."""
        self._lease_s = lease_s
        self._bound = bound_s
        self._floor = min(bound_s, lease_s / 30)
        self._backoff = self._floor
        self._expires = anyio.current_time() + min(left_s, lease_s)

    def limit(self, start: float) -> float:
        """How long a renewal starting at ``start`` may take."""
        left = self._expires - start
        if left <= 0:
            return self._bound
        return min(self._bound, max(left / 3, self._floor))

    def renewed(self, start: float) -> None:
        """A renewal that started at ``start`` succeeded."""
        self._expires = start + self._lease_s
        self._backoff = self._floor

    def failed(self, error: BaseException | None) -> float:
        """After a renewal failed (timed out, or ``error``): the pause before the retry."""
        if isinstance(error, TimeoutError):
            return 0.0  # it took its whole limit already
        pause = self._backoff
        self._backoff = min(self._backoff * 2, self._lease_s / 3)
        left = self._expires - anyio.current_time()
        return pause if left <= 0 else min(pause, max(left / 3, self._floor))
