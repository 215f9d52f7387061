"""Clause: the SQLite WAL is cut back once a reader that held it open is gone.

A reader holding a snapshot (an operator's ``sqlite3`` shell in a transaction,
a backup, a notebook cursor) keeps checkpoints from finishing, so the WAL
grows while writes go on: that is how WAL works. Without a size limit the
file then stayed that large until the last connection closed (a restart).
The writer sets ``journal_size_limit``: once the reader is gone and a
checkpoint lets the log start over, the file is cut back to the limit.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from hostkit.store import RuntimeStore
from hostkit.store import _connection as connection_module

pytestmark = [pytest.mark.anyio, pytest.mark.sqlite_only("the WAL is SQLite's")]

LIMIT = 256 * 1024
ROW = b"x" * 32 * 1024


def wal_size(db: Path) -> int:
    wal = db.with_name(db.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


async def test_the_wal_a_long_reader_grew_is_cut_back_after_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection_module, "WAL_SIZE_LIMIT", LIMIT)
    db = tmp_path / "hostkit.db"

    def insert(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO scratch (data) VALUES (?)", [ROW])

    async with RuntimeStore.open(db) as store:
        await store.write(lambda c: c.execute("CREATE TABLE scratch (data BLOB)"))
        reading, done = threading.Event(), threading.Event()

        def hold_a_snapshot() -> None:
            # Another process's reader, as an operator's shell holds one.
            reader = sqlite3.connect(db, isolation_level=None)
            try:
                reader.execute("BEGIN")
                reader.execute("SELECT count(*) FROM scratch").fetchone()
                reading.set()
                done.wait(60)
                reader.execute("COMMIT")
            finally:
                reader.close()

        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, hold_a_snapshot)
            await anyio.to_thread.run_sync(reading.wait, 30)
            for _ in range(200):  # 6.4 MB: past the autocheckpoint's 1000 pages
                await store.write(insert)
            grown = await anyio.to_thread.run_sync(wal_size, db)
            done.set()
        for _ in range(5):  # a checkpoint finishes, then the log starts over
            await store.write(insert)
        after = await anyio.to_thread.run_sync(wal_size, db)
    assert grown > 4 * 1024 * 1024, "the reader kept the checkpoints from finishing"
    assert after <= LIMIT + 64 * 1024, (grown, after)
