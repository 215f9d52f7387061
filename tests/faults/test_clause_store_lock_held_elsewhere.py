"""Clause: another process holding SQLite's write lock delays writes; it does not fail them.

Several Host processes share one database file, and an operator's tool, a
backup or a long interactive transaction may hold the write lock for longer
than one busy timeout. The writer's ``BEGIN`` has run no job when it fails on
that lock, so it is tried again until the writer's lock timeout: a turn whose
tool ran while another process held the lock ends ``completed`` with its call
``succeeded``, not ``failed`` with the call recorded as possibly run. Past the
lock timeout a write fails with a typed, retryable ``StoreError``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.errors import StoreError
from hostkit.host import Host
from hostkit.store import RuntimeStore
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import TurnResult
from tests.hosts import config, request

pytestmark = pytest.mark.anyio

# Holds the lock until its stdin closes: however slowly this machine runs the test, the
# lock is held for certain until the test releases it.
HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("COMMIT")
"""


@asynccontextmanager
async def lock_held_elsewhere(database: Path) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Another OS process holds the database's write lock until the block ends, or until
    the ``release`` it yields is awaited."""
    async with await anyio.open_process([sys.executable, "-c", HOLDER, str(database)]) as holder:
        assert holder.stdin is not None
        assert holder.stdout is not None
        with anyio.fail_after(30):
            assert b"locked" in await holder.stdout.receive()
        yield holder.stdin.aclose
        await holder.stdin.aclose()
        with anyio.fail_after(30):
            assert await holder.wait() == 0


async def test_a_write_waits_out_a_lock_longer_than_the_busy_timeout(tmp_path: Path) -> None:
    database = tmp_path / "hostkit.db"
    async with await RuntimeStore.open(database, busy_timeout_s=0.2, lock_timeout_s=20) as store:
        await store.write(lambda c: c.execute("CREATE TABLE t (v TEXT)"))
        written = anyio.Event()

        async def insert() -> None:
            await store.write(lambda c: c.execute("INSERT INTO t VALUES ('after the lock')"))
            written.set()

        async with lock_held_elsewhere(database) as release, anyio.create_task_group() as group:
            group.start_soon(insert)
            await anyio.sleep(1.0)  # five busy timeouts
            assert not written.is_set()  # it waits for the other process, and has not failed
            await release()
            with anyio.fail_after(15):
                await written.wait()
        rows = await store.read(lambda c: c.execute("SELECT v FROM t").fetchall())
    assert [tuple(r) for r in rows] == [("after the lock",)]


async def test_past_the_lock_timeout_a_write_fails_typed_and_retryable(tmp_path: Path) -> None:
    database = tmp_path / "hostkit.db"
    async with await RuntimeStore.open(database, busy_timeout_s=0, lock_timeout_s=1) as store:
        await store.write(lambda c: c.execute("CREATE TABLE t (v TEXT)"))
        async with lock_held_elsewhere(database):  # held until the write has failed
            started = time.monotonic()
            with anyio.fail_after(30), pytest.raises(StoreError) as caught:
                await store.write(lambda c: c.execute("INSERT INTO t VALUES ('x')"))
            waited = time.monotonic() - started
        assert caught.value.retryable
        assert "locked" in str(caught.value)
        assert len(str(caught.value)) <= 500
        # The lock timeout (1 s; the bound is for a loaded machine), while the lock was held.
        assert 0.8 < waited < 10
        await store.write(lambda c: c.execute("INSERT INTO t VALUES ('later')"))
        rows = await store.read(lambda c: c.execute("SELECT v FROM t").fetchall())
    assert [tuple(r) for r in rows] == [("later",)]


@pytest.mark.slow
async def test_a_turn_whose_tool_ran_under_another_processs_lock_completes(
    tmp_path: Path,
) -> None:
    database = tmp_path / "hostkit.db"
    running, locked = anyio.Event(), anyio.Event()

    @tool("work.slow")
    async def slow(ctx: ToolContext) -> str:
        """Returns once another process holds the write lock (longer than a busy timeout)."""
        running.set()
        await locked.wait()
        return "worked"

    model = ScriptedModel([CallTools(("work_slow", {})), Reply("done")])
    async with Host.open(config(tmp_path), capabilities=capabilities(model, tools=[slow])) as host:
        results: list[TurnResult] = []

        async def run() -> None:
            results.append(await host.turns.run(request("work please")))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            with anyio.fail_after(30):
                await running.wait()
            # The default busy timeout is 5 s: the lock outlasts it, and the tool's result
            # is written while it is held.
            async with lock_held_elsewhere(database):
                locked.set()
                await anyio.sleep(6.5)
    (result,) = results
    assert result.outcome == "completed", result
    assert result.text == "done"
    assert [e.status for e in result.effects] == ["succeeded"]
