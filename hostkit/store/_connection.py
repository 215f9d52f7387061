"""One SQLite connection on its own aiosqlite thread, with a one-hop ``run``.

aiosqlite executes each statement as one hop to its thread, so a transaction
of several statements pays several hops: at synchronous=NORMAL that costs about
half the commit throughput (bench/store_bench.py); at FULL the fsync dominates.
``DbConnection.run`` ships a whole synchronous function to the connection's
thread in one hop instead. aiosqlite has no public
API for that, so this module is the one place that uses its connection's
private work queue, exactly as ``Connection._execute`` does (its dependency
range is pinned in pyproject.toml and a test checks the hop).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

import aiosqlite
import anyio

__all__ = [
    "LOCK_HELD",
    "WAL_SIZE_LIMIT",
    "DbConnection",
    "Synchronous",
    "create_private",
    "open_connection",
    "primary_code",
]

T = TypeVar("T")

Synchronous = Literal["EXTRA", "FULL", "NORMAL"]

_JOIN_TIMEOUT_S = 10.0
# Between two tries of switching a file to WAL while another process holds it.
_WAL_PAUSE_S = 0.01


class DbConnection:
    """A sqlite3 connection owned by one aiosqlite worker thread."""

    def __init__(self, aio: aiosqlite.Connection, raw: sqlite3.Connection) -> None:
        self._aio = aio
        self._raw = raw

    @property
    def aio(self) -> aiosqlite.Connection:
        """The aiosqlite connection, for statement-at-a-time interactive transactions."""
        return self._aio

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` on the connection's thread: one hop, however many statements."""
        return await self.start(fn)

    def start(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue ``fn(connection)`` on the connection's thread; its result, as a future.

        For a caller that must not wait in a task (the group-commit writer
        starts its drain from a callback). ``ValueError`` when the connection
        is closed, as aiosqlite says it.
        """
        aio = self._aio
        if not aio._running or not aio._connection:
            raise ValueError("Connection closed")
        raw = self._raw
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        aio._tx.put_nowait((future, lambda: fn(raw)))
        return future

    async def close(self) -> None:
        await self._aio.close()


# Another connection's lock: its holder ends it, then the same statement may succeed.
LOCK_HELD = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def primary_code(exc: sqlite3.Error) -> int | None:
    """The primary SQLite result code of ``exc`` (extended codes share its low byte)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _enter_wal(raw: sqlite3.Connection, wait_s: float) -> None:
    """``PRAGMA journal_mode = WAL``, tried again for ``wait_s`` while another process
    holds the file (it may be switching a new file to WAL at the same moment).

    SQLite answers that pragma "database is locked" at once, without its busy
    handler; once any process has switched the file, the pragma changes nothing.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            raw.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if primary_code(exc) not in LOCK_HELD:
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(_WAL_PAUSE_S)  # the connection's own thread, not the event loop


def create_private(path: Path | str) -> None:
    """Create ``path`` empty, readable by its owner only, unless it exists (blocking).

    A database holds transcripts, inbox payloads and approvals' raw arguments; SQLite
    would create it (and then its -wal and -shm, which take the file's mode) readable
    by every local user under the usual umask.
    """
    # It exists; or it cannot be made here, and SQLite's own open then says why.
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600))


# The size the WAL file is cut back to once a checkpoint let it start over (bytes).
WAL_SIZE_LIMIT = 64 * 1024 * 1024


async def open_connection(
    path: Path,
    *,
    synchronous: Synchronous,
    busy_timeout_ms: int,
    query_only: bool = False,
    admit: Callable[[sqlite3.Connection], object] | None = None,
) -> DbConnection:
    """Open ``path`` in WAL mode with explicit transactions (``isolation_level=None``).

    ``admit(connection)`` runs before anything is written to the file (the switch to
    WAL is a lasting change to its header): it raises to refuse a file that is not
    the caller's, which is then left as it was. A failed open closes its connection
    and ends its thread: nothing of it is left holding the file.
    """
    holder: list[sqlite3.Connection] = []

    def configure(raw: sqlite3.Connection) -> None:
        raw.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        raw.execute("PRAGMA foreign_keys = ON")
        if admit is not None:
            admit(raw)
        if not query_only:
            _enter_wal(raw, busy_timeout_ms / 1000)
            # A reader that holds a snapshot (an operator's sqlite3 shell, a backup) keeps
            # checkpoints from finishing, and the WAL grows meanwhile; without a limit the
            # file keeps that size after the reader is gone. With one, the WAL is cut back
            # to it each time a checkpoint lets the log start over.
            raw.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        raw.execute(f"PRAGMA synchronous = {synchronous}")
        if query_only:
            raw.execute("PRAGMA query_only = ON")

    def connector() -> sqlite3.Connection:
        # Runs on the aiosqlite thread, so the connection is created where it is used.
        if not query_only:
            create_private(path)
        # Not bound to this thread: a connection that outlives a cancelled open is closed
        # from the event loop's side, once this thread has ended.
        raw = sqlite3.connect(
            str(path),
            isolation_level=None,
            timeout=busy_timeout_ms / 1000,
            check_same_thread=False,
        )
        try:
            configure(raw)
        except BaseException:
            raw.close()  # its descriptor and POSIX locks go now, not at garbage collection
            raise
        holder.append(raw)
        return raw

    aio = aiosqlite.Connection(connector, iter_chunk_size=64)
    # A daemon: a store nobody closed (a script that returned, a kernel shut down) must
    # not keep the interpreter alive, which joins other threads before any atexit hook
    # (the notebook's emergency stop) runs. What was committed is on disk; an open
    # transaction is rolled back like any crash's.
    aio._thread.daemon = True
    try:
        await aio
    except BaseException:
        # aiosqlite stops its worker thread on a failed connect without letting us await
        # it; join it here, or it may report to this event loop after the loop closed.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(aio._thread.join, _JOIN_TIMEOUT_S)
        # Cancelled while the connector ran: it finished after aiosqlite gave up on it, so
        # nobody closed what it opened. The thread has ended; nothing else uses it.
        if holder and not aio._thread.is_alive():
            holder[0].close()
        raise
    return DbConnection(aio, holder[0])
