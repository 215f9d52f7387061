"""Schema migrations: verified backup first, one transaction, the old file untouched on failure."""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import sqlite3
from pathlib import Path

import anyio
import pytest

from hostkit.errors import MigrationError, StoreError
from hostkit.store import (
    APPLICATION_ID,
    MIGRATIONS,
    SCHEMA_VERSION,
    Admitted,
    LeaseOwner,
    Migration,
    RowStore,
    RuntimeStore,
    SessionBusy,
    TurnAdmission,
    _migrate,
    upgrade_room,
)
from hostkit.types import new_id
from tests.contract._delivery_adapters import ROUTE, finish_routed_turns
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
from tests.contract._tally_history import assert_tallies_seeded, seed_before_tallies
from tests.support import file_bytes

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent.parent / "golden"
V1 = MIGRATIONS[:1]
# A step that needs more room than the database may take (max_page_count stands in for a
# full disk: the same SQLITE_FULL).
FILLS_THE_DISK = Migration(
    SCHEMA_VERSION + 1,
    "needs room",
    (
        "PRAGMA max_page_count = 1",
        "CREATE TABLE filler (x BLOB)",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 64) "
        "INSERT INTO filler SELECT randomblob(8192) FROM n",
    ),
)
FAILING = Migration(
    SCHEMA_VERSION + 1,
    "injected failure",
    ("CREATE TABLE half_done (x INTEGER)", "INSERT INTO no_such_table VALUES (1)"),
)


async def digest(path: Path) -> str:
    return hashlib.sha256(await file_bytes(path)).hexdigest()


async def make_v1(path: Path) -> None:
    """A version-1 database with one unambiguous and two ambiguous sessions."""
    async with await RuntimeStore.open(path, migrations=V1) as store:

        def populate(c: sqlite3.Connection) -> None:
            for sid in ("ses_single", "ses_unbound", "ses_shared"):
                c.execute(
                    "INSERT INTO sessions (session_id, created_at) VALUES (?, '2026-01-01')", [sid]
                )
            bindings = [
                ("webhook", "c-single", "webhook:alice", "ses_single"),
                ("webhook", "c-a", "webhook:bob", "ses_shared"),
                ("slack", "c-b", "slack:carol", "ses_shared"),
            ]
            c.executemany(
                "INSERT INTO conversation_bindings VALUES (?, ?, ?, ?, '2026-01-01')", bindings
            )
            c.execute(
                "INSERT INTO messages (message_id, session_id, seq, role, content, created_at) "
                "VALUES ('msg_1', 'ses_single', 1, 'user', '{\"text\":\"hi\"}', '2026-01-01')"
            )
            c.execute(
                "INSERT INTO tasks (task_id, session_id, kind, status, created_at, updated_at) "
                "VALUES ('task_legacy', 'ses_unbound', 'job', 'done', '2026-01-01', '2026-01-01')"
            )

        await store.write(populate)


def owners(path: Path) -> dict[str, tuple[str, str | None]]:
    conn = sqlite3.connect(str(path))
    try:
        rows = conn.execute("SELECT session_id, owner_kind, principal_id FROM session_owners")
        return {sid: (kind, principal) for sid, kind, principal in rows}
    finally:
        conn.close()


