"""The single writer path: group commit over one connection.

Every write to the database goes through one ``GroupCommitWriter`` per store,
so concurrent writers queue instead of racing for SQLite's lock (no
``database is locked``), and small writes that arrive together share one
``COMMIT`` (one fsync). A job that raises is rolled back alone and its error
goes to its caller only: the batch then runs again with each job in its own
SAVEPOINT (``_run_batch`` says why not always). While a job
runs, an authorizer refuses ``BEGIN``/``COMMIT``/``ROLLBACK`` and the writer's
own savepoint, so one job cannot end the transaction it shares with others.

Callers queue their jobs; one drain at a time runs on the connection's
thread and takes up to ``max_batch`` queued jobs per transaction, batch after
batch, until the queue is empty. Each batch's callers are woken with one
callback as soon as its transaction ended, and the next batch starts at once
with what queued meanwhile: commits never wait for a turn of the event loop
(under load the loop is busy, and a leader task handing over between batches
kept the database waiting for it). No background task is needed, and a
cancelled caller whose job was not yet taken is simply dequeued.

Another process may hold SQLite's write lock for longer than the busy
timeout (a long interactive transaction, a backup). A ``BEGIN`` that fails
on that lock has run no job, so it is tried again until the writer's lock
timeout: a write fails then, not after one busy timeout, and a tool call that
ran is not reported lost because another process wrote for a few seconds.
A wait past ``LOCK_NOTICE_S`` is logged once (a person at a terminal must
not stare at silence for half a minute), and a write that never got the lock
fails saying so, not as a failed commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import anyio

from hostkit.errors import DatabaseReplaced, HostkitError, InvalidValue, StoreClosed, StoreError
from hostkit.store._connection import LOCK_HELD, DbConnection, primary_code
from hostkit.store._opened_files import OpenedFiles
from hostkit.store._wait_limit import WaitLimit

__all__ = [
    "MAX_BATCH",
    "GroupCommitWriter",
    "LockWait",
    "TransactionGuard",
    "begin_immediate",
    "map_sqlite_error",
    "narrow_busy_timeout",
    "refuse_replaced",
]

T = TypeVar("T")

# The most jobs one transaction takes. Past a few dozen, a larger batch saves no
# commit worth having and only delays the callers of its first jobs.
MAX_BATCH = 1024

# SQLite result codes after which the same statement may succeed later: a lock, an I/O
# error, a full disk (as PostgreSQL's class 53, insufficient resources).
_RETRYABLE = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL}
# Between two BEGINs when the busy handler did not wait (a busy timeout of 0).
_BEGIN_PAUSE_S = 0.01
# A write waiting this long for another process's write lock is logged (once per wait).
LOCK_NOTICE_S = 1.5

_log = logging.getLogger(__name__)

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


class _LockNeverFree(sqlite3.OperationalError):
    """``BEGIN`` gave up: another process held the write lock for the writer's whole wait."""


def map_sqlite_error(exc: sqlite3.Error, action: str) -> StoreError:
    """Map a sqlite3 error to a bounded ``StoreError`` with ``retryable`` set."""
    if isinstance(exc, _LockNeverFree):
        return StoreError(str(exc), retryable=True)
    primary = primary_code(exc)
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
    __slots__ = ("done", "error", "fn", "result")

    def __init__(self, fn: Callable[[sqlite3.Connection], T], done: asyncio.Future[None]) -> None:
        self.fn = fn
        self.result: T | None = None
        self.error: BaseException | None = None
        # Resolved on the event loop once the job's transaction ended (committed or not).
        self.done = done


class LockWait(WaitLimit):
    """The writer's wait for SQLite's write lock: its bound, and since when a BEGIN waits.

    ``since`` is set on the database thread while a ``BEGIN`` runs and read on
    the event loop, which says so when the wait grows long (one attribute,
    written and read whole). Once the store limits its waits (``limit``), every
    wait ends by then, a wait already under way too.
    """

    __slots__ = ("bound_s", "busy_s", "database", "files", "since")

    def __init__(
        self,
        bound_s: float,
        database: str,
        files: OpenedFiles | None = None,
        *,
        busy_s: float,
    ) -> None:
        super().__init__()
        self.bound_s = bound_s
        # The connection's busy timeout: how long one statement waits for the lock.
        self.busy_s = busy_s
        self.database = database
        self.since: float | None = None
        # The database file, and its -wal and -shm, the store opened (once it was open);
        # None: nothing to compare (a migration at open).
        self.files = files


