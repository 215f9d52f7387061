"""What the supervisor says about its daemons: one frozen status each, and how a run ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

__all__ = ["DAEMON_STATES", "DaemonExit", "DaemonState", "DaemonStatus"]

# starting: run() called, task_status.started() not yet; running: started; backoff: it
# raised or returned and waits for its restart; stopping: a shutdown asked it to stop;
# stopped: it ended for the shutdown; failed: it raised a HostkitError that is not
# retryable (a restart cannot help), so it stays down until the process restarts.
DaemonState = Literal["starting", "running", "backoff", "stopping", "stopped", "failed"]
DAEMON_STATES: tuple[str, ...] = get_args(DaemonState)


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    """One daemon as the supervisor sees it now (status lines, widgets, ``/readyz``).

    ``since`` and ``next_restart_at`` are wall-clock seconds; ``restarts``
    counts restarts since the supervisor began; ``last_error`` is the latest
    failure's type and message, redacted and bounded (None until one).
    """

    name: str
    state: DaemonState
    restarts: int = 0
    last_error: str | None = None
    since: float = 0.0
    next_restart_at: float | None = None

    @property
    def troubled(self) -> bool:
        """Failing now: waiting to restart (``backoff``) or down for good (``failed``)."""
        return self.state in ("backoff", "failed")


@dataclass(frozen=True, slots=True)
class DaemonExit:
    """How a supervisor run ended: the process exit ``code`` and a one-line ``reason``.

    ``cut`` names the daemons still running at the shutdown deadline (they
    were cancelled instead of finishing their drain).
    """

    code: int
    reason: str
    cut: tuple[str, ...] = ()
