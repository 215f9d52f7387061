"""The two places where a row function must know which engine it runs on.

Row functions take a DB-API connection: ``sqlite3.Connection`` on SQLite,
``PgConnection`` (which speaks the same subset) on PostgreSQL. Almost all SQL
is written once, in spellings both engines accept; ``PgConnection`` rewrites
the few SQLite-only fragments (see ``_pg_translate``). What cannot be rewritten
statement by statement is asked for here, by name.
"""

from __future__ import annotations

import sqlite3

__all__ = ["claim_isolation", "is_postgres"]


def is_postgres(conn: sqlite3.Connection | object) -> bool:
    """True when ``conn`` is a PostgreSQL connection (memory search differs: FTS5 vs tsvector)."""
    return getattr(conn, "dialect", "sqlite") == "postgresql"


def claim_isolation(conn: sqlite3.Connection | object) -> None:
    """Run this transaction at READ COMMITTED on PostgreSQL; a no-op on SQLite.

    Writes are serialisable by default (SQLite has one writer; PostgreSQL runs
    them SERIALIZABLE and retries a serialisation failure). A claim instead
    locks the rows it takes with ``FOR UPDATE SKIP LOCKED``, so concurrent
    claimers on several Hosts take disjoint rows rather than failing each
    other. Call it before the transaction's first statement.
    """
    if is_postgres(conn):
        conn.read_committed()  # type: ignore[union-attr]
