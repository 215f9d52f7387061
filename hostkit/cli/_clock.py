"""Every time the CLI shows a person, in one form: UTC, marked ``Z``.

The store records instants in UTC and ``--json`` writes them as ISO 8601
(``2026-12-01T13:48:03.120Z``); a table, a field or a log line shows the
same instant as ``2026-12-01 13:48Z``, so what one command prints can be
matched against another's, against ``--json`` and against ``hostkit serve``'s
log, whatever the terminal's ``TZ``. The ``Z`` says which zone it is.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from hostkit.inspect import printable

__all__ = ["CLOCK_CHARS", "TIME_CHARS", "shown_clock", "shown_time", "utc_stamp"]

_MINUTES = "%Y-%m-%d %H:%MZ"
_SECONDS = "%Y-%m-%d %H:%M:%SZ"
_CLOCK = "%H:%M:%SZ"
# The width of ``shown_time`` (minutes) and ``shown_clock``: a table column's cap.
TIME_CHARS = len("2026-12-01 13:48Z")
CLOCK_CHARS = len("13:48:03Z")
# The last second a date can hold (the year 9999).
_LAST = 253_402_300_799


def shown_time(at: float | str | None, *, seconds: bool = False) -> str:
    """``at`` (epoch seconds, or an instant as the store writes it) as ``2026-12-01 13:48Z``.

    ``seconds`` adds them (``13:48:03Z``). None is ""; a stored text that is
    no instant is shown as it is, escaped (never a guessed time).
    """
    moment = _moment(at)
    if moment is None:
        return "" if at is None else printable(str(at))
    return moment.strftime(_SECONDS if seconds else _MINUTES)


def shown_clock(at: float | None) -> str:
    """``at`` as a time of day, ``13:48:03Z``: for what is due within hours (a retry)."""
    moment = _moment(at)
    if moment is None:
        return "" if at is None else printable(str(at))
    return moment.strftime(_CLOCK)


def utc_stamp(moment: datetime) -> str:
    """A log record's time, ``2026-12-01 13:48:03Z`` (a naive ``moment`` is local time)."""
    return moment.astimezone(UTC).strftime(_SECONDS)


def _moment(at: float | str | None) -> datetime | None:
    if isinstance(at, str):
        try:
            moment = datetime.fromisoformat(at)
        except ValueError:
            return None
        # The store writes UTC; a stamp without an offset is one of its own.
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    if isinstance(at, bool) or not isinstance(at, int | float):
        return None
    if not math.isfinite(at) or not 0 <= at <= _LAST:
        return None
    return datetime.fromtimestamp(at, UTC)
