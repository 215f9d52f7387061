"""RestartPolicy: how long a failing daemon waits before its next start."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hostkit.errors import InvalidValue

__all__ = ["RestartPolicy"]

_MAX_SECONDS = 86_400.0


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Exponential backoff between restarts, reset by a healthy run.

    The n-th consecutive failure waits ``min(max_s, initial_s * factor**(n-1))``;
    a daemon that ran (started) for at least ``healthy_after_s`` before it
    failed starts again from ``initial_s``: a crash once a day is not a
    crash loop.
    """

    initial_s: float = 0.5
    max_s: float = 60.0
    factor: float = 2.0
    healthy_after_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("initial_s", "max_s", "healthy_after_s"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not 0 < value <= _MAX_SECONDS
            ):
                raise InvalidValue(f"{name} must be a number of seconds in (0, {_MAX_SECONDS:g}]")
        if self.max_s < self.initial_s:
            raise InvalidValue("max_s must be at least initial_s")
        factor = self.factor
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not 1 <= factor <= 10:
            raise InvalidValue("factor must be a number between 1 and 10")

    def delay(self, failures: int) -> float:
        """The wait before the restart that follows ``failures`` consecutive failures (>= 1)."""
        exponent = min(max(failures, 1) - 1, 64)
        return float(min(self.max_s, self.initial_s * self.factor**exponent))
