"""The throwaway PostgreSQL cluster the store matrix runs on (tests/postgres.py)."""

from __future__ import annotations

import contextlib
import subprocess

import anyio
import psutil
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from hostkit.store import RuntimeStore
from tests.parts import missing
from tests.postgres import HOSTKIT_TEMPLATE, PostgresCluster, PostgresUnavailable

pytestmark = pytest.mark.anyio


async def connect(url: str, **options: object) -> psycopg.AsyncConnection[tuple[object, ...]]:
    return await psycopg.AsyncConnection.connect(url, connect_timeout=10, **options)  # type: ignore[arg-type]


async def test_a_url_without_password_connects_with_the_password_from_the_environment(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await postgres_cluster.create_database()
    assert "password" not in conninfo_to_dict(url)
    assert postgres_cluster.password not in url
    async with await connect(url) as conn:
        row = await (
            await conn.execute(
                "SELECT current_user, current_setting('listen_addresses'), "
                "current_setting('fsync'), current_setting('password_encryption')"
            )
        ).fetchone()
    assert row == ("hostkit", "127.0.0.1", "off", "scram-sha-256")


async def test_a_wrong_or_missing_password_is_refused(
    postgres_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres_cluster.url()
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        await connect(url, password="not-the-password")
    # Loopback TCP is SCRAM, not trust: without PGPASSWORD there is no way in.
    monkeypatch.delenv("PGPASSWORD")
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        await connect(url)


async def test_two_created_databases_are_independent(postgres_cluster: PostgresCluster) -> None:
    first = await postgres_cluster.create_database()
    second = await postgres_cluster.create_database()
    assert first != second
    async with await connect(first, autocommit=True) as conn:
        await conn.execute("CREATE TABLE only_here (v text)")
        await conn.execute("INSERT INTO only_here VALUES ('first')")
    async with await connect(second) as conn:
        found = await (await conn.execute("SELECT to_regclass('only_here')")).fetchone()
    assert found == (None,)


async def test_template_clones_hold_the_migrated_schema_and_nothing_shared(
    postgres_cluster: PostgresCluster,
) -> None:
    first = await postgres_cluster.create_database(template=HOSTKIT_TEMPLATE)
    second = await postgres_cluster.create_database(template=HOSTKIT_TEMPLATE)
    async with RuntimeStore.open_postgres(first) as store:
        session_id = await store.create_session(owner_kind="system", principal_id="one")
    async with RuntimeStore.open_postgres(second) as store:
        assert await store.owner_facts(session_id) is None
    async with RuntimeStore.open_postgres(first) as store:
        assert await store.owner_facts(session_id) is not None


async def test_a_durable_cluster_keeps_every_commit_on_disk() -> None:
    # What the benchmarks (bench/_scaleout.py) measure on, unlike the tests' fast cluster.
    try:
        cluster = await anyio.to_thread.run_sync(lambda: PostgresCluster.start(durable=True))
    except PostgresUnavailable as exc:
        missing("postgres", str(exc))
    try:
        async with await connect(cluster.url(), password=cluster.password) as conn:
            row = await (
                await conn.execute(
                    "SELECT current_setting('fsync'), current_setting('synchronous_commit'), "
                    "current_setting('full_page_writes'), current_setting('listen_addresses')"
                )
            ).fetchone()
    finally:
        await anyio.to_thread.run_sync(cluster.stop)
    assert row == ("on", "on", "on", "127.0.0.1")


def test_a_backend_that_ended_before_its_signal_does_not_fail_freeze_or_thaw(
    postgres_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A frozen-server test's teardown thaws the cluster just after its Host closed its
    # connections: their backends end meanwhile, between the listing and the signal.
    child = subprocess.Popen(["true"])
    ended = psutil.Process(child.pid)
    child.wait(timeout=10)
    listed = postgres_cluster._processes()
    monkeypatch.setattr(postgres_cluster, "_processes", lambda: [ended, *listed])
    with pytest.raises(psutil.NoSuchProcess):
        ended.send_signal(0)
    postgres_cluster.thaw()  # SIGCONT to a running server changes nothing
    assert all(process.status() != psutil.STATUS_STOPPED for process in listed)


async def test_freeze_stops_the_postmaster_and_every_backend_and_thaw_resumes_them(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await postgres_cluster.create_database()
    connections = [await connect(url, password=postgres_cluster.password) for _ in range(3)]
    try:
        try:
            postgres_cluster.freeze()
            frozen = postgres_cluster._processes()
            assert len(frozen) >= 4  # the postmaster and at least the three backends
            # A child that ended just before its stopped postmaster could reap it is a zombie.
            assert statuses(frozen) - {psutil.STATUS_ZOMBIE} == {psutil.STATUS_STOPPED}
        finally:
            postgres_cluster.thaw()
        assert psutil.STATUS_STOPPED not in statuses(postgres_cluster._processes())
    finally:
        for conn in connections:
            await conn.close()


def statuses(processes: list[psutil.Process]) -> set[str]:
    """The processes' states; one that ended meanwhile (an autovacuum worker) has none."""
    seen: set[str] = set()
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            seen.add(process.status())
    return seen
