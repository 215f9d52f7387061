"""SqliteStore: the RuntimeStore adapter on one SQLite file (WAL, aiosqlite)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import anyio

from hostkit.errors import InvalidValue, StoreClosed, StoreError
from hostkit.store._checks import UNSTORABLE_TEXT, check_count, check_duration
from hostkit.store._connection import DbConnection, Synchronous, open_connection, primary_code
from hostkit.store._migrate import MigrationReport, admit_hostkit_file, upgrade
from hostkit.store._opened_files import OpenedFiles, keep_foreign_wal
from hostkit.store._row_store import MAX_REASON, RowStore, audit_reason
from hostkit.store._schema import MIGRATIONS, Migration
from hostkit.store._transaction import Transaction
from hostkit.store._wait_limit import follow_opening_limit
from hostkit.store._writer import (
    BEGIN,
    COMMIT,
    MAX_BATCH,
    ROLLBACK,
    GroupCommitWriter,
    LockWait,
    map_sqlite_error,
    narrow_busy_timeout,
    refuse_replaced,
)
from hostkit.types import is_seconds

__all__ = ["MAX_REASON", "SqliteStore", "Transaction", "audit_reason"]

T = TypeVar("T")

_SYNCHRONOUS = ("EXTRA", "FULL", "NORMAL")


class SqliteStore(RowStore):
    """One SQLite database (WAL) through aiosqlite: migrations, writes, owned queries.

    All writes go through one writer connection with group commit; reads use a
    separate query-only connection and see the last committed state. Every
    owned query verifies that the scope was issued by *this* open of the store
    and applies the owner predicate in SQL.
    """

    def __init__(
        self,
        path: Path,
        writer: DbConnection,
        reader: DbConnection,
        *,
        report: MigrationReport,
        max_batch: int,
        lock_timeout_s: float,
        busy_s: float,
        files: OpenedFiles | None = None,
    ) -> None:
        self.path = path
        self.migration = report
        self._writer_conn = writer
        self._reader = reader
        self._writer = GroupCommitWriter(
            writer,
            max_batch=max_batch,
            lock_timeout_s=lock_timeout_s,
            busy_s=busy_s,
            database=str(path),
            files=files,
        )
        self._files = files
        super().__init__()

    @classmethod
    async def connect(
        cls,
        path: str | Path,
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout_s: float = 5.0,
        max_batch: int = 64,
        lock_timeout_s: float = 30.0,
        migrations: Sequence[Migration] | None = None,
    ) -> SqliteStore:
        """Open (creating or upgrading) the database at ``path``.

        ``synchronous`` trades durability for commit speed (WAL mode):

        - ``"FULL"`` (default): a commit is on disk before ``write`` returns;
          survives a process crash and a power loss. Use for anything the
          contracts call durable (inbound envelopes, turn terminal states).
        - ``"NORMAL"``: survives a process crash, but the last commits before a
          power loss or OS crash may be rolled back (the file stays consistent).
        - ``"EXTRA"``: like FULL, also syncing the directory after WAL resets.

        Raises ``MigrationError`` if an upgrade cannot happen; the old file is
        then unchanged and the error names the backup and the restore action.
        Opened inside ``stores_opened_follow(limit)``, every lock wait of the
        opening (the migration's) and of the store ends by that limit once set.
        """
        if synchronous not in _SYNCHRONOUS:
            raise InvalidValue(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}")
        # Checked before anything opens: a batch of no jobs would drain nothing, forever.
        if not is_seconds(busy_timeout_s, high=3_600, zero=True):  # 0: a statement never waits
            raise InvalidValue("busy_timeout_s must be a number of seconds from 0 to 3600")
        check_count("max_batch", max_batch, MAX_BATCH)
        check_duration("lock_timeout_s", lock_timeout_s)
        # No one wait for another process's lock outlasts the wait for it in all.
        busy_s = min(busy_timeout_s, lock_timeout_s)
        busy_ms = int(busy_s * 1000)
        database = Path(await (await anyio.Path(path).expanduser()).resolve())
        try:
            writer = await open_connection(
                database,
                synchronous=synchronous,
                busy_timeout_ms=busy_ms,
                admit=lambda raw: admit_hostkit_file(raw, database),
            )
        except sqlite3.Error as exc:
            raise _open_failure(exc, database) from exc
        reader: DbConnection | None = None
        # The migration's wait for the write lock, before there is a store to limit.
        migrating = LockWait(lock_timeout_s, str(database), busy_s=busy_s)
        follow_opening_limit(migrating.limit)
        try:
            report = await writer.run(
                lambda raw: upgrade(
                    raw,
                    database=database,
                    migrations=MIGRATIONS if migrations is None else migrations,
                    lock=migrating,
                )
            )
            reader = await open_connection(
                database, synchronous=synchronous, busy_timeout_ms=busy_ms, query_only=True
            )
            # The files this store writes to (the database, its -wal and -shm): a write finds
            # one deleted or replaced at once, even before the first one (on the database
            # thread: the writer has read in WAL mode, so SQLite made both siblings).
            files = await writer.run(lambda raw: OpenedFiles.of(str(database), wal=_in_wal(raw)))
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                if reader is not None:
                    await reader.close()
                await writer.close()
            if isinstance(exc, sqlite3.Error):  # the lock never came free, or the backup failed
                raise _open_failure(exc, database) from exc
            raise
        store = cls(
            database,
            writer,
            reader,
            report=report,
            max_batch=max_batch,
            lock_timeout_s=lock_timeout_s,
            busy_s=busy_s,
            files=files,
        )
        follow_opening_limit(store.limit_waits)
        guard = store._writer.guard
        try:
            await writer.run(lambda raw: raw.set_authorizer(guard))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await store.aclose()
            raise
        return store

    async def aclose(self) -> None:
        """Close both connections; idempotent. Scopes issued by this open stop verifying."""
        if self._closed:
            return
        self._closed = True
        try:
            self._keys.close()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    # Queued writes fail with StoreClosed; the batch in flight finishes.
                    await self._writer.close()
                finally:
                    await self._close_connections()

    async def _close_connections(self) -> None:
        """Close both connections; when another process made a new -wal or -shm, after a
        read-only one that closes last (``keep_foreign_wal`` says why)."""
        files = self._files
        keeper = None if files is None else await anyio.to_thread.run_sync(keep_foreign_wal, files)
        try:
            try:
                await self._reader.close()
            finally:
                await self._writer_conn.close()
        finally:
            if keeper is not None:
                await anyio.to_thread.run_sync(keeper.close)

    @property
    def location(self) -> str:
        return str(self.path)

    @property
    def local_directory(self) -> Path | None:
        return self.path.parent

    def now(self) -> float:
        """This machine's wall clock: every process on the file reads the same one."""
        return time.time()

    def limit_waits(self, seconds: float) -> None:
        self._writer.lock_wait.limit(seconds)

    # -- transactions ----------------------------------------------------------------

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on the database thread in a committed transaction; one hop.

        Concurrent calls may share one commit; an exception from ``fn`` rolls
        back only ``fn``'s statements and is re-raised here (the others of the
        commit then run again, each in its own savepoint: ``fn`` may run twice).
        sqlite errors become ``StoreError`` (see ``retryable``).
        """
        if self._closed:
            raise StoreClosed()
        try:
            return await self._writer.submit(fn)
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, "write") from exc
        except UnicodeEncodeError:  # fn's text, not the database: rolled back, nothing stored
            raise InvalidValue(UNSTORABLE_TEXT) from None

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in one read transaction (a consistent snapshot); one hop."""
        if self._closed:
            raise StoreClosed()

        def snapshot(raw: sqlite3.Connection) -> T:
            raw.execute("BEGIN")
            try:
                return fn(raw)
            finally:
                raw.execute("COMMIT")

        try:
            return await self._reader.run(snapshot)
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, "read") from exc
        except UnicodeEncodeError:
            raise InvalidValue(UNSTORABLE_TEXT) from None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """``async with store.transaction() as tx:`` — commit on exit, roll back on error."""
        if self._closed:
            raise StoreClosed()
        guard = self._writer.guard

        def begin(raw: sqlite3.Connection) -> None:
            narrow_busy_timeout(raw, self._writer.lock_wait)
            raw.execute(BEGIN)
            refuse_replaced(raw, self._writer.lock_wait)
            guard.raised = True  # statements inside may not end the transaction

        def end(statement: str) -> Callable[[sqlite3.Connection], None]:
            def run(raw: sqlite3.Connection) -> None:
                guard.raised = False
                if raw.in_transaction:
                    raw.execute(statement)

            return run

        async with self._writer.exclusive() as conn:
            tx = Transaction(conn)
            try:
                await tx.run(begin)
                yield tx
            except BaseException:
                tx._open = False
                with anyio.CancelScope(shield=True):
                    await conn.run(end(ROLLBACK))
                raise
            tx._open = False
            with anyio.CancelScope(shield=True):
                try:
                    await conn.run(end(COMMIT))
                except sqlite3.Error as exc:
                    await conn.run(end(ROLLBACK))
                    raise map_sqlite_error(exc, "commit") from exc


