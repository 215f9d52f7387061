"""The PostgreSQL schema equals SQLite's, and its migrations keep SQLite's discipline.

Parity: after ``PG_MIGRATIONS`` a database has exactly the tables, columns
(name, type, nullability, default), primary keys, unique constraints, foreign
keys and named indexes of a fresh SQLite file after ``MIGRATIONS``, apart from
the ``*_ONLY`` constants below, where each engine does one thing its own way.

Migrations: one transaction under an advisory lock, so a second open does
nothing, concurrent first opens apply the schema once, a Host starting while
another upgrades waits for it (by the lock's bound, not the statement timeout,
and no longer than a limit it was opened under), a newer or foreign database
is refused, and a failing statement leaves the database as it was.

Backups: a file named like a backup (``hostkit-v<N>-<time>.dump``) is always a
verified dump; a failed, cut or killed dump leaves nothing under that name.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from hostkit.errors import MigrationError
from hostkit.store import (
    Migration,
    RowStore,
    RuntimeStore,
    WaitLimit,
    _pg_backup,
    _pg_migrate,
    stores_opened_follow,
)
from hostkit.store._pg_backup import dump_and_verify
from hostkit.store._pg_migrate import PgMigrationReport
from hostkit.store._pg_schema import PG_MIGRATIONS, PG_SCHEMA_VERSION
from hostkit.store._sqlite import SqliteStore
from hostkit.types import InboundEnvelope
from tests.contract._delivery_adapters import ROUTE
from tests.contract._session_history import (
    assert_session_activity_backfilled,
    seed_before_session_activity,
)
from tests.contract._store_adapters import (
    assert_memory_kept_untraced,
    assert_owner_search_backfilled,
    assert_reclaim_backfilled,
    assert_refs_backfilled,
    assert_search_words_backfilled,
    seed_attachments_before_reclaim,
    seed_attachments_before_refs,
    seed_before_owner_search,
    seed_before_search_words,
    seed_memory_before_provenance,
)
from tests.contract._tally_history import (
    NOW,
    assert_tallies_seeded,
    counted,
    recount,
    seed_before_tallies,
)
from tests.postgres import HOSTKIT_TEMPLATE, PostgresCluster

pytestmark = pytest.mark.anyio

# What one engine has and the other does not, on purpose (the *_ONLY constants):
# SQLite's memory search is an FTS5 virtual table and its shadow tables ...
SQLITE_ONLY_TABLES = frozenset(
    {"memory_fts", "memory_fts_config", "memory_fts_data", "memory_fts_docsize", "memory_fts_idx"}
)
# ... PostgreSQL's a generated tsvector column with a GIN index.
PG_ONLY_COLUMNS = frozenset({("memory_items", "search")})
PG_ONLY_INDEXES = frozenset({"memory_search"})
# SQLite's items carry their owner's token, the FTS5 column a recall must match.
SQLITE_ONLY_COLUMNS = frozenset({("memory_items", "owner_token")})
# PostgreSQL records applied migrations in a table; SQLite in PRAGMA user_version.
PG_ONLY_TABLES = frozenset({"hostkit_schema"})
# SQLite declared type -> PostgreSQL type (_pg_schema's module doc).
TYPES = {"INTEGER": "bigint", "TEXT": "text", "REAL": "double precision", "BLOB": "bytea"}


@dataclass
class Table:
    # column -> (type, not null, default)
    columns: dict[str, tuple[str, bool, str | None]] = field(default_factory=dict)
    primary_key: tuple[str, ...] = ()
    unique: set[tuple[str, ...]] = field(default_factory=set)
    # (columns, referenced table, referenced columns)
    foreign_keys: set[tuple[tuple[str, ...], str, tuple[str, ...]]] = field(default_factory=set)
    # index name -> (columns, unique, partial)
    indexes: dict[str, tuple[tuple[str, ...], bool, bool]] = field(default_factory=dict)


Schema = dict[str, Table]


# -- reading SQLite -------------------------------------------------------------------


def _sqlite_schema(path: Path) -> Schema:
    conn = sqlite3.connect(path)
    try:
        schema: Schema = {}
        names = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for name in names:
            if name in SQLITE_ONLY_TABLES:
                continue
            table = schema[name] = Table()
            info = conn.execute(f"PRAGMA table_info({name})").fetchall()
            pk = sorted((row[5], row[1]) for row in info if row[5])
            table.primary_key = tuple(column for _, column in pk)
            for _, column, declared, notnull, default, in_pk in info:
                if (name, column) in SQLITE_ONLY_COLUMNS:
                    continue
                # A key column is NOT NULL (SQLite's rowid tables let a non-integer key be
                # NULL only by an old bug no row function relies on).
                table.columns[column] = (
                    TYPES.get(declared.upper(), f"?{declared}"),
                    bool(notnull or in_pk),
                    default,
                )
            for _, index, unique, origin, partial in conn.execute(f"PRAGMA index_list({name})"):
                columns = tuple(
                    row[2] for row in sorted(conn.execute(f"PRAGMA index_info({index})").fetchall())
                )
                if origin == "u":
                    table.unique.add(columns)
                elif origin == "c":
                    table.indexes[index] = (columns, bool(unique), bool(partial))
            fks: dict[int, list[tuple[int, str, str, str]]] = {}
            for fk_id, seq, parent, source, target, *_ in conn.execute(
                f"PRAGMA foreign_key_list({name})"
            ):
                fks.setdefault(fk_id, []).append((seq, parent, source, target))
            for parts in fks.values():
                parts.sort()
                table.foreign_keys.add(
                    (tuple(p[2] for p in parts), parts[0][1], tuple(p[3] for p in parts))
                )
        return schema
    finally:
        conn.close()


async def sqlite_schema(tmp_path: Path) -> Schema:
    path = tmp_path / "parity.db"
    # SqliteStore directly: on the store matrix's postgres leg RuntimeStore.open is PostgreSQL.
    store = await SqliteStore.connect(path)
    await store.aclose()
    return await anyio.to_thread.run_sync(_sqlite_schema, path)


# -- reading PostgreSQL ---------------------------------------------------------------

_KEY_COLUMNS = (
    "array(SELECT a.attname::text FROM unnest({keys}) WITH ORDINALITY AS k(num, ord) "
    "JOIN pg_attribute a ON a.attrelid = {rel} AND a.attnum = k.num ORDER BY k.ord)"
)
_CONSTRAINTS = (
    "SELECT c.conrelid::regclass::text, c.contype, "
    + _KEY_COLUMNS.format(keys="c.conkey", rel="c.conrelid")
    + ", c.confrelid::regclass::text, "
    + _KEY_COLUMNS.format(keys="c.confkey", rel="c.confrelid")
    + " FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace "
    "WHERE n.nspname = current_schema() AND c.contype IN ('p', 'u', 'f')"
)
_INDEXES = (
    "SELECT t.relname::text, i.relname::text, ix.indisunique, ix.indpred IS NOT NULL, "
    + _KEY_COLUMNS.format(keys="ix.indkey::int2[]", rel="ix.indrelid")
    + " FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid "
    "JOIN pg_class t ON t.oid = ix.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
    "WHERE n.nspname = current_schema() "
    "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = ix.indexrelid)"
)


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[psycopg.AsyncConnection[tuple[Any, ...]]]:
    with anyio.fail_after(30):
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)
    async with conn:
        yield conn


async def fetch(url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    async with connect(url) as conn:
        with anyio.fail_after(30):
            return await (await conn.execute(sql, params)).fetchall()


def _pg_default(text: str | None) -> str | None:
    # PostgreSQL shows a literal default with its cast: 'active'::text.
    return None if text is None else re.sub(r"::[a-z ]+$", "", text)


async def pg_schema(url: str) -> Schema:
    schema: Schema = {}
    for table, column, data_type, nullable, default in await fetch(
        url,
        "SELECT table_name, column_name, data_type, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_schema = current_schema() "
        "ORDER BY table_name, ordinal_position",
    ):
        if table in PG_ONLY_TABLES or (table, column) in PG_ONLY_COLUMNS:
            continue
        schema.setdefault(table, Table()).columns[column] = (
            data_type,
            nullable == "NO",
            _pg_default(default),
        )
    for table, kind, columns, parent, parent_columns in await fetch(url, _CONSTRAINTS):
        if table in PG_ONLY_TABLES:
            continue
        if kind == "p":
            schema[table].primary_key = tuple(columns)
        elif kind == "u":
            schema[table].unique.add(tuple(columns))
        else:
            schema[table].foreign_keys.add((tuple(columns), parent, tuple(parent_columns)))
    for table, index, unique, partial, columns in await fetch(url, _INDEXES):
        if index not in PG_ONLY_INDEXES:
            schema[table].indexes[index] = (tuple(columns), unique, partial)
    return schema


async def migrated_database(cluster: PostgresCluster) -> str:
    return await cluster.create_database(template=HOSTKIT_TEMPLATE)


async def schema_rows(url: str) -> list[tuple[Any, ...]]:
    return await fetch(url, "SELECT version, name FROM hostkit_schema ORDER BY version")


async def table_names(url: str) -> list[str]:
    rows = await fetch(
        url,
        "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1",
    )
    return [row[0] for row in rows]


async def open_fails(url: str, *, migrations: tuple[Migration, ...]) -> Exception:
    """The error of an open that must fail (returned, so the test checks the database
    before it checks the error's class)."""
    try:
        store = await RuntimeStore.open_postgres(url, migrations=migrations)
    except Exception as exc:
        return exc
    await store.aclose()
    raise AssertionError("the open with a failing migration succeeded")


# -- parity ---------------------------------------------------------------------------


async def test_postgres_and_sqlite_have_the_same_tables(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    sqlite = await sqlite_schema(tmp_path)
    pg = await pg_schema(await migrated_database(postgres_cluster))
    assert sorted(pg) == sorted(sqlite)
    assert len(sqlite) > 25  # the whole schema, not an empty read


async def test_every_table_has_the_same_columns_types_nullability_and_defaults(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    sqlite = await sqlite_schema(tmp_path)
    pg = await pg_schema(await migrated_database(postgres_cluster))
    differences = {
        name: {"sqlite": sqlite[name].columns, "postgres": pg[name].columns}
        for name in sorted(set(sqlite) & set(pg))
        if sqlite[name].columns != pg[name].columns
    }
    assert differences == {}
    # The comparison saw columns of every kind it maps.
    kinds = {column[0] for table in pg.values() for column in table.columns.values()}
    assert kinds == set(TYPES.values())


async def test_every_table_has_the_same_keys_and_unique_constraints(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    sqlite = await sqlite_schema(tmp_path)
    pg = await pg_schema(await migrated_database(postgres_cluster))
    for name in sorted(set(sqlite) & set(pg)):
        assert pg[name].primary_key == sqlite[name].primary_key, name
        assert pg[name].primary_key, f"{name} has no primary key"
        assert pg[name].unique == sqlite[name].unique, name
        assert pg[name].foreign_keys == sqlite[name].foreign_keys, name
    assert ("channel_instance_id", "platform_event_key") in pg["inbox"].unique
    assert (("session_id",), "sessions", ("session_id",)) in pg["turns"].foreign_keys


async def test_every_table_has_the_same_named_indexes(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    sqlite = await sqlite_schema(tmp_path)
    pg = await pg_schema(await migrated_database(postgres_cluster))
    for name in sorted(set(sqlite) & set(pg)):
        assert pg[name].indexes == sqlite[name].indexes, name
    assert pg["inbox"].indexes["inbox_due"] == (("channel_instance_id", "due_at"), False, True)


async def test_the_schema_version_is_recorded_once_per_migration(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await migrated_database(postgres_cluster)
    assert await schema_rows(url) == [(m.version, m.name) for m in PG_MIGRATIONS]
    assert PG_MIGRATIONS[-1].version == PG_SCHEMA_VERSION


# -- migration behaviour ------------------------------------------------------------


async def test_a_second_open_migrates_nothing(postgres_cluster: PostgresCluster) -> None:
    url = await postgres_cluster.create_database()
    async with RuntimeStore.open_postgres(url) as first:
        assert first.migration == PgMigrationReport(0, PG_SCHEMA_VERSION)  # type: ignore[attr-defined]
        session_id = await first.create_session(owner_kind="system", principal_id="ops")
    rows = await schema_rows(url)
    async with RuntimeStore.open_postgres(url) as second:
        assert second.migration == PgMigrationReport(  # type: ignore[attr-defined]
            PG_SCHEMA_VERSION, PG_SCHEMA_VERSION
        )
        assert await second.owner_facts(session_id) is not None
    assert await schema_rows(url) == rows


async def test_concurrent_first_opens_apply_the_schema_once(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await postgres_cluster.create_database()
    reports: list[PgMigrationReport] = []

    async def open_one() -> None:
        async with RuntimeStore.open_postgres(url) as store:
            reports.append(store.migration)  # type: ignore[attr-defined]

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(open_one)
    assert sorted(r.from_version for r in reports) == [0, *[PG_SCHEMA_VERSION] * 3]
    assert {r.to_version for r in reports} == {PG_SCHEMA_VERSION}
    assert await schema_rows(url) == [(m.version, m.name) for m in PG_MIGRATIONS]


@asynccontextmanager
async def upgrade_under_way(url: str) -> AsyncIterator[None]:
    """Another Host's upgrade, as its first open sees it: the migrator's lock held."""
    async with connect(url) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", [_pg_migrate._MIGRATION_LOCK])
        try:
            yield
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", [_pg_migrate._MIGRATION_LOCK])


async def lock_waiters(url: str) -> int:
    """Sessions still queued for an advisory lock of this database."""
    rows = await fetch(
        url,
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
        "WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()",
    )
    return int(rows[0][0])


async def test_a_host_starting_during_another_hosts_upgrade_waits_past_its_statement_timeout(
    postgres_cluster: PostgresCluster,
) -> None:
    """The wait for another Host's upgrade is bounded by the lock's own bound (900 s),
    never by ``statement_timeout_s``: a long upgrade elsewhere is waited out, and the
    schema is then found current."""
    url = await migrated_database(postgres_cluster)
    opened: list[PgMigrationReport] = []

    async def start_a_host() -> None:
        async with RuntimeStore.open_postgres(url, statement_timeout_s=1) as store:
            opened.append(store.migration)  # type: ignore[attr-defined]

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group, upgrade_under_way(url):
            group.start_soon(start_a_host)
            await anyio.sleep(3)  # three statement timeouts
            assert opened == []
    assert opened == [PgMigrationReport(PG_SCHEMA_VERSION, PG_SCHEMA_VERSION)]


async def test_a_wait_for_another_upgrade_past_its_bound_says_who_holds_it(
    postgres_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the bound the open fails retryably, naming the cause and what to do, and
    migrates nothing."""
    url = await migrated_database(postgres_cluster)
    monkeypatch.setattr(_pg_migrate, "_LOCK_WAIT_S", 3)
    started = time.monotonic()
    with anyio.fail_after(60), pytest.raises(MigrationError) as caught:
        async with upgrade_under_way(url):
            await RuntimeStore.open_postgres(url, statement_timeout_s=1)
    assert time.monotonic() - started >= 2.9
    message = str(caught.value)
    assert "another Host is upgrading the schema" in message, message
    assert "still at it after 3 s" in message, message
    assert "start this Host again when that upgrade is done" in message, message
    assert caught.value.retryable
    assert caught.value.database == url
    assert await lock_waiters(url) == 0


async def test_a_store_opened_under_a_limit_ends_its_wait_for_another_upgrade_when_set(
    postgres_cluster: PostgresCluster,
) -> None:
    """A command stopped while its Host waits for another Host's upgrade (it opens the
    store inside ``stores_opened_follow``): the limit ends that wait within seconds,
    the server's lock queue keeps no session of it, and a store opened once the limit
    is set fails at once."""
    url = await migrated_database(postgres_cluster)
    limit = WaitLimit()
    failed: list[tuple[float, MigrationError]] = []

    async def start_a_host() -> None:
        with stores_opened_follow(limit), pytest.raises(MigrationError) as caught:
            await RuntimeStore.open_postgres(url, statement_timeout_s=60)
        failed.append((time.monotonic(), caught.value))

    with anyio.fail_after(60):
        async with upgrade_under_way(url):
            async with anyio.create_task_group() as group:
                group.start_soon(start_a_host)
                await anyio.sleep(1.0)  # queued for the lock (900 s, unlimited)
                assert await lock_waiters(url) == 1
                limited = time.monotonic()
                limit.limit(0.5)
            ended, error = failed[0]
            assert ended - limited < 5, ended - limited
            assert "stopped waiting for it" in str(error), error
            assert error.retryable
            assert await lock_waiters(url) == 0
            started = time.monotonic()
            with stores_opened_follow(limit), pytest.raises(MigrationError):
                await RuntimeStore.open_postgres(url, statement_timeout_s=60)
            assert time.monotonic() - started < 5


async def test_a_database_of_a_newer_hostkit_is_refused_naming_both_versions(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await migrated_database(postgres_cluster)
    newer = PG_SCHEMA_VERSION + 41
    async with connect(url) as conn:
        await conn.execute(
            "INSERT INTO hostkit_schema (version, name, applied_at) VALUES (%s, 'future', 0)",
            [newer],
        )
    with pytest.raises(MigrationError) as caught:
        await RuntimeStore.open_postgres(url)
    message = str(caught.value)
    assert f"schema version {newer}" in message
    assert f"version {PG_SCHEMA_VERSION})" in message
    assert caught.value.database == url
    assert not caught.value.retryable
    assert (await schema_rows(url))[-1] == (newer, "future")


async def test_a_database_holding_foreign_tables_is_refused_and_left_alone(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await postgres_cluster.create_database()
    async with connect(url) as conn:
        await conn.execute("CREATE TABLE customers (id bigint PRIMARY KEY, name text)")
        await conn.execute("INSERT INTO customers VALUES (1, 'acme')")
    with pytest.raises(MigrationError) as caught:
        await RuntimeStore.open_postgres(url)
    assert "1 tables but no hostkit schema" in str(caught.value)
    assert await table_names(url) == ["customers"]
    assert await fetch(url, "SELECT id, name FROM customers") == [(1, "acme")]


async def test_a_failing_migration_leaves_the_database_as_it_was(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await migrated_database(postgres_cluster)
    async with RuntimeStore.open_postgres(url) as store:
        session_id = await store.create_session(owner_kind="system", principal_id="ops")
    tables = await table_names(url)
    versions = await schema_rows(url)
    failing = Migration(
        PG_SCHEMA_VERSION + 1,
        "injected failure",
        (
            "CREATE TABLE half_done (x BIGINT)",
            "ALTER TABLE sessions ADD COLUMN half_done BIGINT",
            "INSERT INTO no_such_table VALUES (1)",
        ),
    )
    error = await open_fails(url, migrations=(*PG_MIGRATIONS, failing))
    assert await table_names(url) == tables
    assert await schema_rows(url) == versions
    columns = await fetch(
        url,
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = 'sessions' "
        "AND column_name = 'half_done'",
    )
    assert columns == []
    async with RuntimeStore.open_postgres(url) as store:
        assert await store.owner_facts(session_id) is not None
    # Checked last, so the rollback above is verified whatever the error's class.
    assert isinstance(error, MigrationError), repr(error)
    assert "no_such_table" in str(error)
    assert error.database == url


async def test_a_failing_first_migration_leaves_an_empty_database_empty(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await postgres_cluster.create_database()
    broken = Migration(1, "broken", ("CREATE TABLE sessions (id BIGINT)", "SELECT 1/0"))
    error = await open_fails(url, migrations=(broken,))
    assert await table_names(url) == []
    # Nothing half-made is in the way of the real schema afterwards.
    async with RuntimeStore.open_postgres(url) as store:
        assert store.migration == PgMigrationReport(0, PG_SCHEMA_VERSION)  # type: ignore[attr-defined]
    assert isinstance(error, MigrationError), repr(error)
    assert "division by zero" in str(error)


# -- destructive steps: a verified pg_dump first --------------------------------------


def destructive_step() -> Migration:
    return Migration(PG_SCHEMA_VERSION + 1, "drop tasks", ("DROP TABLE tasks",), destructive=True)


async def test_a_destructive_step_without_a_backup_folder_is_refused_and_changes_nothing(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await migrated_database(postgres_cluster)
    tables = await table_names(url)
    with pytest.raises(MigrationError) as caught:
        await RuntimeStore.open_postgres(url, migrations=(*PG_MIGRATIONS, destructive_step()))
    assert "pg_dump" in str(caught.value)
    assert await table_names(url) == tables
    assert await schema_rows(url) == [(m.version, m.name) for m in PG_MIGRATIONS]


async def test_a_destructive_step_on_an_empty_database_needs_no_backup(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await postgres_cluster.create_database()
    async with RuntimeStore.open_postgres(
        url, migrations=(*PG_MIGRATIONS, destructive_step())
    ) as store:
        assert store.migration.backup is None  # type: ignore[attr-defined]
    assert "tasks" not in await table_names(url)


async def test_a_destructive_step_runs_after_a_verified_dump(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    url = await migrated_database(postgres_cluster)
    folder = tmp_path / "backups"
    async with RuntimeStore.open_postgres(
        url, backup_dir=folder, migrations=(*PG_MIGRATIONS, destructive_step())
    ) as store:
        report = store.migration  # type: ignore[attr-defined]
    assert report.from_version == PG_SCHEMA_VERSION
    assert report.to_version == PG_SCHEMA_VERSION + 1
    assert report.backup is not None
    assert report.backup.parent == folder
    mode = (await anyio.Path(report.backup).stat()).st_mode & 0o777
    assert mode == 0o600
    listing = await anyio.run_process(["pg_restore", "--list", str(report.backup)])
    # The dump holds the table the step dropped: it is the state before the upgrade.
    assert b"TABLE public tasks" in listing.stdout
    assert "tasks" not in await table_names(url)


async def test_the_dump_never_carries_the_password_on_its_command_line(
    postgres_cluster: PostgresCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await migrated_database(postgres_cluster)
    password = postgres_cluster.password
    user, _, rest = url.partition("@")
    monkeypatch.delenv("PGPASSWORD")  # only the URL's password can get in now
    argvs: list[list[str]] = []
    real = anyio.run_process

    async def spy(command: Any, **kwargs: Any) -> Any:
        argvs.append([str(part) for part in command])
        return await real(command, **kwargs)

    # Every process's command line is world-readable (ps, /proc/<pid>/cmdline).
    monkeypatch.setattr(anyio, "run_process", spy)
    try:
        store = await RuntimeStore.open_postgres(
            f"{user}:{password}@{rest}",
            backup_dir=tmp_path / "backups",
            migrations=(*PG_MIGRATIONS, destructive_step()),
        )
    finally:
        monkeypatch.setattr(anyio, "run_process", real)
    await store.aclose()
    assert [argv[0].rsplit("/", 1)[-1] for argv in argvs] == ["pg_dump", "pg_restore"]
    leaked = [argv[0] for argv in argvs if any(password in part for part in argv)]
    assert leaked == [], "the URL's password is on these programs' command lines"


def folder_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


async def test_a_failed_dump_leaves_no_file_named_like_a_backup(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    """pg_dump failing (here: no such database), and retried, leaves the folder empty."""
    folder = tmp_path / "backups"
    missing = postgres_cluster.url("no_such_database")
    for _ in range(2):
        with pytest.raises(MigrationError, match="pg_dump failed"):
            await dump_and_verify(missing, folder, 5, location="test")
    assert folder_names(folder) == []


async def test_a_dump_that_is_not_a_hostkit_backup_is_not_kept(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    """The listing decides: an archive without ``hostkit_schema`` is deleted."""
    folder = tmp_path / "backups"
    url = await postgres_cluster.create_database()
    with pytest.raises(MigrationError, match="does not list hostkit_schema"):
        await dump_and_verify(url, folder, 5, location="test")
    assert folder_names(folder) == []


# A pg_dump that writes part of an archive, says so, and hangs (until killed).
_HANGING_PG_DUMP = """#!/bin/sh
for arg in "$@"; do case "$arg" in --file=*) printf 'PGDMP partial' > "${arg#--file=}";; esac; done
touch "$HANGING_DUMP_STARTED"
exec sleep 600
"""
_DUMP_IN_A_PROCESS = """
import asyncio, sys
from pathlib import Path
from hostkit.store._pg_backup import dump_and_verify
asyncio.run(dump_and_verify(sys.argv[1], Path(sys.argv[2]), 5, location="test"))
"""


def hanging_pg_dump(tmp_path: Path) -> tuple[Path, Path]:
    """A folder holding that pg_dump (to put first on PATH), and the file it touches."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "pg_dump").write_text(_HANGING_PG_DUMP)
    (bindir / "pg_dump").chmod(0o755)
    return bindir, tmp_path / "started"


async def test_a_dump_cut_by_its_deadline_leaves_no_file(
    postgres_cluster: PostgresCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "backups"
    url = await migrated_database(postgres_cluster)
    bindir, started = hanging_pg_dump(tmp_path)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HANGING_DUMP_STARTED", str(started))
    monkeypatch.setattr(_pg_backup, "_DUMP_TIMEOUT_S", 1.0)
    with anyio.fail_after(30), pytest.raises(MigrationError, match="did not finish within 1 s"):
        await dump_and_verify(url, folder, 5, location="test")
    assert started.exists()
    assert folder_names(folder) == []


async def test_a_killed_dump_is_never_a_backup_and_the_next_dump_removes_it(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    """A Host killed during its dump leaves only a ``.partial`` file; the next dump into
    the folder deletes it and leaves exactly one verified backup."""
    folder = tmp_path / "backups"
    url = await migrated_database(postgres_cluster)
    bindir, started = hanging_pg_dump(tmp_path)
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "HANGING_DUMP_STARTED": str(started),
    }
    host = await anyio.open_process(
        [sys.executable, "-c", _DUMP_IN_A_PROCESS, url, str(folder)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # its pg_dump in its group: killed with it
    )
    async with host:
        try:
            with anyio.fail_after(60):
                while not await anyio.Path(started).exists():  # noqa: ASYNC110 (another process)
                    await anyio.sleep(0.05)
        finally:
            os.killpg(host.pid, signal.SIGKILL)
            with anyio.fail_after(30):
                await host.wait()
    left = folder_names(folder)
    assert [name for name in left if not name.endswith(".partial")] == [], left
    assert len(left) == 1, left

    backup = await dump_and_verify(url, folder, 5, location="test")
    assert folder_names(folder) == [backup.name]
    assert backup.name.startswith("hostkit-v5-")
    assert backup.suffix == ".dump"
    assert (await anyio.Path(backup).stat()).st_mode & 0o777 == 0o600
    listing = await anyio.run_process(["pg_restore", "--list", str(backup)])
    assert b"hostkit_schema" in listing.stdout


async def test_a_dump_under_way_in_another_process_is_left_alone(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    """A partial file whose writer still holds its lock is not a leftover."""
    folder = tmp_path / "backups"
    folder.mkdir(mode=0o700)
    url = await migrated_database(postgres_cluster)
    other = folder / "hostkit-v5-20000101T000000.dump.partial"
    other.write_bytes(b"PGDMP under way")
    with other.open("rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        backup = await dump_and_verify(url, folder, 5, location="test")
    assert folder_names(folder) == sorted([backup.name, other.name])


def test_a_partial_another_hosts_clean_up_locks_first_is_a_retry_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Hosts dumping into one folder: the other's clean-up may lock this Host's new
    partial file before this Host does (and take it for a leftover). That is the same
    "taken, retry" as a name already there, never a raw ``BlockingIOError``."""
    target = tmp_path / "hostkit-v5-20000101T000000.dump"
    partial = target.with_name(target.name + ".partial")
    real_open = os.open
    cleaners: list[int] = []

    def open_then_another_locks(path: Any, flags: int, *rest: Any) -> int:
        fd = real_open(path, flags, *rest)
        if str(path) == str(partial):
            cleaners.append(real_open(path, os.O_RDONLY))
            fcntl.flock(cleaners[-1], fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd

    monkeypatch.setattr(os, "open", open_then_another_locks)
    try:
        with pytest.raises(FileExistsError):
            _pg_backup._claim(target, partial)
    finally:
        monkeypatch.undo()
        for fd in cleaners:
            os.close(fd)
    assert cleaners, "the other Host's clean-up never ran"


async def test_v9_keeps_every_attachment_a_stored_message_names_and_reclaims_the_rest(
    postgres_cluster: PostgresCluster,
) -> None:
    """The twin of SQLite's v22: a transcript's attachments stay kept, the rest go."""
    url = await postgres_cluster.create_database()
    async with RuntimeStore.open_postgres(url, migrations=PG_MIGRATIONS[:8]) as store:
        named, unnamed = await seed_attachments_before_reclaim(store)
    async with RuntimeStore.open_postgres(url) as store:
        assert store.migration == PgMigrationReport(8, PG_SCHEMA_VERSION)  # type: ignore[attr-defined]
        await assert_reclaim_backfilled(store, named, unnamed)


async def test_v10_keeps_every_memory_item_untraced_and_never_reuses_an_id(
    postgres_cluster: PostgresCluster,
) -> None:
    """The twin of SQLite's v23: items keep their ids and search, with no provenance."""
    url = await postgres_cluster.create_database()
    async with RuntimeStore.open_postgres(url, migrations=PG_MIGRATIONS[:9]) as store:
        ids = await seed_memory_before_provenance(store)
    async with RuntimeStore.open_postgres(url) as store:
        assert store.migration == PgMigrationReport(9, PG_SCHEMA_VERSION)  # type: ignore[attr-defined]
        await assert_memory_kept_untraced(store, ids)


async def test_v11_keeps_every_memory_item_and_audit_view(
    postgres_cluster: PostgresCluster,
) -> None:
    """The twin of SQLite's v24: items recalled as before, a session's audit view kept."""
    url = await postgres_cluster.create_database()
    async with RuntimeStore.open_postgres(url, migrations=PG_MIGRATIONS[:10]) as store:
        ids, session = await seed_before_owner_search(store)
    async with RuntimeStore.open_postgres(url) as store:
        assert store.migration == PgMigrationReport(10, PG_SCHEMA_VERSION)  # type: ignore[attr-defined]
        await assert_owner_search_backfilled(store, ids, session)


async def test_v12_ranks_every_old_session_by_its_turns_as_the_old_list_did(
    postgres_cluster: PostgresCluster,
) -> None:
    """The twin of SQLite's v25: the columns backfilled from the turns, the list kept."""
    url = await postgres_cluster.create_database()
    async with RuntimeStore.open_postgres(url, migrations=PG_MIGRATIONS[:11]) as store:
        before, clock = await seed_before_session_activity(store)
    async with RuntimeStore.open_postgres(url) as store:
        assert store.migration == PgMigrationReport(11, PG_SCHEMA_VERSION)  # type: ignore[attr-defined]
        await assert_session_activity_backfilled(store, before, clock)


async def test_v13_backfills_attachment_references_from_stored_messages(
    postgres_cluster: PostgresCluster,
) -> None:
    """The twin of SQLite's v26: references from messages' text, the rest pending."""
    url = await postgres_cluster.create_database()
    async with RuntimeStore.open_postgres(url, migrations=PG_MIGRATIONS[:12]) as store:
        session_id = await seed_attachments_before_refs(store)
    async with RuntimeStore.open_postgres(url) as store:
        assert store.migration == PgMigrationReport(12, PG_SCHEMA_VERSION)  # type: ignore[attr-defined]
        await assert_refs_backfilled(store, session_id)


async def test_v14_indexes_every_old_item_by_the_words_both_engines_match(
    postgres_cluster: PostgresCluster,
) -> None:
    """The twin of SQLite's v27: old items' words filled, and found by them."""
    url = await postgres_cluster.create_database()
    async with RuntimeStore.open_postgres(url, migrations=PG_MIGRATIONS[:13]) as store:
        ids = await seed_before_search_words(store)
    async with RuntimeStore.open_postgres(url) as store:
        assert store.migration == PgMigrationReport(13, PG_SCHEMA_VERSION)  # type: ignore[attr-defined]
        await assert_search_words_backfilled(store, ids)


async def test_v15_tallies_every_old_finished_row_as_the_old_counts_did(
    postgres_cluster: PostgresCluster,
) -> None:
    """The twin of SQLite's v28: the tallies seeded from the rows, the counts kept."""
    url = await postgres_cluster.create_database()
    async with RuntimeStore.open_postgres(url, migrations=PG_MIGRATIONS[:14]) as store:
        assert isinstance(store, RowStore)
        before = await seed_before_tallies(store)
    async with RuntimeStore.open_postgres(url) as store:
        assert store.migration == PgMigrationReport(14, PG_SCHEMA_VERSION)  # type: ignore[attr-defined]
        await assert_tallies_seeded(store, before)


async def test_v15_counts_what_a_host_of_v14_commits_while_it_upgrades(
    postgres_cluster: PostgresCluster,
) -> None:
    """Hosts of the previous version write on while another upgrades: an inbound completed
    and an intent delivered by a transaction open when the upgrade starts, and committed
    while it runs, are in the counts (neither the seeds' snapshots nor a trigger saw them
    before the upgrade locked the tables first)."""
    url = await postgres_cluster.create_database()
    async with RuntimeStore.open_postgres(url, migrations=PG_MIGRATIONS[:14]) as store:
        envelope = InboundEnvelope(
            channel_instance_id="chan.a",
            platform_event_key="k1",
            conversation_key="c",
            principal_key="u",
            authenticated_by="hmac",
            received_at=NOW,
            payload="hi",
        )
        await store.inbox.accept([envelope], None, now=NOW)
        await store.delivery.reply(inbound_id="in-1", session_id="ses-1", route=ROUTE, text="hi")
    older = await psycopg.AsyncConnection.connect(url)
    try:
        await older.execute(
            "UPDATE inbox SET state = 'completed', due_at = NULL, result_kind = 'ignored', "
            "claim_token = NULL, owner = NULL WHERE platform_event_key = 'k1'"
        )
        await older.execute("UPDATE outbox SET status = 'delivered', next_attempt_at = NULL")

        async def commit_meanwhile() -> None:
            await anyio.sleep(1.0)  # the upgrade has started: it waits for this writer
            await older.commit()

        async with anyio.create_task_group() as group:
            group.start_soon(commit_meanwhile)
            with anyio.fail_after(60):
                async with RuntimeStore.open_postgres(url) as store:
                    assert isinstance(store, RowStore)
                    assert store.migration == PgMigrationReport(14, PG_SCHEMA_VERSION)  # type: ignore[attr-defined]
                    inbox, delivery = await counted(store)
                    assert (inbox, delivery) == await recount(store)
    finally:
        await older.close()
    assert [(c.channel_instance_id, c.completed) for c in inbox] == [("chan.a", 1)]
    assert delivery.delivered == 1
