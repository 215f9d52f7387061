"""Terminal output past its retention: found and deleted in bounded passes.

Every run keeps its non-empty output as ``<root>/<session hmac>/<spawn id>.stdout``
(and ``.stderr``) and nothing else ever deletes those files, so without this
the artifacts' disk fills until ``host.artifact_reserve_mb`` refuses every
run. A pass deletes the files last written before a cut-off, at most
``limit`` of them after looking at most ``examine`` entries; an ``ArtifactCursor``
carries where it stopped to the next pass, so a large root is covered over
several passes instead of one long one.

What is never deleted: anything that is not one of those names in a
directory of that shape; a link (every open is ``O_NOFOLLOW``, relative to a
descriptor of the root: nothing outside it is reached); a file or directory
of another user; a file written after the cut-off; and a file a run still
holds open (its writer keeps a shared ``flock``: ``_process_streams``), in
any Host process. A session directory left empty is removed too.

Blocking file system work: run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EXAMINE_PER_PASS", "ArtifactCursor", "reclaim_expired_artifacts"]

# Directory entries one pass looks at, at most (besides those it skips to resume).
EXAMINE_PER_PASS = 20_000

_SESSION = re.compile(r"[0-9a-f]{32}")
_ARTIFACT = re.compile(r"spawn_[0-9a-f]+\.(?:stdout|stderr)")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(slots=True)
class ArtifactCursor:
    """Where the last pass stopped: a session directory and the entries kept before it."""

    directory: str | None = None
    offset: int = 0


@dataclass(slots=True)
class _Budget:
    limit: int
    examine: int
    removed: int = 0

    @property
    def spent(self) -> bool:
        return self.removed >= self.limit or self.examine <= 0


def reclaim_expired_artifacts(
    root: Path,
    *,
    cutoff: float,
    limit: int,
    cursor: ArtifactCursor,
    examine: int = EXAMINE_PER_PASS,
) -> int:
    """Delete up to ``limit`` artifact files under ``root`` last written before ``cutoff``
    (epoch seconds), resuming at ``cursor`` (advanced in place); how many went."""
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0  # no run has kept output yet
    budget = _Budget(limit=limit, examine=examine)
    try:
        names = sorted(name for name in os.listdir(root_fd) if _SESSION.fullmatch(name))
        if cursor.directory is not None:
            names = [name for name in names if name >= cursor.directory]
        for name in names:
            skip = cursor.offset if name == cursor.directory else 0
            kept = _sweep_session(root_fd, name, cutoff, budget, skip)
            if kept is not None:  # stopped inside it: resume there
                cursor.directory, cursor.offset = name, kept
                return budget.removed
            if budget.spent:
                cursor.directory, cursor.offset = name + "~", 0  # sorts after it
                return budget.removed
        cursor.directory, cursor.offset = None, 0  # reached the end: start over next time
        return budget.removed
    finally:
        os.close(root_fd)


def _sweep_session(
    root_fd: int, name: str, cutoff: float, budget: _Budget, skip: int
) -> int | None:
    """Delete the expired files of one session directory.

    None when it was looked through to the end, else the entries kept before where it
    stopped (skipped by the next pass).
    """
    try:
        dir_fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
    except OSError:
        return None  # a link, not a directory, or gone
    try:
        info = os.fstat(dir_fd)
        if info.st_uid != os.getuid():
            return None
        seen = kept = removed = 0
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                seen += 1
                if seen <= skip:
                    continue
                if budget.spent:
                    return skip + kept
                budget.examine -= 1
                if _ARTIFACT.fullmatch(entry.name) and _expire(dir_fd, entry.name, cutoff):
                    removed += 1
                    budget.removed += 1
                else:
                    kept += 1
        if seen - removed == 0 and (removed or info.st_mtime < cutoff):
            # Empty and idle: a run creating its files meanwhile makes this fail (ENOTEMPTY),
            # or makes the directory again (``_prepare_artifacts``).
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=root_fd)
        return None
    finally:
        os.close(dir_fd)


def _expire(dir_fd: int, name: str, cutoff: float) -> bool:
    """Delete ``name`` if it is a regular file of ours, last written before ``cutoff``, and
    no run holds it. A file that cannot be checked or deleted is left for a later pass."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return False  # a link (ELOOP), gone, or unreadable
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mtime >= cutoff:
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a running run: EWOULDBLOCK
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            return False
        os.unlink(name, dir_fd=dir_fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
