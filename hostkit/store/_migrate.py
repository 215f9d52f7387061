"""Forward schema upgrades: verified backup first, then one transaction.

Runs synchronously on the writer connection's thread (one hop from the event
loop). The order is the contract's: take an online backup, check it with
``PRAGMA integrity_check``, then migrate every pending step in one
transaction. Any failure rolls back and leaves the original file as it was.

Several processes may open one file at once (``hostkit serve`` starting
beside a ``hostkit run``): all of it, from reading the version to the
backup and the last step, happens under the write lock, so the second
opener finds the first one's work done instead of redoing it from the
version it read before it waited.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hostkit._free_space import free_bytes_at
from hostkit.errors import MigrationError
from hostkit.store._connection import create_private
from hostkit.store._fresh_schema import fresh_image
from hostkit.store._schema import APPLICATION_ID, MIGRATIONS, Backfill, Migration
from hostkit.store._writer import LockWait, begin_immediate

__all__ = [
    "MigrationReport",
    "admit_hostkit_file",
    "file_schema_version",
    "logical_fingerprint",
    "upgrade",
    "upgrade_room",
]

_MIB = 1024 * 1024
# Every step runs in the upgrade's one transaction: a page a step rewrites is in the WAL
# until the commit, and the file grows by a rebuilt table's new copy before the old one is
# freed. Twice the rewritten pages per step (an upper bound: a later step writing the same
# pages again reuses their frames) held the measured peaks of a memory-heavy file.
_REWRITE_COPIES = 2
# Where the rewritten tables cannot be sized: the WAL of a whole rewrite and the growth of
# the file by a copy of it.
_UNSIZED_COPIES = 3
# The steps that rewrite nothing (a new table, an index over few rows), and the Host's
# first writes after the upgrade.
_AFTER_BYTES = 16 * _MIB


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What ``upgrade`` did: versions before/after and the backup it used, if any."""

    from_version: int
    to_version: int
    backup: Path | None
    backup_reused: bool


def logical_fingerprint(conn: sqlite3.Connection) -> str:
    """A digest of the database's logical content (schema, rows, header pragmas).

    Two files with the same fingerprint hold the same data even if their page
    layout differs, which is what "this backup is of the current database" means.
    """
    digest = hashlib.sha256()
    for pragma in ("user_version", "application_id"):
        digest.update(f"{pragma}={conn.execute(f'PRAGMA {pragma}').fetchone()[0]}\n".encode())
    for line in conn.iterdump():
        digest.update(line.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _header(conn: sqlite3.Connection) -> tuple[int, int]:
    """The file's ``(application_id, user_version)``: one statement, two header fields."""
    row = conn.execute(
        "SELECT a.application_id, v.user_version FROM pragma_application_id AS a, "
        "pragma_user_version AS v"
    ).fetchone()
    return int(row[0]), int(row[1])


def file_schema_version(database: Path) -> int | None:
    """Blocking: the schema version of the hostkit database file ``database``; None when
    the file holds nothing yet (``hostkit doctor``).

    Opened read-only and never migrated: it answers while another process holds the
    write lock or the disk is full. ``MigrationError`` for a file that is not
    hostkit's, or one SQLite cannot read.
    """
    try:
        conn = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=5.0)
        try:
            app_id, version = _header(conn)
            fresh = _is_new(conn, app_id, version)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise MigrationError(
            f"reading its schema version failed: {exc}", database=str(database)
        ) from None
    if fresh:
        return None
    if app_id != APPLICATION_ID:
        raise MigrationError("the file is not a hostkit database", database=str(database))
    return version


def _is_new(conn: sqlite3.Connection, app_id: int, version: int) -> bool:
    """Nothing in it at all: no id, no version, not one table, view, index or trigger."""
    if app_id != 0 or version != 0:
        return False
    return conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None


