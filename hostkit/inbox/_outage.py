"""ProviderOutages: an inbox worker's breaker per agent whose model provider is unreachable.

A provider outage (connection refused, 5xx, 429 for minutes) would fail the
turn of every queued message in turn, each after the adapter's own retries,
and answer each with the Host's failure notice. Instead, the first turn that
fails with its provider unreachable (``TurnResult.provider_unavailable``)
opens the agent's breaker: its inbounds are deferred, their attempts not
spent, while the outage backs off exponentially (``RetryPolicy.delay``: from
``base_delay_s`` to ``max_delay_s``). When the backoff ends, one inbound at a
time goes through as the probe (half-open); a probe the model answers closes
the breaker, one that finds the provider down again doubles the backoff.
Other agents keep being served. Keyed by agent (the worker's route), the one
thing the worker knows of a turn before it runs.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Literal

from hostkit.errors import bounded
from hostkit.inbox._policy import RetryPolicy
from hostkit.types import plural

__all__ = ["OutageView", "ProviderOutages", "Verdict", "outage_checks"]

_log = logging.getLogger("hostkit.inbox")

# How a turn that went through ended, for its agent's breaker: the model answered,
# the provider could not be reached, or neither tells (another failure, no result).
Verdict = Literal["reached", "unavailable"] | None
_REASON_CHARS = 200


@dataclass(frozen=True, slots=True)
class OutageView:
    """One open breaker as an operator sees it (``/readyz``, status): since when (the
    inbox's clock), how many probes failed, when the next may go, the last reason."""

    agent: str
    since: float
    failures: int
    next_probe_at: float
    reason: str


@dataclass(slots=True)
class _Outage:
    since: float
    failures: int
    retry_at: float
    reason: str
    probing: bool = False
    deferred: int = 0


class ProviderOutages:
    """The open breakers of one worker's agents; every method is synchronous (no await
    between a look and its change, so one probe at a time needs no lock)."""

    def __init__(self, policy: RetryPolicy, rng: random.Random | None = None) -> None:
        self._policy = policy
        self._rng = rng or random.Random()
        self._open: dict[str, _Outage] = {}

    def admit(self, agent: str, now: float) -> tuple[float | None, bool]:
        """(When to try again, None: go ahead; whether this turn is the probe).

        Closed: go ahead. Open: wait until the backoff ends, and then let one
        turn through at a time; the others wait for its verdict.
        """
        outage = self._open.get(agent)
        if outage is None:
            return None, False
        if not outage.probing and now >= outage.retry_at:
            outage.probing = True
            return None, True
        if outage.probing:
            return now + self._policy.delay(outage.failures, self._rng), False
        return outage.retry_at, False

    def waited(self, agent: str) -> None:
        """An inbound of ``agent`` was deferred for its outage (counted for the log)."""
        if (outage := self._open.get(agent)) is not None:
            outage.deferred += 1

    def ended(self, agent: str, now: float, verdict: Verdict, *, probe: bool, reason: str) -> None:
        """A turn of ``agent`` that went through ended: open, close or back off its breaker.

        A failure of a turn begun before the breaker opened (not the probe) changes
        nothing: the outage is one event, however many turns it failed.
        """
        outage = self._open.get(agent)
        if verdict == "reached":
            if outage is not None:
                del self._open[agent]
                _log.warning(
                    "agent %s: its model provider answers again after %s; %s waited",
                    agent,
                    _duration(now - outage.since),
                    plural(outage.deferred, "deferral"),
                )
            return
        if outage is None:
            if verdict == "unavailable":
                retry_at = now + self._policy.delay(1, self._rng)
                self._open[agent] = _Outage(now, 1, retry_at, bounded(reason, _REASON_CHARS))
                _log.warning(
                    "agent %s: its model provider is unreachable (%s); its messages wait "
                    "for it (up to %gs after each was received), one probe at a time",
                    agent,
                    bounded(reason, _REASON_CHARS),
                    self._policy.provider_wait_s,
                )
            return
        if not probe:
            return
        outage.probing = False
        if verdict == "unavailable":
            outage.failures += 1
            outage.reason = bounded(reason, _REASON_CHARS)
            outage.retry_at = now + self._policy.delay(outage.failures, self._rng)
            _log.info(
                "agent %s: its model provider is still unreachable (probe %d); next probe in %gs",
                agent,
                outage.failures,
                round(outage.retry_at - now, 1),
            )

    def views(self) -> tuple[OutageView, ...]:
        """The open breakers, by agent."""
        return tuple(
            OutageView(agent, o.since, o.failures, o.retry_at, o.reason)
            for agent, o in sorted(self._open.items())
        )


def outage_checks(views: tuple[OutageView, ...], now: float) -> dict[str, str]:
    """The ``/readyz`` check of the open breakers: agent -> what waits and why."""
    return {
        view.agent: (
            f"model provider unreachable for {_duration(now - view.since)}, its messages "
            f"wait; next probe in {_duration(max(view.next_probe_at - now, 0.0))}: "
            f"{view.reason}"
        )
        for view in views
    }


def _duration(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f} min"
