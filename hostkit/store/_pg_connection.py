"""PgConnection: the sqlite3 DB-API subset the row functions use, on psycopg's async driver.

The row functions are synchronous functions of one connection (on SQLite they
run on the connection's thread). On PostgreSQL, ``PgStore`` runs the same
function in a worker thread, and each statement it executes hops back to the
event loop, where an ``AsyncConnection`` from psycopg's ``AsyncConnectionPool``
runs it: the network I/O is psycopg's async I/O on the Host's loop, and the
loop never blocks on the database.

Statements are bound client-side (``AsyncClientCursor``: psycopg quotes each
value with libpq's escaping). That keeps SQLite's literal typing: a text or
integer parameter is a literal PostgreSQL types from its context, so SQL
written for SQLite needs no casts. Rows answer to both ``row[0]`` and
``row["name"]``, as ``sqlite3.Row`` does. A constraint violation is raised as
``sqlite3.IntegrityError`` (the DB-API class the row functions catch); every
other driver error propagates for ``PgStore`` to map.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from types import MappingProxyType
from typing import Any, ClassVar

import anyio.from_thread
import psycopg
from psycopg.adapt import Loader

from hostkit.store._pg_translate import ends_transaction, translate

__all__ = ["PgConnection", "PgRow", "register_loaders"]


class PgRow(tuple[Any, ...]):
    """One result row: a tuple (as sqlite3 returns), that also answers ``row["column"]``."""

    __slots__ = ()
    _index: ClassVar[Mapping[str, int]] = MappingProxyType({})

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


@functools.lru_cache(maxsize=512)
def _row_class(names: tuple[str, ...]) -> type[PgRow]:
    """A PgRow class per column list, so a row carries no per-row name table."""
    index = {name: n for n, name in enumerate(names)}
    return type("PgRow", (PgRow,), {"__slots__": (), "_index": MappingProxyType(index)})


class _NumericLoader(Loader):
    """``numeric`` (what ``SUM`` of integers and ``round`` give) as int or float, as SQLite."""

    def load(self, data: Any) -> int | float:
        value = Decimal(bytes(data).decode("ascii"))
        return int(value) if value == value.to_integral_value() else float(value)


def register_loaders(conn: psycopg.AsyncConnection[Any]) -> None:
    """Numbers come back as SQLite returns them (no ``Decimal``)."""
    conn.adapters.register_loader("numeric", _NumericLoader)


class PgCursor:
    """The result of one statement (all rows fetched: row functions read bounded pages)."""

    def __init__(self, conn: PgConnection) -> None:
        self._conn = conn
        self._rows: list[PgRow] = []
        self._next = 0
        self.rowcount = -1
        # Accepted and ignored: every PgRow already answers by name and by index.
        self.row_factory: object = None

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> PgCursor:
        _refuse_control(sql)
        names, rows, self.rowcount = self._conn.run(translate(sql), _params(parameters))
        row = _row_class(tuple(names))
        self._rows = [row(values) for values in rows]
        self._next = 0
        return self

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> PgCursor:
        _refuse_control(sql)
        self.rowcount = self._conn.run_many(translate(sql), [_params(p) for p in seq])
        self._rows = []
        return self

    def fetchone(self) -> PgRow | None:
        if self._next >= len(self._rows):
            return None
        row = self._rows[self._next]
        self._next += 1
        return row

    def fetchall(self) -> list[PgRow]:
        rows = self._rows[self._next :]
        self._next = len(self._rows)
        return rows

    def __iter__(self) -> Iterator[PgRow]:
        while (row := self.fetchone()) is not None:
            yield row

    def close(self) -> None:
        self._rows = []


class PgConnection:
    """The connection a row function sees on PostgreSQL; used from one worker thread."""

    dialect = "postgresql"

    def __init__(self, aconn: psycopg.AsyncConnection[Any]) -> None:
        self._aconn = aconn
        self._started = False

    def cursor(self) -> PgCursor:
        return PgCursor(self)

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> PgCursor:
        return PgCursor(self).execute(sql, parameters)

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> PgCursor:
        return PgCursor(self).executemany(sql, seq)

    def read_committed(self) -> None:
        """See ``_dialect.claim_isolation``; only before the first statement."""
        if self._started:
            raise RuntimeError("the isolation level is set before the first statement")
        anyio.from_thread.run(
            self._aconn.set_isolation_level, psycopg.IsolationLevel.READ_COMMITTED
        )

    def run(self, sql: str, params: list[Any]) -> tuple[list[str], list[tuple[Any, ...]], int]:
        """One statement, one hop to the event loop: (column names, rows, rowcount)."""
        self._started = True
        return anyio.from_thread.run(self._execute, sql, params)

    def run_many(self, sql: str, seq: list[list[Any]]) -> int:
        self._started = True
        if not seq:
            return 0
        return anyio.from_thread.run(self._execute_many, sql, seq)

    async def _execute(
        self, sql: str, params: list[Any]
    ) -> tuple[list[str], list[tuple[Any, ...]], int]:
        try:
            async with self._aconn.cursor() as cur:
                await cur.execute(sql, params)
                if cur.description is None:
                    return [], [], cur.rowcount
                names = [column.name for column in cur.description]
                return names, list(await cur.fetchall()), cur.rowcount
        except psycopg.IntegrityError as exc:
            raise sqlite3.IntegrityError(_bounded(exc)) from exc

    async def _execute_many(self, sql: str, seq: list[list[Any]]) -> int:
        try:
            async with self._aconn.cursor() as cur:
                await cur.executemany(sql, seq)
                return cur.rowcount
        except psycopg.IntegrityError as exc:
            raise sqlite3.IntegrityError(_bounded(exc)) from exc


def _refuse_control(sql: str) -> None:
    """The transaction is the store's: a row function may not begin, end or split it."""
    if ends_transaction(sql):
        raise sqlite3.DatabaseError("not authorized: the store owns the transaction")


def _params(parameters: Sequence[Any]) -> list[Any]:
    """SQLite stores booleans as integers; so do these columns (``BIGINT``)."""
    return [int(value) if isinstance(value, bool) else value for value in parameters]


def _bounded(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
