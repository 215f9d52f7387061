"""The files a SQLite store opened, by identity: the database, and in WAL mode its -wal and -shm.

SQLite goes on using a file it has open once its name is gone or names another
file. A database file deleted or replaced under a running store, or its
``-wal``/``-shm`` deleted by a "cleanup", takes commits no later open finds
(the WAL's are lost at the next crash), and a second process opening the
database then makes a fresh WAL and index of its own: the two write apart.
So each write transaction first compares every path with the file the store
opened (a ``stat`` each, a few microseconds) and refuses when one differs.

At close, SQLite's last connection writes its WAL back into the database and
unlinks the ``-wal`` and ``-shm`` paths, whatever files they name by then. When
another process made new ones, that would overwrite that process's commits
with this store's older ones and delete its WAL: ``keep_foreign_wal`` keeps a
read-only connection open past the store's own, so neither of those closes
checkpoints or unlinks (a read-only connection never does either).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SIBLINGS", "OpenedFiles", "file_of", "keep_foreign_wal"]

# The files SQLite keeps beside a database in WAL mode, by the suffix of their names.
SIBLINGS = ("-wal", "-shm")
# How long the read-only connection kept at close waits for another process's lock.
_KEEPER_WAIT_S = 1.0

FileId = tuple[int, int]

_log = logging.getLogger("hostkit.store")


def file_of(path: str) -> FileId | None:
    """(device, inode) of ``path``; None when there is no such file (blocking: a stat)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


@dataclass(frozen=True, slots=True)
class OpenedFiles:
    """(path, identity) of the database file and of each sibling it had when the store opened."""

    database: str
    files: tuple[tuple[str, FileId], ...]

    @classmethod
    def of(cls, database: str, *, wal: bool) -> OpenedFiles | None:
        """The files at ``database`` now (blocking); None when there is no file to compare.

        ``wal``: the connection is in WAL mode and has read, so SQLite made the
        ``-wal`` and ``-shm`` files and keeps them while any connection is open.
        """
        main = file_of(database)
        if main is None:
            return None
        files = [(database, main)]
        for suffix in SIBLINGS if wal else ():
            sibling = file_of(database + suffix)
            if sibling is not None:
                files.append((database + suffix, sibling))
        return cls(database, tuple(files))

    def changed(self) -> str | None:
        """The first path that no longer names the file opened there (gone, or another)."""
        for path, opened in self.files:
            if file_of(path) != opened:
                return path
        return None

    def foreign_siblings(self) -> bool:
        """Whether a ``-wal`` or ``-shm`` path now names a file this store did not open."""
        return any(
            (now := file_of(path)) is not None and now != opened for path, opened in self.files[1:]
        )


def keep_foreign_wal(files: OpenedFiles) -> sqlite3.Connection | None:
    """A read-only connection holding the database, to close after the store's own (blocking).

    Only when another process made a ``-wal`` or ``-shm`` of its own: none of the
    store's connections is then the last one, so none writes its WAL back or
    unlinks the new files, and this one, read-only, does neither. The store's
    commits since its last checkpoint are lost then (they are in a WAL no one
    else sees); writing them back would break the other process's. None when
    nothing needs keeping or the connection could not read (the close is
    then SQLite's own).
    """
    if not files.foreign_siblings():
        return None
    uri = Path(files.database).as_uri() + "?mode=ro"
    keeper: sqlite3.Connection | None = None
    try:
        keeper = sqlite3.connect(uri, uri=True, timeout=_KEEPER_WAIT_S, check_same_thread=False)
        # A read takes the shared lock a WAL connection keeps until it closes.
        keeper.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        if keeper is not None:
            keeper.close()
        _log.error(
            "the -wal or -shm file of %s was replaced while this store had it open, and "
            "it could not be kept at close (%s): SQLite's close may write this store's "
            "commits back over another process's",
            files.database[-200:],
            type(exc).__name__,
        )
        return None
    _log.error(
        "the -wal or -shm file of %s was replaced while this store had it open (another "
        "process made new ones): this store's commits since its last checkpoint are not "
        "written back into the database, where they would overwrite that process's",
        files.database[-200:],
    )
    return keeper
