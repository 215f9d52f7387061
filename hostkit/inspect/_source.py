"""Where a view reads from (a Host or its store) and the bounds every view shares."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from hostkit.errors import InvalidValue
from hostkit.store import RuntimeStore
from hostkit.types import plain_text

if TYPE_CHECKING:
    from hostkit.host import Host

__all__ = ["MAX_STEPS", "MAX_TURNS", "Source", "bounded", "id_arg", "store_of"]

# Bounds of every list a view holds: the newest turns of a session, the first steps of a turn.
MAX_TURNS = 50
MAX_STEPS = 64
# The longest id or name a view is asked for (the store's own limit).
MAX_ID = 200

Source: TypeAlias = "Host | RuntimeStore"


def store_of(source: Source) -> RuntimeStore:
    """The store behind ``source``."""
    return source if isinstance(source, RuntimeStore) else source.store


def bounded(name: str, value: object, most: int) -> int:
    """``value`` if it is an int in 1..``most``, else ``InvalidValue``."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise InvalidValue(f"{name} must be between 1 and {most}")
    return value


def id_arg(name: str, value: object) -> str:
    """``value`` as a plain ``str`` id, or ``InvalidValue``: checked before it is hashed,
    compared or quoted, none of which may run a caller's own code."""
    text = plain_text(value, limit=MAX_ID)
    if text is None:
        raise InvalidValue(f"{name} must be 1-{MAX_ID} characters of valid text")
    return text
