"""A new SQLite file's schema in one pass: the end state of every migration, not each step.

Replaying the steps on an empty file re-parses the whole schema at each of the ~120
statements (the table rebuilds above all): about 30 ms of CPU for every new database,
where creating the final tables, indexes and triggers directly takes a third of that.
The image is derived from the steps themselves (replayed once per process, in memory),
so there is no second copy of the schema to keep in step; a contract test checks that
a file created from it is logically identical to one built step by step.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from hostkit.store._schema import Migration

__all__ = ["FreshImage", "fresh_image"]


@dataclass(frozen=True, slots=True)
class FreshImage:
    """What a new file needs to be the migrations' end state: statements, in order."""

    statements: tuple[tuple[str, tuple[object, ...]], ...]


_NO_PARAMETERS: tuple[object, ...] = ()

# One image per distinct list of steps: the release's, and any a test injects.
_images: dict[tuple[Migration, ...], FreshImage | None] = {}


def fresh_image(migrations: Sequence[Migration]) -> FreshImage | None:
    """The image of ``migrations`` applied to an empty database, or ``None``.

    ``None`` when the steps fail in memory or the image would not be logically identical
    to their replay: the caller then replays them on the file itself, where any failure
    is reported as usual. Two writer threads asking at once may both build it; either
    result is the same, and the cache keeps the first.
    """
    key = tuple(migrations)
    if key not in _images:
        _images.setdefault(key, _build(key))
    return _images[key]


def _build(migrations: tuple[Migration, ...]) -> FreshImage | None:
    replayed = _memory()
    created = _memory()
    try:
        for step in migrations:
            for statement in step.statements:
                replayed.execute(statement)
        statements = _schema_statements(replayed)
        _apply(created, statements)
        # Rows the steps leave (a seeded table, a full-text index's structure record, an
        # AUTOINCREMENT counter) that creating the schema alone does not: copied as they are.
        for table in _tables(replayed):
            rows = _rows(replayed, table)
            if rows != _rows(created, table):
                copy = [(f"DELETE FROM {_quoted(table)}", _NO_PARAMETERS)] + [
                    (f"INSERT INTO {_quoted(table)} VALUES ({', '.join('?' * len(row))})", row)
                    for row in rows
                ]
                _apply(created, copy)
                statements += copy
        if list(created.iterdump()) != list(replayed.iterdump()):
            return None
        return FreshImage(tuple(statements))
    except sqlite3.Error:
        return None
    finally:
        replayed.close()
        created.close()


def _memory() -> sqlite3.Connection:
    """An in-memory database set up as the store's writer is where the steps run."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _apply(conn: sqlite3.Connection, statements: Sequence[tuple[str, tuple[object, ...]]]) -> None:
    for statement, parameters in statements:
        conn.execute(statement, parameters)


def _schema_statements(conn: sqlite3.Connection) -> list[tuple[str, tuple[object, ...]]]:
    """The statements that create ``conn``'s tables, indexes, triggers and views, and its id."""
    shadows = _shadows(conn)
    objects = [
        (str(kind), str(sql))
        for kind, name, sql in conn.execute(
            "SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY rowid"
        )
        if not str(name).startswith("sqlite_") and name not in shadows
    ]
    # Tables first (an index or trigger names its table), then the rest as they came.
    ordered = [sql for kind, sql in objects if kind == "table"]
    ordered += [sql for kind, sql in objects if kind != "table"]
    application_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    ordered.append(f"PRAGMA application_id = {application_id}")
    return [(sql, _NO_PARAMETERS) for sql in ordered]


def _shadows(conn: sqlite3.Connection) -> set[str]:
    return {str(row[1]) for row in conn.execute("PRAGMA main.table_list") if row[2] == "shadow"}


def _tables(conn: sqlite3.Connection) -> list[str]:
    """Every table that stores rows itself: ordinary, shadow and ``sqlite_sequence``."""
    return [
        str(row[1])
        for row in conn.execute("PRAGMA main.table_list")
        if row[2] in ("table", "shadow") and row[1] != "sqlite_schema"
    ]


def _rows(conn: sqlite3.Connection, table: str) -> list[tuple[object, ...]]:
    """``table``'s rows in a stable order (by rowid, or by its key when it has none)."""
    source = f"SELECT * FROM {_quoted(table)}"
    try:
        return [tuple(row) for row in conn.execute(f"{source} ORDER BY rowid")]
    except sqlite3.OperationalError:  # a WITHOUT ROWID table
        return [tuple(row) for row in conn.execute(f"{source} ORDER BY 1")]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
