"""PostgreSQL schema upgrades: one transaction, one migrator at a time, versioned.

PostgreSQL's DDL is transactional, so every pending migration runs in one
transaction with its version rows: a failure leaves the database exactly as it
was. Several Hosts starting at once take a transaction-scoped advisory lock;
the first migrates, the others then find nothing pending. A database that
holds tables but no ``hostkit_schema`` is not ours and is refused, and so is a
database of a newer hostkit.

A destructive step (``Migration.destructive``: it drops or rewrites data) on a
database that holds data runs only after a verified backup (``_pg_backup``:
``pg_dump -Fc`` into the backup folder, then ``pg_restore --list`` of that
file). Without those programs, or without a backup folder, the upgrade is
refused and the error says how to take one by hand (docs/postgres.md).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from hostkit.errors import MigrationError
from hostkit.store._pg_connection import first_line
from hostkit.store._schema import Migration

__all__ = ["PgMigrationReport", "upgrade"]

# pg_advisory_xact_lock key of the schema migrator: "hkit" as a 32-bit integer.
_MIGRATION_LOCK = 0x686B6974

# How long a starting Host waits for another Host's upgrade before giving up.
_LOCK_WAIT_S = 900

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS hostkit_schema (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at DOUBLE PRECISION NOT NULL
)"""


@dataclass(frozen=True, slots=True)
class PgMigrationReport:
    """What ``upgrade`` did: the schema version before and after."""

    from_version: int
    to_version: int
    backup: Path | None = None


async def upgrade(
    conn: psycopg.AsyncConnection[Any],
    *,
    migrations: Sequence[Migration],
    location: str,
    backup: Callable[[int], Awaitable[Path]] | None,
) -> PgMigrationReport:
    """Bring the database at ``conn`` to the last of ``migrations``, or raise ``MigrationError``.

    ``backup(version)`` takes and verifies a dump; it runs (before the upgrade
    transaction) only when a pending step is destructive and the database has
    a schema already.
    """
    try:
        return await _upgrade(conn, migrations=migrations, location=location, backup=backup)
    except psycopg.Error as exc:
        # Transactional DDL: the failed transaction left the database as it was.
        state = getattr(exc, "sqlstate", None) or "connection"
        first = first_line(exc)
        raise MigrationError(
            f"the schema upgrade failed ({state}: {first}); nothing was migrated",
            database=location,
        ) from exc


async def _upgrade(
    conn: psycopg.AsyncConnection[Any],
    *,
    migrations: Sequence[Migration],
    location: str,
    backup: Callable[[int], Awaitable[Path]] | None,
) -> PgMigrationReport:
    latest = migrations[-1].version if migrations else 0
    taken: Path | None = None
    async with conn.transaction():
        before = await _current_version(conn, location)
    if any(m.destructive for m in migrations if m.version > before) and before > 0:
        if backup is None:
            raise MigrationError(
                f"upgrading {location} from version {before} drops data and needs a verified "
                "backup first: give the store a backup folder, or take one by hand with "
                "pg_dump --format=custom and check it with pg_restore --list",
                database=location,
            )
        taken = await backup(before)
    async with conn.transaction():
        # Another Host's upgrade may take a while: wait for it, boundedly; a step itself
        # (rewriting a large table) is not cut off by the store's statement timeout.
        await conn.execute(f"SET LOCAL lock_timeout = '{_LOCK_WAIT_S}s'")
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATION_LOCK])
        await conn.execute("SET LOCAL statement_timeout = 0")
        current = await _current_version(conn, location)
        if current > latest:
            raise MigrationError(
                f"{location} has schema version {current}, newer than this hostkit "
                f"(version {latest}); upgrade hostkit on every Host that uses it",
                database=location,
            )
        pending = [m for m in migrations if m.version > current]
        if not pending:
            return PgMigrationReport(current, current, taken)
        if current > 0 and taken is None and any(m.destructive for m in pending):
            # Another Host created or upgraded the schema since the backup was decided.
            raise MigrationError(
                f"{location} changed to version {current} while this Host started; "
                "start it again (its upgrade drops data and takes a verified backup first)",
                database=location,
            )
        await conn.execute(_VERSION_TABLE)
        for migration in pending:
            for statement in migration.statements:
                await conn.execute(statement.encode())
            await conn.execute(
                "INSERT INTO hostkit_schema (version, name, applied_at) VALUES (%s, %s, %s)",
                [migration.version, migration.name, time.time()],
            )
    return PgMigrationReport(current, pending[-1].version, taken)


async def _current_version(conn: psycopg.AsyncConnection[Any], location: str) -> int:
    cur = await conn.execute(
        "SELECT to_regclass('hostkit_schema') IS NOT NULL, "
        "(SELECT count(*) FROM pg_tables WHERE schemaname = current_schema())"
    )
    row = await cur.fetchone()
    assert row is not None
    has_versions, tables = bool(row[0]), int(row[1])
    if not has_versions:
        if tables:
            raise MigrationError(
                f"{location} holds {tables} tables but no hostkit schema; "
                "give hostkit a database (or schema) of its own",
                database=location,
            )
        return 0
    cur = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM hostkit_schema")
    found = await cur.fetchone()
    return int(found[0]) if found is not None else 0
