"""How long to wait before the next attempt, how many attempts, how long to keep what.

Backoff is bounded exponential with jitter: attempt ``n`` (1-based) waits
``min(max_delay, base_delay * 2**(n-1))``, scaled by a random factor in
``[1 - jitter, 1]`` so retries of many messages that failed together spread
out instead of arriving together again. After ``max_attempts`` the inbound is
dead-lettered: there is no infinite automatic replay.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hostkit.errors import InvalidValue
from hostkit.store import inbox_checks
from hostkit.types import finite_seconds, is_count

__all__ = ["DEDUP_HORIZON_S", "RetentionPolicy", "RetryPolicy"]

# The longest retry/replay window of any transport hostkit supports, with margin:
# Telegram keeps undelivered updates for 24 h, Slack retries a webhook 3 times
# within about an hour, email stays unread until it is marked Seen (our IMAP
# poller retains it on failure), and generic signed webhooks (GitHub, Stripe)
# redeliver for up to 3 days. Seven days covers them all.
DEDUP_HORIZON_S = 7 * 24 * 3600.0
_PAYLOAD_RETENTION_S = 24 * 3600.0
# A claim lease shorter than a second expires while it is granted (the next claim takes
# the same inbound again); one longer than a day strands it on a Host that died.
_LEASE_S = (1.0, 24 * 3600.0)
# No retry waits longer than the dedup horizon: past it, the platform's redelivery
# would no longer be recognised.
_MAX_DELAY_S = DEDUP_HORIZON_S


def _positive(name: str, value: float, high: float | None = None) -> float:
    number = finite_seconds(name, value)
    if number <= 0:
        raise InvalidValue(f"{name} must be positive")
    if high is not None and number > high:
        raise InvalidValue(f"{name} must be at most {high:g} seconds")
    return number


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Attempts, backoff and lease length of every inbound of one inbox.

    ``turn_wait_s``: how long after it was received an inbound whose earlier
    turn still runs under a live holder (another Host) is deferred without
    spending an attempt; a turn ends within its deadline (the worker's default
    is an hour), so past this wait a turn that never ends counts against the
    attempts like any other transient failure.

    ``provider_wait_s``: how long after it was received an inbound whose agent's
    model provider is unreachable (``ProviderOutages``) is deferred without
    spending an attempt, the outage backing off from ``base_delay_s`` to
    ``max_delay_s`` between probes; past this wait it runs like any other message,
    and fails with the Host's notice if the provider is still down.
    """

    max_attempts: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0
    jitter: float = 0.5
    lease_s: float = 60.0
    turn_wait_s: float = 7_200.0
    provider_wait_s: float = 3_600.0

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise InvalidValue("max_attempts must be an integer")
        if not 1 <= self.max_attempts <= 100:
            raise InvalidValue("max_attempts must be between 1 and 100")
        _positive("base_delay_s", self.base_delay_s, _MAX_DELAY_S)
        _positive("max_delay_s", self.max_delay_s, _MAX_DELAY_S)
        low, high = _LEASE_S
        if _positive("lease_s", self.lease_s, high) < low:
            raise InvalidValue(f"lease_s must be at least {low:g} second")
        _positive("turn_wait_s", self.turn_wait_s, _MAX_DELAY_S)
        _positive("provider_wait_s", self.provider_wait_s, _MAX_DELAY_S)
        if self.max_delay_s < self.base_delay_s:
            raise InvalidValue("max_delay_s must not be below base_delay_s")
        if (
            isinstance(self.jitter, bool)
            or not isinstance(self.jitter, int | float)
            or not 0.0 <= self.jitter <= 1.0
        ):
            raise InvalidValue("jitter must be a number between 0 and 1")

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based), jitter applied."""
        exponent = min(max(attempt, 1) - 1, 60)
        ceiling = min(self.max_delay_s, self.base_delay_s * 2.0**exponent)
        return ceiling * (1.0 - self.jitter * rng.random())

    def retry_at(self, attempt: int, now: float, rng: random.Random) -> float | None:
        """When attempt ``attempt + 1`` may start, or None when no attempt is left."""
        if attempt >= self.max_attempts:
            return None
        return now + self.delay(attempt, rng)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long completed inbounds keep their payload, and their dedup tombstone.

    ``dedup_horizon_s`` must cover the longest transport retry window
    (``DEDUP_HORIZON_S``, seven days, by default); it can never be shorter
    than the payload retention, so pruning a payload never lets the same
    platform event in again.
    """

    payload_s: float = _PAYLOAD_RETENTION_S
    dedup_horizon_s: float = DEDUP_HORIZON_S
    batch: int = 1_000

    def __post_init__(self) -> None:
        _positive("payload_s", self.payload_s)
        _positive("dedup_horizon_s", self.dedup_horizon_s)
        if self.dedup_horizon_s < self.payload_s:
            raise InvalidValue("dedup_horizon_s must not be shorter than payload_s")
        if not is_count(self.batch, high=inbox_checks.MAX_PRUNE):
            raise InvalidValue(f"batch must be an integer from 1 to {inbox_checks.MAX_PRUNE}")