def admit_hostkit_file(conn: sqlite3.Connection, database: Path) -> bool:
    """Whether the file is new (else it is hostkit's); ``MigrationError`` for any other file.

    Runs at every open before anything is written to the file, so a refused file is
    left byte for byte as it was. Cheap for a hostkit database (one statement): it runs
    for every CLI command.
    """
    app_id, version = _header(conn)
    if app_id == APPLICATION_ID:
        return False
    if _is_new(conn, app_id, version):
        return True
    raise MigrationError(
        "this file is not a hostkit database (another program's SQLite file: its "
        "PRAGMA application_id is not hostkit's); nothing was changed in it. Point "
        "the database setting ([host] database) at a hostkit database or at a new path",
        database=str(database),
    )


def _backup_path(database: Path, version: int) -> Path:
    return database.with_name(f"{database.name}.v{version}.backup")


def _file_bytes(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def upgrade_room(database: Path, version: int, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Blocking: the free bytes an upgrade of ``database`` from schema ``version`` to the
    last of ``migrations`` needs beside it (``hostkit doctor`` shows it): its backup, a
    copy of the file and its WAL (none when one is there to reuse), what the pending steps
    rewrite, and 16 MiB, less what an unfinished backup the upgrade deletes first holds."""
    held = sum(_file_bytes(database.with_name(database.name + end)) for end in ("", "-wal"))
    backup = _backup_path(database, version)
    copy = 0 if backup.exists() else held
    dead = sum(_file_bytes(path) for path in _partial_files(backup))
    rewritten = _rewritten_bytes(database, migrations[version:], held)
    return max(0, copy + rewritten + _AFTER_BYTES - dead)


def _rewritten_bytes(database: Path, steps: Sequence[Migration], held: int) -> int:
    """The WAL and file growth of the ``steps``' rewrites: twice the pages each step
    declares (``Migration.rewrites``), at most the whole file per step. A name the file
    does not hold yet is a table an earlier step creates, empty. Where SQLite cannot size
    them (the file locked in rollback-journal mode, say), the upgrade counts the whole
    file rewritten once: a page written again in one transaction reuses its WAL frame, so
    steps rewriting the same pages do not add up."""
    names = {name for step in steps for name in step.rewrites}
    if not names:
        return 0
    try:
        sizes = _btree_bytes(database, names)
    except sqlite3.Error:
        return _UNSIZED_COPIES * held
    return sum(
        _REWRITE_COPIES * min(held, sum(sizes.get(name, 0) for name in step.rewrites))
        for step in steps
    )


def _btree_bytes(database: Path, names: set[str]) -> dict[str, int]:
    """The bytes of the pages of each table in ``names`` with its indexes (or of an index),
    through SQLite's ``dbstat`` on a read-only connection: it reads beside the upgrade's
    write lock, and only the pages of those tables."""
    conn = sqlite3.connect(f"{database.absolute().as_uri()}?mode=ro", uri=True, timeout=5.0)
    try:
        return {
            name: int(
                conn.execute(
                    "SELECT COALESCE(SUM(s.pgsize), 0) FROM sqlite_master AS m "
                    "JOIN dbstat AS s ON s.name = m.name "
                    "WHERE m.rootpage > 0 AND (m.tbl_name = ? OR m.name = ?)",
                    (name, name),
                ).fetchone()[0]
            )
            for name in sorted(names)
        }
    finally:
        conn.close()


def _room_needed(database: Path, version: int, migrations: Sequence[Migration]) -> int | None:
    """``upgrade_room``, or None where the file sizes cannot be read."""
    try:
        return upgrade_room(database, version, migrations)
    except OSError:
        return None


def _check_room(database: Path, version: int, migrations: Sequence[Migration]) -> None:
    """Refuse, with nothing changed, an upgrade the free space beside the file cannot hold:
    the backup would fail only once copied, or the migration once it had filled the disk."""
    try:
        needed, free = upgrade_room(database, version, migrations), free_bytes_at(database.parent)
    except OSError:
        return  # unknown: the backup's own error says what went wrong
    if free < needed:
        raise MigrationError(
            f"the upgrade needs about {-(-needed // _MIB)} MiB free beside the database (a "
            f"backup of it, then the migration); {free // _MIB} MiB free. Nothing was "
            "changed: free space beside the database and retry",
            database=str(database),
        )


def _restore_action(database: Path, backup: Path) -> str:
    return (
        f"stop every hostkit process, copy {backup} to {database}, "
        f"and delete {database}-wal and {database}-shm if present"
    )


def _integrity_ok(path: Path) -> bool:
    conn = sqlite3.connect(str(path))
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
        return rows == [("ok",)]
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()


def _partial_files(backup: Path) -> list[Path]:
    """An unfinished copy of ``backup`` and the journal files SQLite kept beside it."""
    partial = backup.with_name(backup.name + ".partial")
    return [partial.with_name(partial.name + end) for end in ("", "-journal", "-wal", "-shm")]


def _remove_partial(backup: Path) -> None:
    """Delete an unfinished copy of ``backup`` (a backup cut by a crash) and its journals."""
    for path in _partial_files(backup):
        path.unlink(missing_ok=True)


def _ensure_backup(conn: sqlite3.Connection, database: Path, backup: Path) -> bool:
    """Take (or reuse) a verified backup of ``conn``; return True when reused."""
    if backup.exists():
        if not _integrity_ok(backup):
            raise MigrationError(
                "an existing backup failed PRAGMA integrity_check; move it away and retry",
                database=str(database),
                backup=str(backup),
            )
        existing = sqlite3.connect(str(backup))
        try:
            matches = logical_fingerprint(existing) == logical_fingerprint(conn)
        finally:
            existing.close()
        if not matches:
            raise MigrationError(
                "an existing backup is stale (it does not match the current database); "
                "nothing was migrated. Move the stale backup away, or restore it if the "
                "current database is the wrong one, then retry",
                database=str(database),
                backup=str(backup),
                restore=_restore_action(database, backup),
            )
        return True
    partial = backup.with_name(backup.name + ".partial")
    _remove_partial(backup)
    # Copied through a connection of its own: ``conn`` holds the write lock (so nothing
    # changes meanwhile), and SQLite's backup from a connection in a write transaction
    # answers SQLITE_BUSY for ever.
    with contextlib.ExitStack() as connections:
        try:
            source = connections.enter_context(contextlib.closing(sqlite3.connect(database)))
            create_private(partial)  # a copy of the database: as private as a new one
            target = connections.enter_context(contextlib.closing(sqlite3.connect(partial)))
            source.backup(target)
            # A standalone file: no -wal/-shm companions needed to read it.
            target.execute("PRAGMA journal_mode = DELETE")
        except sqlite3.Error as exc:
            connections.close()
            _remove_partial(backup)
            raise _backup_failed(database, exc) from exc
    if not _integrity_ok(partial):
        _remove_partial(backup)
        raise MigrationError(
            "the new backup failed PRAGMA integrity_check; nothing was migrated",
            database=str(database),
        )
    try:
        with open(partial, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(partial, backup)
        _fsync_dir(backup.parent)
    except OSError as exc:
        _remove_partial(backup)
        raise _backup_failed(database, exc) from exc
    return False


def _backup_failed(database: Path, exc: Exception) -> MigrationError:
    """Nothing was migrated; a full disk or a failed write says to free space."""
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    full = name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) or isinstance(exc, OSError)
    todo = ": free space beside the database and retry" if full else ""
    return MigrationError(
        f"the backup could not be written ({name}: {str(exc)[:200]}); nothing was migrated{todo}",
        database=str(database),
    )


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(str(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def upgrade(
    conn: sqlite3.Connection,
    *,
    database: Path,
    migrations: Sequence[Migration],
    lock: LockWait,
) -> MigrationReport:
    """Bring ``conn`` to the last version in ``migrations`` or raise ``MigrationError``.

    Waits up to ``lock.bound_s`` (or its limit, once set: the opening store's owner
    may stop meanwhile) for another process's write lock (one that is migrating the
    same file, say); past that, the ``sqlite3`` error of ``begin_immediate`` is
    raised, for the caller to map.
    """
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(migrations) + 1)):
        raise MigrationError(
            "migrations must be numbered 1..N without gaps", database=str(database)
        )
    latest = versions[-1]
    app_id, version = _header(conn)
    if app_id == APPLICATION_ID and version == latest:
        return MigrationReport(latest, latest, None, False)  # current: no lock needed
    begin_immediate(conn, lock)
    try:
        return _upgrade_locked(conn, database, migrations, latest)
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _fill(conn: sqlite3.Connection, backfill: Backfill) -> None:
    """Run ``backfill`` over every row, a page at a time (in the upgrade's transaction)."""
    after = 0
    while rows := conn.execute(backfill.select, [after]).fetchall():
        conn.executemany(backfill.update, [(backfill.compute(value), id_) for id_, value in rows])
        after = rows[-1][0]


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _upgrade_locked(
    conn: sqlite3.Connection, database: Path, migrations: Sequence[Migration], latest: int
) -> MigrationReport:
    """``upgrade`` within its write transaction: the version read here is the one migrated."""
    # Whose file it is comes first: a version number means something only in hostkit's.
    fresh = admit_hostkit_file(conn, database)
    current = _version(conn)
    if current == latest:  # another process migrated it while this one waited
        return MigrationReport(current, current, None, False)
    if current > latest:
        raise MigrationError(
            f"the database is at schema v{current}, newer than this hostkit (v{latest}); "
            "upgrade hostkit instead",
            database=str(database),
        )

    backup: Path | None = None
    reused = False
    if not fresh:
        _check_room(database, current, migrations)
        backup = _backup_path(database, current)
        reused = _ensure_backup(conn, database, backup)

    # What failed, for the message: a step's statements, or the commit of them all.
    failing = f"migration to v{migrations[current].version}"
    image = fresh_image(migrations) if fresh else None
    try:
        if image is not None:
            failing = f"creating the schema of v{latest}"
            for statement, parameters in image.statements:
                conn.execute(statement, parameters)
        else:
            for step in migrations[current:]:
                failing = f"migration to v{step.version} ({step.name})"
                for statement in step.statements:
                    conn.execute(statement)
                if step.backfill is not None:
                    _fill(conn, step.backfill)
        failing = f"committing the migration to v{latest}"
        conn.execute(f"PRAGMA user_version = {latest}")
        problems = conn.execute("PRAGMA foreign_key_check").fetchall()
        if problems:
            raise sqlite3.IntegrityError(f"{len(problems)} foreign key violations after migration")
        conn.execute("COMMIT")
    except Exception as exc:
        if conn.in_transaction:  # an I/O error may have rolled it back already
            conn.execute("ROLLBACK")
        name = getattr(exc, "sqlite_errorname", None) or ""
        if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")):
            # The disk, not a step: the rollback left the file as it was, nothing to restore.
            needed = _room_needed(database, current, migrations)
            room = f" (the retry needs about {-(-needed // _MIB)} MiB free)" if needed else ""
            raise MigrationError(
                f"{failing} failed and was rolled back ({name}: {str(exc)[:200]}); the "
                f"database is unchanged at v{current}: free space beside the database{room} "
                "and retry",
                database=str(database),
                backup=str(backup) if backup else None,
            ) from exc
        raise MigrationError(
            f"{failing} failed and was rolled back; "
            f"the database is unchanged at v{current}: {type(exc).__name__}: {exc}",
            database=str(database),
            backup=str(backup) if backup else None,
            restore=_restore_action(database, backup) if backup else None,
        ) from exc
    return MigrationReport(current, latest, backup, reused)
