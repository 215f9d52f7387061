"""Where a view reads from (a Host or its store) and the bounds every view shares."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from hostkit.errors import InvalidValue
from hostkit.store import RuntimeStore

if TYPE_CHECKING:
    from hostkit.host import Host

__all__ = ["MAX_STEPS", "MAX_TURNS", "Source", "bounded", "store_of"]

# Bounds of every list a view holds: the newest turns of a session, the first steps of a turn.
MAX_TURNS = 50
MAX_STEPS = 64

Source: TypeAlias = "Host | RuntimeStore"


def store_of(source: Source) -> RuntimeStore:
    """The store behind ``source``."""
    return source if isinstance(source, RuntimeStore) else source.store


def bounded(name: str, value: object, most: int) -> int:
    """``value`` if it is an int in 1..``most``, else ``InvalidValue``."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise InvalidValue(f"{name} must be between 1 and {most}")
    return value