def schema(path: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(str(path))
    try:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        header = [
            ("pragma", p, str(conn.execute(f"PRAGMA {p}").fetchone()[0]))
            for p in ("user_version", "application_id")
        ]
        return header + rows
    finally:
        conn.close()


@pytest.mark.sqlite_only("the SQLite migration chain and its file backup")
async def test_fresh_create_applies_every_migration_without_backup(db_path: Path) -> None:
    async with await RuntimeStore.open(db_path) as store:
        assert store.migration.to_version == SCHEMA_VERSION
        assert store.migration.backup is None
    assert not list(db_path.parent.glob("*.backup"))
    assert ("pragma", "application_id", str(APPLICATION_ID)) in await anyio.to_thread.run_sync(
        schema, db_path
    )


# A list of constants in an IN of a trigger: more than two make SQLite build a table at every
# run of the trigger (measured: 60 µs on every turn's status update, its WHEN alone false).
_IN_LIST = re.compile(r"\bIN\s*\(([^()]*)\)", re.IGNORECASE)


@pytest.mark.sqlite_only("the SQLite triggers' text, read with sqlite3")
async def test_no_trigger_builds_a_table_of_constants_at_every_run(db_path: Path) -> None:
    """Triggers run in the transactions of every turn and inbound: an outcome list is
    spelled as equalities (``unanswered_status``), not as an IN of more than two."""
    async with await RuntimeStore.open(db_path):
        pass

    def lists() -> list[tuple[str, str]]:
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
            return [
                (name, found.group(0))
                for name, sql in rows
                for found in _IN_LIST.finditer(sql)
                if "SELECT" not in found.group(1).upper() and found.group(1).count(",") > 1
            ]

    assert await anyio.to_thread.run_sync(lists) == []


@pytest.mark.sqlite_only("a v1 SQLite file built from a prefix of the SQLite migrations")
async def test_upgrade_backfills_owners_and_marks_ambiguous_rows_legacy(db_path: Path) -> None:
    await make_v1(db_path)
    async with await RuntimeStore.open(db_path) as store:
        report = store.migration
    assert (report.from_version, report.to_version) == (1, SCHEMA_VERSION)
    assert report.backup == db_path.with_name("hostkit.db.v1.backup")
    assert not report.backup_reused
    found = await anyio.to_thread.run_sync(owners, db_path)
    assert found == {
        "ses_single": ("conversation", "webhook:alice"),
        "ses_unbound": ("legacy_local", None),
        "ses_shared": ("legacy_local", None),
    }


@pytest.mark.sqlite_only("the backup copy of the SQLite file, read with sqlite3")
async def test_upgrade_backup_is_verified_and_equals_the_old_database(db_path: Path) -> None:
    await make_v1(db_path)
    before = await anyio.to_thread.run_sync(schema, db_path)
    async with await RuntimeStore.open(db_path):
        pass
    backup = db_path.with_name("hostkit.db.v1.backup")

    def check(path: Path) -> tuple[str, int]:
        conn = sqlite3.connect(str(path))
        try:
            return (
                conn.execute("PRAGMA integrity_check").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0],
            )
        finally:
            conn.close()

    assert await anyio.to_thread.run_sync(check, backup) == ("ok", 3)
    assert await anyio.to_thread.run_sync(schema, backup) == before


@pytest.mark.sqlite_only("compares two SQLite files schema by schema")
async def test_fresh_schema_equals_a_migrated_old_one(tmp_path: Path) -> None:
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    async with await RuntimeStore.open(fresh):
        pass
    await make_v1(old)
    async with await RuntimeStore.open(old):
        pass
    assert await anyio.to_thread.run_sync(schema, fresh) == await anyio.to_thread.run_sync(
        schema, old
    )


