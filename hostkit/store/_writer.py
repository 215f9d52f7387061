"""The single writer path: group commit over one connection.

Every write to the database goes through one ``GroupCommitWriter`` per store,
so concurrent writers queue instead of racing for SQLite's lock (no
``database is locked``), and small writes that arrive together share one
``COMMIT`` (one fsync). A job that raises is rolled back alone and its error
goes to its caller only: the batch then runs again with each job in its own
SAVEPOINT (``_run_batch`` says why not always). While a job
runs, an authorizer refuses ``BEGIN``/``COMMIT``/``ROLLBACK`` and the writer's
own savepoint, so one job cannot end the transaction it shares with others.

The batch is led by whichever caller finds no leader: it ships up to
``max_batch`` queued jobs to the connection thread in one hop, wakes their
callers, and hands leadership to the next waiter. No background task is needed,
and a cancelled caller whose job was not yet taken is simply dequeued.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import anyio

from hostkit.errors import HostkitError, InvalidValue, StoreClosed, StoreError
from hostkit.store._connection import DbConnection

__all__ = ["GroupCommitWriter", "TransactionGuard", "map_sqlite_error"]

T = TypeVar("T")

# SQLite result codes after which the same statement may succeed later.
_RETRYABLE = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR}

# The writer's own control statements. Their text differs from anything a caller
# would write, so a caller's "COMMIT" never reuses a statement prepared (and
# authorized) while the guard was down.
BEGIN = "BEGIN IMMEDIATE /* hostkit writer */"
COMMIT = "COMMIT /* hostkit writer */"
ROLLBACK = "ROLLBACK /* hostkit writer */"
_SAVEPOINT = "hostkit_job"
SAVEPOINT = f"SAVEPOINT {_SAVEPOINT} /* hostkit writer */"
RELEASE = f"RELEASE {_SAVEPOINT} /* hostkit writer */"
ROLLBACK_TO = f"ROLLBACK TO {_SAVEPOINT} /* hostkit writer */"


def map_sqlite_error(exc: sqlite3.Error, action: str) -> StoreError:
    """Map a sqlite3 error to a bounded ``StoreError`` with ``retryable`` set."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    name = getattr(exc, "sqlite_errorname", type(exc).__name__)
    return StoreError(f"{action} failed: {name}: {exc}", retryable=primary in _RETRYABLE)


class TransactionGuard:
    """An sqlite authorizer that, while raised, refuses statements ending the transaction."""

    def __init__(self) -> None:
        self.raised = False

    def __call__(self, action: int, arg1: str | None, arg2: str | None, *_: object) -> int:
        if not self.raised:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_TRANSACTION:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_SAVEPOINT and (arg2 or "").lower() == _SAVEPOINT:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK


class _Job(Generic[T]):
    __slots__ = ("error", "finished", "fn", "result", "taken", "wake")

    def __init__(self, fn: Callable[[sqlite3.Connection], T]) -> None:
        self.fn = fn
        self.result: T | None = None
        self.error: BaseException | None = None
        self.taken = False
        self.finished = False
        # Created only when the job has to wait for another leader's batch. A bare
        # asyncio future, not an anyio.Event: this writer runs on aiosqlite (asyncio
        # only), and the event costs five times as much, once per queued write.
        self.wake: asyncio.Future[None] | None = None

    def rouse(self) -> None:
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)


def _run_batch(conn: sqlite3.Connection, guard: TransactionGuard, jobs: list[_Job[Any]]) -> None:
    """Run ``jobs`` in one transaction; runs on the DB thread.

    The jobs first run back to back with no savepoint between them (two
    statements fewer per job). If one raises, that transaction is rolled back
    and the batch runs again with each job in its own savepoint, so the failure
    is rolled back alone. Jobs are therefore run twice in that case: like the
    PostgreSQL adapter's reruns, a job must be a function of the database only.
    """
    guard.raised = False  # never inherit a raised guard from an interrupted transaction
    if len(jobs) == 1:
        _run_alone(conn, guard, jobs[0])
        return
    try:
        if not _run_jobs(conn, guard, jobs, savepoints=False):
            _run_jobs(conn, guard, jobs, savepoints=True)
        conn.execute(COMMIT)
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute(ROLLBACK)
        failure = map_sqlite_error(exc, "commit")
        for job in jobs:
            job.result = None
            job.error = failure


def _run_jobs(
    conn: sqlite3.Connection, guard: TransactionGuard, jobs: list[_Job[Any]], *, savepoints: bool
) -> bool:
    """Run every job in one open transaction; each in its own savepoint if ``savepoints``.

    Without savepoints, a job that raises rolls the whole transaction back and
    the answer is False (run them again with savepoints); with them, its error
    is its own and the others go on.
    """
    conn.execute(BEGIN)
    for job in jobs:
        job.result = None
        if savepoints:
            conn.execute(SAVEPOINT)
        guard.raised = True
        try:
            job.result = job.fn(conn)
        except BaseException as exc:
            guard.raised = False
            if isinstance(exc, sqlite3.Error) and not conn.in_transaction:
                # SQLite rolled the whole transaction back (SQLITE_FULL, an I/O
                # error): every job of the batch is lost, with this error.
                raise
            if not savepoints:
                conn.execute(ROLLBACK)
                return False
            conn.execute(ROLLBACK_TO)
            job.error = exc
        finally:
            guard.raised = False
        if savepoints:
            conn.execute(RELEASE)
    return True


