"""The store's inspect group: read-only queries behind the inspectors."""

from __future__ import annotations

from abc import ABC
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hostkit.store._sqlite import SqliteStore

__all__ = ["InspectQueries", "SqliteInspectQueries"]


class InspectQueries(ABC):
    """The interface of this group; every adapter implements it."""


class SqliteInspectQueries(InspectQueries):
    """The SQLite adapter of InspectQueries."""

    def __init__(self, db: SqliteStore) -> None:
        self._db = db
