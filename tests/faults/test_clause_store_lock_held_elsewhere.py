"""Clause: another process holding SQLite's write lock delays writes; it does not fail them.

Several Host processes share one database file, and an operator's tool, a
backup or a long interactive transaction may hold the write lock for longer
than one busy timeout. The writer's ``BEGIN`` has run no job when it fails on
that lock, so it is tried again until the writer's lock timeout: a turn whose
tool ran while another process held the lock ends ``completed`` with its call
``succeeded``, not ``failed`` with the call recorded as possibly run. Past the
lock timeout a write fails with a typed, retryable ``StoreError`` that says so.
A wait that grows long is said at once (a person at a terminal), not after it.
A stop signal ends a Host's opening within seconds on either engine (on
PostgreSQL: its wait for another Host's schema upgrade).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from hostkit.effects import AuthoredTool, ToolContext, tool
from hostkit.errors import (
    HostkitError,
    InvalidValue,
    StoreError,
    TurnInfrastructureError,
)
from hostkit.host import Host
from hostkit.host import _host as host_module
from hostkit.store import MIGRATIONS, RuntimeStore, WaitLimit, stores_opened_follow
from hostkit.store._pg_migrate import _MIGRATION_LOCK
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.turns import TurnExecution
from hostkit.types import TurnRequest, TurnResult
from tests.contract.test_clause_cli_approval_interrupt import (
    OPENING_HELD,
    ctrl_c_hostkit,
    read_until,
)
from tests.contract.test_clause_cli_stop_signals import (
    Stopped,
    model_answering,
    signal_hostkit,
    turn_states,
)
from tests.contract.test_cli import CONFIG
from tests.contract.test_cli_approvals import CONFIG as WRITER_CONFIG
from tests.hosts import config, request
from tests.postgres import HOSTKIT_TEMPLATE, PostgresCluster
from tests.wire import openai_chat as wire_openai
from tests.wire import serve_wire, sse_reply

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


# (busy_timeout_s, lock_timeout_s): a busy timeout longer than the whole wait, and one
# that does not divide it (the last try may wait only what is left).
OVERSHOOTING = [(5.0, 1.0), (1.5, 2.0)]


@pytest.mark.parametrize(("busy_s", "lock_s"), OVERSHOOTING)
async def test_a_write_gives_up_at_the_lock_timeout_not_a_busy_timeout_after(
    tmp_path: Path, busy_s: float, lock_s: float
) -> None:
    """Each try waits up to the busy timeout, but never past the lock timeout in all."""
    database = tmp_path / "hostkit.db"
    async with await RuntimeStore.open(
        database, busy_timeout_s=busy_s, lock_timeout_s=lock_s
    ) as store:
        await store.write(lambda c: c.execute("CREATE TABLE t (v TEXT)"))
        async with lock_held_elsewhere(database):
            started = time.monotonic()
            with anyio.fail_after(30), pytest.raises(StoreError, match="try again when"):
                await store.write(lambda c: c.execute("INSERT INTO t VALUES ('x')"))
            waited = time.monotonic() - started
        assert lock_s - 0.1 < waited < lock_s + 0.6
        # The next write's first try waits a whole busy timeout again (and needs none).
        await store.write(lambda c: c.execute("INSERT INTO t VALUES ('later')"))
        busy = await store.write(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0])
    assert busy == int(min(busy_s, lock_s) * 1000)


@pytest.mark.parametrize(("busy_s", "lock_s"), OVERSHOOTING)
async def test_an_opening_gives_up_at_the_lock_timeout_not_a_busy_timeout_after(
    tmp_path: Path, busy_s: float, lock_s: float
) -> None:
    """The migration's wait for another process's lock has the same bound."""
    database = tmp_path / "hostkit.db"
    async with await RuntimeStore.open(database, migrations=MIGRATIONS[:1]):
        pass  # an old version: opening it migrates, under the write lock
    async with lock_held_elsewhere(database):
        started = time.monotonic()
        with anyio.fail_after(30), pytest.raises(StoreError, match="held the write lock"):
            await RuntimeStore.open(database, busy_timeout_s=busy_s, lock_timeout_s=lock_s)
        waited = time.monotonic() - started
    assert lock_s - 0.1 < waited < lock_s + 0.6


@pytest.mark.slow
async def test_a_turn_whose_tool_ran_under_another_processs_lock_completes(
    tmp_path: Path,
) -> None:
    database = tmp_path / "hostkit.db"
    running, locked = anyio.Event(), anyio.Event()

    slow = work_until(running, locked)
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


async def test_a_limit_ends_the_wait_under_way_and_bounds_every_later_one(
    tmp_path: Path,
) -> None:
    """``limit_waits`` is for an owner that is closing: a write already waiting, and each
    one after it, fails (typed, retryable, nothing done) at the limit, not after the
    store's lock timeout; a later, longer limit does not lift it; writes that need no
    wait still run."""
    database = tmp_path / "hostkit.db"
    async with await RuntimeStore.open(database, busy_timeout_s=0.2, lock_timeout_s=60) as store:
        await store.write(lambda c: c.execute("CREATE TABLE t (v TEXT)"))
        failed: list[tuple[StoreError, float]] = []

        async def insert() -> None:
            with pytest.raises(StoreError) as caught:
                await store.write(lambda c: c.execute("INSERT INTO t VALUES ('x')"))
            failed.append((caught.value, time.monotonic()))

        async with lock_held_elsewhere(database):
            async with anyio.create_task_group() as group:
                group.start_soon(insert)
                await anyio.sleep(1.0)  # waiting (the lock timeout is a minute)
                limited = time.monotonic()
                store.limit_waits(0.5)
                store.limit_waits(100)
            with anyio.fail_after(30):
                await insert()
            ended = time.monotonic()
        (first, first_at), (second, _) = failed
        assert first_at - limited < 5  # a minute without the limit
        assert ended - limited < 10
        for error in (first, second):
            assert error.retryable
            assert "another process held the write lock of" in str(error)
        await store.write(lambda c: c.execute("INSERT INTO t VALUES ('no wait')"))
        rows = await store.read(lambda c: c.execute("SELECT v FROM t").fetchall())
    assert [tuple(r) for r in rows] == [("no wait",)]


async def test_under_a_limit_one_statement_waits_no_longer_than_what_is_left(
    tmp_path: Path,
) -> None:
    """The busy timeout (5 s by default) is one try's wait: under a limit of 1 s a write
    fails after about a second, not after a whole busy timeout."""
    database = tmp_path / "hostkit.db"
    async with await RuntimeStore.open(database, lock_timeout_s=60) as store:
        await store.write(lambda c: c.execute("CREATE TABLE t (v TEXT)"))
        async with lock_held_elsewhere(database):
            store.limit_waits(1.0)
            started = time.monotonic()
            with anyio.fail_after(30), pytest.raises(StoreError) as caught:
                await store.write(lambda c: c.execute("INSERT INTO t VALUES ('x')"))
            waited = time.monotonic() - started
    assert caught.value.retryable
    assert waited < 4.5, waited


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), "1", True])
async def test_a_limit_that_is_no_length_of_time_is_refused(
    tmp_path: Path, seconds: object
) -> None:
    async with await RuntimeStore.open(tmp_path / "hostkit.db") as store:
        with pytest.raises(InvalidValue) as caught:
            store.limit_waits(seconds)  # type: ignore[arg-type]
        assert "seconds" in str(caught.value)
        assert len(str(caught.value)) <= 200
        await store.write(lambda c: c.execute("CREATE TABLE t (v TEXT)"))  # nothing limited


async def test_a_host_closing_under_another_processs_lock_waits_its_close_bound_in_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Host closing while a stopped process holds the lock (a turn in flight: its end is
    a write) closes within ``CLOSE_LOCK_WAIT_S``, not a lock timeout per write. The next
    Host in this process, once the lock is free, ends that turn as recovery does (its
    owner is a closed Host instance of this process: dead, not a lease to wait out) and
    does not run it again."""
    monkeypatch.setattr(host_module, "CLOSE_LOCK_WAIT_S", 1.0)
    database = tmp_path / "hostkit.db"
    running = anyio.Event()

    forever = work_forever(running)
    model = ScriptedModel([CallTools(("work_forever", {})), Reply("never")])
    turn = request("work please")
    host = await Host.open(config(tmp_path), capabilities=capabilities(model, tools=[forever]))
    async with anyio.create_task_group() as group:
        group.start_soon(_run_quietly, host, turn)
        with anyio.fail_after(30):
            await running.wait()
        async with lock_held_elsewhere(database):
            started = time.monotonic()
            with anyio.fail_after(60):
                await host.aclose()
            closing = time.monotonic() - started
    assert closing < 12, closing  # 1 s of lock waits and the close's own work; 30 s a write
    async with Host.open(config(tmp_path), capabilities=capabilities(ScriptedModel([]))) as again:
        with anyio.fail_after(10):
            ended = await again.turns.run(turn)
    assert ended.outcome == "indeterminate", ended  # its tool had started: it may have acted