def _run_alone(conn: sqlite3.Connection, guard: TransactionGuard, job: _Job[Any]) -> None:
    """One job, one transaction: no savepoint is needed to roll it back alone."""
    try:
        conn.execute(BEGIN)
        guard.raised = True
        try:
            job.result = job.fn(conn)
        except BaseException as exc:
            guard.raised = False
            if conn.in_transaction:  # SQLITE_FULL and I/O errors may have rolled it back
                conn.execute(ROLLBACK)
            job.error = exc
            return
        guard.raised = False
        conn.execute(COMMIT)
    except sqlite3.Error as exc:
        guard.raised = False
        if conn.in_transaction:
            conn.execute(ROLLBACK)
        job.result = None
        job.error = map_sqlite_error(exc, "commit")


class GroupCommitWriter:
    """Serializes all writes to one connection and groups concurrent ones per commit."""

    def __init__(self, conn: DbConnection, *, max_batch: int, lock_timeout_s: float) -> None:
        self._conn = conn
        self._max_batch = max_batch
        self._lock_timeout_s = lock_timeout_s
        self._lock = anyio.Lock()
        self._pending: deque[_Job[Any]] = deque()
        self._leader: _Job[Any] | None = None
        self._interactive_task: int | None = None
        self._closed = False
        # Jobs in the last batch: more than one means writers are concurrent now.
        self._last_batch = 0
        self.guard = TransactionGuard()

    async def submit(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in a committed transaction (possibly shared) and return its result.

        Raises what ``fn`` raised (its savepoint rolled back), ``StoreError``
        when the shared commit failed, or ``StoreClosed``. If the caller is
        cancelled after its job was taken, the job may still commit: the outcome
        is then unknown to the caller, exactly as for a crash after ``COMMIT``.
        """
        if self._closed:
            raise StoreClosed()
        interactive = self._interactive_task
        if interactive is not None and interactive == anyio.get_current_task().id:
            raise InvalidValue(
                "store.write() inside this task's store.transaction() would deadlock; "
                "use tx.run(fn) instead"
            )
        job: _Job[T] = _Job(fn)
        self._pending.append(job)
        try:
            while not job.finished:
                if self._leader is None:
                    self._leader = job
                    try:
                        # Shielded: once jobs are taken their callers must be woken.
                        with anyio.CancelScope(shield=True):
                            if self._last_batch > 1 and len(self._pending) < self._max_batch:
                                # The callers of the last shared batch are resubmitting
                                # on this very loop pass: let them queue first, or this
                                # job commits alone and the next batch waits behind it.
                                await anyio.lowlevel.checkpoint()
                            await self._flush_once()
                    finally:
                        self._leader = None
                        if self._pending:
                            self._pending[0].rouse()
                else:
                    job.wake = asyncio.get_running_loop().create_future()
                    try:
                        await job.wake
                    finally:
                        job.wake = None
        except BaseException:
            if not job.taken:
                self._pending.remove(job)
                if self._leader is None and self._pending:
                    self._pending[0].rouse()
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
        self._last_batch = len(batch)
        try:
            if self._closed:
                raise StoreClosed()
            # The lock is contended only by interactive transactions: take it at once
            # when free, and wait (bounded) only when one holds it.
            try:
                self._lock.acquire_nowait()
            except anyio.WouldBlock:
                with anyio.fail_after(self._lock_timeout_s):
                    await self._lock.acquire()
            try:
                await self._conn.run(lambda raw: _run_batch(raw, self.guard, batch))
            finally:
                self._lock.release()
        except TimeoutError:
            _fail(batch, StoreError("timed out waiting for the database writer", retryable=True))
        except HostkitError as exc:
            _fail(batch, exc)
        except sqlite3.Error as exc:
            _fail(batch, map_sqlite_error(exc, "write"))
        except Exception as exc:
            # aiosqlite reports a connection closed under us as ValueError.
            _fail(batch, StoreError(f"write failed: {type(exc).__name__}: {exc}"))
        finally:
            for queued in batch:
                queued.finished = True
                queued.rouse()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[DbConnection]:
        """Hold the writer for an interactive transaction (statement-at-a-time)."""
        if self._closed:
            raise StoreClosed()
        try:
            with anyio.fail_after(self._lock_timeout_s):
                await self._lock.acquire()
        except TimeoutError as exc:
            raise StoreError("timed out waiting for the database writer", retryable=True) from exc
        self._interactive_task = anyio.get_current_task().id
        try:
            yield self._conn
        finally:
            self._interactive_task = None
            self._lock.release()

    async def close(self) -> None:
        """Refuse new writes, fail queued ones (``StoreClosed``), let the batch in flight end."""
        self._closed = True
        while self._pending:
            queued = self._pending.popleft()
            queued.taken = True
            queued.error = StoreClosed()
            queued.finished = True
            queued.rouse()
        with anyio.move_on_after(self._lock_timeout_s):
            await self._lock.acquire()
            self._lock.release()


def _fail(batch: list[_Job[Any]], error: BaseException) -> None:
    for queued in batch:
        queued.result = None
        queued.error = error
