"""The store's context group: history windows, bootstrap, decisions, usage, calibration, summaries, compaction leases."""

from __future__ import annotations

from abc import ABC
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hostkit.store._sqlite import SqliteStore

__all__ = ["ContextStore", "SqliteContextStore"]


class ContextStore(ABC):
    """The interface of this group; every adapter implements it."""


class SqliteContextStore(ContextStore):
    """The SQLite adapter of ContextStore."""

    def __init__(self, db: SqliteStore) -> None:
        self._db = db
