"""Whether a SIGHUP ``hostkit serve`` receives means its terminal closed, or a reload.

SIGHUP has two meanings. A daemon's manager sends it to ask for a reload
(``ExecReload=/bin/kill -HUP $MAINPID``, ``kill -HUP``); a terminal that
closes sends it too (the kernel to the session's leader, the shell to its
jobs), and a process that took it for a reload would go on serving with
nobody to see its log and its port taken. The signal itself does not say
which it is; the controlling terminal does.

The entry point (``hostkit._launch``) ignores SIGHUP while ``serve`` loads,
so it calls ``remember_start`` first: what the process started with is read
before that ignore hides nohup's. Only the standard library is imported here.
"""

from __future__ import annotations

import errno
import os
import signal
from dataclasses import dataclass

__all__ = ["Terminal", "remember_start"]

_CONTROLLING_TERMINAL = "/dev/tty"
# What opening /dev/tty fails with once the process has no controlling terminal (ENXIO:
# the hang-up detached it) or one that is hung up (EIO). Any other failure (too many
# open files) says nothing about the terminal, so it is no reason to stop.
_GONE = frozenset({errno.ENXIO, errno.EIO})


@dataclass(frozen=True, slots=True)
class Terminal:
    """The controlling terminal ``hostkit serve`` started with, if a hang-up may end it.

    ``attached``: at start the process had a controlling terminal (``/dev/tty``
    opened) and did not ignore SIGHUP. That is the test, not whether stdin or
    stderr is a terminal: ``setsid hostkit serve`` keeps the terminal's file
    descriptors but has no controlling terminal, so no hang-up can reach it and
    every SIGHUP it gets is a reload; ``nohup`` ignores SIGHUP to say "outlive the
    terminal", so there too a SIGHUP is a reload. A service (systemd, a container
    without ``-t``) has no controlling terminal at all.
    """

    attached: bool

    @classmethod
    def at_start(cls) -> Terminal:
        """What ``remember_start`` saw, else (not started by the entry point) what is so now."""
        return _started[0] if _started else cls._now()

    @classmethod
    def _now(cls) -> Terminal:
        ignored = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        return cls(attached=not ignored and _controlling_terminal_gone() is False)

    def hung_up(self) -> bool:
        """Whether the terminal the process started on has hung up (asked on SIGHUP).

        The kernel detaches a hung-up terminal from every process of its session
        before it sends the SIGHUP, so from then on ``/dev/tty`` no longer opens;
        while the terminal is open (a ``kill -HUP`` from another shell) it does.
        Opened without blocking: a terminal's open may wait for a carrier.
        """
        return self.attached and _controlling_terminal_gone() is True


def _controlling_terminal_gone() -> bool | None:
    """False: it opens; True: there is none, or it hung up; None: the open failed otherwise."""
    try:
        fd = os.open(_CONTROLLING_TERMINAL, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        return True if exc.errno in _GONE else None
    os.close(fd)
    return False


# One fact about the whole process, noted once by the entry point.
_started: list[Terminal] = []


def remember_start() -> None:
    """Note the terminal and SIGHUP's disposition the process started with, before the
    entry point changes that disposition."""
    _started[:] = [Terminal._now()]