def replayed(path: Path, migrations: tuple[Migration, ...]) -> str:
    """``migrations`` run step by step on a new file at ``path``: its logical fingerprint."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("BEGIN")
        for step in migrations:
            for statement in step.statements:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {len(migrations)}")
        conn.execute("COMMIT")
        return _migrate.logical_fingerprint(conn)
    finally:
        conn.close()


def fingerprint(path: Path) -> str:
    conn = sqlite3.connect(str(path))
    try:
        return _migrate.logical_fingerprint(conn)
    finally:
        conn.close()


@pytest.mark.sqlite_only("compares two SQLite files' logical content")
async def test_a_new_file_holds_exactly_what_every_step_replayed_leaves(tmp_path: Path) -> None:
    """A new file is created from the steps' end state in one pass, not step by step:
    schema, AUTOINCREMENT counters, full-text index tables and header all match a replay."""
    async with await RuntimeStore.open(tmp_path / "fresh.db"):
        pass
    expected = await anyio.to_thread.run_sync(replayed, tmp_path / "replayed.db", MIGRATIONS)
    assert await anyio.to_thread.run_sync(fingerprint, tmp_path / "fresh.db") == expected


SEEDING = Migration(
    SCHEMA_VERSION + 1,
    "a step that seeds a row",
    ("CREATE TABLE seeded (x INTEGER)", "INSERT INTO seeded VALUES (7)"),
)


@pytest.mark.sqlite_only("an injected SQLite migration on a new file")
async def test_a_step_that_seeds_rows_still_leaves_them_in_a_new_file(tmp_path: Path) -> None:
    steps = (*MIGRATIONS, SEEDING)
    async with await RuntimeStore.open(tmp_path / "fresh.db", migrations=steps) as store:
        assert store.migration.to_version == SCHEMA_VERSION + 1
    expected = await anyio.to_thread.run_sync(replayed, tmp_path / "replayed.db", steps)
    assert await anyio.to_thread.run_sync(fingerprint, tmp_path / "fresh.db") == expected


@pytest.mark.sqlite_only("an injected failing SQLite migration on a new file")
async def test_a_failing_step_on_a_new_file_is_named_and_leaves_it_new(db_path: Path) -> None:
    with pytest.raises(MigrationError, match="injected failure") as caught:
        await RuntimeStore.open(db_path, migrations=(*MIGRATIONS, FAILING))
    assert "unchanged at v0" in str(caught.value)
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.backup) == (0, None)


@pytest.mark.sqlite_only("golden SQLite files of released versions")
@pytest.mark.parametrize("golden", sorted(p.name for p in GOLDEN.glob("hostkit-v*.db")))
async def test_golden_database_of_each_released_version_migrates(
    tmp_path: Path, golden: str
) -> None:
    copy = tmp_path / golden
    await anyio.to_thread.run_sync(shutil.copyfile, GOLDEN / golden, copy)
    async with await RuntimeStore.open(copy) as store:
        assert store.migration.to_version == SCHEMA_VERSION
        kinds = await store.read(
            lambda c: dict(c.execute("SELECT owner_kind, COUNT(*) FROM session_owners GROUP BY 1"))
        )
    assert kinds.get("legacy_local", 0) >= 1
    assert kinds.get("conversation", 0) >= 1
    version = int(golden.removeprefix("hostkit-v").removesuffix(".db"))
    if version >= 3:
        async with await RuntimeStore.open(copy) as store:
            turns, memory, approvals = await store.read(
                lambda c: (
                    c.execute("SELECT turn_id, status FROM turns").fetchall(),
                    c.execute("SELECT text FROM memory_items").fetchall(),
                    c.execute("SELECT COUNT(*) FROM approvals").fetchone()[0],
                )
            )
        expected = [("turn_golden", "completed")]
        if version >= 5:
            expected.append(("turn_golden_running", "running"))
        assert turns == expected
        assert memory == [("likes tea",)]
        assert approvals == 0


@pytest.mark.sqlite_only("a golden v5 SQLite file")
async def test_a_turn_left_running_before_v6_holds_its_session_until_recovered(
    tmp_path: Path,
) -> None:
    copy = tmp_path / "hostkit-v5.db"
    await anyio.to_thread.run_sync(shutil.copyfile, GOLDEN / "hostkit-v5.db", copy)
    async with await RuntimeStore.open(copy) as store:
        assert store.migration.from_version == 5
        held = await store.turns.session_lease("ses_golden_owned")
        assert held is not None
        assert (held.turn_id, held.token) == ("turn_golden_running", 1)
        # Its owner is on another machine and its lease expired long ago: recovery ends it.
        recovered = await store.turns.recover()
        assert [(r.turn_id, r.outcome) for r in recovered] == [("turn_golden_running", "lost")]
        assert await store.turns.session_lease("ses_golden_owned") is None
        # A terminal row whose stored result predates the current format still answers.
        old = await store.turns.find("webhook:alice", "req_golden")
        assert old is not None
        assert old.result is not None
        assert (old.status, old.result.outcome, old.result.turn_id) == (
            "completed",
            "completed",
            "turn_golden",
        )
        summary = await store.read(
            lambda c: c.execute("SELECT cutoff_seq FROM context_summaries").fetchall()
        )
    assert summary == [(3,)]


@pytest.mark.sqlite_only("the SQLite file bytes and its -wal file")
async def test_failed_migration_leaves_the_file_byte_identical(db_path: Path) -> None:
    await make_v1(db_path)
    before = await digest(db_path)
    with pytest.raises(MigrationError) as caught:
        await RuntimeStore.open(db_path, migrations=(*MIGRATIONS, FAILING))
    error = caught.value
    backup = db_path.with_name("hostkit.db.v1.backup")
    assert error.database == str(db_path)
    assert error.backup == str(backup)
    assert str(db_path) in str(error)
    assert str(backup) in str(error)
    assert error.restore is not None
    assert f"copy {backup} to {db_path}" in error.restore
    assert "unchanged at v1" in str(error)
    assert await digest(db_path) == before
    assert (
        not await anyio.Path(db_path.with_name("hostkit.db-wal")).exists()
        or (await anyio.Path(db_path.with_name("hostkit.db-wal")).stat()).st_size == 0
    )


@pytest.mark.sqlite_only("an injected SQLite migration and SQLite's page limit")
async def test_a_migration_that_runs_out_of_room_says_to_free_space_not_to_restore(
    db_path: Path,
) -> None:
    """The rollback leaves the file as it was: the fix is room, not the backup, and the
    error names the room the retry needs (its backup is there to reuse)."""
    await make_v1(db_path)
    before = await digest(db_path)
    migrations = (*MIGRATIONS, FILLS_THE_DISK)
    with pytest.raises(MigrationError) as caught:
        await RuntimeStore.open(db_path, migrations=migrations)
    said = str(caught.value)
    needed = await anyio.to_thread.run_sync(upgrade_room, db_path, 1, migrations)
    assert "SQLITE_FULL" in said
    assert (
        f"unchanged at v1: free space beside the database (the retry needs about "
        f"{-(-needed // (1 << 20))} MiB free) and retry"
    ) in said
    assert caught.value.restore is None
    assert await digest(db_path) == before


@pytest.mark.sqlite_only("the free space beside the SQLite file, as its backup needs it")
async def test_an_upgrade_without_room_for_its_backup_and_migration_changes_nothing(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked before the backup: refused, naming what it needs and what is free, with no
    backup written and the file as it was; with the room, it runs."""
    await make_v1(db_path)
    before = await digest(db_path)
    needed = await anyio.to_thread.run_sync(upgrade_room, db_path, 1)
    size = (await anyio.Path(db_path).stat()).st_size
    assert needed >= 2 * size
    seen: list[Path] = []

    def free_bytes_at(where: Path) -> int:
        seen.append(where)
        return needed - 1

    monkeypatch.setattr(_migrate, "free_bytes_at", free_bytes_at)
    with pytest.raises(MigrationError) as caught:
        await RuntimeStore.open(db_path)
    said = str(caught.value)
    mib = 1024 * 1024
    assert f"needs about {-(-needed // mib)} MiB free beside the database" in said
    assert f"{(needed - 1) // mib} MiB free. Nothing was changed" in said
    assert seen == [db_path.parent]
    assert await digest(db_path) == before
    assert not await anyio.Path(db_path.with_name("hostkit.db.v1.backup")).exists()
    monkeypatch.setattr(_migrate, "free_bytes_at", lambda where: needed)
    async with await RuntimeStore.open(db_path) as store:
        assert store.migration.to_version == SCHEMA_VERSION


