"""PgStore: the RuntimeStore adapter on a PostgreSQL database (psycopg 3, psycopg_pool).

Several Hosts on several machines share one database. Each write is one
SERIALIZABLE transaction on a pooled connection: PostgreSQL then guarantees
what SQLite's single writer gives for free (the outcome equals some serial
order of the writes). A transaction that lost a serialisation race (SQLSTATE
40001, or a deadlock, 40P01) is run again from the start; after
``_OPTIMISTIC_RUNS`` such losses it runs once more holding the writer lock
alone (every write holds it shared), so it cannot lose again: no write is
starved under contention. Claims relax to READ COMMITTED and lock their rows with
``FOR UPDATE SKIP LOCKED`` (``_dialect.claim_isolation``), so concurrent
claimers take disjoint rows. Reads are REPEATABLE READ, READ ONLY: one
snapshot per call. Leases, claims and fencing tokens are rows, as on SQLite:
owner, expiry and token are checked inside the statements that write. Their
times are on the server's clock (``now``: sampled, never a round trip per
lease; ``_pg_clock``), so no Host's own clock decides one.

New or re-readied inbounds are announced with NOTIFY by a trigger; each inbox
worker LISTENs (``watch_inbox``) and wakes at once, and still polls as a
fallback while its listening connection is down.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import socket
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import psycopg
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from hostkit.errors import ClockSkew, InvalidValue, StoreClosed, StoreError, StoreOutcomeUnknown
from hostkit.store._checks import UNSTORABLE_TEXT, check_count, check_duration
from hostkit.store._pg_backup import dump_and_verify
from hostkit.store._pg_clock import SERVER_CLOCK, ClockSample, ServerClock, local_reading
from hostkit.store._pg_connection import (
    CLIENT_KEEPALIVES,
    SET_LOCK_TIMEOUT,
    WRITE_LOCK,
    PgConnection,
    configure_connection,
    encoding_refusal,
    first_line,
    pg_row,
)
from hostkit.store._pg_listen import listen
from hostkit.store._pg_migrate import PgMigrationReport, upgrade
from hostkit.store._pg_refusals import ConnectRefusals
from hostkit.store._pg_schema import INBOX_CHANNEL, PG_MIGRATIONS
from hostkit.store._pg_url import check_url, redact_url
from hostkit.store._row_store import RowStore
from hostkit.store._schema import Migration
from hostkit.store._tallies import fold_alone
from hostkit.store._wait_limit import WaitLimit, follow_opening_limit
from hostkit.store._writer import map_sqlite_error

__all__ = ["PgStore"]

T = TypeVar("T")

# A cancelled opening's cancel request and the wait for its query to end, together; and
# the wait after its socket was cut.
_CANCEL_WAIT_S = 1.0

# Runs of a write before it takes the writer lock alone (its last run).
_OPTIMISTIC_RUNS = 4
# SQLSTATE classes after which the same call may succeed later: serialisation and
# deadlock (40), connection (08), resources (53), operator intervention (57: shutdown,
# statement timeout), lock not available (55P03).
_RETRYABLE_CLASSES = ("40", "08", "53", "57")
_RETRYABLE_STATES = ("55P03",)
_RERUN_STATES = ("40001", "40P01")
# Reruns of a transaction whose connection was lost before its COMMIT, each after the
# pool's idle connections were closed: a restarted server leaves every idle one dead.
_LOST_CONNECTION_RUNS = 2
# Under ``limit_waits``: a lock wait's bound before the limit is near (the statement
# timeout bounds it anyway), and the least a pool checkout is given once it passed.
_MAX_LOCK_WAIT_S = 3_600.0
_MIN_CHECKOUT_S = 0.05
# A wait for a pooled connection looks this often whether its caller still waits.
_CHECKOUT_SLICE_S = 1.0
# While the server refuses new connections (``_pg_refusals``) a checkout waits this long
# for one put back, then fails: not the whole ``connect_timeout_s``.
_REFUSED_SLICE_S = 0.25
# psycopg_pool retries a lost connection with a doubling backoff (1 s, 2 s, 4 s, ... up to
# ``reconnect_timeout``): after a long outage its next try could come as late as the
# outage lasted, and every checkout fails meanwhile. A slot whose tries failed this long
# is given up instead, and the next checkout that finds no connection grows the pool
# again with an immediate try: a restarted server is used again within a few seconds.
_RECONNECT_GIVE_UP_S = 4.0
# CLIENT_KEEPALIVES (_pg_connection), done by the server for its side of each connection
# (session settings).
_SERVER_KEEPALIVES: dict[str, int] = {
    "tcp_keepalives_idle": 5,
    "tcp_keepalives_interval": 2,
    "tcp_keepalives_count": 3,
    "tcp_user_timeout": 15_000,
}
# Under ``limit_waits``: how long past the limit a call still waits for a server that
# does not answer before its connection is cut. Also how long past its caller's deadline
# an abandoned call's thread may still wait for a connection.
_SILENT_SERVER_MARGIN_S = 0.5
# pool.close() joins each pool worker thread this long at most (they are daemons).
_CLOSE_JOIN_S = 1.0
# Round trips of the clock comparison at open; the one with the shortest wait decides.
_CLOCK_SAMPLES = 3
# This machine's wall clock: measured against the server's, never used for a lease.
_machine_clock = time.time


class _Call:
    """One transaction's hop, shared by its caller and its worker thread (under the
    store's calls lock): a copy of the socket of the connection the thread holds now,
    whether the caller stopped waiting (the thread then gives up at its next step and
    never reruns), whether the COMMIT was sent, and until when (monotonic) a checkout
    is worth waiting for: never past the caller's own deadline."""

    __slots__ = ("abandoned", "checked_out_at", "checkout_until", "commit_sent", "sock")

    def __init__(self, checkout_until: float) -> None:
        self.sock: socket.socket | None = None
        self.checked_out_at = 0.0
        self.abandoned = False
        self.commit_sent = False
        self.checkout_until = checkout_until

    def gave_up(self) -> bool:
        """Whether the caller stopped waiting (read under the calls lock)."""
        return self.abandoned


