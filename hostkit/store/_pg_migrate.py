"""PostgreSQL schema upgrades: one transaction, one migrator at a time, versioned.

PostgreSQL's DDL is transactional, so every pending migration runs in one
transaction with its version rows: a failure leaves the database exactly as it
was. Several Hosts starting at once take a transaction-scoped advisory lock;
the first migrates, the others wait for it (up to ``_LOCK_WAIT_S``, bounded by
``lock_timeout`` alone: the store's ``statement_timeout`` is lifted first, so
a long upgrade elsewhere is waited out) and then find nothing pending. Opened
under a ``WaitLimit`` (``stores_opened_follow``), that wait ends by the limit
too, one under way included. A database that holds tables but no
``hostkit_schema`` is not ours and is refused, and so is a
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

import anyio
import psycopg

from hostkit.errors import MigrationError
from hostkit.store._pg_connection import first_line
from hostkit.store._pg_translate import translate
from hostkit.store._schema import Backfill, Migration
from hostkit.store._wait_limit import WaitLimit

__all__ = ["PgMigrationReport", "upgrade"]

# pg_advisory_xact_lock key of the schema migrator: "hkit" as a 32-bit integer.
_MIGRATION_LOCK = 0x686B6974

# How long a starting Host waits for another Host's upgrade before giving up.
_LOCK_WAIT_S = 900
# Under a limit: how long past it the wait still lets the server report its own
# lock timeout before the statement is cancelled from here.
_LIMIT_MARGIN_S = 0.5

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
    limit: WaitLimit | None = None,
) -> PgMigrationReport:
    """Bring the database at ``conn`` to the last of ``migrations``, or raise ``MigrationError``.

    ``backup(version)`` takes and verifies a dump; it runs (before the upgrade
    transaction) only when a pending step is destructive and the database has
    a schema already. ``limit`` (the opening's): once set, the wait for another
    Host's upgrade ends by it.
    """
    try:
        return await _upgrade(
            conn,
            migrations=migrations,
            location=location,
            backup=backup,
            limit=WaitLimit() if limit is None else limit,
        )
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
    limit: WaitLimit,
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
        # Neither the wait for another Host's upgrade (bounded by lock_timeout) nor a step
        # itself (rewriting a large table) is cut off by the store's statement timeout.
        await conn.execute("SET LOCAL statement_timeout = 0")
        await _wait_for_other_upgrades(conn, location, limit)
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
            if migration.backfill is not None:
                await _fill(conn, migration.backfill)
            await conn.execute(
                "INSERT INTO hostkit_schema (version, name, applied_at) VALUES (%s, %s, %s)",
                [migration.version, migration.name, time.time()],
            )
    return PgMigrationReport(current, pending[-1].version, taken)


async def _fill(conn: psycopg.AsyncConnection[Any], backfill: Backfill) -> None:
    """Run ``backfill`` over every row, a page at a time (in the upgrade's transaction)."""
    select, update = translate(backfill.select), translate(backfill.update)
    after = 0
    while rows := await (await conn.execute(select, [after])).fetchall():
        async with conn.cursor() as cursor:
            await cursor.executemany(
                update, [(backfill.compute(value), id_) for id_, value in rows]
            )
        after = rows[-1][0]


async def _wait_for_other_upgrades(
    conn: psycopg.AsyncConnection[Any], location: str, limit: WaitLimit
) -> None:
    """Take the migrator's lock in this transaction: up to ``_LOCK_WAIT_S``, or until
    ``limit``; past that a retryable ``MigrationError`` saying another Host's upgrade holds it.

    A limit set during the wait has the server cancel the statement (the connection
    stays usable, and no backend of this Host is left queued for the lock).
    """
    wait_s = limit.left_s(_LOCK_WAIT_S)
    await conn.execute(f"SET LOCAL lock_timeout = '{max(1, int(wait_s * 1000))}ms'")
    timer = anyio.CancelScope()

    def end_by(left_s: float) -> None:
        timer.deadline = min(timer.deadline, anyio.current_time() + left_s + _LIMIT_MARGIN_S)

    limit.follow(end_by)
    stopped = False

    async def cancel_at_the_limit() -> None:
        nonlocal stopped
        with timer:
            await anyio.sleep_forever()
        stopped = True
        await conn.cancel_safe(timeout=_LIMIT_MARGIN_S * 10)

    refused: psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled | None = None
    async with anyio.create_task_group() as watch:
        watch.start_soon(cancel_at_the_limit)
        try:
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATION_LOCK])
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as exc:
            refused = exc
        finally:
            watch.cancel_scope.cancel()
    if refused is None:
        return
    if isinstance(refused, psycopg.errors.LockNotAvailable):
        stopped = stopped or wait_s < _LOCK_WAIT_S
    elif not stopped:
        raise refused
    why = (
        "this Host stopped waiting for it (it is stopping)"
        if stopped
        else f"it is still at it after {_LOCK_WAIT_S} s"
    )
    error = MigrationError(
        f"another Host is upgrading the schema of {location} and {why}; nothing was "
        "migrated here: start this Host again when that upgrade is done",
        database=location,
    )
    error.retryable = True
    raise error


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