def work_until(running: anyio.Event, locked: anyio.Event) -> AuthoredTool:
    """A tool that sets ``running``, then returns once ``locked`` is set (another process
    holds the write lock)."""

    @tool("work.slow")
    async def slow(ctx: ToolContext) -> str:
        """Returns once another process holds the write lock."""
        running.set()
        await locked.wait()
        return "worked"

    return slow


def work_forever(running: anyio.Event) -> AuthoredTool:
    """A tool that sets ``running`` and then runs until it is cancelled."""

    @tool("work.forever")
    async def forever(ctx: ToolContext) -> str:
        """Runs until its turn is cancelled or the Host closes."""
        running.set()
        await anyio.sleep_forever()
        return "never"

    return forever


async def _run_quietly(host: Host, turn: TurnRequest) -> None:
    """Run ``turn``; the closing Host may end it with an error (its record is then ended by
    the next Host)."""
    with contextlib.suppress(HostkitError):
        await host.turns.run(turn)


async def test_a_limit_longer_than_the_busy_timeout_never_widens_it(tmp_path: Path) -> None:
    """A limit only shortens waits: a store whose statements wait 0.2 s still does under a
    limit of a minute."""
    async with await RuntimeStore.open(tmp_path / "hostkit.db", busy_timeout_s=0.2) as store:
        store.limit_waits(60)
        busy = await store.write(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0])
        assert busy == 200
        store.limit_waits(0.1)
        await anyio.sleep(0.2)  # the limit has passed: no wait is left at all
        busy = await store.write(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0])
        assert busy == 0


