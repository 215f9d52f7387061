"""TurnExecution: admission, per-session serialization, lifecycle, terminal state, recovery."""

from hostkit.turns._active import capability_snapshot
from hostkit.turns._core import CoreResolver, OutputCheck, PinnedCore
from hostkit.turns._events import NullObserver, Observer, TurnEvent, listening, notify_observer
from hostkit.turns._execution import TurnExecution

__all__ = [
    "CoreResolver",
    "NullObserver",
    "Observer",
    "OutputCheck",
    "PinnedCore",
    "TurnEvent",
    "TurnExecution",
    "capability_snapshot",
    "listening",
    "notify_observer",
]
