"""Who holds a durable lease: a Host process identified by machine, pid and start time.

Session leases (one running turn per session), turn admission rows and
context compaction leases all record their owner as ``LeaseOwner.encode()``.
A lease normally ends by expiry; an owner that is *provably* dead (same
machine, and its pid is gone or now belongs to a process with another start
time) gives its lease up at once, so a restarted Host does not wait out a TTL
for work whose process was killed.

"Same machine" is the host name *and* the kernel's boot id with the PID
namespace the owner's pids are numbered in: containers that share a host
name but not a PID namespace (or two machines both called ``localhost``)
cannot read each other's pids, so their owners are ``unknown`` to each
other and only expiry ends their leases. That includes a container restarted
into a new PID namespace (and a rebooted machine): it waits out the leases
of the process it replaced.

A start time is counted from boot (``/proc/<pid>/stat``), not read off the
wall clock: a clock step (NTP, a VM resumed or migrated, ``date -s``) moves
every wall-clock start time, and a live Host would look like a reused pid.
Owners recorded with a wall-clock start time (where ``/proc`` is missing, or
by an earlier hostkit) are still compared as such.

An owner in this very process (its pid and start time) is alive only while
its Host instance is: ``LeaseOwner.current`` counts the instance live in
this process until ``retire``, so a Host opened again in the same process (a
notebook kernel re-running its setup cell) takes over at once the leases a
closed instance could not end (the database was down as it closed).

Every check reads ``/proc`` (psutil): call ``LeaseOwner.current``,
``LeaseOwner.liveness`` and ``owner_is_dead`` off the event loop
(``anyio.to_thread.run_sync``).
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass, field
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
# The instances of this process that may hold leases: from ``current`` until ``retire``.
# Only added to and discarded from (atomic under the GIL, from any thread or event loop),
# so no lock: several Hosts in one process each add and discard their own.
_live_instances: set[str] = set()


def _started_since_boot(pid: int | Literal["self"]) -> float | None:
    """When ``pid`` (or this process) started, in seconds since boot; None without ``/proc``.

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


@functools.cache
def machine_identity() -> str:
    """This kernel boot and PID namespace (``boot id:namespace inode``); "" without ``/proc``.

    Fixed for the process's life; read once.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            boot_id = boot.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except (OSError, ValueError):
        return ""
    return f"{boot_id}:{namespace}"


@functools.cache
def _proc_numbers_another_namespace() -> bool:
    """Whether ``/proc`` is mounted from a PID namespace other than this process's.

    A process in a PID namespace of its own that kept its parent's ``/proc``
    (``unshare --pid`` without ``--mount-proc``) would read other processes
    under the pids it knows: no pid it holds can be looked up there.
    """
    try:
        return int(os.readlink("/proc/self")) != os.getpid()
    except FileNotFoundError:
        # A /proc that does not show this process at all (a child namespace's), or none.
        return os.path.isdir("/proc/1")
    except (OSError, ValueError):
        return False


@dataclass(frozen=True, slots=True)
class LeaseOwner:
    """Which Host process holds a lease (host, pid, process start time, Host instance id,
    and the machine its pid is numbered on: this one unless given)."""

    host: str
    pid: int
    started: float
    instance: str
    machine: str = field(default_factory=machine_identity)

    @classmethod
    def current(cls, instance: str) -> LeaseOwner:
        """This process as the Host instance ``instance``, live here until ``retire``
        (reads ``/proc``: not on the loop)."""
        _live_instances.add(instance)
        pid = os.getpid()
        # /proc/self is this process whatever namespace /proc numbers.
        started = _started_since_boot("self")
        if started is None:
            started = psutil.Process(pid).create_time()
        return cls(socket.gethostname(), pid, started, instance)

    def retire(self) -> None:
        """This instance holds nothing any more (its Host closed): a lease it could not
        end is this process's no longer, and ``liveness`` calls its owner dead."""
        _live_instances.discard(self.instance)

    def encode(self) -> str:
        """The persisted form, ``host|pid|start time|instance|machine``; ``decode`` reverses it."""
        return f"{self.host}|{self.pid}|{self.started:.3f}|{self.instance}|{self.machine}"

    @classmethod
    def decode(cls, text: str) -> LeaseOwner | None:
        """The owner ``encode`` wrote, or None for any other text.

        An owner written before the machine was recorded (four fields) names no
        machine: its liveness is ``unknown`` wherever ``/proc`` tells machines apart.
        """
        try:
            host, pid, started, instance, *machine = text.split("|", 4)
            return cls(host, int(pid), float(started), instance, machine[0] if machine else "")
        except ValueError:
            return None

    def liveness(self) -> Liveness:
        """Whether the owning process still runs, as far as this machine can tell.

        The process start time guards against PID reuse. An owner on another
        machine, or in another PID namespace, is ``unknown`` here; its lease
        expiry decides. So is every owner when this process's ``/proc`` numbers
        another namespace's processes. An owner in this process is alive only while
        its instance is (``retire``).
        """
        if self.host != socket.gethostname() or self.machine != machine_identity():
            return "unknown"
        seen = self._seen_here()
        if seen == "alive" and self.pid == os.getpid() and self.instance not in _live_instances:
            return "dead"
        return seen

    def closed_here(self) -> bool:
        """Whether this owner is a Host of this very process that closed (``retire``):
        its process runs (it is this one), its Host does not. ``liveness`` calls such
        an owner dead; what is said of it must not be that its process is gone.
        (Reads ``/proc``: not on the loop.)"""
        return (
            self.pid == os.getpid()
            and self.instance not in _live_instances
            and self.host == socket.gethostname()
            and self.machine == machine_identity()
            and self._seen_here() == "alive"
        )

    def runs_here_maybe(self) -> bool:
        """Whether a process with this owner's pid and start time runs where this one
        looks: how an owner that recorded no machine, which ``liveness`` cannot
        place, may still be alive. It proves nothing dead, so it may only keep a
        record as it is, never end one. (Reads ``/proc``: not on the loop.)"""
        if self.host != socket.gethostname() or self.pid == os.getpid():
            # A pid this process holds names it here: an owner written by an older
            # version (the only kind asked) is never this Host, but another PID
            # namespace's process numbered the same.
            return False
        return self._seen_here() == "alive"

    def _seen_here(self) -> Liveness:
        """This owner's pid and start time, looked up in this process's ``/proc``."""
        if _proc_numbers_another_namespace():
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
            # An exited process its parent has not reaped keeps its pid and start time.
            if same and psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE:
                return "dead"
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
