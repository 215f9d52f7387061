"""PgConnection: the sqlite3 DB-API subset the row functions use, on a pooled psycopg connection.

The row functions are synchronous functions of one connection. On SQLite they
run on aiosqlite's connection thread; on PostgreSQL ``PgStore`` runs the whole
transaction (checkout, statements, commit) in one worker-thread hop on a
connection from psycopg_pool's ``ConnectionPool``, so the event loop never
blocks and pays one hop per transaction, not one per statement (measured:
about a quarter of the CPU per statement of an async connection driven
statement by statement from that thread).

Statements are bound client-side (``ClientCursor``: psycopg quotes each value
with libpq's escaping). That keeps SQLite's literal typing: a text or integer
parameter is a literal PostgreSQL types from its context, so SQL written for
SQLite needs no casts. Rows are tuples that also answer ``row["name"]``, as
``sqlite3.Row`` does. A constraint violation is raised as
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

import psycopg
from psycopg.adapt import Loader

from hostkit.errors import StoreError, bounded
from hostkit.store._pg_translate import ends_transaction, translate

__all__ = [
    "CLIENT_KEEPALIVES",
    "SET_LOCK_TIMEOUT",
    "WRITE_LOCK",
    "PgConnection",
    "PgRow",
    "configure_connection",
    "first_line",
    "pg_row",
]

# What libpq does about a peer that vanished (a dead machine, a partition), on every
# connection the store opens (the pool's, the migration's, LISTEN's): probe an idle
# connection after 5 s, give it up after 3 unanswered probes 2 s apart, or when sent
# data stays unacknowledged for 15 s. (A frozen server still acknowledges: the deadline
# of each call covers that case.)
CLIENT_KEEPALIVES: Mapping[str, Any] = MappingProxyType(
    {
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 15_000,
    }
)

# pg_advisory lock key of the store's writers: "hkwr". Every write transaction holds it
# shared; a write that keeps losing serialisation races runs once more holding it alone.
WRITE_LOCK = 0x686B7772
# This transaction's lock timeout (undone at its end).
SET_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, true)"


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


def pg_row(cursor: psycopg.Cursor[Any]) -> Any:
    """psycopg row factory: rows as ``PgRow`` of the cursor's columns."""
    names = tuple(column.name for column in cursor.description or ())
    return _row_class(names)


class _NumericLoader(Loader):
    """``numeric`` (what ``SUM`` of integers and ``round`` give) as int or float, as SQLite."""

    def load(self, data: Any) -> int | float:
        value = Decimal(bytes(data).decode("ascii"))
        return int(value) if value == value.to_integral_value() else float(value)


# PostgreSQL 14 and later: how often a backend running a statement checks that its
# client is still there. A cut hop's statement (its caller gave up) then ends within
# this, releasing its locks, not at ``statement_timeout``.
_CLIENT_CHECK = "SET client_connection_check_interval = 1000"
_CLIENT_CHECK_SINCE = 140000


def configure_connection(conn: psycopg.Connection[Any]) -> None:
    """Each pooled connection once: numbers come back as SQLite returns them (no
    ``Decimal``), and the server watches for a vanished client where it can.

    The watch is best effort: a server that cannot check its sockets (Windows; 14 on
    macOS and the BSDs) or a proxy refuses the setting, and the connection is used
    without it rather than never.
    """
    conn.adapters.register_loader("numeric", _NumericLoader)
    if conn.info.server_version >= _CLIENT_CHECK_SINCE:
        try:
            conn.execute(_CLIENT_CHECK)
            conn.commit()
        except psycopg.Error:
            conn.rollback()


def encoding_refusal(server_encoding: str | None, location: str) -> StoreError | None:
    """Why a database that does not store UTF-8 cannot hold hostkit's state, or None.

    SQL_ASCII hands text back as bytes and LATIN1 refuses most of Unicode, so such a
    database would fail turns and memories one by one with unrelated errors; ``createdb``
    makes one whenever the cluster was initialised under the C locale without ``-E``.
    """
    if server_encoding == "UTF8":
        return None
    found = bounded(server_encoding or "unknown", 40)
    return StoreError(
        f"the database {location} stores text as {found}, not UTF8: hostkit keeps any "
        "Unicode text there. Create it with ENCODING 'UTF8' TEMPLATE template0 (createdb "
        "-E UTF8 -T template0 NAME) and point [store] url at it",
        retryable=False,
    )


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
        self._rows, self.rowcount = self._conn.run(sql, _params(parameters))
        self._next = 0
        return self

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> PgCursor:
        self.rowcount = self._conn.run_many(sql, [_params(p) for p in seq])
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
    """The connection a row function sees on PostgreSQL, for one transaction, in one thread.

    A write transaction's first statement is preceded by the shared writer lock,
    and any transaction's by its ``lock_timeout`` when it has one (after the row
    function had its chance to relax the isolation level).
    """

    dialect = "postgresql"

    def __init__(
        self, conn: psycopg.Connection[Any], *, writer: bool, lock_timeout: str | None = None
    ) -> None:
        self._conn = conn
        self._writer = writer
        self._lock_timeout = lock_timeout
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
        self._conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED

    def _begin(self) -> None:
        if not self._started:
            self._started = True
            if self._lock_timeout is not None:
                self._conn.execute(SET_LOCK_TIMEOUT, [self._lock_timeout])
            if self._writer:
                self._conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", [WRITE_LOCK])

    def run(self, sql: str, params: list[Any]) -> tuple[list[PgRow], int]:
        """One statement: its rows (all of them) and its row count."""
        _refuse_control(sql)
        self._begin()
        try:
            cur = self._conn.execute(translate(sql), params)
            rows: list[PgRow] = cur.fetchall() if cur.description is not None else []
            return rows, cur.rowcount
        except psycopg.IntegrityError as exc:
            raise sqlite3.IntegrityError(first_line(exc)) from exc

    def run_many(self, sql: str, seq: list[list[Any]]) -> int:
        _refuse_control(sql)
        if not seq:
            return 0
        self._begin()
        try:
            with self._conn.cursor() as cur:
                cur.executemany(translate(sql), seq)
                return cur.rowcount
        except psycopg.IntegrityError as exc:
            raise sqlite3.IntegrityError(first_line(exc)) from exc


def _refuse_control(sql: str) -> None:
    """The transaction is the store's: a row function may not begin, end or split it."""
    if ends_transaction(sql):
        raise sqlite3.DatabaseError("not authorized: the store owns the transaction")


def _params(parameters: Sequence[Any]) -> list[Any]:
    """SQLite stores booleans as integers; so do these columns (``BIGINT``)."""
    return [int(value) if isinstance(value, bool) else value for value in parameters]


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An error's first line, bounded (its class name when it has no text): what a
    message quotes of a server's or driver's error."""
    return (str(exc).splitlines() or [type(exc).__name__])[0][:limit]