def _in_wal(raw: sqlite3.Connection) -> bool:
    row = raw.execute("PRAGMA journal_mode").fetchone()
    return row is not None and str(row[0]).lower() == "wal"


_NEEDS_ROOM = "free space beside the database (it needs room for its -wal and -shm files) and retry"
# What an operator can do when the file cannot be opened at all, by SQLite's primary code.
_OPEN_ADVICE = {
    sqlite3.SQLITE_NOTADB: "point the database setting at another file, or move this one aside",
    sqlite3.SQLITE_CORRUPT: "it is damaged: restore it from a backup (one is kept before "
    "each migration, beside it), or move it aside to start empty",
    sqlite3.SQLITE_CANTOPEN: "its directory must exist and be writable by this user",
    sqlite3.SQLITE_PERM: "this user may not write it, or its -wal and -shm files beside it",
    sqlite3.SQLITE_READONLY: "this user may not write it, or its -wal and -shm files beside it",
    # A full disk, seen first as the -shm file that could not be made (SQLITE_IOERR_SHMSIZE).
    sqlite3.SQLITE_FULL: _NEEDS_ROOM,
    sqlite3.SQLITE_IOERR: _NEEDS_ROOM,
}


def _open_failure(exc: sqlite3.Error, database: Path) -> StoreError:
    """The open's ``StoreError``, saying what to do where an operator can fix the cause."""
    failure = map_sqlite_error(exc, f"opening {database}")
    advice = _OPEN_ADVICE.get(primary_code(exc) or 0)
    if advice is None:
        return failure
    return StoreError(f"{failure.message}; {advice}", retryable=failure.retryable)
