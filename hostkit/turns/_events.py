"""Turn events: the projections observers see, and the observer protocol."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hostkit.errors import bounded
from hostkit.freeze import FrozenMap

__all__ = ["NullObserver", "Observer", "TurnEvent", "listening", "notify_observer"]

_log = logging.getLogger("hostkit.turns")
# The most characters of an observer's failure (its type's name, its message) logged.
_MAX_FAILURE_CHARS = 200
# Observers that cannot be weakly referenced whose failure was logged, kept alive so their
# id names no other object; past this many, such an observer's failure is not logged.
_MAX_HELD_OBSERVERS = 64


@dataclass(frozen=True, slots=True)
class TurnEvent:
    """One lifecycle step or streamed increment of a turn.

    Persisted kinds (``turn.started``, ``provider.completed``,
    ``effect.completed``, ``turn.<outcome>`` …) are sent after their row
    commits. Live only, never persisted: ``text.delta``, and for tracing
    ``provider.started`` / ``provider.responded`` / ``provider.failed`` around
    each model call and ``effect.started`` before each effect runs; and,
    before admission, ``turn.waiting`` (once per turn holding the session).
    None of them carries tool arguments or results.
    """

    kind: str
    request_id: str
    turn_id: str
    session_id: str
    data: Mapping[str, Any] = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", FrozenMap(self.data))


class Observer(Protocol):
    """Receives turn events; must return quickly and never raise into the turn.

    What ``notify`` raises is kept out of the turn (and from the other observers);
    the first failure of each observer object is logged as a warning on
    ``hostkit.turns`` (the exception's type and a bounded message), no later one:
    a callback with a typo is seen once, not a dozen times per turn.

    An observer that would drop every event for now may say so with a
    ``listening`` attribute that is False (hostkit's own ``NullObserver`` and
    the Host's event bus without subscribers do): the turn then builds no
    event for it. Without the attribute an observer receives every event.
    """

    def notify(self, event: TurnEvent) -> None: ...


def listening(observer: Observer) -> bool:
    """Whether ``observer`` wants events now (``listening`` absent: always).

    Never raises into the turn: an attribute that fails counts as listening
    (its ``notify`` errors are then handled like any observer's, ``notify_observer``).
    """
    try:
        return getattr(observer, "listening", True) is not False
    except Exception:
        return True


class NullObserver:
    """An observer that ignores everything."""

    listening = False

    def notify(self, event: TurnEvent) -> None:
        return None


def notify_observer(observer: Observer, event: TurnEvent) -> None:
    """Give ``event`` to ``observer``; what it raises never reaches the caller.

    Its first failure is logged (warning, ``hostkit.turns``), once per observer
    object for as long as it lives: an embedder's broken observer gets a sign,
    and a broken one does not flood the log with a line per event.
    """
    try:
        observer.notify(event)
    except Exception as exc:
        if _failed.first(observer):
            _log.warning(
                "observer %s raised %s on %s: %s (its later failures are not logged)",
                bounded(type(observer).__qualname__, _MAX_FAILURE_CHARS),
                bounded(type(exc).__qualname__, _MAX_FAILURE_CHARS),
                bounded(event.kind, _MAX_FAILURE_CHARS),
                _message(exc),
            )


def _message(exc: Exception) -> str:
    """``exc``'s message, bounded; an exception whose ``str`` raises too says only that."""
    try:
        return bounded(str(exc), _MAX_FAILURE_CHARS)
    except Exception:
        return "(its message could not be read)"


class _FirstFailures:
    """Which observer objects already had a failure logged: each once, while it lives.

    By identity, not equality: two equal observers are two observers. An id is
    forgotten when its object goes (so a later object at that address is new);
    one that cannot be weakly referenced is held instead, up to ``held``.
    """

    def __init__(self, *, held: int = _MAX_HELD_OBSERVERS) -> None:
        self._logged: set[int] = set()
        self._held: dict[int, object] = {}
        self._limit = held

    def first(self, observer: object) -> bool:
        """Whether this is ``observer``'s first failure (recorded now)."""
        key = id(observer)
        if key in self._logged:
            return False
        try:
            weakref.finalize(observer, self._logged.discard, key).atexit = False
        except TypeError:
            if len(self._held) >= self._limit:
                return False  # silence over a line per event, past the bound
            self._held[key] = observer
        self._logged.add(key)
        return True


_failed = _FirstFailures()
