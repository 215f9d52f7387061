"""ProviderOutages: an inbox worker's breaker per agent whose model provider is unreachable.

A provider outage (connection refused, 5xx, 429 for minutes) would fail the
turn of every queued message in turn, each after the adapter's own retries,
and answer each with the Host's failure notice. Instead, the first turn that
fails with its provider unreachable (``TurnResult.provider_unavailable``)
opens the agent's breaker: its inbounds are deferred, their attempts not
spent, while the outage backs off exponentially (``RetryPolicy.delay``: from
``base_delay_s`` to ``max_delay_s``, never sooner than the provider's own
``Retry-After``). When the backoff ends, one inbound at a time goes through
as the probe (half-open); a probe the model answers closes the breaker, one
that finds the provider down again doubles the backoff. The inbounds deferred
meanwhile are remembered (bounded): a verdict makes them due again (at the
next probe, or at once and first when the breaker closes), so while a probe
runs they wait for its verdict rather than for a guess of its length.
Other agents keep being served. Keyed by agent (the worker's route), the one
thing the worker knows of a turn before it runs. A breaker nothing has asked
about for two longest backoffs (the agent gets no more messages, a reload
routed them elsewhere) is forgotten.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

from hostkit.errors import bounded
from hostkit.inbox._policy import RetryPolicy
from hostkit.store import MAX_BRING_FORWARD
from hostkit.types import plural

__all__ = ["OutageView", "ProviderOutages", "Verdict", "Wake", "outage_checks"]

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


@dataclass(frozen=True, slots=True)
class Wake:
    """What a verdict asks of the store: make these deferred inbounds due at ``due_at``
    (the next probe's time, or the opening's when the breaker closed: before any
    inbound accepted since, so the backlog goes first, in its order)."""

    inbound_ids: tuple[str, ...]
    due_at: float


@dataclass(slots=True)
class _Outage:
    opening: int
    since: float
    failures: int
    retry_at: float
    reason: str
    # When a turn of the agent last asked (deferred or probed): an idle breaker is forgotten.
    touched: float
    probing: bool = False
    deferred: int = 0
    waiting: dict[str, None] = field(default_factory=dict)

    def take(self, due_at: float) -> Wake | None:
        ids, self.waiting = tuple(self.waiting), {}
        return Wake(ids, due_at) if ids else None


class ProviderOutages:
    """The open breakers of one worker's agents; every method is synchronous (no await
    between a look and its change, so one probe at a time needs no lock). In memory:
    a restarted worker finds an outage again with its first turns."""

    def __init__(self, policy: RetryPolicy, rng: random.Random | None = None) -> None:
        self._policy = policy
        self._rng = rng or random.Random()
        self._open: dict[str, _Outage] = {}
        self._openings = itertools.count(1)

    def admit(self, agent: str, now: float) -> tuple[float | None, int | None]:
        """(When to try again, None: go ahead; the opening this turn probes, None if none).

        Closed: go ahead. Open: wait until the backoff ends, and then let one
        turn through at a time; the others wait for its verdict, which wakes them
        (``ended``), so they are deferred for as long as the policy allows.
        """
        outage = self._live(agent, now)
        if outage is None:
            return None, None
        outage.touched = now
        if not outage.probing and now >= outage.retry_at:
            outage.probing = True
            return None, outage.opening
        if outage.probing:
            return now + self._policy.max_delay_s, None
        return outage.retry_at, None

    def waited(self, agent: str, inbound_id: str) -> None:
        """``inbound_id`` of ``agent`` was deferred for its outage: a verdict wakes it."""
        if (outage := self._open.get(agent)) is not None:
            outage.deferred += 1
            # Past the store's bound (one call wakes them), the rest wait out their
            # deferral: at most ``max_delay_s``.
            if len(outage.waiting) < MAX_BRING_FORWARD:
                outage.waiting[inbound_id] = None

    def ended(
        self,
        agent: str,
        now: float,
        verdict: Verdict,
        *,
        probe: int | None,
        reason: str,
        retry_after: float | None = None,
    ) -> Wake | None:
        """A turn of ``agent`` that went through ended: open, close or back off its breaker;
        the deferred inbounds its verdict makes due, if any.

        A failure of a turn that is not this opening's probe (begun before the
        breaker opened, or probing an earlier opening) changes nothing: the
        outage is one event, however many turns it failed. ``retry_after``, the
        provider's own delay, holds the next probe back at least that long.
        """
        outage = self._open.get(agent)
        if verdict == "reached":
            if outage is None:
                return None
            del self._open[agent]
            _log.warning(
                "agent %s: its model provider answers again after %s; %s waited",
                agent,
                _duration(now - outage.since),
                plural(outage.deferred, "deferral"),
            )
            return outage.take(outage.since)
        if outage is None:
            if verdict == "unavailable":
                why = bounded(reason, _REASON_CHARS)
                retry_at = self._next_probe(now, 1, retry_after)
                self._open[agent] = _Outage(next(self._openings), now, 1, retry_at, why, now)
                _log.warning(
                    "agent %s: its model provider is unreachable (%s); its messages wait "
                    "for it (up to %gs after each was received), one probe at a time",
                    agent,
                    why,
                    self._policy.provider_wait_s,
                )
            return None
        if probe != outage.opening:
            return None
        outage.probing = False
        if verdict != "unavailable":
            return outage.take(now)
        outage.failures += 1
        outage.reason = bounded(reason, _REASON_CHARS)
        outage.retry_at = self._next_probe(now, outage.failures, retry_after)
        _log.info(
            "agent %s: its model provider is still unreachable (probe %d); next probe in %gs",
            agent,
            outage.failures,
            round(outage.retry_at - now, 1),
        )
        return outage.take(outage.retry_at)

    def probe_now(self, agents: Collection[str], now: float) -> list[tuple[str, Wake]]:
        """``agents``' model providers changed (a reload fixed a base URL, or moved them to
        another provider during the outage): each of their open breakers lets its next
        probe go now, not after its backoff, and hands back the inbounds it deferred,
        due now. As a new opening: a probe still running on the old provider says
        nothing of the new one (its failure counts for nothing; an answer still closes)."""
        wakes = []
        for agent in agents:
            outage = self._open.get(agent)
            if outage is None:
                continue
            outage.opening = next(self._openings)
            outage.probing = False
            outage.retry_at = outage.touched = now
            _log.info("agent %s: its model provider changed; probing it now", agent)
            if (wake := outage.take(now)) is not None:
                wakes.append((agent, wake))
        return wakes

    def views(self, now: float) -> tuple[OutageView, ...]:
        """The open breakers, by agent (an idle one is forgotten first)."""
        return tuple(
            OutageView(agent, o.since, o.failures, o.retry_at, o.reason)
            for agent in sorted(self._open)
            if (o := self._live(agent, now)) is not None
        )

    def _next_probe(self, now: float, failures: int, retry_after: float | None) -> float:
        """The backoff after ``failures``, or the provider's ``Retry-After`` if longer
        (held to ``provider_wait_s``: no message waits longer than that anyway)."""
        delay = self._policy.delay(failures, self._rng)
        asked = min(retry_after or 0.0, self._policy.provider_wait_s)
        return now + max(delay, asked)

    def _live(self, agent: str, now: float) -> _Outage | None:
        """The agent's breaker, forgotten when no turn asked about it for two longest
        backoffs after its next probe was due: every deferral is due again within one,
        so no message waits for it any more (the agent was rerouted, or is quiet)."""
        outage = self._open.get(agent)
        if outage is None or outage.probing:
            return outage
        if now - max(outage.touched, outage.retry_at) > 2 * self._policy.max_delay_s:
            del self._open[agent]
            _log.info("agent %s: its outage breaker is forgotten, no message waits for it", agent)
            return None
        return outage


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