# -- a turn's end under another process's lock: one bound, then recovery's ----------------


@pytest.fixture
def short_lock_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts opened in the test wait 1 s for another process's lock (30 s by default; each
    try 0.2 s, not 5), and close within 1 s of lock waits."""
    opening = RuntimeStore.open.__func__  # type: ignore[attr-defined]

    def open_short(cls: type[RuntimeStore], path: Any, **options: Any) -> Any:
        return opening(cls, path, **{**options, "lock_timeout_s": 1.0, "busy_timeout_s": 0.2})

    monkeypatch.setattr(RuntimeStore, "open", classmethod(open_short))
    monkeypatch.setattr(host_module, "CLOSE_LOCK_WAIT_S", 1.0)


def writes_of_the_end(host: Host, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the end-of-turn writes the Host starts after its terminal record
    (ending a turn ``lost``, writing its context decisions), as they start."""
    started: list[str] = []
    for owner, name in ((host.store.turns, "abandon"), (host.store.context, "record_decisions")):
        original = getattr(owner, name)

        async def spy(*args: Any, _original: Any = original, _name: str = name) -> Any:
            started.append(_name)
            return await _original(*args)

        monkeypatch.setattr(owner, name, spy)
    return started


async def test_a_turn_whose_end_waited_out_the_lock_starts_no_more_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, short_lock_waits: None
) -> None:
    """The terminal record waited out another process's lock (the store's lock timeout)
    and failed: the turn ends at once (``TurnInfrastructureError``), without ending it
    ``lost`` and writing its context decisions each after another whole wait. Its lease
    is left for recovery: once the lock is free, a retry of the same request (as the
    inbox worker sends) reads it ended as recovery would, at once, not ``TurnInProgress``
    until the lease expires; and the next admission of its session in this Host runs."""
    database = tmp_path / "hostkit.db"
    running, locked = anyio.Event(), anyio.Event()

    slow = work_until(running, locked)
    model = ScriptedModel([CallTools(("work_slow", {})), Reply("done"), Reply("again")])
    async with Host.open(config(tmp_path), capabilities=capabilities(model, tools=[slow])) as host:
        started = writes_of_the_end(host, monkeypatch)
        failed: list[BaseException] = []
        ended = anyio.Event()

        first = request("work please")

        async def run() -> None:
            with pytest.raises(TurnInfrastructureError) as caught:
                await host.turns.run(first)
            failed.append(caught.value)
            ended.set()

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            with anyio.fail_after(30):
                await running.wait()
            async with lock_held_elsewhere(database):
                locked.set()
                with anyio.fail_after(30):
                    await ended.wait()
        assert started == []  # each would have waited out the lock once more
        (turn_id,) = [failed[0].durable_result_ref]
        with anyio.fail_after(10):
            retried = await host.turns.run(first)
        assert (retried.turn_id, retried.outcome) == (turn_id, "indeterminate")
        again = await host.turns.run(request("once more", request_id="req_again"))
        assert again.outcome == "completed", again
        status = await host.store.read(
            lambda c: c.execute("SELECT status FROM turns WHERE turn_id = ?", [turn_id]).fetchone()
        )
    assert tuple(status) == ("indeterminate",)  # as recovery ends it: its call had run


