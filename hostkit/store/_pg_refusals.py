"""Whether the PostgreSQL server refuses this store's new connections right now.

psycopg_pool keeps a checkout waiting for its whole timeout even while every
try of the pool to connect fails at once (the server is down or shutting
down, or has no connection slot left: ECONNREFUSED, 57P03, 53300): each store
call would hang for ``connect_timeout_s`` before it fails, and a readiness
probe fed by those calls say "ready" all that time. ``ConnectRefusals``
remembers when a try last failed (the pool's ``connections_errors`` counter,
seen to grow) until a new connection is made (the pool's ``configure``), so a
checkout that finds no connection can fail after a short wait instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

__all__ = ["REFUSAL_FRESH_S", "ConnectRefusals"]

# How long a failed try to connect says the server refuses: about the pool's first
# retry interval (1 s), so the next try (or a new connection) decides again.
REFUSAL_FRESH_S = 1.0
# The pool's counter of failed tries to connect (``ConnectionPool.get_stats``).
_ERRORS_STAT = "connections_errors"


class ConnectRefusals:
    """When the pool's tries to connect were last seen failing, and none worked since.

    Used from the pool's worker threads (``connected``) and the store's hop
    threads (``refusing``), so under a lock of its own.
    """

    def __init__(self, *, fresh_s: float = REFUSAL_FRESH_S) -> None:
        self._fresh_s = fresh_s
        self._lock = threading.Lock()
        self._errors = 0
        self._failed_at: float | None = None

    def connected(self, stats: Mapping[str, int]) -> None:
        """The pool made a new connection: the server accepts connections again, and
        the tries that failed before it (``stats``, the pool's) are past."""
        with self._lock:
            self._errors = max(self._errors, stats.get(_ERRORS_STAT, 0))
            self._failed_at = None

    def refusing(self, stats: Mapping[str, int]) -> bool:
        """Whether a try to connect failed within ``fresh_s`` and none worked since.

        ``stats`` is the pool's ``get_stats()``: a counter grown since the last
        look is a try that failed since then (seen now, at most a look late).
        """
        errors = stats.get(_ERRORS_STAT, 0)
        now = time.monotonic()
        with self._lock:
            if errors > self._errors:
                self._failed_at = now
            self._errors = errors  # a counter reset (pop_stats) only starts it again
            return self._failed_at is not None and now - self._failed_at < self._fresh_s
