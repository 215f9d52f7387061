"""The clock of a PostgreSQL store: the database server's, read here without a round trip.

Hosts on several machines share the store, and each compares lease, claim,
expiry and due times the others wrote. A machine's own wall clock can be off
by any amount and can step at any moment (NTP after a boot with a wrong RTC,
a resumed or migrated VM, ``date -s``): a lease compared on it is taken over
early, a send taken over while its holder still renews it, a dead Host's
session kept for as long as one clock ran ahead, an intent the server made
due left waiting for as long as one ran behind. So every such time is on the
server's clock (``clock_timestamp()``), which every Host shares and new
intents are due by. It is sampled when the store opens (the shortest of
three round trips) and again every ``RESAMPLE_S`` by whichever transaction
starts next (its few more round trips, never one per lease), and carried
between samples on ``boot_clock``, which counts a suspend and never steps:
a step of this machine's wall clock between samples changes nothing.

A sample puts ``now`` ahead of the server's clock by at most its round trip,
never behind it (an intent the server just made due is due here too); one
slower than half of ``max_clock_skew_s`` is not used (the last good one
carries on). Each sample also measures this machine's wall clock against the
server's: opening refuses a machine further off than ``max_clock_skew_s``
(``ClockSkew``: it tells the operator the clock is wrong), and a later sample
that finds it that far off says so in one warning, and once more when it is
back. Leases no longer depend on it; the times this Host shows and logs do.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

from hostkit._boot_clock import boot_clock
from hostkit.errors import bounded

__all__ = ["RESAMPLE_S", "SERVER_CLOCK", "ClockSample", "ServerClock", "local_reading"]

_log = logging.getLogger("hostkit.store")

# The server's clock in epoch seconds (``clock_timestamp()``: now, not the transaction's start).
SERVER_CLOCK = "SELECT extract(epoch FROM clock_timestamp())::float8"
# How often the server's clock is sampled again (by the next transaction after this).
RESAMPLE_S = 5.0
# A warning's bound: it names the database's (redacted) location.
_MESSAGE_CHARS = 600


def local_reading(wall: Callable[[], float]) -> tuple[float, float]:
    """This machine's two clocks now: ``boot_clock`` and its wall clock (``wall``)."""
    return boot_clock(), wall()


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One reading of the server's clock, between two ``local_reading``s."""

    # How long the round trip took: the reading's error is at most half of it.
    trip: float
    # The server's clock minus ``boot_clock`` as of the round trip's start: the most it
    # can be, so ``now`` is never behind the server's clock (an intent the server made
    # due is due at once by it too), and ahead by at most the round trip.
    offset: float
    # This machine's wall clock minus the server's (positive: ahead), the reading's
    # error counted in the machine's favour.
    skew: float

    @classmethod
    def of(
        cls, before: tuple[float, float], server: float, after: tuple[float, float]
    ) -> ClockSample:
        """The sample of ``server`` read between the local readings ``before`` and ``after``."""
        trip = max(0.0, after[0] - before[0])
        seen = (before[1] + after[1]) / 2 - server
        skew = math.copysign(max(0.0, abs(seen) - trip / 2), seen)
        return cls(trip, server - before[0], skew)


class ServerClock:
    """``now()``: the server's clock as last sampled, carried on ``boot_clock``.

    Thread-safe: transactions run on worker threads, and any of them may take
    the next sample (``sample_due``, then ``sampled``); ``now`` reads memory.
    """

    __slots__ = ("_database", "_lock", "_max_skew_s", "_next_at", "_off", "_offset", "_sampling")

    def __init__(self, first: ClockSample, *, max_skew_s: float, database: str) -> None:
        self._offset = first.offset
        self._max_skew_s = max_skew_s
        self._database = database
        self._lock = threading.Lock()
        self._next_at = boot_clock() + RESAMPLE_S
        self._sampling = False
        # Whether the last sample found this machine's wall clock too far off (told once).
        self._off = False

    def now(self) -> float:
        """The server's clock, in epoch seconds."""
        return boot_clock() + self._offset

    def sample_due(self) -> bool:
        """Whether the caller should sample now; True makes it the only sampler until it
        calls ``sampled``."""
        if boot_clock() < self._next_at:  # the common case: no lock taken
            return False
        with self._lock:
            if self._sampling or boot_clock() < self._next_at:
                return False
            self._sampling = True
            return True

    def sampled(self, sample: ClockSample | None) -> None:
        """The sample ``sample_due`` asked for (None: it could not be taken)."""
        with self._lock:
            self._sampling = False
            self._next_at = boot_clock() + RESAMPLE_S
            if sample is None or sample.trip > self._max_skew_s / 2:
                return
            self._offset = sample.offset
            off = abs(sample.skew) > self._max_skew_s
            told, self._off = self._off, off
        if off and not told:
            side = "ahead of" if sample.skew > 0 else "behind"
            _log.warning(
                "%s",
                bounded(
                    f"this machine's clock is {abs(sample.skew):.1f} s {side} the clock of the "
                    f"database server {self._database} (more than max_clock_skew_s, "
                    f"{self._max_skew_s:g} s): leases follow the server's clock, but the times "
                    "this Host shows and logs are off; synchronise this machine's clock (NTP)",
                    _MESSAGE_CHARS,
                ),
            )
        elif told and not off:
            _log.info(
                "%s",
                bounded(
                    "this machine's clock is back within max_clock_skew_s of the clock of the "
                    f"database server {self._database}",
                    _MESSAGE_CHARS,
                ),
            )
