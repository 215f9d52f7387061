"""The store's approvals group: durable pending approvals and their answers."""

from __future__ import annotations

from abc import ABC
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hostkit.store._sqlite import SqliteStore

__all__ = ["ApprovalStore", "SqliteApprovalStore"]


class ApprovalStore(ABC):
    """The interface of this group; every adapter implements it."""


class SqliteApprovalStore(ApprovalStore):
    """The SQLite adapter of ApprovalStore."""

    def __init__(self, db: SqliteStore) -> None:
        self._db = db
