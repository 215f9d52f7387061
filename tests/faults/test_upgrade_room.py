"""An upgrade the free space beside the database cannot hold is refused before its backup.

Every pending step runs in one transaction: a step that rebuilds or rewrites a table keeps
each page it writes in the WAL until the commit, and the file grows by the new copy before
the old one is freed. A memory-heavy file upgraded from v22 peaked at well over twice the
room the check asked for when it counted a quarter of the file whatever the steps: the
backup was written, then the migration ran out of room.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from pathlib import Path

import anyio
import pytest

from hostkit.store import MIGRATIONS, RuntimeStore, _migrate, upgrade_room
from tests.support import in_mount_namespace

pytestmark = pytest.mark.anyio

MB = 1 << 20
# About 20 MiB: memory items and their FTS index, as an agent's memory grows.
MEMORY_ITEMS = 8000
FILL_MEMORY = """WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
    INSERT INTO memory_items (agent, principal_id, text, created_at)
    SELECT 'assistant', 'p' || (i % 50), replace(hex(randomblob(600)), 'A', ' '),
        '2026-01-01T00:00:00.000Z' FROM n"""


async def memory_heavy(path: Path, version: int) -> int:
    """A database at schema ``version`` (22 or later) whose bulk is memory items; its size."""
    async with await RuntimeStore.open(path, migrations=MIGRATIONS[:22]):
        pass

    def fill() -> None:
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("BEGIN")
            conn.execute(FILL_MEMORY, (MEMORY_ITEMS,))
            for step in MIGRATIONS[22:version]:
                for statement in step.statements:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version}")
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    await anyio.to_thread.run_sync(fill)
    return (await anyio.Path(path).stat()).st_size


def measured_peak(database: Path, version: int) -> int:
    """The bytes the upgrade adds beside the file at its peak: its backup (a copy of the
    file), the WAL of its one transaction at the commit, and the file's growth once that
    WAL is copied into it (the WAL is still there meanwhile)."""
    work = database.with_name("peak.db")
    shutil.copyfile(database, work)
    before = work.stat().st_size
    with contextlib.closing(sqlite3.connect(work, isolation_level=None)) as conn:
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("BEGIN IMMEDIATE")
        for step in MIGRATIONS[version:]:
            for statement in step.statements:
                conn.execute(statement)
            if step.backfill is not None:
                _migrate._fill(conn, step.backfill)
        conn.execute("COMMIT")
        wal = work.with_name("peak.db-wal").stat().st_size
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        grown = work.stat().st_size - before
    return before + wal + max(0, grown)


@pytest.mark.parametrize("version", [22, 23, 26])
@pytest.mark.sqlite_only("the SQLite file, its WAL and the free space beside them")
async def test_the_room_asked_holds_the_upgrade_s_peak(tmp_path: Path, version: int) -> None:
    """Counted from the tables the pending steps rewrite: at least the measured peak, and
    not a multiple of it."""
    db = tmp_path / "hostkit.db"
    await memory_heavy(db, version)
    asked = await anyio.to_thread.run_sync(upgrade_room, db, version)
    peak = await anyio.to_thread.run_sync(measured_peak, db, version)
    assert peak <= asked < 2 * peak


async def shared_attachments(path: Path, attachments: int, sessions: int) -> None:
    """A v25 database whose attachments are each named by a message in ``sessions``
    sessions: v26 writes a reference row (and an index entry) per message."""
    async with await RuntimeStore.open(path, migrations=MIGRATIONS[:25]):
        pass

    def fill() -> None:
        many = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("BEGIN")
            conn.execute(
                many + "INSERT INTO attachments (principal_id, ref, media_type, size, data, "
                "created_at) SELECT 'principal-1', lower(hex(randomblob(32))), 'text/plain', "
                "1, x'00', '2026-01-01T00:00:00.000Z' FROM n",
                (attachments,),
            )
            conn.execute(
                many + "INSERT INTO sessions (session_id, created_at) "
                "SELECT printf('ses_%028d', i), 'x' FROM n",
                (sessions,),
            )
            conn.execute(
                "INSERT INTO messages (message_id, session_id, seq, role, content, created_at) "
                "SELECT printf('msg_%d_%d', a.id, s.id), s.session_id, a.id, 'user', "
                "json_object('text', 'see', 'attachments', json_array(json_object('ref', a.ref))),"
                " 'x' FROM attachments a, sessions s"
            )
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    await anyio.to_thread.run_sync(fill)


@pytest.mark.sqlite_only("the SQLite file, its WAL and the free space beside them")
async def test_the_room_asked_holds_the_peak_of_writing_attachment_references(
    tmp_path: Path,
) -> None:
    """v26 writes a reference per message naming bytes: sized by those messages, not by
    the attachments' key index alone (asked 80 MiB where the peak was 154 MiB)."""
    db = tmp_path / "hostkit.db"
    await shared_attachments(db, 24_000, 5)
    asked = await anyio.to_thread.run_sync(upgrade_room, db, 25)
    peak = await anyio.to_thread.run_sync(measured_peak, db, 25)
    assert peak <= asked < 2 * peak