def refuse_replaced(conn: sqlite3.Connection, lock: LockWait) -> None:
    """In a transaction just begun: roll it back and raise ``DatabaseReplaced`` when a path no
    longer names the file this connection has open (the database, its -wal or its -shm:
    deleted, or another file there)."""
    changed = None if lock.files is None else lock.files.changed()
    if changed is not None:
        conn.execute(ROLLBACK)
        raise DatabaseReplaced(lock.database, changed)


def begin_immediate(conn: sqlite3.Connection, lock: LockWait) -> None:
    """``BEGIN IMMEDIATE``, tried again while another process holds the write lock.

    Each try waits up to the connection's busy timeout, or what is left of
    ``lock.bound_s`` (or of the store's limit) when that is less; past it,
    ``_LockNeverFree`` is raised. Nothing ran yet, so trying again is safe. A
    BEGIN that gets the lock at once pays no statement more than itself.
    """
    began = time.monotonic()
    deadline = began + lock.bound_s
    lock.since = began
    narrowed = False
    try:
        while True:
            started = time.monotonic()
            # A try that would wait past the end, or a limited store's: it waits only what
            # is left (a few ms past it, not worth a statement on every first try).
            if lock.until is not None or deadline - started + _BEGIN_PAUSE_S < lock.busy_s:
                _set_busy_timeout(conn, min(lock.left_s(lock.busy_s), deadline - started))
                narrowed = True
            try:
                conn.execute(BEGIN)
            except sqlite3.OperationalError as exc:
                if primary_code(exc) not in LOCK_HELD:
                    raise
                now = time.monotonic()
                if lock.until is not None and now >= lock.until:
                    raise _LockNeverFree(
                        f"another process held the write lock of {lock.database[-200:]} and "
                        "this store waits no longer (it is closing): nothing of this write "
                        "was done; the next process to open it takes over"
                    ) from exc
                if now >= deadline:
                    raise _LockNeverFree(
                        f"another process held the write lock of {lock.database[-200:]} for "
                        f"{lock.bound_s:g} s: nothing of this write was done; try again when "
                        "that process is done"
                    ) from exc
                if now - started < _BEGIN_PAUSE_S:  # the database thread's own wait, not the loop's
                    time.sleep(min(_BEGIN_PAUSE_S, deadline - now))
                continue
            # Under the write lock: a stat per file (three in WAL mode), a few microseconds.
            refuse_replaced(conn, lock)
            return
    finally:
        lock.since = None
        if narrowed:  # the next write's tries wait a whole busy timeout again (or the limit's)
            narrow_busy_timeout(conn, lock, always=True)


def _set_busy_timeout(conn: sqlite3.Connection, seconds: float) -> None:
    conn.execute(f"PRAGMA busy_timeout = {max(0, int(seconds * 1000))}")


def narrow_busy_timeout(conn: sqlite3.Connection, lock: LockWait, *, always: bool = False) -> None:
    """Under the store's limit, let one statement wait no longer than what is left of it
    (nor longer than the connection's busy timeout). Never widened past the limit again:
    it is set when the store's owner is closing. ``always``: set it with no limit too
    (to the busy timeout itself), after a try that was let wait less."""
    if always or lock.until is not None:
        _set_busy_timeout(conn, lock.left_s(lock.busy_s))


def _run_batch(
    conn: sqlite3.Connection, guard: TransactionGuard, jobs: list[_Job[Any]], lock: LockWait
) -> None:
    """Run ``jobs`` in one transaction; runs on the DB thread.

    The jobs first run back to back with no savepoint between them (two
    statements fewer per job). If one raises, that transaction is rolled back
    and the batch runs again with each job in its own savepoint, so the failure
    is rolled back alone. Jobs are therefore run twice in that case: like the
    PostgreSQL adapter's reruns, a job must be a function of the database only.
    """
    guard.raised = False  # never inherit a raised guard from an interrupted transaction
    if len(jobs) == 1:
        _run_alone(conn, guard, jobs[0], lock)
        return
    try:
        if not _run_jobs(conn, guard, jobs, savepoints=False, lock=lock):
            _run_jobs(conn, guard, jobs, savepoints=True, lock=lock)
        conn.execute(COMMIT)
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute(ROLLBACK)
        _fail(jobs, map_sqlite_error(exc, "commit"))