async def _ended_when_cancelled(
    conn: psycopg.AsyncConnection[Any], work: Callable[[], Awaitable[T]]
) -> T:
    """``work()`` on ``conn``, which a cancellation of the caller does not reach at once:
    that sends a cancel request and waits for the work to end, together at most
    ``_CANCEL_WAIT_S``; then cuts the connection's socket (a wait on it ends at once, on
    a lost connection) and waits as long again; then cancels the work itself (a wait
    elsewhere: the backup's pg_dump, which a cancellation kills); and goes on.

    psycopg's own answer to a cancelled query waits up to 5 s for the cancel request
    and 5 s more for the query: on an unreachable or frozen server, a stop signal while
    the Host opened took 9 s to end it, not the 4 s docs/service.md gives. A server that
    answers ends the query itself, so none of this Host's backends is left queued for a
    lock. The socket is cut before the work is cancelled, so psycopg's answer never runs.
    """
    outcome: list[T] = []
    failure: list[BaseException] = []
    finished = anyio.Event()
    stopped = anyio.CancelScope()

    async def run() -> None:
        with anyio.CancelScope(shield=True):
            try:
                with stopped:
                    outcome.append(await work())
            except BaseException as exc:  # the caller's to raise, not the task group's
                failure.append(exc)
            finally:
                finished.set()

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        try:
            await finished.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(_CANCEL_WAIT_S):
                    with contextlib.suppress(psycopg.Error):
                        await conn.cancel_safe(timeout=_CANCEL_WAIT_S)
                    await finished.wait()
                if not finished.is_set():
                    with (
                        contextlib.suppress(OSError, psycopg.Error),
                        _socket_copy(conn.pgconn.socket) as sock,
                    ):
                        sock.shutdown(socket.SHUT_RDWR)
                    with anyio.move_on_after(_CANCEL_WAIT_S):
                        await finished.wait()
                stopped.cancel()
            raise
    if failure:
        raise failure[0]
    return outcome[0]


def _socket_copy(fileno: int) -> socket.socket:
    """A socket object on a duplicate of ``fileno`` (the duplicate closed if none is made)."""
    copy = os.dup(fileno)
    try:
        return socket.socket(fileno=copy)
    except BaseException:
        os.close(copy)
        raise


