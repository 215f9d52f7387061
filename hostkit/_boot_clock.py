"""The clock for "has this much time passed": it counts a suspend and never steps.

Neither of Python's usual clocks will do for a lease or a cached answer's
time to live. ``time.time`` steps whenever the wall clock is set (NTP after
a boot with a wrong RTC, a resumed or migrated VM, ``date -s``).
``time.monotonic`` (Linux's ``CLOCK_MONOTONIC``, and anyio's clock) never
steps, but it stops while the machine sleeps or its VM is paused: a Host
that slept past its session lease would still believe it held it, and an
"approve for the session" answer would outlive its eight hours by every
night the laptop slept. ``CLOCK_BOOTTIME`` counts the time suspended and
never steps; where the platform has none, ``time.monotonic`` stands in.

No I/O and no hostkit import: every layer may use it (the store anchors
the database server's clock on it, the turns and the approval cache read it).
"""

from __future__ import annotations

import time

__all__ = ["boot_clock"]

# Linux (and Android); None elsewhere.
_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def boot_clock() -> float:
    """Seconds from an arbitrary start, counting any suspend in between; never steps."""
    if _BOOTTIME is None:
        return time.monotonic()
    return time.clock_gettime(_BOOTTIME)
