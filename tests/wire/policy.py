"""A RetryPolicy that records the waits it was asked for and waits for none of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from hostkit.providers import RetryPolicy

__all__ = ["RecordingRetryPolicy"]


@dataclass(frozen=True)
class RecordingRetryPolicy(RetryPolicy):
    """Records each delay ``call_with_retries`` would sleep, then asks it to sleep 0 s.

    Tests assert on ``waits`` (Retry-After honoured, how many retries) without
    spending wall time; ``len(waits) + 1`` is the number of attempts made.
    """

    waits: list[float] = field(default_factory=list)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        self.waits.append(super().delay(attempt, retry_after))
        return 0.0
