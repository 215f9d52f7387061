"""The store's memory group: agent memory items and their full-text index."""

from __future__ import annotations

from abc import ABC
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hostkit.store._sqlite import SqliteStore

__all__ = ["MemoryStore", "SqliteMemoryStore"]


class MemoryStore(ABC):
    """The interface of this group; every adapter implements it."""


class SqliteMemoryStore(MemoryStore):
    """The SQLite adapter of MemoryStore."""

    def __init__(self, db: SqliteStore) -> None:
        self._db = db