@pytest.mark.sqlite_only("the SQLite file backup and the free space beside it")
async def test_an_unfinished_backup_s_space_counts_as_free_for_the_upgrade(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backup cut by a crash leaves its ``.partial`` copy, which the upgrade deletes
    first: the room it holds is the upgrade's, so a disk too full only because of it
    upgrades rather than refusing until an operator finds the file."""
    await make_v1(db_path)
    needed = await anyio.to_thread.run_sync(upgrade_room, db_path, 1)
    partial = db_path.with_name("hostkit.db.v1.backup.partial")
    await anyio.Path(partial).write_bytes(b"\0" * (1 << 20))
    assert await anyio.to_thread.run_sync(upgrade_room, db_path, 1) == needed - (1 << 20)
    monkeypatch.setattr(_migrate, "free_bytes_at", lambda where: needed - (1 << 20))
    async with await RuntimeStore.open(db_path) as store:
        assert store.migration.to_version == SCHEMA_VERSION
    assert not await anyio.Path(partial).exists()


@pytest.mark.sqlite_only("the SQLite file backup and an injected SQLite migration")
async def test_matching_backup_is_reused_after_a_failed_attempt(db_path: Path) -> None:
    await make_v1(db_path)
    with pytest.raises(MigrationError):
        await RuntimeStore.open(db_path, migrations=(*MIGRATIONS, FAILING))
    async with await RuntimeStore.open(db_path) as store:
        assert store.migration.backup_reused
        assert store.migration.to_version == SCHEMA_VERSION


@pytest.mark.sqlite_only("the SQLite file backup and a prefix of the SQLite migrations")
async def test_stale_backup_stops_the_migration(db_path: Path) -> None:
    await make_v1(db_path)
    with pytest.raises(MigrationError):
        await RuntimeStore.open(db_path, migrations=(*MIGRATIONS, FAILING))
    # The database changes after the backup was taken: that backup is now stale.
    async with await RuntimeStore.open(db_path, migrations=V1) as store:
        await store.write(
            lambda c: c.execute(
                "INSERT INTO sessions (session_id, created_at) VALUES ('ses_late', '2026-02-01')"
            )
        )
    before = await digest(db_path)
    with pytest.raises(MigrationError, match="stale") as caught:
        await RuntimeStore.open(db_path)
    assert caught.value.backup == str(db_path.with_name("hostkit.db.v1.backup"))
    assert await digest(db_path) == before
    version = await anyio.to_thread.run_sync(schema, db_path)
    assert ("pragma", "user_version", "1") in version


@pytest.mark.sqlite_only("the SQLite file backup")
async def test_corrupt_backup_stops_the_migration(db_path: Path) -> None:
    await make_v1(db_path)
    await anyio.Path(db_path.with_name("hostkit.db.v1.backup")).write_bytes(b"not sqlite" * 100)
    with pytest.raises(MigrationError, match="integrity_check"):
        await RuntimeStore.open(db_path)


@pytest.mark.sqlite_only("a SQLite file migrated past this release (injected migration)")
async def test_newer_database_is_refused(db_path: Path) -> None:
    future = Migration(SCHEMA_VERSION + 1, "future", ("CREATE TABLE future (x)",))
    async with await RuntimeStore.open(db_path, migrations=(*MIGRATIONS, future)):
        pass
    with pytest.raises(MigrationError, match="newer than this hostkit"):
        await RuntimeStore.open(db_path)


# Another program's SQLite files: whatever their version says, none is hostkit's.
FOREIGN = {
    "a table": ("CREATE TABLE other_app (x)",),
    "hostkit's own version": ("CREATE TABLE notes (x)", f"PRAGMA user_version = {SCHEMA_VERSION}"),
    "a newer version": ("CREATE TABLE notes (x)", f"PRAGMA user_version = {SCHEMA_VERSION + 76}"),
    "an older version": ("CREATE TABLE notes (x)", "PRAGMA user_version = 5"),
    "only a view": ("CREATE VIEW answer AS SELECT 42",),
    "only its application_id": ("PRAGMA application_id = 1234",),
    "only a version": ("PRAGMA user_version = 3",),
}


@pytest.mark.parametrize("made", sorted(FOREIGN))
@pytest.mark.sqlite_only("a foreign SQLite file (application_id)")
async def test_foreign_sqlite_file_is_refused_and_left_byte_identical(
    db_path: Path, made: str
) -> None:
    """A file that is neither new nor hostkit's is refused at every open, before anything is
    written to it (not switched to WAL, no schema, no application_id): the operator is
    told to point the setting elsewhere, not to upgrade or restore."""

    def foreign(path: Path) -> None:
        with contextlib.closing(sqlite3.connect(str(path))) as conn:
            for statement in FOREIGN[made]:
                conn.execute(statement)
            conn.commit()

    await anyio.to_thread.run_sync(foreign, db_path)
    before = await digest(db_path)
    for _ in range(2):  # a refused open changes nothing that would let the next one in
        with pytest.raises(MigrationError) as caught:
            await RuntimeStore.open(db_path)
        said = str(caught.value)
        assert said.startswith("this file is not a hostkit database")
        assert "([host] database) at a hostkit database or at a new path" in said
        assert "newer" not in said
        assert caught.value.database == str(db_path)
        assert await digest(db_path) == before
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]


@pytest.mark.sqlite_only("an empty SQLite file")
async def test_an_empty_file_is_a_new_database(db_path: Path) -> None:
    """A file with nothing in it (as `touch` leaves one) is hostkit's to create."""
    await anyio.Path(db_path).write_bytes(b"")
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.backup) == (0, None)
    assert ("pragma", "application_id", str(APPLICATION_ID)) in await anyio.to_thread.run_sync(
        schema, db_path
    )


