"""The SQLite database, its -wal and -shm, and a migration's backup are readable by their
owner only, whatever the umask: they hold transcripts, inbox payloads and the raw
arguments of pending approvals (a secret-named field included, until its one execution).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from hostkit.store import RuntimeStore

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent.parent / "golden"


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask (022): what SQLite would create readable by every local user."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def _others_may_read(path: Path) -> bool:
    return bool(stat.S_IMODE(path.stat().st_mode) & 0o077)


async def test_a_new_database_and_its_wal_are_private(tmp_path: Path, open_umask: None) -> None:
    database = tmp_path / "hostkit.db"
    async with await RuntimeStore.open(database) as store:
        await store.create_session(owner_kind="system", principal_id="suite")
        files = [database, tmp_path / "hostkit.db-wal", tmp_path / "hostkit.db-shm"]
        assert all(f.exists() for f in files)
        assert [f.name for f in files if _others_may_read(f)] == []


async def test_a_migrations_backup_is_private(tmp_path: Path, open_umask: None) -> None:
    database = tmp_path / "hostkit.db"
    await anyio.to_thread.run_sync(shutil.copyfile, GOLDEN / "hostkit-v13.db", database)
    database.chmod(0o600)
    async with await RuntimeStore.open(database) as store:
        backup = store.migration.backup  # type: ignore[attr-defined]
    assert backup is not None
    assert not _others_may_read(Path(backup))