class _ConnectionLost(Exception):
    """The connection broke before the transaction's COMMIT was sent: nothing landed."""

    def __init__(self, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.error = error


class _Refused(PoolTimeout):
    """No pooled connection came back, and the server refuses new ones (``_pg_refusals``)."""


def _caller_gone() -> psycopg.OperationalError:
    """What a hop raises once its caller stopped waiting: nobody reads it (or the store
    closed, and the caller gets ``StoreClosed``)."""
    return psycopg.OperationalError("the caller stopped waiting")


def map_pg_error(exc: BaseException, action: str) -> StoreError | InvalidValue:
    """A bounded ``StoreError`` (``retryable`` from the SQLSTATE) or ``InvalidValue``."""
    if isinstance(exc, _Refused):
        return StoreError(
            f"{action} failed: new connections to the database server fail (it is down, "
            "unreachable, shutting down or out of connection slots)",
            retryable=True,
        )
    if isinstance(exc, PoolTimeout):
        return StoreError(f"{action} failed: no database connection in time", retryable=True)
    state = getattr(exc, "sqlstate", None) or ""
    first = first_line(exc)
    if isinstance(exc, psycopg.DataError):
        # A read's argument is compared, not stored: say which the value failed.
        verb = "store" if action == "write" else "look up"
        return InvalidValue(f"PostgreSQL cannot {verb} this value: {first}")
    retryable = state[:2] in _RETRYABLE_CLASSES or state in _RETRYABLE_STATES
    if isinstance(exc, psycopg.OperationalError) and not state:
        retryable = True  # the connection broke before the server answered
    name = f"{state} " if state else ""
    return StoreError(f"{action} failed: {name}{type(exc).__name__}: {first}", retryable=retryable)


async def _clock_sample(conn: psycopg.AsyncConnection[Any]) -> ClockSample:
    """The server's clock as the store opens: the best of ``_CLOCK_SAMPLES`` readings.

    Each brackets the server's reading between two local ones; the one with
    the shortest round trip has the smallest error (at most half of it), and
    its ``skew`` counts that error in the machine's favour.
    """
    samples: list[ClockSample] = []
    for _ in range(_CLOCK_SAMPLES):
        before = local_reading(_machine_clock)
        row = await (await conn.execute(SERVER_CLOCK)).fetchone()
        after = local_reading(_machine_clock)
        samples.append(ClockSample.of(before, float(cast(Any, row)[0]), after))
    return min(samples, key=lambda sample: sample.trip)


def _unreachable(location: str, timeout_s: float, exc: Exception) -> StoreError:
    """The one-line, retryable error of a server that could not be reached in time."""
    first = first_line(exc, 200)
    return StoreError(
        f"cannot connect to {location} within {timeout_s:g} s: {first}", retryable=True
    )


class PgStore(RowStore):
    """One PostgreSQL database shared by any number of Hosts; see the module doc."""

    def __init__(
        self,
        pool: ConnectionPool[psycopg.Connection[Any]],
        *,
        url: str,
        connect_timeout_s: float,
        location: str,
        report: PgMigrationReport,
        clock: ServerClock,
        refusals: ConnectRefusals,
    ) -> None:
        super().__init__()
        self._pool = pool
        # Whether the server refuses the pool's new connections now: a checkout then
        # fails in a moment instead of waiting out connect_timeout_s.
        self._refusals = refusals
        # The server's clock, which every lease, claim and due time is in (``now``).
        self._clock = clock
        # One worker thread per pooled connection at most: a transaction is one hop.
        self._threads = anyio.CapacityLimiter(pool.max_size)
        self._url = url
        self._connect_timeout_s = connect_timeout_s
        self._location = location
        self.migration = report
        self._waits = WaitLimit()
        # Hops in flight; guarded by _calls_lock (taken by worker threads and the loop).
        self._calls: set[_Call] = set()
        self._calls_lock = threading.Lock()
        # Connections of the pool checked out by this store's calls (under _calls_lock).
        self._checked_out = 0
        # When the pool was last drained after a lost connection (monotonic; _calls_lock).
        self._drained_at = 0.0
        # The scopes of the calls waiting for their hop now (event loop only).
        self._waiting: set[anyio.CancelScope] = set()

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        pool_size: int = 8,
        connect_timeout_s: float = 10.0,
        statement_timeout_s: float = 30.0,
        backup_dir: Path | None = None,
        migrations: Sequence[Migration] | None = None,
        max_clock_skew_s: float = 2.0,
    ) -> PgStore:
        """Open a pool on ``url`` and bring the schema to this version.

        The password is never in ``url`` when it comes from configuration:
        libpq reads it from ``PGPASSWORD``, ``PGPASSFILE`` or ``~/.pgpass``.
        Raises ``StoreError`` (retryable) when the database cannot be reached
        within ``connect_timeout_s``, ``MigrationError`` when the schema cannot
        be brought to this version. ``backup_dir`` is where a verified
        ``pg_dump`` goes before an upgrade that drops data (none: refused).
        Raises ``ClockSkew`` when this machine's clock is more than
        ``max_clock_skew_s`` off the server's: leases follow the server's clock
        (``now``), but a machine that far off is wrong about every time it
        shows; later samples that find it so log a warning instead.
        """
        check_url(url)
        check_duration("max_clock_skew_s", max_clock_skew_s)
        check_count("pool_size", pool_size, 100)
        check_duration("connect_timeout_s", connect_timeout_s)
        check_duration("statement_timeout_s", statement_timeout_s)
        location = redact_url(url)
        # The server's side of the keepalives too: a backend whose client machine vanished
        # between transactions (holding the writer lock of an ``alone`` run) is ended in
        # seconds, not after the system's two-hour default.
        options = (
            f"-c statement_timeout={int(statement_timeout_s * 1000)} "
            f"-c idle_in_transaction_session_timeout={int(4 * statement_timeout_s * 1000)} "
            + " ".join(f"-c {name}={value}" for name, value in _SERVER_KEEPALIVES.items())
        )

        refusals = ConnectRefusals()

        def configure(conn: psycopg.Connection[Any]) -> None:
            configure_connection(conn)
            refusals.connected(pool.get_stats())

        pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={
                "autocommit": False,
                "cursor_factory": psycopg.ClientCursor,
                "row_factory": pg_row,
                "connect_timeout": max(1, int(connect_timeout_s)),
                "options": options,
                "application_name": "hostkit",
                **CLIENT_KEEPALIVES,
            },
            configure=configure,
            open=False,
            timeout=connect_timeout_s,
            reconnect_timeout=_RECONNECT_GIVE_UP_S,
            name="hostkit",
        )
        try:
            # One direct connection first (it migrates): when the server cannot be reached
            # its error is the reason shown, and the pool never logs its retries.
            try:
                migrating = await psycopg.AsyncConnection.connect(
                    url,
                    autocommit=True,
                    connect_timeout=max(1, int(connect_timeout_s)),
                    options=options,
                    application_name="hostkit-migrate",
                    # Its waits (another Host's upgrade: up to 900 s) must end on a
                    # partition too, not at the kernel's two-hour keepalive.
                    **CLIENT_KEEPALIVES,
                )
            except psycopg.Error as exc:
                raise _unreachable(location, connect_timeout_s, exc) from exc
            # The migration's wait for another Host's upgrade, before there is a store to limit.
            opening = WaitLimit()
            follow_opening_limit(opening.limit)
            async with migrating as conn:

                async def checked_and_upgraded() -> tuple[ClockSample, PgMigrationReport]:
                    status = conn.info.parameter_status("server_encoding")
                    refused = encoding_refusal(status, location)
                    if refused is not None:
                        raise refused
                    sample = await _clock_sample(conn)
                    if abs(sample.skew) > max_clock_skew_s:
                        raise ClockSkew(
                            skew_s=sample.skew, max_skew_s=max_clock_skew_s, database=location
                        )
                    report = await upgrade(
                        conn,
                        migrations=PG_MIGRATIONS if migrations is None else migrations,
                        location=location,
                        backup=None
                        if backup_dir is None
                        else functools.partial(dump_and_verify, url, backup_dir, location=location),
                        limit=opening,
                    )
                    return sample, report

                sample, report = await _ended_when_cancelled(conn, checked_and_upgraded)
            try:
                await anyio.to_thread.run_sync(
                    functools.partial(pool.open, wait=True, timeout=connect_timeout_s)
                )
            except (PoolTimeout, psycopg.Error) as exc:
                raise _unreachable(location, connect_timeout_s, exc) from exc
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(functools.partial(pool.close, timeout=5.0))
            raise
        store = cls(
            pool,
            url=url,
            connect_timeout_s=connect_timeout_s,
            location=location,
            report=report,
            clock=ServerClock(sample, max_skew_s=max_clock_skew_s, database=location),
            refusals=refusals,
        )
        # The opening's own lock wait (the migration's) followed the opening's limit, and a
        # cancellation ends it (psycopg cancels the statement). What the owner writes next
        # (recovery) may be shielded: it follows the limit the store was opened under.
        follow_opening_limit(store.limit_waits)
        return store

    async def aclose(self) -> None:
        """Close the pool; idempotent. Scopes issued by this open stop verifying."""
        if self._closed:
            return
        self._closed = True
        try:
            self._keys.close()
        finally:
            # A hop still in flight holds its connection outside the pool, which close()
            # leaves alone: cut it, so its thread ends (AnyIO's threads are not daemons).
            with self._calls_lock:
                calls = list(self._calls)
            for call in calls:
                self._interrupt(call)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(
                    functools.partial(self._pool.close, timeout=_CLOSE_JOIN_S),
                    abandon_on_cancel=True,
                )

    @property
    def location(self) -> str:
        return self._location

    def now(self) -> float:
        """The server's clock as last sampled (``_pg_clock``): no round trip."""
        return self._clock.now()

    @contextlib.contextmanager
    def _checkout(self, call: _Call, timeout_s: float) -> Iterator[psycopg.Connection[Any]]:
        """``pool.connection(timeout_s)``, except that a wait for a connection ends within
        ``_CHECKOUT_SLICE_S`` of its caller giving up. The pool cannot be told to stop a
        wait, and a caller cancelled with no deadline would otherwise leave its thread
        waiting out the whole timeout, ahead of live callers in the pool's queue."""
        raw = self._getconn(call, timeout_s)
        with self._calls_lock:
            self._checked_out += 1
        try:
            with raw:  # as the pool's own: commit on success, roll back on an error
                yield raw
        finally:
            self._pool.putconn(raw)
            with self._calls_lock:
                self._checked_out -= 1

    def _getconn(self, call: _Call, timeout_s: float) -> psycopg.Connection[Any]:
        """A pooled connection within ``timeout_s``; ``_Refused`` as soon as none came
        back within a short slice while the server refuses new ones (the pool would
        wait the whole timeout: a down server then fails each call in a moment).

        Not while a connection of this store is checked out: a server with no slot
        left refuses the pool's growth while those work, and one comes back soon.
        """
        until = time.monotonic() + timeout_s
        while True:
            left = until - time.monotonic()
            refused = self._refused()
            slice_s = _REFUSED_SLICE_S if refused else _CHECKOUT_SLICE_S
            try:
                return self._pool.getconn(timeout=max(_MIN_CHECKOUT_S, min(left, slice_s)))
            except PoolTimeout:
                with self._calls_lock:
                    gone = call.gave_up()
                if gone:
                    raise _caller_gone() from None
                if self._refused():
                    raise _Refused() from None
                if left <= slice_s:
                    raise

    def _refused(self) -> bool:
        """Whether the server refuses new connections and none of this store's is out."""
        with self._calls_lock:
            if self._checked_out:
                return False
        return self._refusals.refusing(self._pool.get_stats())

    @contextlib.contextmanager
    def _holding(self, call: _Call, raw: psycopg.Connection[Any]) -> Any:
        """Register ``raw`` as ``call``'s while the hop uses it (a caller gone already:
        give it back unused). The socket is copied here, on the thread that owns the
        connection, so a cut never reaches a descriptor the connection closed meanwhile
        (and the system gave to another)."""
        with self._calls_lock:
            if call.abandoned:
                raise _caller_gone()
            if self._closed:  # aclose() took its snapshot of the calls to cut already
                raise PoolClosed("the store is closing")
            try:
                call.sock = _socket_copy(raw.fileno())
            except OSError as exc:  # out of file descriptors: nothing ran yet
                raise StoreError(
                    f"the database call could not start: {exc.strerror}", retryable=True
                ) from None
            call.checked_out_at = time.monotonic()
            self._calls.add(call)
        try:
            yield
        finally:
            with self._calls_lock:  # before the pool gets it back: never cut a reused one
                sock, call.sock = call.sock, None
                self._calls.discard(call)
                abandoned = call.gave_up()
            # Unregistered: no cut can reach it now, and the event loop never waits on
            # these closes for the lock.
            if sock is not None:
                sock.close()
            if abandoned:
                raw.close()  # maybe cut after its last statement: never back as idle

    def limit_waits(self, seconds: float) -> None:
        self._waits.limit(seconds)
        # Calls already waiting end by the limit too (their own scope had no such bound).
        deadline = self._silent_server_deadline()
        for scope in self._waiting:
            scope.deadline = min(scope.deadline, deadline)

    def _silent_server_deadline(self) -> float:
        """Under ``limit_waits``: when a call stops waiting for a server that does not answer
        (past the lock timeout, so a server that answers reports its own first)."""
        left = self._waits.left_s(_MAX_LOCK_WAIT_S)
        return anyio.current_time() + left + _SILENT_SERVER_MARGIN_S

    def _lock_timeout(self) -> str | None:
        """Under the limit: how long a statement may wait for a lock, as ``lock_timeout``
        takes it (what is left of the limit; 0 would mean no bound)."""
        if self._waits.until is None:
            return None
        return f"{max(1, int(self._waits.left_s(_MAX_LOCK_WAIT_S) * 1000))}ms"

    async def watch_inbox(self, wake: Callable[[], None]) -> None:
        """LISTEN for ready inbounds and call ``wake()`` at each; until cancelled."""
        if self._closed:
            raise StoreClosed()
        await listen(self._url, INBOX_CHANNEL, wake, connect_timeout_s=self._connect_timeout_s)

    async def fold_after_retention(self) -> None:
        """Fold in a transaction of its own (``fold_alone``). Best effort: the pass's rows
        are gone and its report stands; the deltas a failed fold leaves are folded by
        the next claim or pass."""
        with contextlib.suppress(StoreError):
            await self.write(fold_alone)

    # -- transactions ----------------------------------------------------------------

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in one SERIALIZABLE transaction; rerun it on a lost race.

        ``fn`` may run more than once (each earlier run rolled back), so it
        must not act outside the database. A cancelled caller stops waiting at
        once and the hop's connection is cut: the transaction rolls back unless
        its COMMIT was already sent (then its outcome is unknown to the caller,
        as for any deadline: read the state again).
        """
        for run in range(_OPTIMISTIC_RUNS + 1):
            alone = run == _OPTIMISTIC_RUNS
            try:
                return await self._transaction(fn, read_only=False, alone=alone)
            except psycopg.Error as exc:
                if getattr(exc, "sqlstate", None) not in _RERUN_STATES or alone:
                    raise map_pg_error(exc, "write") from exc
            await anyio.sleep(random.uniform(0.001, 0.004) * (run + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in one REPEATABLE READ, READ ONLY transaction (one snapshot)."""
        try:
            return await self._transaction(fn, read_only=True, alone=False)
        except psycopg.Error as exc:
            raise map_pg_error(exc, "read") from exc

    async def _transaction(
        self, fn: Callable[[sqlite3.Connection], T], *, read_only: bool, alone: bool
    ) -> T:
        if self._closed:
            raise StoreClosed()
        # A store call is a cancellation point, as on SQLite.
        await anyio.lowlevel.checkpoint_if_cancelled()
        action = "read" if read_only else "write"
        try:
            # The caller stops waiting at its own deadline (a frozen server answers
            # nothing, and statement_timeout is the server's), and under limit_waits at
            # the limit, whatever shields the caller holds; the hop is then cut off.
            with anyio.CancelScope() as limit:
                if self._waits.until is not None:
                    limit.deadline = self._silent_server_deadline()
                # An abandoned thread waits for a connection hardly longer than its
                # caller would have: threads left behind by callers that gave up (a
                # renewal retried through an outage) never pile up ahead of live callers.
                # The margin lets the caller's own deadline end its wait, not a timeout.
                until = min(anyio.current_effective_deadline(), limit.deadline)
                left = max(0.0, until - anyio.current_time())
                checkout_until = time.monotonic() + left + _SILENT_SERVER_MARGIN_S
                call = _Call(checkout_until)
                job = functools.partial(self._run, fn, call, read_only=read_only, alone=alone)
                self._waiting.add(limit)
                try:
                    return await anyio.to_thread.run_sync(
                        job, limiter=self._threads, abandon_on_cancel=True
                    )
                except anyio.get_cancelled_exc_class():
                    self._interrupt(call)
                    raise
                finally:
                    self._waiting.discard(limit)
        except PoolClosed:
            raise StoreClosed() from None
        except PoolTimeout as exc:  # before psycopg.Error: the pool's errors are its kind
            raise map_pg_error(exc, action) from exc
        except psycopg.Error:
            with self._calls_lock:
                cut_by_close = self.closed and call.gave_up()
            if cut_by_close:  # aclose() cut the hop before its COMMIT: nothing landed
                raise StoreClosed() from None
            raise
        except sqlite3.Error as exc:
            # A constraint the row function did not expect (PgConnection raises sqlite3's class).
            raise map_sqlite_error(exc, action) from exc
        except UnicodeEncodeError:  # fn's text, not the database: rolled back, nothing stored
            raise InvalidValue(UNSTORABLE_TEXT) from None
        # Only the limit ends the block without a return or an exception.
        with self._calls_lock:
            commit_sent = call.commit_sent
        if read_only or not commit_sent:
            raise StoreError(
                f"{action} failed: the database did not answer in time", retryable=True
            )
        # The hop sent its COMMIT: never say "nothing was stored".
        raise StoreOutcomeUnknown(
            "the database did not answer in time; whether the write landed is unknown: "
            "read the state again before retrying"
        )

    def _interrupt(self, call: _Call) -> None:
        """Stop waiting for ``call``'s hop: cut its connection's socket (the thread's wait
        ends at once with a lost connection, which the pool then discards); never cancel
        through the server, which may be the thing not answering."""
        with self._calls_lock:
            call.abandoned = True
            if call.sock is not None:
                # The copy: shutdown() acts on the connection itself, close() on the copy.
                with contextlib.suppress(OSError):
                    call.sock.shutdown(socket.SHUT_RDWR)

    def _run(
        self, fn: Callable[[sqlite3.Connection], T], call: _Call, *, read_only: bool, alone: bool
    ) -> T:
        """The whole transaction, on a worker thread; rerun when its connection was lost.

        A pooled connection can be dead without the pool knowing (a server
        restart, a failover, a terminated backend). A transaction whose
        connection broke before its COMMIT was sent committed nothing, so it
        is run again on a connection the pool has checked, instead of failing
        the caller once per dead pooled connection.
        """
        for run in range(_LOST_CONNECTION_RUNS + 1):
            try:
                return self._attempt(fn, call, read_only=read_only, alone=alone)
            except _ConnectionLost as lost:
                if call.abandoned:
                    raise lost.error from None  # nobody waits (or the store closed): never rerun
                if run == _LOST_CONNECTION_RUNS:
                    # Whichever class reported it: a lost connection is worth a later try.
                    action = "read" if read_only else "write"
                    raise StoreError(
                        f"{action} failed: the database connection was lost on every try "
                        f"({first_line(lost.error)})",
                        retryable=True,
                    ) from lost.error
                self._drain_after(call)
        raise AssertionError("unreachable")  # pragma: no cover

    def _drain_after(self, call: _Call) -> None:
        """Dispose of every idle connection once per lost one: what lost it (a restart, a
        failover) most likely left the others dead too.

        Closed, never pinged: a ping waits on the server, which may be the thing not
        answering, and nothing could cut it. A connection checked out before the
        last drain was lost to what that drain answered (the pool closes it when it
        comes back), so the calls that lost theirs at once drain once, not each.
        """
        with self._calls_lock:
            if call.checked_out_at <= self._drained_at:
                return
            self._drained_at = time.monotonic()
        self._pool.drain()

    def _sample_clock(self, raw: psycopg.Connection[Any]) -> None:
        """Sample the server's clock on ``raw`` before the call's transaction begins: every
        ``RESAMPLE_S`` one call pays for it (a BEGIN, the reading, a ROLLBACK); a sample
        that fails keeps the last one, and a connection it finds lost is one lost before
        the call's own transaction (rerun)."""
        sample: ClockSample | None = None
        try:
            before = local_reading(_machine_clock)
            row = raw.execute(SERVER_CLOCK).fetchone()
            after = local_reading(_machine_clock)
            raw.rollback()
            sample = ClockSample.of(before, float(cast(Any, row)[0]), after)
        except psycopg.Error as exc:
            with contextlib.suppress(psycopg.Error):
                raw.rollback()
            if raw.broken:
                raise _ConnectionLost(exc) from exc  # nothing of the call ran yet
        finally:
            self._clock.sampled(sample)

    def _attempt(
        self, fn: Callable[[sqlite3.Connection], T], call: _Call, *, read_only: bool, alone: bool
    ) -> T:
        """Checkout, run, commit, return: one try."""
        checkout_s = max(
            _MIN_CHECKOUT_S,
            min(
                self._waits.left_s(self._connect_timeout_s),
                call.checkout_until - time.monotonic(),
            ),
        )
        with self._checkout(call, checkout_s) as raw, self._holding(call, raw):
            if self._clock.sample_due():
                self._sample_clock(raw)
            if alone:
                # Session-level, before the transaction's snapshot: it waits for every
                # writer in flight, and the snapshot then sees all of them.
                try:
                    if (lock_timeout := self._lock_timeout()) is not None:
                        raw.execute(SET_LOCK_TIMEOUT, [lock_timeout])
                    raw.execute("SELECT pg_advisory_lock(%s)", [WRITE_LOCK])
                    raw.commit()
                except psycopg.Error as exc:
                    lost = raw.broken
                    raw.close()  # never back in the pool holding (or awaiting) the lock
                    if lost:
                        raise _ConnectionLost(exc) from exc
                    raise
                except BaseException:
                    raw.close()
                    raise
            try:
                raw.read_only = read_only
                raw.isolation_level = (
                    psycopg.IsolationLevel.REPEATABLE_READ
                    if read_only
                    else psycopg.IsolationLevel.SERIALIZABLE
                )
                # The lock timeout goes with the first statement: a claim sets its
                # isolation level before that (``PgConnection.read_committed``).
                conn = PgConnection(raw, writer=not read_only, lock_timeout=self._lock_timeout())
                try:
                    result = fn(cast(sqlite3.Connection, conn))
                except BaseException as exc:
                    with contextlib.suppress(psycopg.Error):
                        raw.rollback()  # a broken connection is discarded by the pool
                    if isinstance(exc, psycopg.Error) and raw.broken:
                        raise _ConnectionLost(exc) from exc  # before COMMIT: nothing landed
                    raise
                with self._calls_lock:
                    if call.abandoned:  # cut already: a COMMIT now could only fail
                        raise _caller_gone()
                    call.commit_sent = True
                try:
                    raw.commit()
                except psycopg.Error as exc:
                    # Decided by the connection, not the error's class: an error the server
                    # sent back on a live connection rolled the transaction back (once its
                    # commit record is written, PostgreSQL fails only by PANIC, which breaks
                    # the connection).
                    if getattr(exc, "sqlstate", None) and not raw.broken:
                        raise
                    if read_only:  # a read stored nothing: lost is lost, rerun it
                        if raw.broken:
                            raise _ConnectionLost(exc) from exc
                        raise
                    # No answer to the COMMIT: it may or may not have landed.
                    raise StoreOutcomeUnknown(
                        "the connection broke during COMMIT; whether the write landed is "
                        "unknown: read the state again before retrying"
                    ) from exc
                return result
            finally:
                if alone:
                    try:
                        raw.rollback()
                        raw.execute("SELECT pg_advisory_unlock(%s)", [WRITE_LOCK])
                        raw.commit()
                    except BaseException:
                        raw.close()  # the server releases a closed session's lock