async def test_everything_a_cancelled_turns_end_writes_shares_one_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn cancelled while another process holds the lock for longer than the store
    waits: its end (the answers to its calls, its record, ending it ``lost``, its context
    decisions) takes the terminal bound in all, not that bound plus a lock timeout for
    each write after it."""
    monkeypatch.setitem(TurnExecution.__init__.__kwdefaults__, "terminal_timeout_s", 1.0)
    monkeypatch.setattr(host_module, "CLOSE_LOCK_WAIT_S", 1.0)
    database = tmp_path / "hostkit.db"
    running = anyio.Event()

    forever = work_forever(running)
    model = ScriptedModel([CallTools(("work_forever", {})), Reply("never")])
    tools = capabilities(model, tools=[forever])
    async with Host.open(config(tmp_path), capabilities=tools) as host:
        started = writes_of_the_end(host, monkeypatch)
        done = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(_run_then, host, request("work please"), done)
            with anyio.fail_after(30):
                await running.wait()
            async with lock_held_elsewhere(database):
                began = time.monotonic()
                group.cancel_scope.cancel()
                with anyio.CancelScope(shield=True), anyio.fail_after(120):
                    await done.wait()
                ended = time.monotonic() - began
                assert started == []
    assert ended < 8, ended  # 1 s; a loaded machine (a lock timeout, 30 s, a write without)


async def test_a_slow_but_healthy_store_still_records_the_end_of_a_turn_with_many_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answering many unanswered calls on a slow store (no lock held) takes at most half
    of the end's bound: the turn's record still gets the rest, so the turn ends recorded
    (``indeterminate``), never left ``running`` for recovery."""
    monkeypatch.setitem(TurnExecution.__init__.__kwdefaults__, "terminal_timeout_s", 2.0)
    running = anyio.Event()
    calls = [("work_forever", {})] * 30
    model = ScriptedModel([CallTools(*calls), Reply("never")])
    tools = capabilities(model, tools=[work_forever(running)])
    async with Host.open(config(tmp_path), capabilities=tools) as host:
        append = host.store.turns.append_message

        async def slow_append(*args: Any, **kwargs: Any) -> Any:
            await anyio.sleep(0.1)  # 30 answers: 3 s, past the 2 s bound
            return await append(*args, **kwargs)

        monkeypatch.setattr(host.store.turns, "append_message", slow_append)
        done = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(_run_then, host, request("work please"), done)
            with anyio.fail_after(30):
                await running.wait()
            group.cancel_scope.cancel()
            with anyio.CancelScope(shield=True), anyio.fail_after(60):
                await done.wait()
        rows = await host.store.read(lambda c: c.execute("SELECT status FROM turns").fetchall())
    assert [row[0] for row in rows] == ["indeterminate"]


