"""The store's turns group: turns, events, transcript writes, terminal records, session and turn leases."""

from __future__ import annotations

from abc import ABC
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hostkit.store._sqlite import SqliteStore

__all__ = ["TurnStore", "SqliteTurnStore"]


class TurnStore(ABC):
    """The interface of this group; every adapter implements it."""


class SqliteTurnStore(TurnStore):
    """The SQLite adapter of TurnStore."""

    def __init__(self, db: SqliteStore) -> None:
        self._db = db
