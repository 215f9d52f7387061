"""Fault clause: a database file deleted or replaced under a running Host takes no more writes.

SQLite keeps writing to a file that is open, even once its name is gone: a
``hostkit serve`` whose database an operator deleted would go on answering
webhooks 200 and running turns, and all of it would vanish at the next start
(a repeated event accepted again, run twice). Every write transaction first
checks, under the write lock, that the path still names the file the store
opened; when it does not, the write is refused (``DatabaseReplaced``, a
``StoreError``: a webhook answers 503 and the platform keeps the event) and
nothing is acknowledged.

The same holds for the database's ``-wal`` and ``-shm`` files (a "cleanup"
deleting them, or another file put there): the store would go on committing
into a WAL no later open finds (a crash then loses every commit since the last
checkpoint), and a second process opening the database would make a fresh WAL
and index of its own and write apart from the first. Such a write is refused
too, naming the file; a graceful close then writes what the store committed
before back into the database, unless another process made new ``-wal`` and
``-shm`` files meanwhile, whose commits the close then leaves as they are.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from hostkit import DatabaseReplaced, StoreError
from hostkit.inbox import ChannelInbox, RetryPolicy
from hostkit.store import RuntimeStore
from hostkit.types import InboundEnvelope
from tests.contract._inbox_adapters import envelope

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).with_name("inbox_store_worker.py")
PROCESS_S = 60.0


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


def delete_wal(database: Path) -> None:
    Path(f"{database}-wal").unlink()


def delete_shm(database: Path) -> None:
    Path(f"{database}-shm").unlink()


def delete_both(database: Path) -> None:
    delete_wal(database)
    delete_shm(database)


def replace_wal(database: Path) -> None:
    """Another file (a copy, as a careless backup and restore would leave) under the name."""
    wal = Path(f"{database}-wal")
    shutil.copyfile(wal, wal.with_name("copy-wal"))
    os.replace(wal.with_name("copy-wal"), wal)


@pytest.mark.parametrize(
    ("mishap", "named"),
    [(delete_wal, "-wal"), (delete_shm, "-shm"), (delete_both, "-wal"), (replace_wal, "-wal")],
    ids=["wal-deleted", "shm-deleted", "both-deleted", "wal-replaced"],
)
async def test_no_write_is_taken_once_the_wal_or_shm_is_gone(
    tmp_path: Path, mishap: Callable[[Path], None], named: str
) -> None:
    database = tmp_path / "hostkit.db"
    async with RuntimeStore.open(database) as store:
        inbox = ChannelInbox.on_store(store, policy=RetryPolicy(), owner="worker.a")
        first = await inbox.accept(envelope("evt-1", received_at=time.time()))
        assert first.disposition == "accepted"
        await anyio.to_thread.run_sync(mishap, database)
        with pytest.raises(DatabaseReplaced, match=f"{database}{named} beside the database"):
            await inbox.accept(envelope("evt-2", received_at=time.time()))
        with pytest.raises(DatabaseReplaced, match="stop every process using the database"):
            async with store.transaction():
                raise AssertionError("the transaction began beside a deleted WAL")
    # Nothing acknowledged is lost: the graceful close wrote evt-1 back into the database,
    # and evt-2, never acknowledged, the platform sends again.
    async with RuntimeStore.open(database) as store:
        inbox = ChannelInbox.on_store(store, policy=RetryPolicy(), owner="worker.a")
        again = await inbox.accept(envelope("evt-1", received_at=time.time()))
        assert (again.disposition, again.inbound_id) == ("duplicate", first.inbound_id)
        retried = await inbox.accept(envelope("evt-2", received_at=time.time()))
        assert retried.disposition == "accepted"


async def accept_in_another_process(tmp_path: Path, database: Path, key: str) -> str:
    """A second Host process opens the database, accepts ``key`` and closes; its disposition."""
    (tmp_path / "go").write_text("go")
    out = tmp_path / f"{key}.jsonl"
    options = {
        "db": str(database),
        "out": str(out),
        "mode": "accept",
        "key": key,
        "tasks": 1,
        "ready": str(tmp_path / f"ready-{key}"),
        "go": str(tmp_path / "go"),
    }
    with anyio.fail_after(PROCESS_S):
        done = await anyio.run_process(
            [sys.executable, str(WORKER), json.dumps(options)], check=False
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    (receipt,) = [json.loads(line) for line in out.read_text().splitlines()]
    return str(receipt["disposition"])


def worker_envelope(key: str) -> InboundEnvelope:
    """The envelope ``inbox_store_worker.py`` accepts for ``key``."""
    return InboundEnvelope(
        channel_instance_id="webhook.main",
        platform_event_key=key,
        conversation_key="chat-1",
        principal_key="user-1",
        authenticated_by="hmac",
        received_at=1_800_000_000.0,
        payload="hello",
    )


async def test_another_process_opening_and_closing_the_database_trips_nothing(
    tmp_path: Path,
) -> None:
    """SQLite's last connection unlinks the -wal and -shm; another process's close is not
    the last while this store is open, so this store writes on."""
    database = tmp_path / "hostkit.db"
    async with RuntimeStore.open(database) as store:
        inbox = ChannelInbox.on_store(store, policy=RetryPolicy(), owner="worker.a")
        await inbox.accept(worker_envelope("evt-a1"))
        assert await accept_in_another_process(tmp_path, database, "evt-b") == "accepted"
        receipt = await inbox.accept(worker_envelope("evt-a2"))
        assert receipt.disposition == "accepted"
    async with RuntimeStore.open(database) as store:
        inbox = ChannelInbox.on_store(store, policy=RetryPolicy(), owner="worker.a")
        for key in ("evt-a1", "evt-b", "evt-a2"):
            assert (await inbox.accept(worker_envelope(key))).disposition == "duplicate"


async def test_a_process_that_opened_the_database_after_the_wal_was_deleted_keeps_its_writes(
    tmp_path: Path,
) -> None:
    """The second process made a fresh WAL: this store refuses to write beside it, and its
    close does not write its older commits over the other's (nor unlink its WAL)."""
    database = tmp_path / "hostkit.db"
    async with RuntimeStore.open(database) as store:
        inbox = ChannelInbox.on_store(store, policy=RetryPolicy(), owner="worker.a")
        await inbox.accept(worker_envelope("evt-a1"))
        await anyio.to_thread.run_sync(delete_both, database)
        assert await accept_in_another_process(tmp_path, database, "evt-b") == "accepted"
        with pytest.raises(DatabaseReplaced, match="-wal beside the database"):
            await inbox.accept(worker_envelope("evt-a2"))
    async with RuntimeStore.open(database) as store:
        inbox = ChannelInbox.on_store(store, policy=RetryPolicy(), owner="worker.a")
        assert (await inbox.accept(worker_envelope("evt-b"))).disposition == "duplicate"
    with closing(sqlite3.connect(database)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