async def _run_then(host: Host, turn: TurnRequest, done: anyio.Event) -> None:
    """``_run_quietly``, then ``done`` (also when cancelled)."""
    try:
        await _run_quietly(host, turn)
    finally:
        done.set()


async def test_ctrl_c_under_another_processs_lock_ends_soon_and_says_the_end_was_not_recorded(
    tmp_path: Path,
) -> None:
    """``hostkit run`` interrupted while another process holds the lock stops within
    seconds (its store waits no longer once Ctrl-C arrived), not after a lock timeout per
    write of the turn's end; and it does not claim a record it could not write: the turn
    is still ``running`` and the line says so, and who ends it."""
    async with serve_wire() as wire:
        project = tmp_path
        await anyio.Path(project / "hostkit.toml").write_text(
            WRITER_CONFIG.format(base_url=wire.base_url)
        )
        wire.script(
            sse_reply(wire_openai.sse([wire_openai.chunk(role="assistant")], done=False), hold=True)
        )
        database = project / "state" / "hostkit.db"
        async with contextlib.AsyncExitStack() as stack:

            async def locked_while_the_model_answers(terminal: int, seen: bytearray) -> None:
                with anyio.fail_after(30):
                    while not wire.requests:
                        with anyio.move_on_after(0.05):
                            await read_until(terminal, b"\x00", seen)
                await stack.enter_async_context(lock_held_elsewhere(database))

            code, text, took = await ctrl_c_hostkit(
                ["run", "--agent", "writer", "hello"], project, locked_while_the_model_answers
            )
    assert code == 130, text
    # From the SIGINT to the exit: 3 s of lock waits, more on a loaded machine (over a
    # minute before); the command's start-up is not counted.
    assert took < 20, took
    line = (
        "interrupted: the turn's end could not be recorded (the store was busy): this "
        "command's close, or else the next hostkit command to open the database, ends it "
        "lost; `hostkit sessions` shows it"
    )
    assert text.count(line) == 1, text
    assert "recorded as it ended" not in text
    with closing(sqlite3.connect(database)) as connection, connection:
        turns = connection.execute("SELECT status FROM turns").fetchall()
    assert turns == [("running",)]


async def _stopped_under_the_lock(
    project: Path, signals: list[signal.Signals], *, between_s: float = 0.5
) -> Stopped:
    """``hostkit run`` sent ``signals`` while its model answers and another process holds
    the database's write lock (held until it has exited)."""
    async with serve_wire() as wire:
        await anyio.Path(project / "hostkit.toml").write_text(
            WRITER_CONFIG.format(base_url=wire.base_url)
        )
        wire.script(OPENING_HELD)
        async with contextlib.AsyncExitStack() as stack:

            async def locked_while_the_model_answers() -> None:
                await model_answering(wire)()
                await stack.enter_async_context(
                    lock_held_elsewhere(project / "state" / "hostkit.db")
                )

            return await signal_hostkit(
                ["run", "--agent", "writer", "hello"],
                project,
                locked_while_the_model_answers,
                signals,
                between_s=between_s,
            )


async def test_sigterm_under_another_processs_lock_ends_soon_and_says_the_end_was_not_recorded(
    tmp_path: Path,
) -> None:
    """SIGTERM narrows the store's waits as Ctrl-C does: the command exits within seconds
    (not a lock timeout per write), status 143, and does not claim a record it could not
    write."""
    stopped = await _stopped_under_the_lock(tmp_path, [signal.SIGTERM])
    assert stopped.code == 143, stopped
    assert stopped.took < 20, stopped.took  # 3 s of lock waits, on a loaded machine
    line = (
        "interrupted: the turn's end could not be recorded (the store was busy): this "
        "command's close, or else the next hostkit command to open the database, ends it "
        "lost; `hostkit sessions` shows it"
    )
    assert stopped.err.count(line) == 1, stopped.err
    assert turn_states(tmp_path) == ["running"]


