"""Opening a SQLite database that cannot be opened: advice, and nothing left behind.

An embedder may retry a failed open in one long-lived process, and an operator
may want to unmount or replace the file after it: a failed open holds no
descriptor, no POSIX lock and no thread of it, even while its error (whose
traceback references the opening's frames) is still alive. A full disk says
what to do instead of a bare ``disk I/O error``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import textwrap
import threading
from pathlib import Path

import anyio
import pytest

from hostkit.errors import HostkitError
from hostkit.store import RuntimeStore
from hostkit.store._sqlite import _open_failure

pytestmark = pytest.mark.anyio

ROOM = "free space beside the database (it needs room for its -wal and -shm files) and retry"


def descriptors_of(path: Path) -> list[str]:
    """This process's open descriptors on ``path`` or its -wal/-shm files."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(path)):
                found.append(target)
    return found


def write_garbage(path: Path) -> None:
    path.write_text("a note someone saved under the database's name\n")


def write_foreign(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(str(path))) as conn:
        conn.execute("CREATE TABLE other_app (x)")
        conn.commit()


@pytest.mark.parametrize("prepare", [write_garbage, write_foreign])
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
async def test_a_failed_open_keeps_no_descriptor_lock_or_thread(
    db_path: Path, prepare: object
) -> None:
    await anyio.to_thread.run_sync(prepare, db_path)  # type: ignore[arg-type]
    threads = threading.active_count()
    errors: list[HostkitError] = []
    for _ in range(3):
        with pytest.raises(HostkitError) as caught:
            await RuntimeStore.open(db_path)
        errors.append(caught.value)  # kept alive: its traceback may not hold the file open
    assert descriptors_of(db_path) == []
    assert threading.active_count() == threads
    # Nothing holds a lock on it: another connection takes the exclusive lock at once.
    with contextlib.closing(sqlite3.connect(str(db_path), timeout=0)) as other:
        other.execute("PRAGMA locking_mode = EXCLUSIVE")
        with contextlib.suppress(sqlite3.DatabaseError):  # the garbage file: not a database
            other.execute("BEGIN EXCLUSIVE")
            other.execute("ROLLBACK")
    assert len(errors) == 3


# Holds an exclusive lock on an empty file until stdin closes: an opener's first read waits.
HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("COMMIT")
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
async def test_an_open_cancelled_while_it_waits_keeps_no_descriptor(db_path: Path) -> None:
    """Cancelled while its connection waited for another process's lock, which then came
    free: the connection it went on to make is closed, not left to garbage collection."""
    await anyio.Path(db_path).write_bytes(b"")
    threads = threading.active_count()
    async with await anyio.open_process([sys.executable, "-c", HOLDER, str(db_path)]) as holder:
        assert holder.stdin is not None
        assert holder.stdout is not None
        with anyio.fail_after(30):
            assert b"locked" in await holder.stdout.receive()

        async def release_later() -> None:
            await anyio.sleep(1.0)
            assert holder.stdin is not None
            await holder.stdin.aclose()

        async with anyio.create_task_group() as group:
            group.start_soon(release_later)
            with anyio.move_on_after(0.3) as scope:
                await RuntimeStore.open(db_path, busy_timeout_s=10)
        assert scope.cancelled_caught
        with anyio.fail_after(30):
            assert await holder.wait() == 0
    assert descriptors_of(db_path) == []
    assert threading.active_count() == threads


# Files may grow to a few KB only (RLIMIT_FSIZE, as a full disk would refuse the writes):
# the database's shared-memory index (-shm, 32 KB) cannot be made.
SMALL_DISK = textwrap.dedent(
    """
    import resource, signal, sys
    import anyio
    from hostkit.errors import StoreError
    from hostkit.store import RuntimeStore

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    async def main() -> None:
        try:
            await RuntimeStore.open(sys.argv[1])
        except StoreError as exc:
            print("StoreError", exc.message)
            return
        print("opened")

    anyio.run(main)
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
async def test_an_open_on_a_full_disk_says_to_free_space(db_path: Path) -> None:
    async with await RuntimeStore.open(db_path):
        pass
    for suffix in ("-wal", "-shm"):
        await anyio.Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    done = await anyio.run_process([sys.executable, "-c", SMALL_DISK, str(db_path)], check=False)
    said = done.stdout.decode()
    assert said.startswith("StoreError opening"), said + done.stderr.decode()
    assert str(db_path) in said
    assert "SQLITE_IOERR" in said
    assert said.rstrip().endswith(ROOM)
    async with await RuntimeStore.open(db_path) as store:  # room again: it opens
        assert store.migration.backup is None


def test_full_disk_advice_covers_every_io_error_code() -> None:
    """SQLITE_FULL and every extended SQLITE_IOERR_* share the advice (by primary code)."""
    codes = {"SQLITE_FULL": sqlite3.SQLITE_FULL, "SQLITE_IOERR_READ": sqlite3.SQLITE_IOERR_READ}
    for name, code in codes.items():
        exc = sqlite3.OperationalError("disk I/O error")
        exc.sqlite_errorcode = code  # type: ignore[attr-defined]
        exc.sqlite_errorname = name  # type: ignore[attr-defined]
        failure = _open_failure(exc, Path("/srv/hostkit.db"))
        assert failure.message.endswith(ROOM)
