"""Fault clause: a database file deleted or replaced under a running Host takes no more writes.

SQLite keeps writing to a file that is open, even once its name is gone: a
``hostkit serve`` whose database an operator deleted would go on answering
webhooks 200 and running turns, and all of it would vanish at the next start
(a repeated event accepted again, run twice). Every write transaction first
checks, under the write lock, that the path still names the file the store
opened; when it does not, the write is refused (``DatabaseReplaced``, a
``StoreError``: a webhook answers 503 and the platform keeps the event) and
nothing is acknowledged.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from hostkit import DatabaseReplaced, StoreError
from hostkit.inbox import ChannelInbox, RetryPolicy
from hostkit.store import RuntimeStore
from tests.contract._inbox_adapters import envelope

pytestmark = pytest.mark.anyio


def delete(database: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)


def replace(database: Path) -> None:
    other = database.with_name("other.db")
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE t (x)")
    os.replace(other, database)


@pytest.mark.parametrize("mishap", [delete, replace], ids=["deleted", "replaced"])
async def test_no_write_is_taken_once_the_file_is_gone(
    tmp_path: Path, mishap: Callable[[Path], None]
) -> None:
    database = tmp_path / "hostkit.db"
    async with RuntimeStore.open(database) as store:
        inbox = ChannelInbox.on_store(store, policy=RetryPolicy(), owner="worker.a")
        first = await inbox.accept(envelope("evt-1", received_at=time.time()))
        assert first.disposition == "accepted"
        await anyio.to_thread.run_sync(mishap, database)
        with pytest.raises(DatabaseReplaced, match="deleted or replaced") as refused:
            await inbox.accept(envelope("evt-2", received_at=time.time()))
        assert isinstance(refused.value, StoreError)
        assert not refused.value.retryable
        # Every later write too, whatever it is: nothing is acknowledged into a lost file.
        with pytest.raises(DatabaseReplaced):
            await inbox.accept(envelope("evt-3", received_at=time.time()))


async def test_a_store_that_keeps_its_file_writes_on(tmp_path: Path) -> None:
    async with RuntimeStore.open(tmp_path / "hostkit.db") as store:
        inbox = ChannelInbox.on_store(store, policy=RetryPolicy(), owner="worker.a")
        for n in range(3):
            receipt = await inbox.accept(envelope(f"evt-{n}", received_at=time.time()))
            assert receipt.disposition == "accepted"


async def test_a_file_deleted_before_the_first_write_is_refused_too(tmp_path: Path) -> None:
    """The store knows its file from the moment it opened it, not from its first write."""
    database = tmp_path / "hostkit.db"
    async with RuntimeStore.open(database) as store:
        await anyio.to_thread.run_sync(delete, database)
        inbox = ChannelInbox.on_store(store, policy=RetryPolicy(), owner="worker.a")
        with pytest.raises(DatabaseReplaced):
            await inbox.accept(envelope("evt-1", received_at=time.time()))


async def test_an_interactive_transaction_is_refused_too(tmp_path: Path) -> None:
    database = tmp_path / "hostkit.db"
    async with RuntimeStore.open(database) as store:
        await anyio.to_thread.run_sync(replace, database)
        with pytest.raises(DatabaseReplaced):
            async with store.transaction():
                raise AssertionError("the transaction began on a replaced file")