async def test_a_second_stop_signal_exits_at_once_and_says_so(tmp_path: Path) -> None:
    """The first signal's unwinding waits up to 3 s for the lock; a second (any of Ctrl-C,
    SIGTERM, SIGHUP) ends the process at once with its own status, saying who ends the
    turn it leaves running."""
    stopped = await _stopped_under_the_lock(
        tmp_path, [signal.SIGTERM, signal.SIGINT], between_s=0.2
    )
    assert stopped.code == 130, stopped
    assert stopped.took < 2.5, stopped  # well before the 3 s the first one's writes may wait
    line = (
        "hostkit: second SIGINT: exiting at once (status 130); a turn left running is ended "
        "lost by the next hostkit command to open the database once its lease expires"
    )
    assert stopped.err.count(line) == 1, stopped.err
    assert "Traceback" not in stopped.err
    assert turn_states(tmp_path) == ["running"]


async def test_a_store_opened_under_a_limit_ends_its_migrations_lock_wait_when_it_is_set(
    tmp_path: Path,
) -> None:
    """An owner that may have to stop before its store is open (a command sent SIGTERM
    while its Host upgrades the database) opens it inside ``stores_opened_follow``: a
    limit set while the opening waits for another process's write lock ends that wait,
    not the store's lock timeout, and the file is left as it was."""
    database = tmp_path / "hostkit.db"
    async with await RuntimeStore.open(database, migrations=MIGRATIONS[:1]):
        pass
    limit = WaitLimit()
    failed: list[float] = []

    async def open_the_store() -> None:
        with stores_opened_follow(limit), pytest.raises(StoreError) as caught:
            await RuntimeStore.open(database, busy_timeout_s=0.2, lock_timeout_s=60)
        assert caught.value.retryable
        failed.append(time.monotonic())

    async with lock_held_elsewhere(database), anyio.create_task_group() as group:
        group.start_soon(open_the_store)
        await anyio.sleep(1.0)  # the upgrade waits for the lock (a minute, unlimited)
        limited = time.monotonic()
        limit.limit(0.5)
    assert failed[0] - limited < 5, failed[0] - limited
    with closing(sqlite3.connect(database)) as connection, connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (1,)


async def test_a_store_opened_under_a_limit_follows_it_once_open_and_if_set_before(
    tmp_path: Path,
) -> None:
    """The limit reaches what the owner writes right after the opening (a Host's recovery)
    as ``limit_waits`` would, and a store opened after it was set is limited at once."""
    database = tmp_path / "hostkit.db"
    limit = WaitLimit()
    with stores_opened_follow(limit):
        async with await RuntimeStore.open(database, busy_timeout_s=0.2, lock_timeout_s=60) as s:
            await s.write(lambda c: c.execute("CREATE TABLE t (v TEXT)"))
            async with lock_held_elsewhere(database):
                limit.limit(0.5)
                started = time.monotonic()
                with anyio.fail_after(30), pytest.raises(StoreError):
                    await s.write(lambda c: c.execute("INSERT INTO t VALUES ('x')"))
                assert time.monotonic() - started < 5
        async with (
            await RuntimeStore.open(database, busy_timeout_s=0.2, lock_timeout_s=60) as s,
            lock_held_elsewhere(database),
        ):
            started = time.monotonic()
            with anyio.fail_after(30), pytest.raises(StoreError):
                await s.write(lambda c: c.execute("INSERT INTO t VALUES ('y')"))
            assert time.monotonic() - started < 5