def _run_jobs(
    conn: sqlite3.Connection,
    guard: TransactionGuard,
    jobs: list[_Job[Any]],
    *,
    savepoints: bool,
    lock: LockWait,
) -> bool:
    """Run every job in one open transaction; each in its own savepoint if ``savepoints``.

    Without savepoints, a job that raises rolls the whole transaction back and
    the answer is False (run them again with savepoints); with them, its error
    is its own and the others go on.
    """
    begin_immediate(conn, lock)
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


def _run_alone(
    conn: sqlite3.Connection, guard: TransactionGuard, job: _Job[Any], lock: LockWait
) -> None:
    """One job, one transaction: no savepoint is needed to roll it back alone."""
    try:
        begin_immediate(conn, lock)
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

    def __init__(
        self,
        conn: DbConnection,
        *,
        max_batch: int,
        lock_timeout_s: float,
        busy_s: float,
        database: str,
        files: OpenedFiles | None = None,
    ) -> None:
        self._conn = conn
        self._max_batch = max_batch
        self._lock_timeout_s = lock_timeout_s
        self.lock_wait = LockWait(lock_timeout_s, database, files, busy_s=busy_s)
        # The next look at that wait while drains run (event loop only), and the wait it
        # last told of.
        self._watch: asyncio.TimerHandle | None = None
        self._noticed: float | None = None
        # Shared with the database thread, which only pops from the left; the loop appends,
        # and removes a cancelled caller's job. Each of those is atomic.
        self._pending: deque[_Job[Any]] = deque()
        # The drain on the database thread, while one runs (loop thread only).
        self._drain: asyncio.Future[None] | None = None
        # An interactive transaction holds the connection: no drain runs meanwhile.
        self._lock = anyio.Lock()
        self._held = False
        self._interactive_task: int | None = None
        self._closed = False
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
        job: _Job[T] = _Job(fn, asyncio.get_running_loop().create_future())
        self._pending.append(job)
        self._start_drain()
        try:
            await job.done
        except BaseException:
            with contextlib.suppress(ValueError):  # not there: taken, it may still commit
                self._pending.remove(job)
            raise
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    def _start_drain(self) -> None:
        """Ship the queue's drain to the database thread unless one runs or must not."""
        if self._drain is not None or self._held or self._closed or not self._pending:
            return
        loop = asyncio.get_running_loop()

        def settle(batch: list[_Job[Any]]) -> None:
            for job in batch:
                if not job.done.done():
                    job.done.set_result(None)

        def deliver(batch: list[_Job[Any]]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(settle, batch)

        def stop() -> bool:
            return self._held or self._closed

        try:
            drain = self._conn.start(
                lambda raw: _drain(
                    raw,
                    self.guard,
                    self._pending,
                    self._max_batch,
                    stop,
                    deliver,
                    self.lock_wait,
                )
            )
        except Exception as exc:  # the connection is closed: nothing queued can run
            self._fail_queued(_as_store_error(exc))
            return
        self._drain = drain
        drain.add_done_callback(self._drained)
        if self._watch is None:
            self._watch = loop.call_later(LOCK_NOTICE_S, self._notice_lock_wait)

    def _notice_lock_wait(self) -> None:
        """Say once per wait that a drain waits for another process's lock; look again later
        while drains run.

        One look every LOCK_NOTICE_S at most, whatever the number of commits (a timer per
        drain would cost every turn a heap push and a cancel); none while the writer idles.
        """
        self._watch = None
        if self._drain is None or self._closed:
            return
        since = self.lock_wait.since
        untold = since is not None and since != self._noticed
        waited = time.monotonic() - since if since is not None and untold else 0.0
        if untold and waited >= LOCK_NOTICE_S:
            self._noticed, untold = since, False
            _log.warning(
                "waiting for the write lock of %s: another process holds it "
                "(this write waits up to %g s)",
                self.lock_wait.database[-200:],
                self.lock_wait.bound_s,
                extra={"hostkit_progress": True},
            )
        # The next look: when the wait in progress, not told of yet, reaches the notice (a
        # wait that begins later is at most LOCK_NOTICE_S old at the look after).
        delay = LOCK_NOTICE_S - waited if untold else LOCK_NOTICE_S
        self._watch = asyncio.get_running_loop().call_later(
            max(0.05, delay), self._notice_lock_wait
        )

    def _drained(self, drain: asyncio.Future[None]) -> None:
        """The drain returned (queue empty, or asked to stop): start another if needed."""
        self._drain = None
        if not drain.cancelled() and drain.exception() is not None:
            # The drain failed outside any batch (its connection thread, not a job):
            # fail what is queued rather than start another that may fail alike.
            self._fail_queued(_as_store_error(drain.exception()))
            return
        self._start_drain()

    def _fail_queued(self, error: BaseException) -> None:
        """Fail every job not yet taken with ``error`` and wake its caller."""
        while self._pending:
            with contextlib.suppress(IndexError):  # the database thread took it meanwhile
                job = self._pending.popleft()
                job.error = error
                if not job.done.done():
                    job.done.set_result(None)

    async def _drain_ended(self) -> None:
        drain = self._drain
        if drain is not None:
            await asyncio.wait((drain,))

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[DbConnection]:
        """Hold the writer for an interactive transaction (statement-at-a-time).

        The drain in flight stops after its current batch; queued writes wait
        and run once the transaction ends.
        """
        if self._closed:
            raise StoreClosed()
        try:
            with anyio.fail_after(self.lock_wait.left_s(self._lock_timeout_s)):
                await self._lock.acquire()
        except TimeoutError as exc:
            raise StoreError("timed out waiting for the database writer", retryable=True) from exc
        if self._closed_meanwhile():  # while this transaction waited for the one before it
            self._lock.release()
            raise StoreClosed()
        self._held = True
        self._interactive_task = anyio.get_current_task().id
        try:
            try:
                # Its statements would queue behind the drain on the connection's thread
                # anyway; waiting here keeps the lock timeout the bound of the whole wait.
                with anyio.fail_after(self.lock_wait.left_s(self._lock_timeout_s)):
                    await self._drain_ended()
            except TimeoutError as exc:
                raise StoreError(
                    "timed out waiting for the database writer", retryable=True
                ) from exc
            yield self._conn
        finally:
            self._interactive_task = None
            self._held = False
            self._lock.release()
            self._start_drain()

    def _closed_meanwhile(self) -> bool:
        """Whether ``close()`` began, asked after an await (a call: never narrowed away)."""
        return self._closed

    async def close(self) -> None:
        """Refuse new writes, fail queued ones and waiting transactions (``StoreClosed``).

        The batch in flight, and the transaction holding the writer, end as they would.
        """
        self._closed = True
        self._fail_queued(StoreClosed())
        with anyio.move_on_after(self.lock_wait.left_s(self._lock_timeout_s)):
            await self._drain_ended()
            await self._lock.acquire()
            self._lock.release()
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None


def _drain(
    conn: sqlite3.Connection,
    guard: TransactionGuard,
    pending: deque[_Job[Any]],
    max_batch: int,
    stop: Callable[[], bool],
    deliver: Callable[[list[_Job[Any]]], None],
    lock: LockWait,
) -> None:
    """Run queued jobs in batches until none is left (or ``stop``); on the DB thread.

    Each batch is one transaction, delivered to the loop as soon as it ended,
    and the next batch starts at once with whatever queued meanwhile: the
    database never waits for the event loop between two commits. A batch
    that fails as a whole fails its own jobs only (typed); the drain goes on,
    and every failed batch took at least one job, so it cannot spin.
    """
    while not stop():
        batch: list[_Job[Any]] = []
        while len(batch) < max_batch:
            try:
                batch.append(pending.popleft())
            except IndexError:
                break
        if not batch:
            return
        try:
            _run_batch(conn, guard, batch, lock)
        except BaseException as exc:
            _fail(batch, _as_store_error(exc))
            _abandon_transaction(conn, guard)
        deliver(batch)


def _abandon_transaction(conn: sqlite3.Connection, guard: TransactionGuard) -> None:
    """After a batch failed outside its jobs: no half-open transaction for the next one."""
    guard.raised = False
    with contextlib.suppress(sqlite3.Error):
        if conn.in_transaction:
            conn.execute(ROLLBACK)


def _as_store_error(exc: BaseException | None) -> BaseException:
    if isinstance(exc, HostkitError):
        return exc
    if isinstance(exc, sqlite3.Error):
        return map_sqlite_error(exc, "write")
    # aiosqlite reports a connection closed under us as ValueError.
    return StoreError(f"write failed: {type(exc).__name__}: {exc}")


def _fail(batch: list[_Job[Any]], error: BaseException) -> None:
    for queued in batch:
        queued.result = None
        queued.error = error