@pytest.mark.sqlite_only("an injected gap in the SQLite migration chain")
async def test_migrations_must_be_contiguous(db_path: Path) -> None:
    gap = Migration(SCHEMA_VERSION + 2, "gap", ("SELECT 1",))
    with pytest.raises(MigrationError, match="without gaps"):
        await RuntimeStore.open(db_path, migrations=(*MIGRATIONS, gap))


async def test_session_owners_rows_are_immutable(store: RuntimeStore) -> None:
    session_id = await store.create_session(owner_kind="system", principal_id="schedule:x")
    with pytest.raises(StoreError, match="immutable"):
        await store.write(
            lambda c: c.execute(
                "UPDATE session_owners SET owner_kind = 'operator' WHERE session_id = ?",
                [session_id],
            )
        )
    with pytest.raises(StoreError, match="immutable"):
        await store.write(
            lambda c: c.execute("DELETE FROM session_owners WHERE session_id = ?", [session_id])
        )


# Digests of every released migration. A landed migration is never edited: change the
# schema by appending a new migration (and a golden database for the version it replaces).
RELEASED = {
    1: "dc18ed3ea901f3819076933fba68b1af94693cf78164e530a2febd44c6719d93",
    2: "1ed42e4b46fdd7c9acb23f0a3e3859f39172a9f6df1055efb8c84bc92ff7010b",
    3: "c80c41a7b083c6c9908073d33d80912ad10542c226519572c2abefe8e4bb56a9",
    4: "8725113464a941ba65af85050f4576e2e52eaaa979aaaab64589dbd9729a060c",
    5: "0b0af56d88bfedb929a5c169917e8a4044aaf2a25e1170c2b6cd80adad11a225",
    6: "9603bef0c2c1bba50f5b39d2ed5039eceb8d339dafd388c7f1b66d65ba3fce0c",
    7: "73f3d916e881a8d1ec3b8335c9ff21f73ead1cfa03437d38f2c240b86a0e6376",
    8: "52ec8b66ea3ffb9ed44666de2942c3729cbfbffd15aaf097a5835704c285f14a",
    9: "db62a26df50f6399e10ff69ca07a04809fcee6ff3bf2ae4774f32cfea43ec349",
    10: "044fc8cfe9e4191db7cd32b4a81436e61aedd6f8d81bd09d221d7363d54146f5",
    11: "5be8b27bbd716a15057bebcbf739c8109858d992e215bba323606910f7493b83",
    12: "f1c6e025c82fc7024d5fa70bcc1ab69d767869f1a90c43b621b78feb19634406",
    13: "3f93aff280eb069c23ebcacf0f833e4d6a8162c58b97336401f31c23df7e1d1a",
    14: "98a921b405ea701d76f9e1f7fbbdd96c5015a6731af1fa3e457409229be956b5",
}


