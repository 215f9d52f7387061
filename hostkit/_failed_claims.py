"""When a drain gives up on claims that keep failing (inbox and delivery drains alike).

A failed claim says nothing about what is due: another process held the
database's lock, a connection dropped, the call ran past ``op_timeout_s``.
So a drain never takes one for "nothing due" (it would return a count with
accepted messages unhandled, and its caller would exit believing them
handled): it claims again after its usual pause. Claims that keep failing
end the drain with a ``StoreError`` instead of a count, once nothing is in
flight: at least ``DRAIN_CLAIM_TRIES`` in a row, over at least the worker's
``op_timeout_s`` (an outage shorter than one store call's bound never ends a
drain). Nothing is released, failed or dead-lettered for it: what was due
stays due for a later run or drain.
"""

from __future__ import annotations

import anyio

from hostkit.errors import HostkitError, StoreError, bounded

__all__ = ["DRAIN_CLAIM_TRIES", "FailedClaims", "claim_failure"]

# The fewest failed claims in a row a drain gives up after (also over op_timeout_s).
DRAIN_CLAIM_TRIES = 3
# Room the last failure's text gets in the drain's error.
_CAUSE_CHARS = 200


class FailedClaims:
    """The current run of failed claims of one serve: ``failed()`` and ``succeeded()`` at
    each claim, ``exhausted()`` when a drain stops trying, ``error()`` what it raises."""

    def __init__(self, span_s: float) -> None:
        self._span_s = span_s
        self.count = 0
        self._since = 0.0
        self._last: BaseException | None = None
        self._text = ""

    def failed(self, exc: BaseException, text: str, *, began: float) -> None:
        """One more claim failed; ``began`` is when it started (``anyio.current_time()``)."""
        if not self.count:
            self._since = began
        self.count += 1
        self._last, self._text = exc, text

    def succeeded(self) -> None:
        self.count = 0
        self._last, self._text = None, ""

    def exhausted(self) -> bool:
        """Tried often and long enough that the store is down, not caught in a hiccup."""
        return (
            self.count >= DRAIN_CLAIM_TRIES and anyio.current_time() - self._since >= self._span_s
        )

    def error(self, what: str, kept: str) -> StoreError:
        """``what``'s drain stopped, ``kept`` staying stored; retryable unless the store said
        its last failure cannot pass (a closed store, a replaced database file)."""
        last = self._last
        retryable = last.retryable if isinstance(last, HostkitError) else True
        elapsed = anyio.current_time() - self._since
        error = StoreError(
            f"{what} drain stopped: {self.count} claims in a row failed over {elapsed:.1f}s "
            f"(last: {bounded(self._text, _CAUSE_CHARS)}); {kept} stay stored for a later "
            "run() or drain()",
            retryable=retryable,
        )
        error.__cause__ = last
        return error


def claim_failure(exc: BaseException, op_timeout_s: float) -> str:
    """What made a claim fail, for logs and the drain's error: the store's bounded message,
    or the deadline a claim that never answered ran into."""
    if isinstance(exc, HostkitError):
        return exc.message
    if isinstance(exc, TimeoutError):
        return f"no answer within op_timeout_s ({op_timeout_s:g}s)"
    return bounded(type(exc).__name__)
