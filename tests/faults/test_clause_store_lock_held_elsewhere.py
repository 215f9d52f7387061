"""Clause: another process holding SQLite's write lock delays writes; it does not fail them.

Several Host processes share one database file, and an operator's tool, a
backup or a long interactive transaction may hold the write lock for longer
than one busy timeout. The writer's ``BEGIN`` has run no job when it fails on
that lock, so it is tried again until the writer's lock timeout: a turn whose
tool ran while another process held the lock ends ``completed`` with its call
``succeeded``, not ``failed`` with the call recorded as possibly run. Past the
lock timeout a write fails with a typed, retryable ``StoreError`` that says so.
A wait that grows long is said at once (a person at a terminal), not after it.
"""

from __future__ import annotations

import logging
import os
import subprocess
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
from tests.contract.test_cli import CONFIG
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


async def test_a_write_waits_out_a_lock_longer_than_the_busy_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hostkit.store")
    database = tmp_path / "hostkit.db"
    async with await RuntimeStore.open(database, busy_timeout_s=0.2, lock_timeout_s=20) as store:
        await store.write(lambda c: c.execute("CREATE TABLE t (v TEXT)"))
        written = anyio.Event()

        async def insert() -> None:
            await store.write(lambda c: c.execute("INSERT INTO t VALUES ('after the lock')"))
            written.set()

        async with lock_held_elsewhere(database) as release, anyio.create_task_group() as group:
            group.start_soon(insert)
            await anyio.sleep(4.0)  # twenty busy timeouts, and well past LOCK_NOTICE_S
            assert not written.is_set()  # it waits for the other process, and has not failed
            # ... and says so while it waits, once, naming the file.
            (notice,) = [r for r in caplog.records if "waiting for the write lock" in r.message]
            assert str(database) in notice.message
            assert notice.hostkit_progress  # type: ignore[attr-defined]
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
        said = str(caught.value)
        # Not "commit failed": no write began. It names the file and what to do.
        assert "another process held the write lock of" in said
        assert str(database) in said
        assert "nothing of this write was done" in said
        assert len(said) <= 500
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


async def test_a_cli_run_says_at_once_that_it_waits_for_another_processs_lock(
    tmp_path: Path,
) -> None:
    """``hostkit run`` while another process holds the lock prints a line within seconds
    (not 30 s of silence), then runs the turn once the lock is free."""
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    command = [sys.executable, "-m", "hostkit", "run"]
    env = {**os.environ, "COLUMNS": "200"}
    first = await anyio.run_process(
        [*command, "first"], cwd=tmp_path, check=False, stdin=subprocess.DEVNULL, env=env
    )
    assert first.returncode == 0, first.stderr.decode()
    database = tmp_path / "state" / "hostkit.db"
    async with (
        lock_held_elsewhere(database) as release,
        await anyio.open_process(
            [*command, "second"], cwd=tmp_path, stdin=subprocess.DEVNULL, env=env
        ) as run,
    ):
        assert run.stderr is not None
        said = b""
        with anyio.fail_after(20):  # the notice comes after 1.5 s; a loaded machine
            while b"waiting for the write lock" not in said:
                said += await run.stderr.receive()
        assert run.returncode is None  # said while waiting, not at the end
        assert str(database).encode() in said.replace(b"\n", b"")
        await release()
        with anyio.fail_after(60):
            assert await run.wait() == 0


async def test_a_wait_that_begins_within_a_drain_is_told_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A second write queued while the first waits runs next in the same drain and waits
    in turn: that wait is told as well, when it reaches the notice's age (not at the
    drain's next round number, which it may never reach)."""
    caplog.set_level(logging.WARNING, logger="hostkit.store")
    database = tmp_path / "hostkit.db"
    async with await RuntimeStore.open(database, busy_timeout_s=0.2, lock_timeout_s=3) as store:
        await store.write(lambda c: c.execute("CREATE TABLE t (v TEXT)"))
        failed: list[StoreError] = []

        async def insert() -> None:
            with pytest.raises(StoreError) as caught:
                await store.write(lambda c: c.execute("INSERT INTO t VALUES ('x')"))
            failed.append(caught.value)

        async with lock_held_elsewhere(database), anyio.create_task_group() as group:
            group.start_soon(insert)
            await anyio.sleep(0.5)  # queued behind the first, whose BEGIN waits
            group.start_soon(insert)
    assert len(failed) == 2
    assert all(error.retryable for error in failed)
    notices = [r for r in caplog.records if "waiting for the write lock" in r.message]
    assert len(notices) == 2, [(r.created, r.message) for r in notices]
