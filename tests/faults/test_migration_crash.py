"""kill -9 in the middle of a schema upgrade: the old database survives and upgrades later."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from hostkit.store import SCHEMA_VERSION, RuntimeStore
from tests.contract.test_store_migrations import make_v1
from tests.support import file_bytes, sigkill_when

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# An upgrade whose extra step writes ~200 MB inside the migration transaction, so the
# process is certainly mid-transaction (uncommitted frames in the WAL) when it is killed.
CHILD = textwrap.dedent(
    """
    import sys
    import anyio
    from hostkit.store import MIGRATIONS, Migration, RuntimeStore

    heavy = Migration(len(MIGRATIONS) + 1, "heavy", (
        "CREATE TABLE filler (x BLOB)",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) "
        "INSERT INTO filler SELECT randomblob(1000) FROM n",
    ))

    async def main() -> None:
        await RuntimeStore.open(sys.argv[1], migrations=(*MIGRATIONS, heavy))

    anyio.run(main)
    """
)


async def test_sigkill_mid_migration_leaves_old_database_recoverable(db_path: Path) -> None:
    await make_v1(db_path)
    before = hashlib.sha256(await file_bytes(db_path)).hexdigest()
    wal = anyio.Path(db_path.with_name("hostkit.db-wal"))

    async def mid_transaction() -> bool:
        # The backup is in place and the WAL holds uncommitted frames.
        return await wal.exists() and (await wal.stat()).st_size > 5_000_000

    argv = [sys.executable, "-c", CHILD, str(db_path)]
    await sigkill_when(argv, mid_transaction, what="it was killed mid-migration")
    assert hashlib.sha256(await file_bytes(db_path)).hexdigest() == before
    async with await RuntimeStore.open(db_path) as store:
        assert store.migration.backup_reused
        assert store.migration.to_version == SCHEMA_VERSION
        sessions = await store.read(lambda c: c.execute("SELECT COUNT(*) FROM sessions").fetchone())
        tables = await store.read(
            lambda c: c.execute(
                "SELECT COUNT(*) FROM sqlite_master WHERE name = 'filler'"
            ).fetchone()
        )
    assert sessions == (3,)
    assert tables == (0,)


# The backup is written under a file size limit below the database's size: the kernel
# refuses the write (EFBIG), as a full disk would, before anything is migrated.
SMALL_DISK = textwrap.dedent(
    """
    import resource, signal, sys
    import anyio
    from hostkit.errors import MigrationError
    from hostkit.store import RuntimeStore

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limit = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    async def main() -> None:
        try:
            await RuntimeStore.open(sys.argv[1])
        except MigrationError as exc:
            print("MigrationError", exc.message)
            return
        print("opened")

    anyio.run(main)
    """
)


async def test_a_backup_that_cannot_be_written_is_a_migration_error_and_leaves_nothing(
    db_path: Path,
) -> None:
    await make_v1(db_path)
    with contextlib.closing(sqlite3.connect(db_path)) as conn, conn:
        # Room for the WAL index and the upgrade's own writes, none for a 2 MB copy.
        conn.execute("CREATE TABLE filler (x BLOB)")
        conn.execute("INSERT INTO filler VALUES (randomblob(2000000))")
    before = hashlib.sha256(await file_bytes(db_path)).hexdigest()
    argv = [sys.executable, "-c", SMALL_DISK, str(db_path), str(1_000_000)]
    done = await anyio.run_process(argv, check=False)
    out = done.stdout.decode()
    assert out.startswith("MigrationError the backup could not be written"), (
        out + done.stderr.decode()
    )
    assert "nothing was migrated" in out
    assert hashlib.sha256(await file_bytes(db_path)).hexdigest() == before
    left = sorted(p.name for p in db_path.parent.iterdir() if ".backup" in p.name)
    assert left == []
    async with await RuntimeStore.open(db_path) as store:
        assert store.migration.to_version == SCHEMA_VERSION
