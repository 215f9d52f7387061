"""RuntimeStore transactions: one hop per transaction, group commit, isolation, closing."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from hostkit.errors import InvalidValue, StoreClosed, StoreError
from hostkit.store import SCHEMA_VERSION, RuntimeStore, SqliteStore
from hostkit.store._connection import DbConnection
from hostkit.store._writer import MAX_BATCH

pytestmark = pytest.mark.anyio

# SqliteStore.transaction() is that adapter's interactive API on its single writer;
# it is not part of RuntimeStore, and PgStore does not offer it.
INTERACTIVE = "store.transaction(): SqliteStore's own interactive API"


async def make_table(store: RuntimeStore) -> None:
    # A scratch table with an id the engine assigns: SQLite's rowid alias, PostgreSQL's
    # identity column (the only DDL here that is spelled differently on each engine).
    if isinstance(store, SqliteStore):
        ddl = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"
    else:
        ddl = "CREATE TABLE t (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v TEXT)"
    await store.write(lambda c: c.execute(ddl))


class Hops:
    """Counts hops to the database thread (calls of DbConnection.start, which run uses)."""

    count = 0


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Hops:
    counter = Hops()
    original = DbConnection.start

    def counting_start(self: DbConnection, fn):  # type: ignore[no-untyped-def]
        counter.count += 1
        return original(self, fn)

    monkeypatch.setattr(DbConnection, "start", counting_start)
    return counter


async def count(store: RuntimeStore) -> int:
    return await store.read(lambda c: c.execute("SELECT COUNT(*) FROM t").fetchone()[0])


@pytest.mark.sqlite_only("PRAGMA journal_mode, user_version and foreign_keys of the SQLite file")
async def test_fresh_database_is_wal_at_latest_version(store: RuntimeStore) -> None:
    pragmas = await store.read(
        lambda c: (
            c.execute("PRAGMA journal_mode").fetchone()[0],
            c.execute("PRAGMA user_version").fetchone()[0],
            c.execute("PRAGMA foreign_keys").fetchone()[0],
        )
    )
    assert pragmas == ("wal", SCHEMA_VERSION, 1)
    assert store.migration.from_version == 0
    assert store.migration.backup is None


@pytest.mark.sqlite_only("the SQLite synchronous PRAGMA")
@pytest.mark.parametrize(("setting", "level"), [("FULL", 2), ("NORMAL", 1), ("EXTRA", 3)])
async def test_synchronous_setting_is_applied(db_path: Path, setting: str, level: int) -> None:
    async with await RuntimeStore.open(db_path, synchronous=setting) as store:  # type: ignore[arg-type]
        value = await store.write(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
        assert value == level


@pytest.mark.sqlite_only("the SQLite synchronous option")
async def test_synchronous_off_is_refused(db_path: Path) -> None:
    with pytest.raises(InvalidValue, match="synchronous"):
        await RuntimeStore.open(db_path, synchronous="OFF")  # type: ignore[arg-type]


@pytest.mark.sqlite_only("the SQLite adapter's open options")
@pytest.mark.parametrize(
    "options",
    [
        {"max_batch": 0},
        {"max_batch": -3},
        {"max_batch": MAX_BATCH + 1},
        {"max_batch": True},
        {"max_batch": 8.0},
        {"lock_timeout_s": 0},
        {"lock_timeout_s": float("nan")},
        {"busy_timeout_s": -1},
        {"busy_timeout_s": float("inf")},
        {"busy_timeout_s": "5"},
    ],
    ids=str,
)
async def test_an_unusable_open_option_is_invalid_value_and_opens_nothing(
    db_path: Path, options: dict[str, Any]
) -> None:
    # A batch of at most 0 jobs would drain nothing while writes wait forever.
    before = _sqlite_threads()
    with pytest.raises(InvalidValue) as caught:
        await RuntimeStore.open(db_path, **options)
    assert next(iter(options)) in str(caught.value)
    assert len(str(caught.value)) < 200
    assert not await anyio.Path(db_path).exists()
    assert _sqlite_threads() <= before


@pytest.mark.sqlite_only("SqliteStore.transaction(), that adapter's interactive API")
async def test_a_transaction_waiting_when_the_store_closes_is_refused(db_path: Path) -> None:
    store = await RuntimeStore.open(db_path, lock_timeout_s=5)
    assert isinstance(store, SqliteStore)
    await make_table(store)
    holding, release = anyio.Event(), anyio.Event()
    outcome: list[str] = []

    async def first() -> None:
        async with store.transaction() as tx:
            await tx.execute("INSERT INTO t (v) VALUES ('first')")
            holding.set()
            await release.wait()

    async def second() -> None:
        try:
            async with store.transaction() as tx:
                await tx.execute("INSERT INTO t (v) VALUES ('second')")
            outcome.append("committed")
        except StoreClosed:
            outcome.append("closed")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await holding.wait()
            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()  # second waits for the writer's lock
            tg.start_soon(store.aclose)
            await anyio.wait_all_tasks_blocked()  # aclose began: it waits for the lock too
            release.set()
    assert outcome == ["closed"]
    async with await RuntimeStore.open(db_path) as reopened:
        rows = await reopened.read(lambda c: c.execute("SELECT v FROM t").fetchall())
    assert rows == [("first",)]


@pytest.mark.sqlite_only("one hop to the SQLite connection thread (DbConnection.start)")
async def test_write_runs_whole_transaction_in_one_hop_off_the_loop(
    store: RuntimeStore, hops: Hops
) -> None:
    await make_table(store)
    loop_thread = threading.get_ident()

    def transaction(conn: sqlite3.Connection) -> int:
        assert threading.get_ident() != loop_thread
        for i in range(10):
            conn.execute("INSERT INTO t (v) VALUES (?)", [str(i)])
        return conn.execute("SELECT COUNT(*) FROM t").fetchone()[0]

    before = hops.count
    assert await store.write(transaction) == 10
    # At most one: none when the drain that committed the table was still running and
    # took this job too (eleven statements, never a hop each).
    assert hops.count - before <= 1


async def test_failing_write_rolls_back_only_itself_in_a_shared_commit(
    store: RuntimeStore,
) -> None:
    await make_table(store)

    def bad(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (v) VALUES ('bad')")
        raise ValueError("refused by the caller")

    results: dict[str, object] = {}

    async def good(i: int) -> None:
        results[f"good{i}"] = await store.write(
            lambda c: c.execute("INSERT INTO t (v) VALUES ('good')").rowcount
        )

    async def failing() -> None:
        with pytest.raises(ValueError, match="refused"):
            await store.write(bad)
        results["bad"] = "raised"

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(good, i)
        tg.start_soon(failing)
        for i in range(5, 10):
            tg.start_soon(good, i)
    assert results["bad"] == "raised"
    assert await count(store) == 10
    bad_rows = await store.read(
        lambda c: c.execute("SELECT COUNT(*) FROM t WHERE v = 'bad'").fetchone()[0]
    )
    assert bad_rows == 0


async def test_a_write_may_run_again_but_commits_once(store: RuntimeStore) -> None:
    """A job must be a function of the database only: the store may run it again.

    SQLite runs a shared commit's jobs back to back and, when one raises, runs
    the batch again with each job in its own savepoint; PostgreSQL reruns a
    write that lost a serialization race. Either way each write commits once.
    """
    await make_table(store)
    runs: dict[int, int] = {}

    def insert(i: int, conn: sqlite3.Connection) -> int:
        runs[i] = runs.get(i, 0) + 1
        return int(conn.execute("INSERT INTO t (v) VALUES (?)", [f"good{i}"]).rowcount)

    def bad(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (v) VALUES ('bad')")
        raise ValueError("refused by the caller")

    async def good(i: int) -> None:
        assert await store.write(lambda c: insert(i, c)) == 1

    async def failing() -> None:
        with pytest.raises(ValueError, match="refused"):
            await store.write(bad)

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(good, i)
        tg.start_soon(failing)
        for i in range(4, 8):
            tg.start_soon(good, i)
    values = await store.read(lambda c: sorted(r[0] for r in c.execute("SELECT v FROM t")))
    assert values == [f"good{i}" for i in range(8)]
    assert set(runs) == set(range(8))
    if isinstance(store, SqliteStore):
        # The first write commits alone; the rest queue behind it as one batch in
        # which the jobs before the failing one ran twice (together, then each in
        # its savepoint) and no job ran more often.
        assert max(runs.values()) == 2


@pytest.mark.sqlite_only("the SQLite writer's group commit")
async def test_a_shared_commit_with_no_failure_runs_each_job_once(
    store: RuntimeStore, hops: Hops
) -> None:
    await make_table(store)
    runs: dict[int, int] = {}

    def insert(i: int, conn: sqlite3.Connection) -> None:
        runs[i] = runs.get(i, 0) + 1
        conn.execute("INSERT INTO t (v) VALUES (?)", [str(i)])

    before = hops.count
    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(store.write, lambda c, i=i: insert(i, c))
    assert runs == dict.fromkeys(range(20), 1)
    assert hops.count - before < 20
    assert await count(store) == 20


async def test_concurrent_writers_share_commits_and_never_hit_locked(
    store: RuntimeStore, hops: Hops
) -> None:
    await make_table(store)
    writers, per_writer = 100, 5

    async def writer(n: int) -> None:
        for i in range(per_writer):
            await store.write(
                lambda c, n=n, i=i: c.execute("INSERT INTO t (v) VALUES (?)", [f"{n}:{i}"])
            )

    async with anyio.create_task_group() as tg:
        for n in range(writers):
            tg.start_soon(writer, n)
    assert await count(store) == writers * per_writer
    # Group commit: far fewer hops (and commits) than transactions.
    assert hops.count < writers * per_writer / 2


@pytest.mark.sqlite_only(INTERACTIVE)
async def test_interactive_transactions_interleave_with_grouped_writes(
    store: RuntimeStore,
) -> None:
    await make_table(store)

    async def interactive(n: int) -> None:
        async with store.transaction() as tx:
            await tx.execute("INSERT INTO t (v) VALUES (?)", [f"tx{n}"])
            await anyio.lowlevel.checkpoint()
            row = await tx.fetchone("SELECT COUNT(*) FROM t WHERE v = ?", [f"tx{n}"])
            assert row == (1,)

    async def grouped(n: int) -> None:
        await store.write(lambda c: c.execute("INSERT INTO t (v) VALUES (?)", [f"w{n}"]))

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(interactive, n)
            tg.start_soon(grouped, n)
    assert await count(store) == 40


@pytest.mark.sqlite_only(INTERACTIVE)
async def test_interactive_transaction_rolls_back_on_error(store: RuntimeStore) -> None:
    await make_table(store)

    async def aborted() -> None:
        async with store.transaction() as tx:
            await tx.execute("INSERT INTO t (v) VALUES ('x')")
            raise RuntimeError("abort")

    with pytest.raises(RuntimeError, match="abort"):
        await aborted()
    assert await count(store) == 0


@pytest.mark.sqlite_only(INTERACTIVE)
async def test_a_timeout_inside_a_transaction_comes_out_as_itself(store: RuntimeStore) -> None:
    """The writer's own wait is bounded; the caller's code raising TimeoutError is not it."""
    await make_table(store)

    async def timed_out() -> None:
        async with store.transaction() as tx:
            await tx.execute("INSERT INTO t (v) VALUES ('x')")
            raise TimeoutError("the caller's own")

    with pytest.raises(TimeoutError, match="the caller's own"):
        await timed_out()
    assert await count(store) == 0


@pytest.mark.sqlite_only("the SQLite writer's drain on its connection thread")
async def test_queued_writes_commit_while_the_event_loop_is_busy(store: RuntimeStore) -> None:
    """Batches follow each other on the database thread without a turn of the loop.

    The first write holds its transaction until the others are queued; then
    the loop thread blocks (as a busy loop does) and the queued writes still
    commit meanwhile.
    """
    await make_table(store)
    token = anyio.lowlevel.current_token()
    entered, go, committed = anyio.Event(), threading.Event(), threading.Event()
    queued = 5

    def first(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (v) VALUES ('first')")
        anyio.from_thread.run_sync(entered.set, token=token)
        go.wait(10)

    def later(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (v) VALUES ('later')")
        if conn.execute("SELECT COUNT(*) FROM t WHERE v = 'later'").fetchone()[0] == queued:
            committed.set()  # the last of them: its batch commits right after this

    async with anyio.create_task_group() as tg:
        tg.start_soon(store.write, first)
        await entered.wait()
        for _ in range(queued):
            tg.start_soon(store.write, later)
        await anyio.lowlevel.checkpoint()
        go.set()
        # The loop thread blocks here: nothing of the writer runs on it meanwhile.
        assert committed.wait(10)
    assert await count(store) == queued + 1


@pytest.mark.sqlite_only(INTERACTIVE)
async def test_transaction_cannot_be_used_after_it_ends(store: RuntimeStore) -> None:
    await make_table(store)
    async with store.transaction() as tx:
        await tx.execute("INSERT INTO t (v) VALUES ('x')")
    with pytest.raises(InvalidValue, match="ended"):
        await tx.execute("INSERT INTO t (v) VALUES ('y')")
    assert await count(store) == 1


async def test_sqlite_errors_become_typed_store_errors(store: RuntimeStore) -> None:
    with pytest.raises(StoreError) as caught:
        await store.write(lambda c: c.execute("INSERT INTO no_such_table VALUES (1)"))
    assert not caught.value.retryable
    assert "no_such_table" in str(caught.value)
    with pytest.raises(StoreError):
        await store.read(lambda c: c.execute("SELEC nonsense"))


async def test_reader_connection_cannot_write(store: RuntimeStore) -> None:
    await make_table(store)
    with pytest.raises(StoreError):
        await store.read(lambda c: c.execute("INSERT INTO t (v) VALUES ('x')"))


async def test_cancelled_waiting_writer_is_dequeued_and_others_proceed(
    store: RuntimeStore,
) -> None:
    await make_table(store)
    entered = anyio.Event()
    release = threading.Event()
    token = anyio.lowlevel.current_token()

    def slow(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (v) VALUES ('slow')")
        anyio.from_thread.run_sync(entered.set, token=token)
        release.wait(10)

    async with anyio.create_task_group() as tg:
        tg.start_soon(store.write, slow)
        await entered.wait()
        with anyio.CancelScope() as waiter_scope:
            waiter_scope.cancel()
            await store.write(lambda c: c.execute("INSERT INTO t (v) VALUES ('cancelled')"))
        tg.start_soon(store.write, lambda c: c.execute("INSERT INTO t (v) VALUES ('after')"))
        await anyio.lowlevel.checkpoint()
        release.set()
    values = await store.read(lambda c: [r[0] for r in c.execute("SELECT v FROM t ORDER BY id")])
    assert values == ["slow", "after"]


async def test_closed_store_raises_and_close_is_idempotent(db_path: Path) -> None:
    store = await RuntimeStore.open(db_path)
    await store.aclose()
    await store.aclose()
    assert store.closed
    with pytest.raises(StoreClosed):
        await store.write(lambda c: None)
    with pytest.raises(StoreClosed):
        await store.read(lambda c: None)
    if isinstance(store, SqliteStore):  # its interactive API (not part of RuntimeStore)
        with pytest.raises(StoreClosed):
            async with store.transaction():
                pass


async def test_committed_writes_survive_reopen(db_path: Path) -> None:
    async with await RuntimeStore.open(db_path) as store:
        await make_table(store)
        await store.write(lambda c: c.execute("INSERT INTO t (v) VALUES ('kept')"))
    async with await RuntimeStore.open(db_path) as store:
        assert await count(store) == 1
        # Already at its engine's latest schema version: the reopen migrates nothing.
        assert store.migration.from_version == store.migration.to_version


async def test_job_cannot_end_the_shared_transaction(store: RuntimeStore) -> None:
    await make_table(store)

    async def neighbour(i: int) -> None:
        await store.write(lambda c: c.execute("INSERT INTO t (v) VALUES (?)", [f"n{i}"]))

    async def rogue(statement: str) -> None:
        def run(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO t (v) VALUES ('rogue')")
            c.execute(statement)

        with pytest.raises(StoreError, match="not authorized"):
            await store.write(run)

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(neighbour, i)
        for statement in ("COMMIT", "ROLLBACK", "RELEASE hostkit_job", "BEGIN"):
            tg.start_soon(rogue, statement)
        for i in range(3, 6):
            tg.start_soon(neighbour, i)
    values = await store.read(lambda c: sorted(r[0] for r in c.execute("SELECT v FROM t")))
    assert values == [f"n{i}" for i in range(6)]
    await neighbour(99)
    assert await count(store) == 7


@pytest.mark.sqlite_only(INTERACTIVE)
async def test_interactive_statements_cannot_end_the_transaction(store: RuntimeStore) -> None:
    await make_table(store)
    async with store.transaction() as tx:
        await tx.execute("INSERT INTO t (v) VALUES ('kept')")
        with pytest.raises(StoreError, match="not authorized"):
            await tx.execute("COMMIT")
        await tx.execute("INSERT INTO t (v) VALUES ('also kept')")
    assert await count(store) == 2


async def test_base_exception_in_a_job_fails_only_that_job(store: RuntimeStore) -> None:
    await make_table(store)

    class Interrupt(BaseException):
        pass

    def interrupted(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO t (v) VALUES ('interrupted')")
        raise Interrupt

    async def good(i: int) -> None:
        await store.write(lambda c: c.execute("INSERT INTO t (v) VALUES (?)", [str(i)]))

    async def bad() -> None:
        with pytest.raises(Interrupt):
            await store.write(interrupted)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(good, 1)
            tg.start_soon(bad)
            tg.start_soon(good, 2)
    await good(3)
    assert await count(store) == 3


@pytest.mark.sqlite_only(INTERACTIVE)
async def test_write_inside_own_transaction_is_refused_not_deadlocked(store: RuntimeStore) -> None:
    await make_table(store)
    async with store.transaction() as tx:
        with pytest.raises(InvalidValue, match="deadlock"):
            await store.write(lambda c: None)
        await tx.run(lambda c: c.execute("INSERT INTO t (v) VALUES ('via tx.run')"))
    assert await count(store) == 1


@pytest.mark.sqlite_only("the SQLite writer's drain on its connection thread")
async def test_a_drain_that_breaks_fails_its_writes_and_the_next_write_works(
    store: RuntimeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing waits forever when a batch fails outside its jobs (here with its
    transaction still open): each of its writes gets a typed error, the
    transaction is abandoned, and the next write commits."""
    import hostkit.store._writer as writer

    await make_table(store)
    run_batch = writer._run_batch

    def broken(conn: sqlite3.Connection, *args: object) -> None:
        conn.execute(writer.BEGIN)  # and leaves its transaction open
        raise RuntimeError("the drain broke")

    monkeypatch.setattr(writer, "_run_batch", broken)
    outcomes: list[str] = []

    async def attempt(i: int) -> None:
        try:
            await store.write(lambda c: c.execute("INSERT INTO t (v) VALUES (?)", [str(i)]))
        except StoreError as exc:
            outcomes.append("failed: the drain broke" if "the drain broke" in str(exc) else "?")
        else:
            outcomes.append("committed")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(attempt, i)
    assert outcomes == ["failed: the drain broke"] * 20
    monkeypatch.setattr(writer, "_run_batch", run_batch)
    await store.write(lambda c: c.execute("INSERT INTO t (v) VALUES ('after')"))
    assert await count(store) == 1