@pytest.mark.sqlite_only("digests of the SQLite migrations; no store is opened")
def test_released_migrations_are_never_edited() -> None:
    for migration in MIGRATIONS:
        body = "\n;\n".join(migration.statements).encode()
        if migration.version in RELEASED:
            assert hashlib.sha256(body).hexdigest() == RELEASED[migration.version], (
                f"migration {migration.version} was edited after release"
            )
    assert set(RELEASED) <= {m.version for m in MIGRATIONS}


@pytest.mark.sqlite_only("a v16 SQLite file built from a prefix of the SQLite migrations")
async def test_v17_rebuilds_the_outbox_keeping_every_intent_and_takes_command_replies(
    db_path: Path,
) -> None:
    """Turn intents written before v17 keep their state; the outbox then also takes the
    reply to a command inbound (no turn), and still refuses an intent with neither."""
    async with await RuntimeStore.open(db_path, migrations=MIGRATIONS[:16]) as store:
        intents = await finish_routed_turns(store, 2)

        def deliver_first(c: sqlite3.Connection) -> None:
            c.execute(
                "UPDATE outbox SET status = 'delivered', next_attempt_at = NULL, "
                "delivered_at = 1.0, attempts = 1 WHERE intent_id = ?",
                [intents[0]],
            )

        await store.write(deliver_first)
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.to_version) == (16, SCHEMA_VERSION)
        kept = {i.intent_id: i for i in await store.delivery.intents()}
        assert kept.keys() == set(intents)
        assert (kept[intents[0]].status, kept[intents[0]].attempts) == ("delivered", 1)
        assert kept[intents[1]].status == "pending"
        assert all(i.turn_id is not None and i.inbound_id is None for i in kept.values())
        session_id = kept[intents[0]].session_id
        reply = await store.delivery.reply(
            inbound_id="inb_1", session_id=session_id, route=ROUTE, text="no such code"
        )
        assert (reply.turn_id, reply.inbound_id) == (None, "inb_1")

        def neither(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO outbox (intent_id, session_id, route, payload, next_attempt_at, "
                "created_at, updated_at) VALUES ('out_x', ?, '{}', '{}', 1.0, 'now', 1.0)",
                [session_id],
            )

        with pytest.raises(StoreError, match="CHECK constraint failed"):
            await store.write(neither)


@pytest.mark.sqlite_only("a v17 SQLite file built from a prefix of the SQLite migrations")
async def test_v18_names_no_owner_for_a_claim_made_before_it(db_path: Path) -> None:
    """A claim a v17 Host made names no owner: no successor can prove it dead, so only its
    lease ends it; every claim made after v18 names its owner."""
    async with await RuntimeStore.open(db_path, migrations=MIGRATIONS[:17]) as store:
        (intent_id,) = await finish_routed_turns(store, 1)

        def claim_as_v17(c: sqlite3.Connection) -> None:
            c.execute(
                "UPDATE outbox SET status = 'sending', next_attempt_at = 100.0, attempts = 1, "
                "claim_token = 'dlc_old' WHERE intent_id = ?",
                [intent_id],
            )

        await store.write(claim_as_v17)
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.to_version) == (17, SCHEMA_VERSION)
        assert await store.delivery.claimed_owners() == ()
        assert await store.delivery.expire_claims(["anyone"], now=50.0) == 0
        assert (
            await store.delivery.claim(
                owner="successor", limit=1, lease_s=30.0, max_attempts=3, now=99.0
            )
            == ()
        )
        (claimed,) = await store.delivery.claim(
            owner="successor", limit=1, lease_s=30.0, max_attempts=3, now=100.0
        )
        assert (claimed.intent.intent_id, claimed.attempt) == (intent_id, 2)
        assert await store.delivery.claimed_owners() == ("successor",)