@pytest.mark.sqlite_only("the SQLite file and the free space beside it")
async def test_tables_that_cannot_be_sized_count_the_file_rewritten_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where dbstat cannot read the file (a rollback-journal writer's lock), each of the
    22 steps from v1 counted twice the file: twenty times the database was asked for."""
    db = tmp_path / "hostkit.db"
    size = await memory_heavy(db, 22)

    def locked(database: Path, names: set[str]) -> dict[str, int]:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(_migrate, "_btree_bytes", locked)
    asked = await anyio.to_thread.run_sync(upgrade_room, db, 1)
    assert size + 3 * size <= asked <= size + 3 * size + 16 * MB


@pytest.mark.sqlite_only("the SQLite file and the free space beside it")
async def test_an_upgrade_that_rewrites_nothing_big_asks_for_its_backup_and_a_margin(
    tmp_path: Path,
) -> None:
    """From v25 to v26: it writes a row per attachment, none here. No more than the old
    estimate (the backup, a quarter of the file, 16 MiB), which held there."""
    db = tmp_path / "hostkit.db"
    size = await memory_heavy(db, 25)
    asked = await anyio.to_thread.run_sync(upgrade_room, db, 25, MIGRATIONS[:26])
    assert asked <= size + size // 4 + 16 * MB


# Copies the v22 file onto a tmpfs with room for the old estimate (the backup, a quarter of
# the file and 16 MiB), not for the upgrade's peak, and opens it.
SMALL_DISK_UPGRADE = """
import asyncio, hashlib, json, shutil, subprocess, sys
from pathlib import Path

from hostkit.errors import MigrationError
from hostkit.store import RuntimeStore

source, size_mb = Path(sys.argv[1]), sys.argv[2]
disk = source.parent / "disk"
disk.mkdir()
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(disk)], check=True)
db = disk / "hostkit.db"
shutil.copyfile(source, db)
before = hashlib.sha256(db.read_bytes()).hexdigest()


async def upgrade():
    try:
        async with await RuntimeStore.open(db):
            return "upgraded"
    except MigrationError as exc:
        return str(exc)


said = asyncio.run(upgrade())
unchanged = hashlib.sha256(db.read_bytes()).hexdigest() == before
left = sorted(p.name for p in disk.iterdir() if ".backup" in p.name)
print(json.dumps(dict(said=said, unchanged=unchanged, left=left)))
"""


@pytest.mark.sqlite_only("the SQLite file's upgrade on a small file system")
async def test_an_upgrade_without_room_for_its_peak_is_refused_before_its_backup(
    tmp_path: Path,
) -> None:
    db = tmp_path / "hostkit.db"
    size = await memory_heavy(db, 22)
    old_estimate = size + size // 4 + 16 * MB
    disk_mb = (size + old_estimate) // MB + 8
    done = await anyio.to_thread.run_sync(
        in_mount_namespace, SMALL_DISK_UPGRADE, str(db), str(disk_mb)
    )
    assert "the upgrade needs about" in done["said"], json.dumps(done)
    assert "Nothing was changed" in done["said"]
    assert done["left"] == []
    assert done["unchanged"]