async def test_close_with_queued_writes_fails_them_cleanly(db_path: Path) -> None:
    store = await RuntimeStore.open(db_path)
    await make_table(store)
    outcomes: list[str] = []

    async def writer(i: int) -> None:
        try:
            await store.write(lambda c: c.execute("INSERT INTO t (v) VALUES (?)", [str(i)]))
            outcomes.append("committed")
        except StoreClosed:
            outcomes.append("closed")

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(writer, i)
            await anyio.lowlevel.checkpoint()
            tg.start_soon(store.aclose)
    assert len(outcomes) == 200
    assert set(outcomes) <= {"committed", "closed"}
    async with await RuntimeStore.open(db_path) as reopened:
        assert await count(reopened) == outcomes.count("committed")


def _sqlite_threads() -> int:
    return sum("_connection_worker_thread" in t.name for t in threading.enumerate())


@pytest.mark.sqlite_only("a SQLite file path that cannot be opened, and its connection thread")
async def test_unopenable_path_is_a_typed_store_error_and_leaves_no_thread(
    tmp_path: Path,
) -> None:
    before = _sqlite_threads()
    target = tmp_path / "no" / "such" / "dir" / "hostkit.db"
    with pytest.raises(StoreError, match="opening") as caught:
        await RuntimeStore.open(target)
    assert str(target) in str(caught.value)
    # The failed connection's worker thread is gone before open() returns, so it cannot
    # report to this event loop after the loop has closed. (Fewer is fine: an earlier
    # test's store may finish closing meanwhile.)
    assert _sqlite_threads() <= before


async def test_text_with_a_lone_surrogate_is_invalid_value_and_nothing_is_written(
    store: RuntimeStore,
) -> None:
    # Undecodable bytes (a command line's $'\xff') arrive as a lone surrogate, which no
    # engine can encode: the caller's value is at fault, said as such, and rolled back.
    await make_table(store)

    def insert_both(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO t (v) VALUES ('before')")
        c.execute("INSERT INTO t (v) VALUES (?)", ["bad \udcff"])

    with pytest.raises(InvalidValue, match="lone surrogate"):
        await store.write(insert_both)
    with pytest.raises(InvalidValue, match="lone surrogate"):
        await store.read(lambda c: c.execute("SELECT v FROM t WHERE v = ?", ["\udcff"]).fetchall())
    assert await count(store) == 0
    await store.write(lambda c: c.execute("INSERT INTO t (v) VALUES ('after')"))
    assert await count(store) == 1
