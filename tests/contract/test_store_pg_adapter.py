"""The PostgreSQL adapter's own behaviour (hostkit/store/_pg.py, _pg_connection.py, _pg_listen.py).

What the shared contract suites cannot see: a lost serialisation race is run
again, a failing row function rolls back, an unreachable or refusing server
is a bounded ``StoreError``, a URL's password never reaches a message or
``location``, values PostgreSQL cannot hold are ``InvalidValue`` with nothing
written, a closed store refuses every call, and LISTEN/NOTIFY wakes an
idle inbox worker, again after its connection is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import anyio.lowlevel
import psycopg
import pytest

from hostkit.errors import (
    MESSAGE_LIMIT,
    ClockSkew,
    InvalidValue,
    StoreClosed,
    StoreError,
    StoreOutcomeUnknown,
)
from hostkit.host import parse_config
from hostkit.host._store import open_configured_store
from hostkit.store import RuntimeStore
from hostkit.store import _pg as pg_module
from hostkit.store import _pg_clock as pg_clock_module
from hostkit.store import _pg_connection as pg_connection_module
from hostkit.types import DeliveryCounts, InboundEnvelope
from tests.postgres import HOSTKIT_TEMPLATE, PostgresCluster

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000.0
# How long a NOTIFY may take to wake a listening worker (the brief's bound).
WAKE_WITHIN_S = 1.0
COUNTER = "counter"


async def database(cluster: PostgresCluster) -> str:
    return await cluster.create_database(template=HOSTKIT_TEMPLATE)


def with_password(url: str, password: str) -> str:
    user, _, rest = url.partition("@")
    return f"{user}:{password}@{rest}"


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port held bound and never listened on: a connection to it is refused,
    and no other process can take it meanwhile (a port merely found free could be)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        yield int(probe.getsockname()[1])


def messages(error: BaseException) -> str:
    """The error and every cause and context under it, as a traceback would show them."""
    seen: list[str] = []
    current: BaseException | None = error
    while current is not None and len(seen) < 20:
        seen.append(f"{current!s} {current!r}")
        current = current.__cause__ or current.__context__
    return "\n".join(seen)


async def scalar(store: RuntimeStore, sql: str, params: list[Any] | None = None) -> Any:
    def read(conn: sqlite3.Connection) -> Any:
        row = conn.execute(sql, params or []).fetchone()
        return None if row is None else row[0]

    return await store.read(read)  # type: ignore[attr-defined]


def envelope(key: str) -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id="webhook.main",
        platform_event_key=key,
        conversation_key="chat-1",
        principal_key="user-1",
        authenticated_by="hmac",
        received_at=NOW,
        payload=f"hello {key}",
    )


async def admin(url: str, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with anyio.fail_after(30):
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=10
        ) as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchall() if cur.description is not None else []


# -- transactions -----------------------------------------------------------------


async def test_a_lost_serialisation_race_is_run_again_and_every_write_lands(
    postgres_cluster: PostgresCluster,
) -> None:
    writes = 16
    runs = 0
    runs_lock = threading.Lock()
    # The first runs of two writes both read the counter before either updates it: one
    # of them must lose (SQLSTATE 40001) and be run again, every time this test runs.
    both_read = threading.Barrier(2, timeout=20)
    raced: list[int] = []

    def increment(conn: sqlite3.Connection) -> int:
        nonlocal runs
        with runs_lock:
            runs += 1
            run = runs
        row = conn.execute(
            "SELECT served_seq FROM inbox_channels WHERE channel_instance_id = ?", [COUNTER]
        ).fetchone()
        if run <= 2:
            raced.append(run)
            both_read.wait()
        conn.execute(
            "UPDATE inbox_channels SET served_seq = ? WHERE channel_instance_id = ?",
            [row[0] + 1, COUNTER],
        )
        return int(row[0]) + 1

    async with RuntimeStore.open_postgres(await database(postgres_cluster)) as store:
        await store.write(  # type: ignore[attr-defined]
            lambda conn: conn.execute(
                "INSERT INTO inbox_channels (channel_instance_id, served_seq) VALUES (?, 0)",
                [COUNTER],
            )
        )
        results: list[int] = []

        async def one() -> None:
            results.append(await store.write(increment))  # type: ignore[attr-defined]

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(writes):
                    tg.start_soon(one)
        final = await scalar(
            store, "SELECT served_seq FROM inbox_channels WHERE channel_instance_id = ?", [COUNTER]
        )
    assert final == writes
    # Each write saw the value before its own increment: a serial order of the writes.
    assert sorted(results) == list(range(1, writes + 1))
    assert raced == [1, 2]
    assert runs > writes  # at least the loser of the forced race ran twice


async def test_under_a_limit_a_write_waits_for_another_sessions_lock_no_longer(
    postgres_cluster: PostgresCluster,
) -> None:
    """``limit_waits`` (a closing owner): a write blocked by another session's lock fails,
    typed and retryable with nothing of it done, at the limit rather than after the
    statement timeout (30 s); once the lock is gone, writes run."""
    url = await database(postgres_cluster)
    insert = "INSERT INTO inbox_channels (channel_instance_id, served_seq) VALUES (?, 0)"
    async with RuntimeStore.open_postgres(url) as store:
        with anyio.fail_after(30):
            holder = await psycopg.AsyncConnection.connect(url, connect_timeout=10)
        async with holder:
            await holder.execute("LOCK TABLE inbox_channels IN ACCESS EXCLUSIVE MODE")
            store.limit_waits(1.0)
            started = time.monotonic()
            with anyio.fail_after(25), pytest.raises(StoreError) as caught:
                await store.write(lambda conn: conn.execute(insert, [COUNTER]))  # type: ignore[attr-defined]
            waited = time.monotonic() - started
            await holder.rollback()
        assert caught.value.retryable
        assert len(str(caught.value)) <= MESSAGE_LIMIT
        assert waited < 8, waited
        await store.write(lambda conn: conn.execute(insert, ["after"]))  # type: ignore[attr-defined]
        kept = await scalar(store, "SELECT COUNT(*) FROM inbox_channels")
    assert kept == 1


async def test_a_failing_row_function_rolls_back_and_its_error_reaches_the_caller(
    postgres_cluster: PostgresCluster,
) -> None:
    class Boom(Exception):
        pass

    boom = Boom("row function failed")

    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO inbox_channels (channel_instance_id) VALUES (?)", ["rolled-back"])
        raise boom

    async with RuntimeStore.open_postgres(await database(postgres_cluster)) as store:
        with pytest.raises(Boom) as caught:
            await store.write(half_then_fail)  # type: ignore[attr-defined]
        assert caught.value is boom
        assert await scalar(store, "SELECT count(*) FROM inbox_channels") == 0
        # The pooled connection is clean: the next write on it commits.
        for _ in range(3):
            await store.write(  # type: ignore[attr-defined]
                lambda conn: conn.execute(
                    "INSERT INTO inbox_channels (channel_instance_id) VALUES (?) "
                    "ON CONFLICT DO NOTHING",
                    ["kept"],
                )
            )
        assert await scalar(store, "SELECT channel_instance_id FROM inbox_channels") == "kept"


async def kill_backends(url: str) -> int:
    """Terminate every hostkit pooled connection to ``url``'s database, as a restart would."""
    rows = await admin(
        url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = 'hostkit' "
        "AND pid <> pg_backend_pid()",
    )
    return len(rows)