# Owners on two other machines: only expiry ends their leases. Built at import (reads /proc).
REMOTE = LeaseOwner("another-machine", 4242, 1.0, "remote-instance")
ELSEWHERE = LeaseOwner("third-machine", 4243, 1.0, "third-instance")


@pytest.mark.sqlite_only("a v18 SQLite file built from a prefix of the SQLite migrations")
async def test_v19_keeps_every_lease_and_ends_a_lapsed_one_only_a_ttl_after_noticing(
    db_path: Path,
) -> None:
    """A lease a v18 Host holds survives the upgrade unchanged; past its expiry the first
    look only notices the lapse (the holder may have been cut off by the upgrade's
    downtime), and the session is taken over a ttl later."""

    def admission(session_id: str) -> TurnAdmission:
        return TurnAdmission(
            turn_id=new_id("turn"),
            request_id=new_id("req"),
            principal_id="suite",
            core_id="assistant",
            core_revision="rev",
            generation=1,
            session=session_id,
            trace_id=new_id("trace"),
        )

    async with await RuntimeStore.open(db_path, migrations=MIGRATIONS[:18]) as store:
        session_id = await store.create_session(owner_kind="system", principal_id="suite")
        held = await store.turns.admit(admission(session_id), owner=REMOTE, ttl_s=0.2)
        assert isinstance(held, Admitted)
    await anyio.sleep(0.3)
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.to_version) == (18, SCHEMA_VERSION)
        assert await store.turns.session_lease(session_id) == held.lease
        busy = await store.turns.admit(admission(session_id), owner=ELSEWHERE, ttl_s=60)
        assert isinstance(busy, SessionBusy)
        assert busy.holder_turn_id == held.lease.turn_id
        await anyio.sleep(0.3)
        taken = await store.turns.admit(admission(session_id), owner=ELSEWHERE, ttl_s=60)
        assert isinstance(taken, Admitted)
        assert [r.turn_id for r in taken.recovered] == [held.lease.turn_id]


@pytest.mark.parametrize(
    ("prepare", "advice"),
    [
        ("garbage", "point the database setting at another file, or move this one aside"),
        ("under_a_file", "its directory must exist and be writable by this user"),
    ],
)
@pytest.mark.sqlite_only("a SQLite file that is no database, or under no directory")
async def test_a_database_that_cannot_be_opened_says_what_to_do(
    tmp_path: Path, prepare: str, advice: str
) -> None:
    """Not a database, or a directory that cannot hold one: the error names the file and
    what an operator can do, and the file is left as it was."""
    if prepare == "garbage":
        database = tmp_path / "hostkit.db"
        await anyio.Path(database).write_text("a note someone saved under the database's name\n")
    else:
        await anyio.Path(tmp_path / "plain").write_text("not a directory\n")
        database = tmp_path / "plain" / "hostkit.db"
    before = await file_bytes(database) if prepare == "garbage" else None
    with pytest.raises(StoreError) as caught:
        async with RuntimeStore.open(database):
            pass
    assert str(database) in caught.value.message
    assert caught.value.message.endswith(advice)
    assert len(caught.value.message) <= 500
    if before is not None:
        assert await file_bytes(database) == before


@pytest.mark.sqlite_only("a v21 SQLite file built from a prefix of the SQLite migrations")
async def test_v22_keeps_every_attachment_a_stored_message_names_and_reclaims_the_rest(
    db_path: Path,
) -> None:
    """Attachments stored before v22 were never reclaimed: the upgrade leaves the ones a
    transcript names kept (every principal's copy of those bytes) and makes the rest
    pending since they were added, so the next reclaim deletes them."""
    async with await RuntimeStore.open(db_path, migrations=MIGRATIONS[:21]) as store:
        named, unnamed = await seed_attachments_before_reclaim(store)
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.to_version) == (21, SCHEMA_VERSION)
        await assert_reclaim_backfilled(store, named, unnamed)


