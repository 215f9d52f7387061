"""Interactive write transactions: statement-at-a-time, holding the single writer."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from hostkit.errors import InvalidValue
from hostkit.store._checks import UNSTORABLE_TEXT
from hostkit.store._connection import DbConnection
from hostkit.store._writer import map_sqlite_error

__all__ = ["Transaction"]

T = TypeVar("T")


class Transaction:
    """An interactive write transaction: each call is one hop to the database thread.

    Prefer ``RuntimeStore.write(fn)`` (one hop for the whole transaction, and
    shared commits); use this when a transaction must await other work between
    statements. ``run(fn)`` executes a whole function inside this transaction.
    """

    def __init__(self, conn: DbConnection) -> None:
        self._conn = conn
        self._open = True

    def _check(self) -> None:
        if not self._open:
            raise InvalidValue("the transaction has ended")

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        """Execute one statement; return its row count."""
        return await self.run(lambda raw: raw.execute(sql, parameters).rowcount)

    async def fetchall(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await self.run(lambda raw: raw.execute(sql, parameters).fetchall())

    async def fetchone(self, sql: str, parameters: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        return await self.run(lambda raw: raw.execute(sql, parameters).fetchone())

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        self._check()
        try:
            return await self._conn.run(fn)
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, "statement") from exc
        except UnicodeEncodeError:
            raise InvalidValue(UNSTORABLE_TEXT) from None
