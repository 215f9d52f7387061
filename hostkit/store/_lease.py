"""Who holds a durable lease: a Host process identified by host, pid and start time.

Session leases (one running turn per session), turn admission rows and
context compaction leases all record their owner as ``LeaseOwner.encode()``.
A lease normally ends by expiry; an owner that is *provably* dead (same
machine, and its pid is gone or now belongs to a process with another start
time) gives its lease up at once, so a restarted Host does not wait out a TTL
for work whose process was killed.

A start time is counted from boot (``/proc/<pid>/stat``), not read off the
wall clock: a clock step (NTP, a VM resumed or migrated, ``date -s``) moves
every wall-clock start time, and a live Host would look like a reused pid.
Owners recorded with a wall-clock start time (where ``/proc`` is missing, or
by an earlier hostkit) are still compared as such.

Every check reads ``/proc`` (psutil): call ``LeaseOwner.current``,
``LeaseOwner.liveness`` and ``owner_is_dead`` off the event loop
(``anyio.to_thread.run_sync``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Literal

import psutil

__all__ = ["LeaseOwner", "Liveness", "owner_is_dead"]

Liveness = Literal["alive", "dead", "unknown"]

# psutil start times sit on a whole-second boot-time base.
START_TIME_SLACK_S = 1.0
# Start times since boot are whole clock ticks (10 ms at the usual 100 Hz).
_BOOT_TIME_SLACK_S = 0.05
# A start time at least this large is a wall-clock one (2001 on): no uptime is that long.
_WALL_CLOCK_FROM = 1e9


def _started_since_boot(pid: int) -> float | None:
    """When ``pid`` started, in seconds since boot; None without ``/proc``.

    ``FileNotFoundError`` (``ProcessLookupError`` for a pid that exits while read)
    when there is no such process.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except FileNotFoundError:
        if not os.path.isdir("/proc/self"):
            return None
        raise
    # Field 22, starttime; fields are counted after the name, which may hold ") ".
    fields = text[text.rindex(b")") + 2 :].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


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
        pid = os.getpid()
        started = _started_since_boot(pid)
        if started is None:
            started = psutil.Process(pid).create_time()
        return cls(socket.gethostname(), pid, started, instance)

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
            if self.started < _WALL_CLOCK_FROM:
                started = _started_since_boot(self.pid)
                if started is None:
                    return "unknown"
                same = abs(started - self.started) <= _BOOT_TIME_SLACK_S
            else:
                started = psutil.Process(self.pid).create_time()
                same = abs(started - self.started) <= START_TIME_SLACK_S
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            return "dead"
        except (psutil.Error, OSError, ValueError, IndexError):
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