def _has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (Linux: its /proc fd links)."""
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path.resolve()):
                    return True
    return False


@pytest.mark.parametrize(
    ("number", "status"),
    [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)],
    ids=["term", "int", "hup"],
)
async def test_a_stop_signal_while_the_host_opens_under_another_processs_lock_ends_soon(
    tmp_path: Path, number: signal.Signals, status: int
) -> None:
    """``hostkit run`` stopped while its Host opens (recovery's writes wait for another
    process's write lock) exits within seconds with the signal's status and one line
    saying so, not after the store's 30 s lock timeout with nothing said (``docker
    stop`` kills after 10 s); nothing of the turn was run or recorded."""
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    env = {**os.environ, "COLUMNS": "200"}
    command = [sys.executable, "-m", "hostkit", "run"]
    first = await anyio.run_process(
        [*command, "first"], cwd=tmp_path, check=False, stdin=subprocess.DEVNULL, env=env
    )
    assert first.returncode == 0, first.stderr.decode()
    database = tmp_path / "state" / "hostkit.db"
    async with lock_held_elsewhere(database):
        stopped = await signal_hostkit(
            ["run", "second"], tmp_path, host_opening(tmp_path, database), [number]
        )
    assert stopped.code == status, stopped
    assert stopped.took < 10, stopped.took  # 3 s of lock waits; 28 s before
    line = (
        "interrupted while the Host was opening (its database busy or being upgraded): "
        "nothing was run"
    )
    assert stopped.err.count(line) == 1, stopped.err
    assert "Traceback" not in stopped.err
    assert turn_states(tmp_path) == ["completed"]


PG_CONFIG = """
[host]
workspace = "workspace"

[store]
url = "{url}"

[providers.scripted]
kind = "scripted"
script = [{{reply = "answered"}}]

[agents.assistant]
provider = "scripted"
memory = false
"""


async def test_a_stop_signal_while_the_host_waits_for_another_hosts_upgrade_ends_soon(
    tmp_path: Path, postgres_cluster: PostgresCluster
) -> None:
    """The PostgreSQL twin: ``hostkit run`` whose Host waits for another Host's schema
    upgrade (the migrator's advisory lock held elsewhere) exits within seconds of
    SIGTERM with one line saying nothing was run, and leaves no session queued for
    the lock."""
    url = await postgres_cluster.create_database(template=HOSTKIT_TEMPLATE)
    await anyio.Path(tmp_path / "hostkit.toml").write_text(PG_CONFIG.format(url=url))
    waiters = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as holder:

        async def queued() -> int:
            row = await (await holder.execute(waiters)).fetchone()
            return int(row[0]) if row else 0

        async def waiting_for_the_upgrade() -> None:
            with anyio.fail_after(60):
                while await queued() == 0:  # noqa: ASYNC110 (another process's session)
                    await anyio.sleep(0.05)

        await holder.execute("SELECT pg_advisory_lock(%s)", [_MIGRATION_LOCK])
        stopped = await signal_hostkit(
            ["run", "second"], tmp_path, waiting_for_the_upgrade, [signal.SIGTERM]
        )
        with anyio.fail_after(10):
            while await queued():  # noqa: ASYNC110 (the server ends the cancelled wait)
                await anyio.sleep(0.05)
    assert stopped.code == 143, stopped
    assert stopped.took < 10, stopped.took
    line = (
        "interrupted while the Host was opening (its database busy or being upgraded): "
        "nothing was run"
    )
    assert stopped.err.count(line) == 1, stopped.err
    assert "Traceback" not in stopped.err


def host_opening(project: Path, database: Path) -> Callable[[], Awaitable[None]]:
    """Ready once the ``hostkit`` process started in ``project`` has the database open."""

    async def ready() -> None:
        with anyio.fail_after(60):
            while True:
                pids = [int(pid) for pid in os.listdir("/proc") if pid.isdigit()]
                if any(_cwd_is(pid, project) and _has_open(pid, database) for pid in pids):
                    break
                await anyio.sleep(0.05)
        await anyio.sleep(0.5)  # on into its recovery's wait for the lock

    return ready


def _cwd_is(pid: int, project: Path) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/cwd") == str(project.resolve())
    except OSError:
        return False