async def test_calls_after_every_pooled_connection_died_succeed_on_fresh_connections(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await database(postgres_cluster)
    async with RuntimeStore.open_postgres(url, pool_size=4) as store:
        # Four reads at once: the pool holds four connections, all idle afterwards.
        together = threading.Barrier(4, timeout=20)

        def hold(conn: sqlite3.Connection) -> int:
            together.wait()
            return int(conn.execute("SELECT 1").fetchone()[0])

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(store.read, hold)  # type: ignore[attr-defined]
        assert await kill_backends(url) == 4

        runs = 0

        def insert(key: str) -> Callable[[sqlite3.Connection], None]:
            def write(conn: sqlite3.Connection) -> None:
                nonlocal runs
                runs += 1
                conn.execute("INSERT INTO inbox_channels (channel_instance_id) VALUES (?)", [key])

            return write

        # Every call after the kill succeeds: none is failed for a connection that was
        # dead before it started, whichever of the four dead ones it was handed.
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for index in range(4):
                    tg.start_soon(store.write, insert(f"after-{index}"))  # type: ignore[attr-defined]
            assert await scalar(store, "SELECT count(*) FROM inbox_channels") == 4
        assert runs > 4  # at least one write met a dead connection and was run again


async def test_a_write_whose_connection_dies_before_commit_lands_once(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await database(postgres_cluster)
    runs = 0

    def insert_then_lose_the_connection(conn: sqlite3.Connection) -> None:
        nonlocal runs
        runs += 1
        conn.execute("INSERT INTO inbox_channels (channel_instance_id) VALUES (?)", ["once"])
        if runs == 1:
            with psycopg.connect(url, autocommit=True) as other:
                other.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name = 'hostkit'"
                )
            conn.execute("SELECT 1")  # the server is gone: this statement fails

    async with RuntimeStore.open_postgres(url) as store:
        with anyio.fail_after(30):
            await store.write(insert_then_lose_the_connection)  # type: ignore[attr-defined]
        assert runs == 2
        assert await scalar(store, "SELECT count(*) FROM inbox_channels") == 1


async def test_a_lost_connection_closes_the_idle_ones_without_asking_the_server(
    postgres_cluster: PostgresCluster,
) -> None:
    """What lost one connection (a restart, a failover) most likely lost the others: the
    idle ones are closed, never pinged (a ping to a server that does not answer could
    not be cut), and the rerun runs on a new connection."""
    url = await database(postgres_cluster)
    pids: set[int] = set()

    def backend(conn: sqlite3.Connection) -> None:
        pids.add(int(conn.execute("SELECT pg_backend_pid()").fetchone()[0]))
        conn.execute("SELECT pg_sleep(0.3)")

    runs = 0

    def lose_own_connection_once(conn: sqlite3.Connection) -> int:
        nonlocal runs
        runs += 1
        if runs == 1:
            with contextlib.suppress(psycopg.OperationalError):
                conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            conn.execute("SELECT 1")  # its backend is gone: this statement fails
        return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])

    async with RuntimeStore.open_postgres(url) as store:
        async with anyio.create_task_group() as group:  # two pooled connections
            for _ in range(2):
                group.start_soon(store.read, backend)  # type: ignore[attr-defined]
        assert len(pids) == 2
        with anyio.fail_after(30):
            rerun_on = await store.write(lose_own_connection_once)  # type: ignore[attr-defined]
        assert runs == 2
        assert rerun_on not in pids
        with anyio.fail_after(10):
            while pids & set(await hostkit_backends(url)):  # noqa: ASYNC110 (another server process)
                await anyio.sleep(0.05)


