"""Bounded retries for provider calls: exponential backoff with jitter, Retry-After honoured.

Only failures that happened *before any response arrived* are retried (429,
5xx, connection errors). A response that arrived is never requested again,
even if it was malformed: repeating it could repeat a paid or side-effecting
generation.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio

from hostkit.errors import InvalidValue, ProviderError
from hostkit.types import is_count, is_positive, is_seconds

__all__ = ["RetryPolicy", "call_with_retries"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry a provider call that got no response."""

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    max_retry_after_s: float = 60.0
    jitter: float = 0.25

    def __post_init__(self) -> None:
        # NaN attempts retried without end; a jitter above 1 made delays negative.
        if not is_count(self.max_attempts, high=100):
            raise InvalidValue("max_attempts must be an integer from 1 to 100")
        for name in ("base_delay_s", "max_delay_s", "max_retry_after_s"):
            if not is_seconds(getattr(self, name), high=3_600, zero=True):
                raise InvalidValue(f"{name} must be a number of seconds from 0 to 3600")
        if not is_positive(self.jitter, high=1.0, zero=True):
            raise InvalidValue("jitter must be a number from 0 to 1")

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_retry_after_s)
        backoff = min(self.base_delay_s * 2.0 ** (attempt - 1), self.max_delay_s)
        return backoff * (1 + random.uniform(-self.jitter, self.jitter))


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> T:
    """Run ``call`` until it succeeds, raises a non-retryable error, or attempts run out.

    ``call`` must raise ``ProviderError`` with ``retryable=True`` only for
    failures where no response arrived; anything else propagates at once.
    """
    attempt = 1
    while True:
        try:
            return await call()
        except ProviderError as exc:
            if not exc.retryable or attempt >= policy.max_attempts:
                raise
            await sleep(policy.delay(attempt, exc.retry_after))
            attempt += 1
