"""The single writer path: group commit over one connection.

Every write to the database goes through one ``GroupCommitWriter`` per store,
so concurrent writers queue instead of racing for SQLite's lock (no
``database is locked``), and small writes that arrive together share one
``COMMIT`` (one fsync). Each job runs inside its own SAVEPOINT, so a job that
raises is rolled back alone and its error goes to its caller only.

The batch is led by whichever caller finds no leader: it ships up to
``max_batch`` queued jobs to the connection thread in one hop, wakes their
callers, and hands leadership to the next waiter. No background task is needed,
and a cancelled caller whose job was not yet taken is simply dequeued.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import anyio

from hostkit.errors import StoreError
from hostkit.store._connection import DbConnection

__all__ = ["GroupCommitWriter", "map_sqlite_error"]

T = TypeVar("T")

# SQLite result codes after which the same statement may succeed later.
_RETRYABLE = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR}


def map_sqlite_error(exc: sqlite3.Error, action: str) -> StoreError:
    """Map a sqlite3 error to a bounded ``StoreError`` with ``retryable`` set."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    name = getattr(exc, "sqlite_errorname", type(exc).__name__)
    return StoreError(f"{action} failed: {name}: {exc}", retryable=primary in _RETRYABLE)


class _Job(Generic[T]):
    __slots__ = ("error", "finished", "fn", "result", "taken", "wake")

    def __init__(self, fn: Callable[[sqlite3.Connection], T]) -> None:
        self.fn = fn
        self.result: T | None = None
        self.error: BaseException | None = None
        self.taken = False
        self.finished = False
        self.wake = anyio.Event()


def _run_batch(conn: sqlite3.Connection, jobs: list[_Job[Any]]) -> None:
    """Run ``jobs`` in one transaction, each in a savepoint; runs on the DB thread."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        for job in jobs:
            conn.execute("SAVEPOINT job")
            try:
                job.result = job.fn(conn)
            except Exception as exc:
                conn.execute("ROLLBACK TO job")
                job.error = exc
            conn.execute("RELEASE job")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        failure = map_sqlite_error(exc, "commit")
        for job in jobs:
            job.result = None
            job.error = failure


class GroupCommitWriter:
    """Serializes all writes to one connection and groups concurrent ones per commit."""

    def __init__(self, conn: DbConnection, *, max_batch: int, lock_timeout_s: float) -> None:
        self._conn = conn
        self._max_batch = max_batch
        self._lock_timeout_s = lock_timeout_s
        self._lock = anyio.Lock()
        self._pending: deque[_Job[Any]] = deque()
        self._leader: _Job[Any] | None = None

    async def submit(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in a committed transaction (possibly shared) and return its result.

        Raises what ``fn`` raised (its savepoint rolled back), or ``StoreError``
        when the shared commit failed. If the caller is cancelled after its job
        was taken, the job may still commit: the outcome is then unknown to the
        caller, exactly as for a crash after ``COMMIT``.
        """
        job: _Job[T] = _Job(fn)
        self._pending.append(job)
        try:
            while not job.finished:
                if self._leader is None:
                    self._leader = job
                    try:
                        # Shielded: once jobs are taken their callers must be woken.
                        with anyio.CancelScope(shield=True):
                            await self._flush_once()
                    finally:
                        self._leader = None
                        if self._pending:
                            self._pending[0].wake.set()
                else:
                    await job.wake.wait()
                    job.wake = anyio.Event()
        except BaseException:
            if not job.taken:
                self._pending.remove(job)
                if self._leader is None and self._pending:
                    self._pending[0].wake.set()
            raise
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    async def _flush_once(self) -> None:
        batch: list[_Job[Any]] = []
        while self._pending and len(batch) < self._max_batch:
            queued = self._pending.popleft()
            queued.taken = True
            batch.append(queued)
        try:
            with anyio.fail_after(self._lock_timeout_s):
                await self._lock.acquire()
        except TimeoutError:
            failure = StoreError("timed out waiting for the database writer", retryable=True)
            for queued in batch:
                queued.error = failure
        else:
            try:
                await self._conn.run(lambda raw: _run_batch(raw, batch))
            except sqlite3.Error as exc:
                failure = map_sqlite_error(exc, "write")
                for queued in batch:
                    queued.error = failure
            finally:
                self._lock.release()
        for queued in batch:
            queued.finished = True
            queued.wake.set()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[DbConnection]:
        """Hold the writer for an interactive transaction (statement-at-a-time)."""
        try:
            with anyio.fail_after(self._lock_timeout_s):
                await self._lock.acquire()
        except TimeoutError as exc:
            raise StoreError("timed out waiting for the database writer", retryable=True) from exc
        try:
            yield self._conn
        finally:
            self._lock.release()
