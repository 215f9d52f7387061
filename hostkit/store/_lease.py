"""Who holds a durable lease: a Host process identified by host, pid and start time.

Session leases (one running turn per session), turn admission rows and
context compaction leases all record their owner as ``LeaseOwner.encode()``.
A lease normally ends by expiry; an owner that is *provably* dead (same
machine, and its pid is gone or now belongs to a process with another start
time) gives its lease up at once, so a restarted Host does not wait out a TTL
for work whose process was killed.

Every check reads ``/proc`` (psutil): call ``LeaseOwner.current``,
``LeaseOwner.liveness`` and ``owner_is_dead`` off the event loop
(``anyio.to_thread.run_sync``).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Literal

import psutil

__all__ = ["LeaseOwner", "Liveness", "owner_is_dead"]

Liveness = Literal["alive", "dead", "unknown"]

# psutil start times sit on a whole-second boot-time base.
START_TIME_SLACK_S = 1.0


@dataclass(frozen=True, slots=True)
class LeaseOwner:
    """Which Host process holds a lease (host, pid, process start time, Host instance id)."""

    host: str
    pid: int
    started: float
    instance: str

    @classmethod
    def current(cls, instance: str) -> LeaseOwner:
        """This process as the Host instance ``instance`` (reads ``/proc``: not on the loop)."""
        process = psutil.Process()
        return cls(socket.gethostname(), process.pid, process.create_time(), instance)

    def encode(self) -> str:
        """The persisted form, ``host|pid|start time|instance``; ``decode`` reverses it."""
        return f"{self.host}|{self.pid}|{self.started:.3f}|{self.instance}"

    @classmethod
    def decode(cls, text: str) -> LeaseOwner | None:
        """The owner ``encode`` wrote, or None for any other text."""
        try:
            host, pid, started, instance = text.split("|", 3)
            return cls(host, int(pid), float(started), instance)
        except ValueError:
            return None

    def liveness(self) -> Liveness:
        """Whether the owning process still runs, as far as this machine can tell.

        The process start time guards against PID reuse. An owner on another
        machine is ``unknown`` here; its lease expiry decides.
        """
        if self.host != socket.gethostname():
            return "unknown"
        try:
            same = abs(psutil.Process(self.pid).create_time() - self.started) <= START_TIME_SLACK_S
        except psutil.NoSuchProcess:
            return "dead"
        except psutil.Error:
            return "unknown"
        return "alive" if same else "dead"


def owner_is_dead(owner_text: str | None) -> bool:
    """True only when ``owner_text`` names an owner that is provably dead on this machine.

    Unparseable text, a live owner and an owner on another machine are all
    False: for them only the lease expiry may end the lease. (Reads ``/proc``:
    call it off the event loop.)
    """
    owner = LeaseOwner.decode(owner_text or "")
    return owner is not None and owner.liveness() == "dead"
