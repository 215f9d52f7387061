"""DeliveryPolicy: how often and how patiently the DeliveryRuntime retries one intent."""

from __future__ import annotations

from dataclasses import dataclass

from hostkit.errors import InvalidValue
from hostkit.types import DeliveryFailure, is_positive

__all__ = ["DeliveryPolicy"]


def _seconds(name: str, value: object, *, high: float, zero: bool = False) -> None:
    # is_positive, not math.isfinite: that raises OverflowError for an int like 10**400.
    if not is_positive(value, high=high, zero=zero):
        raise InvalidValue(f"{name} must be a finite number from 0 to {high:g}")


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """Attempts, backoff and lease of delivery (``[serve]`` sets the first three).

    Attempt ``n`` that fails transiently is retried after ``backoff_s *
    2**(n-1)`` seconds, at most ``backoff_max_s``, shortened by up to
    ``jitter`` of itself (so a burst of failures spreads out), and never
    sooner than the channel's ``retry_after_s``. A permanent failure, or a
    failure of attempt ``max_attempts``, dead-letters the intent. A send
    holds its intent for ``lease_s`` and renews the lease every third of it.
    """

    max_attempts: int = 8
    backoff_s: float = 2.0
    backoff_max_s: float = 600.0
    jitter: float = 0.5
    lease_s: float = 60.0

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or not 1 <= self.max_attempts <= 100
        ):
            raise InvalidValue("max_attempts must be an integer between 1 and 100")
        _seconds("backoff_s", self.backoff_s, high=3_600)
        _seconds("backoff_max_s", self.backoff_max_s, high=86_400)
        _seconds("jitter", self.jitter, high=0.99, zero=True)
        _seconds("lease_s", self.lease_s, high=3_600)
        if self.backoff_max_s < self.backoff_s:
            raise InvalidValue("backoff_max_s must be at least backoff_s")

    def retry_at(
        self, attempt: int, failure: DeliveryFailure, *, now: float, rand: float = 0.0
    ) -> float | None:
        """When attempt ``attempt``'s failure is tried again, or None to dead-letter it.

        ``rand`` in [0, 1) picks the jitter.
        """
        if failure.kind == "permanent" or attempt >= self.max_attempts:
            return None
        delay = min(self.backoff_max_s, self.backoff_s * 2.0 ** min(attempt - 1, 32))
        delay *= 1.0 - self.jitter * min(max(rand, 0.0), 1.0)
        if failure.retry_after_s is not None:
            delay = max(delay, float(failure.retry_after_s))
        return now + delay
