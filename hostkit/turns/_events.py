"""Turn events: the projections observers see, and the observer protocol."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hostkit.freeze import FrozenMap

__all__ = ["NullObserver", "Observer", "TurnEvent", "listening"]


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

    An observer that would drop every event for now may say so with a
    ``listening`` attribute that is False (hostkit's own ``NullObserver`` and
    the Host's event bus without subscribers do): the turn then builds no
    event for it. Without the attribute an observer receives every event.
    """

    def notify(self, event: TurnEvent) -> None: ...


def listening(observer: Observer) -> bool:
    """Whether ``observer`` wants events now (``listening`` absent: always).

    Never raises into the turn: an attribute that fails counts as listening
    (its ``notify`` errors are suppressed like any observer's).
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