async def hostkit_backends(url: str) -> list[int]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as other:
        cursor = await other.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'hostkit'"
        )
        return [int(row[0]) for row in await cursor.fetchall()]


async def test_a_call_that_cannot_start_for_want_of_file_descriptors_is_a_retryable_store_error(
    postgres_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await database(postgres_cluster)
    real_dup = pg_module.os.dup

    def exhausted(fd: int) -> int:
        raise OSError(24, "Too many open files")

    async with RuntimeStore.open_postgres(url) as store:
        monkeypatch.setattr(pg_module.os, "dup", exhausted)
        with pytest.raises(StoreError) as caught:
            await store.write(  # type: ignore[attr-defined]
                lambda conn: conn.execute(
                    "INSERT INTO inbox_channels (channel_instance_id) VALUES ('never')"
                )
            )
        assert caught.value.retryable
        assert "Too many open files" in str(caught.value)
        monkeypatch.setattr(pg_module.os, "dup", real_dup)
        assert await scalar(store, "SELECT count(*) FROM inbox_channels") == 0


async def test_a_read_whose_connection_dies_at_its_commit_is_run_again(
    postgres_cluster: PostgresCluster,
) -> None:
    """A read stored nothing: its connection lost at COMMIT is a lost connection like any
    other (run again on a new one), never "whether the write landed is unknown"."""
    url = await database(postgres_cluster)
    pids: list[int] = []

    def read_then_lose_the_connection(conn: sqlite3.Connection) -> int:
        pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        pids.append(pid)
        if len(pids) == 1:
            with psycopg.connect(url, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", [pid])
                deadline = time.monotonic() + 10
                while (
                    other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.02)
        return pid

    async with RuntimeStore.open_postgres(url) as store:
        with anyio.fail_after(30):
            pid = await store.read(read_then_lose_the_connection)  # type: ignore[attr-defined]
        assert len(pids) == 2
        assert pid == pids[1] != pids[0]  # the answer of the run on a new connection


async def deferred_refusal(url: str, table: str, sqlstate: str) -> None:
    """``table``, whose every insert the server refuses at COMMIT with ``sqlstate`` (a
    deferred constraint trigger: checked at COMMIT, on a live connection)."""
    await admin(url, f"CREATE TABLE {table} (id int)")
    await admin(
        url,
        f"CREATE FUNCTION {table}_refuse() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN RAISE EXCEPTION 'refused at commit' USING ERRCODE = '{sqlstate}'; END $$",
    )
    await admin(
        url,
        f"CREATE CONSTRAINT TRIGGER {table}_refuse AFTER INSERT ON {table} "
        f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {table}_refuse()",
    )


@pytest.mark.parametrize("sqlstate", ["57014", "53100", "P0001", "23514"])
async def test_a_commit_the_server_refuses_is_a_known_failure_not_an_unknown_outcome(
    postgres_cluster: PostgresCluster, sqlstate: str
) -> None:
    """An error the server answers a COMMIT with on a live connection rolled the
    transaction back: the caller learns nothing landed (whatever the error's class, an
    operational one included), and the connection serves the next call."""
    url = await database(postgres_cluster)
    await deferred_refusal(url, "refusing", sqlstate)
    async with RuntimeStore.open_postgres(url, pool_size=1) as store:
        with pytest.raises(StoreError) as caught:
            await store.write(  # type: ignore[attr-defined]
                lambda conn: conn.execute("INSERT INTO refusing (id) VALUES (1)")
            )
        assert not isinstance(caught.value, StoreOutcomeUnknown)
        assert sqlstate in str(caught.value)
        assert caught.value.retryable is (sqlstate[:2] in ("57", "53"))
        assert await scalar(store, "SELECT count(*) FROM refusing") == 0


async def test_a_commit_answered_by_no_server_is_an_unknown_outcome_whatever_the_error_class(
    postgres_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A COMMIT whose connection broke on the way has an unknown outcome, whichever
    psycopg error class reports it (a ``DatabaseError`` without an SQLSTATE too)."""
    url = await database(postgres_cluster)
    real_commit = psycopg.Connection.commit
    cut: list[int] = []

    def commit_cut_on_the_way(self: psycopg.Connection[Any]) -> None:
        # Only the write's own COMMIT (not a new pooled connection's configure callback,
        # which runs on one of the pool's threads).
        pool_thread = threading.current_thread().name.startswith("hostkit-")
        in_transaction = self.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        if pool_thread or not in_transaction or cut:
            real_commit(self)
            return
        cut.append(self.info.backend_pid)
        with socket.socket(fileno=os.dup(self.fileno())) as copy:
            copy.shutdown(socket.SHUT_RDWR)
        try:
            real_commit(self)
        except psycopg.OperationalError as exc:
            raise psycopg.DatabaseError(f"lost: {exc}") from None

    async with RuntimeStore.open_postgres(url) as store:
        monkeypatch.setattr(psycopg.Connection, "commit", commit_cut_on_the_way)
        with pytest.raises(StoreOutcomeUnknown), anyio.fail_after(30):
            await store.write(  # type: ignore[attr-defined]
                lambda conn: conn.execute(
                    "INSERT INTO inbox_channels (channel_instance_id) VALUES ('maybe')"
                )
            )
        assert len(cut) == 1
        monkeypatch.setattr(psycopg.Connection, "commit", real_commit)
        # The COMMIT never reached the server here; the broken connection went away and
        # the store serves the next call.
        assert await scalar(store, "SELECT count(*) FROM inbox_channels") == 0


def test_a_socket_copy_that_cannot_be_made_closes_its_duplicate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    duplicates: list[int] = []

    def recorded_dup(fd: int) -> int:
        duplicates.append(os.dup(fd))
        return duplicates[-1]

    def refused(*args: Any, **kwargs: Any) -> socket.socket:
        raise OSError(22, "Invalid argument")

    # Only the adapter's own names are replaced: no other thread's sockets are touched.
    monkeypatch.setattr(pg_module, "os", SimpleNamespace(dup=recorded_dup, close=os.close))
    monkeypatch.setattr(pg_module, "socket", SimpleNamespace(socket=refused))
    first, second = socket.socketpair()
    with first, second:
        with pytest.raises(OSError, match="Invalid argument"):
            pg_module._socket_copy(first.fileno())
        assert len(duplicates) == 1
        with pytest.raises(OSError, match="Bad file descriptor") as closed:
            os.fstat(duplicates[0])
        assert closed.value.errno == errno.EBADF


async def test_each_connection_asks_the_server_for_keepalives_of_its_own(
    postgres_cluster: PostgresCluster,
) -> None:
    """A backend whose client machine vanished between transactions (holding the writer
    lock) is ended by the server within seconds, not after the system's two hours."""
    async with RuntimeStore.open_postgres(await database(postgres_cluster)) as store:
        shown = [
            await scalar(store, f"SHOW {name}")
            for name in ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")
        ]
        assert shown == ["5", "2", "3"]
        assert await scalar(store, "SHOW tcp_user_timeout") == "15000"  # ms


async def until_rows(url: str, sql: str, rows: list[tuple[Any, ...]], within_s: float) -> None:
    with anyio.fail_after(within_s):
        # Another server's state, polled: nothing here could set an event for it.
        while await admin(url, sql) != rows:  # noqa: ASYNC110
            await anyio.sleep(0.1)


async def test_the_statement_of_a_call_whose_caller_gave_up_ends_within_seconds(
    postgres_cluster: PostgresCluster,
) -> None:
    """The hop of a caller that gave up is cut on the client's side; the server notices
    the vanished client while the statement still runs and ends it (releasing its
    locks), long before its ``statement_timeout``."""
    url = await database(postgres_cluster)
    [(version,)] = await admin(url, "SHOW server_version_num")
    async with RuntimeStore.open_postgres(url, statement_timeout_s=120) as store:
        if int(version) < 140000:  # no such setting before 14: the store works without it
            assert await scalar(store, "SELECT 1") == 1
            return
        assert await scalar(store, "SHOW client_connection_check_interval") == "1s"
        running = "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'"
        async with anyio.create_task_group() as group:
            group.start_soon(
                store.write,  # type: ignore[attr-defined]
                lambda conn: conn.execute("SELECT pg_sleep(60)"),
            )
            await until_rows(url, running, [(1,)], within_s=10)  # it runs on the server
            group.cancel_scope.cancel()  # the caller gives up
        await until_rows(url, running, [(0,)], within_s=10)


async def test_a_server_that_refuses_the_client_check_still_serves_the_store(
    postgres_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some servers refuse ``client_connection_check_interval`` (no socket check on their
    platform, a proxy): each connection then goes without it, never fails to open."""
    url = await database(postgres_cluster)
    monkeypatch.setattr(
        pg_connection_module, "_CLIENT_CHECK", "SET client_connection_check_interval = -5"
    )
    with anyio.fail_after(30):
        async with RuntimeStore.open_postgres(url, connect_timeout_s=5) as store:
            assert await scalar(store, "SHOW client_connection_check_interval") == "0"
            await store.write(  # type: ignore[attr-defined]
                lambda conn: conn.execute(
                    "INSERT INTO inbox_channels (channel_instance_id) VALUES ('served')"
                )
            )
            assert await scalar(store, "SELECT count(*) FROM inbox_channels") == 1


async def test_a_connection_lost_on_every_run_is_a_bounded_retryable_store_error(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await database(postgres_cluster)
    runs = 0

    def always_lose_the_connection(conn: sqlite3.Connection) -> None:
        nonlocal runs
        runs += 1
        conn.execute("INSERT INTO inbox_channels (channel_instance_id) VALUES (?)", [f"r{runs}"])
        with psycopg.connect(url, autocommit=True) as other:
            other.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'hostkit'"
            )
        conn.execute("SELECT 1")

    async with RuntimeStore.open_postgres(url) as store:
        with anyio.fail_after(30), pytest.raises(StoreError) as caught:
            await store.write(always_lose_the_connection)  # type: ignore[attr-defined]
        assert caught.value.retryable
        assert "connection was lost on every try" in str(caught.value)
        assert len(str(caught.value)) <= 500
        assert runs == 3  # the first run and two reruns, no more
        assert await scalar(store, "SELECT count(*) FROM inbox_channels") == 0


async def test_values_round_trip_whatever_quotes_and_placeholders_they_hold(
    postgres_cluster: PostgresCluster,
) -> None:
    # Client-side binding: psycopg quotes each value into the statement text.
    title = "50% done? it's '%s' and \"?\" \\ %% ; DROP TABLE sessions; -- ünïcødé"
    async with RuntimeStore.open_postgres(await database(postgres_cluster)) as store:
        session_id = await store.create_session(
            owner_kind="system", principal_id="ops", title=title
        )
        stored = await scalar(
            store, "SELECT title FROM sessions WHERE session_id = ?", [session_id]
        )
        literal = await scalar(store, "SELECT 'a ? b %' || ? AS v", ["?%"])
    assert stored == title
    assert literal == "a ? b %?%"


# -- connection failures ----------------------------------------------------------------


def _threads() -> set[threading.Thread]:
    # anyio's idle worker threads are a pool kept across calls, not a leak.
    return {t for t in threading.enumerate() if not t.name.startswith("AnyIO worker thread")}


async def test_an_unreachable_server_is_a_retryable_store_error_within_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="psycopg")
    timeout_s = 2.0
    threads = _threads()
    tasks = asyncio.all_tasks()
    started = time.monotonic()
    with closed_port() as port, pytest.raises(StoreError) as caught:
        with anyio.fail_after(timeout_s + 10):
            await RuntimeStore.open_postgres(
                f"postgresql://hostkit@127.0.0.1:{port}/hostkit", connect_timeout_s=timeout_s
            )
    elapsed = time.monotonic() - started
    assert caught.value.retryable
    assert f"127.0.0.1:{port}" in str(caught.value)
    # The server's own answer is the reason shown, and the pool never tried (nor logged).
    assert "Connection refused" in str(caught.value)
    logged = [r for r in caplog.records if r.name.startswith("psycopg")]
    assert [r.getMessage() for r in logged if r.levelno >= logging.WARNING] == []
    assert elapsed < timeout_s + 2.0
    # The pool's workers and connection attempts are gone with the failed open.
    await anyio.lowlevel.checkpoint()
    assert asyncio.all_tasks() - tasks == set()
    assert _threads() - threads == set()


async def test_a_wrong_password_is_a_store_error_that_never_shows_a_password(
    postgres_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await database(postgres_cluster)
    wrong = "wr0ng-Passw0rd-from-env"
    monkeypatch.setenv("PGPASSWORD", wrong)
    with pytest.raises(StoreError) as from_env:
        await RuntimeStore.open_postgres(url, connect_timeout_s=1)
    in_url = "wr0ng-Passw0rd-in-url"
    with pytest.raises(StoreError) as from_url:
        await RuntimeStore.open_postgres(with_password(url, in_url), connect_timeout_s=1)
    for caught, secret in ((from_env, wrong), (from_url, in_url)):
        assert secret not in messages(caught.value)
        assert postgres_cluster.password not in messages(caught.value)
        assert url in str(caught.value)  # the redacted URL says which database


@pytest.mark.parametrize(
    "url",
    [
        "mysql://hostkit@127.0.0.1/hostkit",
        "sqlite:///tmp/hostkit.db",
        "host=127.0.0.1 dbname=hostkit",
        "",
        "postgresql://hostkit@127.0.0.1/" + "d" * 2048,
    ],
    ids=["mysql", "sqlite", "keywords", "empty", "too-long"],
)
async def test_a_url_that_is_not_postgresql_is_invalid_value(url: str) -> None:
    with pytest.raises(InvalidValue):
        await RuntimeStore.open_postgres(url, connect_timeout_s=1)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://hostkit@127.0.0.1:99999/hostkit",
        "postgresql://hostkit@127.0.0.1:port/hostkit",
        "postgresql://hostkit@[::1/hostkit",
        "postgresql://hostkit@127.0.0.1:\u00b2/hostkit",
    ],
    ids=["port-out-of-range", "port-not-a-number", "broken-ipv6", "port-a-non-ascii-digit"],
)
async def test_a_malformed_postgresql_url_is_invalid_value(url: str) -> None:
    with pytest.raises(InvalidValue):
        await RuntimeStore.open_postgres(url, connect_timeout_s=1)


@pytest.mark.parametrize(
    "options",
    [
        {"pool_size": 0},
        {"pool_size": 101},
        {"pool_size": True},
        {"pool_size": 2.5},
        {"connect_timeout_s": float("nan")},
        {"connect_timeout_s": 0},
        {"statement_timeout_s": -1},
        {"statement_timeout_s": float("inf")},
        {"statement_timeout_s": "30"},
    ],
    ids=str,
)
async def test_an_unusable_option_is_invalid_value_before_any_connection(
    options: dict[str, Any],
) -> None:
    # A closed port: were the options not checked first, this would be a StoreError.
    options.setdefault("connect_timeout_s", 1)
    with closed_port() as port:
        url = f"postgresql://hostkit@127.0.0.1:{port}/hostkit"
        with pytest.raises(InvalidValue) as caught:
            await RuntimeStore.open_postgres(url, **options)
    assert len(str(caught.value)) < 200
    assert next(name for name in options if name in str(caught.value))


async def test_a_multi_host_url_is_tried_not_refused_as_malformed() -> None:
    # libpq's failover syntax (host1:port1,host2:port2), which [store] url accepts.
    with closed_port() as first, closed_port() as second:
        url = f"postgresql://hostkit@127.0.0.1:{first},127.0.0.1:{second}/hostkit"
        with pytest.raises(StoreError) as caught:
            await RuntimeStore.open_postgres(url, connect_timeout_s=1)
    assert caught.value.retryable
    assert str(first) in str(caught.value)


async def test_location_never_holds_the_password_given_in_the_url(
    postgres_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await database(postgres_cluster)
    password = postgres_cluster.password
    # Only the URL's password can get in now.
    monkeypatch.delenv("PGPASSWORD")
    for given in (
        with_password(url, password),
        f"{url}?password={password}&application_name=secretive",
    ):
        async with RuntimeStore.open_postgres(given) as store:
            assert store.location == url
            assert password not in store.location
            assert await store.create_session(owner_kind="system", principal_id="ops")


# -- values PostgreSQL cannot hold ----------------------------------------------------


async def test_text_with_nul_is_invalid_value_and_nothing_of_the_write_is_kept(
    postgres_cluster: PostgresCluster,
) -> None:
    def first_fine_then_nul(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO inbox_channels (channel_instance_id) VALUES (?)", ["before"])
        conn.execute("INSERT INTO inbox_channels (channel_instance_id) VALUES (?)", ["a\x00b"])

    async with RuntimeStore.open_postgres(await database(postgres_cluster)) as store:
        with pytest.raises(InvalidValue, match="NUL"):
            await store.write(first_fine_then_nul)  # type: ignore[attr-defined]
        with pytest.raises(InvalidValue):
            await store.create_session(owner_kind="system", principal_id="ops", title="t\x00")
        with pytest.raises(InvalidValue):
            await store.audit("test.nul", reason="r\x00")
        assert await scalar(store, "SELECT count(*) FROM inbox_channels") == 0
        assert await scalar(store, "SELECT count(*) FROM sessions") == 0
        assert await scalar(store, "SELECT count(*) FROM session_owners") == 0
        assert await scalar(store, "SELECT count(*) FROM audit WHERE kind = 'test.nul'") == 0
        # The store is still usable.
        session_id = await store.create_session(owner_kind="system", principal_id="ops")
        assert await store.owner_facts(session_id) is not None


async def test_a_value_a_read_cannot_look_up_is_not_said_to_be_stored(
    postgres_cluster: PostgresCluster,
) -> None:
    def look_up_nul(conn: sqlite3.Connection) -> object:
        return conn.execute(
            "SELECT count(*) FROM inbox_channels WHERE channel_instance_id = ?", ["a\x00b"]
        ).fetchone()

    async with RuntimeStore.open_postgres(await database(postgres_cluster)) as store:
        with pytest.raises(InvalidValue) as refused:
            await store.read(look_up_nul)  # type: ignore[attr-defined]
    assert str(refused.value).startswith("PostgreSQL cannot look up this value: ")
    assert "NUL" in str(refused.value)


# -- closed ------------------------------------------------------------------------


async def test_after_aclose_every_call_raises_store_closed(
    postgres_cluster: PostgresCluster,
) -> None:
    store = await RuntimeStore.open_postgres(await database(postgres_cluster))
    session_id = await store.create_session(owner_kind="system", principal_id="ops")
    await store.aclose()
    await store.aclose()  # idempotent
    assert store.closed
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "write": lambda: store.write(lambda conn: None),  # type: ignore[attr-defined]
        "read": lambda: store.read(lambda conn: None),  # type: ignore[attr-defined]
        "create_session": lambda: store.create_session(owner_kind="system", principal_id="ops"),
        "owner_facts": lambda: store.owner_facts(session_id),
        "audit": lambda: store.audit("test.closed"),
        "inbox.accept": lambda: store.inbox.accept([envelope("closed")], None, now=NOW),
        "inbox.watch": lambda: store.inbox.watch(lambda: None),
    }
    for name, call in calls.items():
        with pytest.raises(StoreClosed), anyio.fail_after(5):
            await call()
        assert name  # each call checked in turn


async def test_a_call_in_flight_when_the_store_closes_raises_store_closed(
    postgres_cluster: PostgresCluster,
) -> None:
    """aclose() cuts a hop still running before its COMMIT: its caller learns the store
    closed (nothing landed), not that the database failed."""
    url = await database(postgres_cluster)
    started = threading.Event()

    def insert_then_wait(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO inbox_channels (channel_instance_id) VALUES ('cut')")
        started.set()
        conn.execute("SELECT pg_sleep(20)")

    store = await RuntimeStore.open_postgres(url)
    outcome: list[BaseException] = []

    async def write() -> None:
        try:
            await store.write(insert_then_wait)  # type: ignore[attr-defined]
        except BaseException as exc:
            outcome.append(exc)

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(write)
            await anyio.to_thread.run_sync(started.wait, 10)
            await store.aclose()
    assert len(outcome) == 1
    assert type(outcome[0]) is StoreClosed
    assert await admin(url, "SELECT count(*) FROM inbox_channels") == [(0,)]


# -- LISTEN / NOTIFY -------------------------------------------------------------------


class Wakes:
    """A ``wake`` callable that counts its calls and lets a test wait for the next."""

    def __init__(self) -> None:
        self.count = 0
        self._event = anyio.Event()

    def __call__(self) -> None:
        self.count += 1
        self._event.set()

    async def past(self, seen: int, *, within_s: float) -> None:
        with anyio.fail_after(within_s):
            while self.count <= seen:
                self._event = anyio.Event()
                await self._event.wait()


async def listener_pids(url: str) -> list[int]:
    rows = await admin(
        url,
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'hostkit-listen' "
        "AND datname = current_database() ORDER BY pid",
    )
    return [int(row[0]) for row in rows]


async def test_watch_wakes_when_another_store_accepts_and_again_after_its_connection_dies(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await database(postgres_cluster)
    wakes = Wakes()
    async with (
        RuntimeStore.open_postgres(url) as watcher,
        RuntimeStore.open_postgres(url) as other,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(watcher.inbox.watch, wakes)
        # The first wake follows LISTEN: from here a NOTIFY reaches the watcher.
        await wakes.past(0, within_s=15)
        seen = wakes.count
        await other.inbox.accept([envelope("first")], None, now=NOW)
        await wakes.past(seen, within_s=WAKE_WITHIN_S)

        [listener] = await listener_pids(url)
        seen = wakes.count
        [[terminated]] = await admin(url, "SELECT pg_terminate_backend(%s)", [listener])
        assert terminated is True
        # It reconnects (and wakes once, for what became ready while it was down) ...
        await wakes.past(seen, within_s=15)
        [relistener] = await listener_pids(url)
        assert relistener != listener
        # ... and a new inbound wakes it again.
        seen = wakes.count
        await other.inbox.accept([envelope("second")], None, now=NOW)
        await wakes.past(seen, within_s=WAKE_WITHIN_S)
        tg.cancel_scope.cancel()
    # Cancelling the watch closes its connection.
    for _ in range(300):
        if not await listener_pids(url):
            break
        await anyio.sleep(0.05)
    else:
        pytest.fail("the listening connection outlived its cancelled watch")


@pytest.mark.parametrize(("offset_s", "side"), [(30.0, "ahead of"), (-30.0, "behind")])
async def test_a_host_whose_clock_is_off_the_servers_does_not_start(
    postgres_cluster: PostgresCluster,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    offset_s: float,
    side: str,
) -> None:
    """Leases written by one Host's clock are read by another's: a machine 30 s off would
    take live holders' sessions over early (ahead) or hold dead ones' too long (behind)."""
    url = await postgres_cluster.create_database()
    monkeypatch.setattr(pg_module, "_machine_clock", lambda: time.time() + offset_s)
    with pytest.raises(ClockSkew) as caught:
        async with RuntimeStore.open_postgres(url):
            pytest.fail("a Host 30 s off the server's clock opened the store")
    assert caught.value.skew_s == pytest.approx(offset_s, abs=1.0)
    assert caught.value.max_skew_s == 2.0
    message = str(caught.value)
    assert f"s {side} the clock of the database server" in message
    assert "max_clock_skew_s" in message
    assert len(message) <= MESSAGE_LIMIT
    # Refused before the schema: nothing was created in the database.
    tables = await admin(url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
    assert tables == [(0,)]
    # The bound is the operator's ([store] max_clock_skew_s): a wider one lets it start.
    config = parse_config({"store": {"url": url, "max_clock_skew_s": 60}}, base_dir=tmp_path)
    store = await open_configured_store(config)
    async with store:
        assert await store.delivery.counts() == DeliveryCounts()
    monkeypatch.setattr(pg_module, "_machine_clock", lambda: time.time() + offset_s / 30)
    async with RuntimeStore.open_postgres(url):
        pass  # one second off: within the default 2 s


async def test_leases_follow_the_servers_clock_and_a_clock_found_off_later_is_told_once(
    postgres_cluster: PostgresCluster,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """This machine's clock steps 30 s ahead after the open-time check: the store's clock
    (``now``: every lease, claim and due time) stays the server's, and the samples taken
    meanwhile log one warning saying how far off it is, then one line once it is back."""
    monkeypatch.setattr(pg_clock_module, "RESAMPLE_S", 0.0)  # every call samples
    async with RuntimeStore.open_postgres(await database(postgres_cluster)) as store:
        monkeypatch.setattr(pg_module, "_machine_clock", lambda: time.time() + 30.0)
        with caplog.at_level(logging.INFO, logger="hostkit.store"):
            for _ in range(3):
                assert await store.delivery.counts() == DeliveryCounts()
            # The server runs on this machine: its clock is this machine's true one.
            assert store.now() == pytest.approx(time.time(), abs=1.0)
            monkeypatch.setattr(pg_module, "_machine_clock", time.time)
            assert await store.delivery.counts() == DeliveryCounts()
    said = [r for r in caplog.records if "this machine's clock" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.INFO]
    assert "s ahead of the clock of the database server" in said[0].getMessage()
    assert "leases follow the server's clock" in said[0].getMessage()
    assert "back within max_clock_skew_s" in said[1].getMessage()


async def test_under_a_limit_a_claim_still_relaxes_its_isolation_and_claims(
    postgres_cluster: PostgresCluster,
) -> None:
    """A closing owner's claims (its inbox and delivery runtimes keep claiming while it
    drains) still run: the lock timeout is set with the first statement, after a claim
    chose READ COMMITTED, never before it (which PostgreSQL refuses mid-transaction)."""
    async with RuntimeStore.open_postgres(await database(postgres_cluster)) as store:
        await store.inbox.accept([envelope("draining")], None, now=NOW)
        store.limit_waits(30.0)
        (claimed,) = await store.inbox.claim(
            owner="closing", now=NOW, lease_s=30.0, limit=1, max_attempts=3
        )
        assert claimed.attempt == 1


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1"])
async def test_a_database_that_does_not_store_utf8_is_refused_before_its_schema(
    postgres_cluster: PostgresCluster, encoding: str
) -> None:
    """``createdb`` on a cluster made under the C locale gives SQL_ASCII: text would come
    back as bytes and turns fail one by one with unrelated errors. Refused at open, with
    how to create the database right, and nothing written to it."""
    url = await postgres_cluster.create_database()
    name = url.rsplit("/", 1)[1]
    other = url.rsplit("/", 1)[0] + f"/{name}_{encoding.lower()}"
    await admin(
        postgres_cluster.url(),
        f"CREATE DATABASE \"{name}_{encoding.lower()}\" ENCODING '{encoding}' "
        "LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0",
    )
    try:
        with pytest.raises(StoreError) as caught:
            async with RuntimeStore.open_postgres(other):
                pytest.fail(f"a {encoding} database opened")
        message = str(caught.value)
        assert f"stores text as {encoding}, not UTF8" in message
        assert "ENCODING 'UTF8' TEMPLATE template0" in message
        assert not caught.value.retryable
        assert len(message) <= MESSAGE_LIMIT
        tables = await admin(other, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert tables == [(0,)]
    finally:
        await admin(
            postgres_cluster.url(), f'DROP DATABASE "{name}_{encoding.lower()}" WITH (FORCE)'
        )


def _socket_keepalives(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> tuple:
    """What the kernel will do about this connection's peer vanishing: (keepalive on, idle
    seconds before the first probe, unacknowledged milliseconds before giving up)."""
    with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        return (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0,
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        )


async def test_every_connection_the_store_opens_gives_up_on_a_vanished_server_in_seconds(
    postgres_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition drops packets silently: a connection without keepalives waits for the
    kernel's default, two hours, and the migration's (which waits up to 900 s for another
    Host's upgrade, then migrates) had none. The pool's, the migration's and LISTEN's
    connections each probe after 5 s of silence and give up after 15 s unacknowledged."""
    url = await database(postgres_cluster)
    seen: dict[str, tuple] = {}
    sync_connect = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]
    async_connect = psycopg.AsyncConnection.connect.__func__  # type: ignore[attr-defined]

    def record(conn: Any, name: object) -> None:
        seen.setdefault(str(name), _socket_keepalives(conn))

    def connecting(cls: Any, *args: Any, **kwargs: Any) -> Any:
        conn = sync_connect(cls, *args, **kwargs)
        record(conn, kwargs.get("application_name"))
        return conn

    async def connecting_async(cls: Any, *args: Any, **kwargs: Any) -> Any:
        conn = await async_connect(cls, *args, **kwargs)
        record(conn, kwargs.get("application_name"))
        return conn

    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(connecting))
    monkeypatch.setattr(psycopg.AsyncConnection, "connect", classmethod(connecting_async))
    async with RuntimeStore.open_postgres(url) as store:
        await store.read(lambda conn: conn.execute("SELECT 1").fetchone())  # type: ignore[attr-defined]
        async with anyio.create_task_group() as group:
            group.start_soon(store.watch_inbox, lambda: None)  # type: ignore[attr-defined]
            with anyio.fail_after(10):
                while "hostkit-listen" not in seen:  # noqa: ASYNC110 (set by the patched connect)
                    await anyio.sleep(0.02)
            group.cancel_scope.cancel()
    assert set(seen) == {"hostkit", "hostkit-migrate", "hostkit-listen"}
    assert all(found == (True, 5, 15_000) for found in seen.values()), seen


async def test_a_cancelled_opening_stops_work_that_waits_off_its_connection(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    """The opening's work (its queries, and the backup an upgrade takes first) runs where
    a cancellation reaches it only after a cancel request and a cut socket, which end a
    query. Work that waits elsewhere, like the backup's pg_dump (a process, up to an
    hour), is then cancelled itself: it is killed about 2 s after the cancellation, not
    left to run to its end while the opening waits."""
    url = await database(postgres_cluster)
    pid_file = tmp_path / "dump.pid"

    async def dumping() -> None:  # as dump_and_verify runs pg_dump
        await anyio.run_process(["sh", "-c", f'echo $$ > "{pid_file}"; exec sleep 60'])

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        started = time.monotonic()
        with anyio.move_on_after(0.5) as scope:
            await pg_module._ended_when_cancelled(conn, dumping)
        took = time.monotonic() - started
        assert scope.cancelled_caught
        assert took < 0.5 + 3.5, took
        pid = int(pid_file.read_text())
        with anyio.fail_after(5):
            while True:  # the process is reaped by run_process's cancellation
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                await anyio.sleep(0.05)
        # Its connection was cut: the opening goes no further on it.
        with pytest.raises(psycopg.OperationalError):
            await conn.execute("SELECT 1")