@pytest.mark.sqlite_only("a v22 SQLite file built from a prefix of the SQLite migrations")
async def test_v23_keeps_every_memory_item_untraced_and_never_reuses_an_id(
    db_path: Path,
) -> None:
    """Items stored before v23 keep their ids and search, with NULL session and turn;
    the rebuilt table never gives a forgotten id to a new item."""
    async with await RuntimeStore.open(db_path, migrations=MIGRATIONS[:22]) as store:
        ids = await seed_memory_before_provenance(store)
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.to_version) == (22, SCHEMA_VERSION)
        await assert_memory_kept_untraced(store, ids)


@pytest.mark.sqlite_only("a v23 SQLite file built from a prefix of the SQLite migrations")
async def test_v24_gives_every_old_item_its_owners_token_and_keeps_the_audit(
    db_path: Path,
) -> None:
    """Items stored before v24 are indexed again under one token per owner (the id of
    the owner's first item) and recalled as before; a session's audit view is kept."""
    async with await RuntimeStore.open(db_path, migrations=MIGRATIONS[:23]) as store:
        ids, session = await seed_before_owner_search(store)
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.to_version) == (23, SCHEMA_VERSION)
        tokens = await store.read(
            lambda c: c.execute(
                "SELECT principal_id, owner_token FROM memory_items ORDER BY id"
            ).fetchall()
        )
        assert tokens == [
            ("alice", f"o{ids[0]}"),
            ("bob", f"o{ids[1]}"),
            ("alice", f"o{ids[0]}"),
        ]
        await store.write(
            lambda c: c.execute("INSERT INTO memory_fts(memory_fts) VALUES ('integrity-check')")
        )
        await assert_owner_search_backfilled(store, ids, session)


@pytest.mark.sqlite_only("a v24 SQLite file built from a prefix of the SQLite migrations")
async def test_v25_ranks_every_old_session_by_its_turns_as_the_old_list_did(
    db_path: Path,
) -> None:
    """Each session's last activity and turn count are backfilled from its turns, so the
    list is the one the statement that ranked every session gave, and the triggers keep
    it so for the history that follows."""
    async with await RuntimeStore.open(db_path, migrations=MIGRATIONS[:24]) as store:
        before, clock = await seed_before_session_activity(store)
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.to_version) == (24, SCHEMA_VERSION)
        await assert_session_activity_backfilled(store, before, clock)


@pytest.mark.sqlite_only("a v25 SQLite file built from a prefix of the SQLite migrations")
async def test_v26_backfills_attachment_references_from_stored_messages(db_path: Path) -> None:
    """Sessions whose messages name bytes reference them (an erase reads these, not other
    sessions' messages); bytes nothing references are pending, so they are reclaimed."""
    async with await RuntimeStore.open(db_path, migrations=MIGRATIONS[:25]) as store:
        session_id = await seed_attachments_before_refs(store)
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.to_version) == (25, SCHEMA_VERSION)
        await assert_refs_backfilled(store, session_id)


@pytest.mark.sqlite_only("a v26 SQLite file built from a prefix of the SQLite migrations")
async def test_v27_indexes_every_old_item_by_the_words_both_engines_match(db_path: Path) -> None:
    """Items stored before v27 get their words (folded in Python, as ``remember`` now
    writes them) and the index is of those words: an email's parts, an accent-free
    spelling, a version's numbers find them, as on PostgreSQL."""
    async with await RuntimeStore.open(db_path, migrations=MIGRATIONS[:26]) as store:
        ids = await seed_before_search_words(store)
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.to_version) == (26, SCHEMA_VERSION)
        await store.write(
            lambda c: c.execute("INSERT INTO memory_fts(memory_fts) VALUES ('integrity-check')")
        )
        await assert_search_words_backfilled(store, ids)


@pytest.mark.sqlite_only("a v27 SQLite file built from a prefix of the SQLite migrations")
async def test_v28_tallies_every_old_finished_row_as_the_old_counts_did(db_path: Path) -> None:
    """The tallies are seeded from the rows already there, so the counts after the
    upgrade are those the statements that read every row gave, and stay exact after."""
    async with await RuntimeStore.open(db_path, migrations=MIGRATIONS[:27]) as store:
        assert isinstance(store, RowStore)
        before = await seed_before_tallies(store)
    async with await RuntimeStore.open(db_path) as store:
        assert (store.migration.from_version, store.migration.to_version) == (27, SCHEMA_VERSION)
        await assert_tallies_seeded(store, before)
