"""A verified ``pg_dump`` before a destructive PostgreSQL migration.

``pg_dump --format=custom`` writes the whole database to ``<name>.partial`` in
the backup folder (0600), then ``pg_restore --list`` must read that archive's
table of contents back and find ``hostkit_schema`` in it: a dump that cannot
be listed is not a backup. Only then is it renamed to its final name
``hostkit-v<N>-<time>.dump`` (never overwritten) and the folder synced, so a
file of that name is always a verified dump. Every failure (pg_dump or the
listing failing or timing out, a cancellation) deletes the partial file; one
left by a killed process is deleted by the next dump into that folder (each
dump holds an ``flock`` on its partial file, so one under way elsewhere is
left alone). Both programs come from the PostgreSQL client package; the
password reaches them through the inherited environment (``PGPASSWORD`` /
``PGPASSFILE``), never the command line.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from pathlib import Path

import anyio

from hostkit.errors import MigrationError
from hostkit.store._pg_url import without_password

__all__ = ["dump_and_verify"]

_DUMP_TIMEOUT_S = 3_600.0
_LIST_TIMEOUT_S = 300.0
# What an unverified dump is called until it is verified (after the final name).
_PARTIAL = ".partial"


async def dump_and_verify(url: str, folder: Path, version: int, *, location: str) -> Path:
    """Dump the database at ``url`` into ``folder`` and verify the archive; its path.

    A password in ``url`` goes to pg_dump in its environment, never on its
    command line (which every local user can read).
    """
    url, password = without_password(url)
    env = dict(os.environ)
    if password is not None:
        env["PGPASSWORD"] = password
    tools = await anyio.to_thread.run_sync(_tools)
    if tools is None:
        raise MigrationError(
            "a destructive upgrade needs a verified backup, and pg_dump / pg_restore are not "
            "installed here; install the PostgreSQL client, or take one by hand: "
            "pg_dump --format=custom --file=<file> <url>, check it with pg_restore --list <file>",
            database=location,
        )
    dump, restore = tools
    await anyio.Path(folder).mkdir(parents=True, exist_ok=True, mode=0o700)
    await anyio.Path(folder).chmod(0o700)
    target = folder / f"hostkit-v{version}-{time.strftime('%Y%m%dT%H%M%S')}.dump"
    partial = target.with_name(target.name + _PARTIAL)
    try:
        # Created empty, private and locked before pg_dump writes a byte of the database.
        held = await anyio.to_thread.run_sync(_claim, target, partial)
    except FileExistsError:
        raise MigrationError(f"{target} exists; retry in a second", database=location) from None
    try:
        await _run(
            [dump, "--format=custom", f"--file={partial}", f"--dbname={url}"],
            what="pg_dump",
            timeout_s=_DUMP_TIMEOUT_S,
            location=location,
            env=env,
        )
        await anyio.Path(partial).chmod(0o600)
        listing = await _run(
            [restore, "--list", str(partial)],
            what="pg_restore --list",
            timeout_s=_LIST_TIMEOUT_S,
            location=location,
        )
        if "hostkit_schema" not in listing:
            raise MigrationError(
                "the new backup does not list hostkit_schema; nothing was migrated",
                database=location,
            )
        try:
            await anyio.to_thread.run_sync(_publish, partial, target)
        except OSError as exc:
            raise MigrationError(
                f"the backup could not be written ({exc.strerror or exc}); nothing was "
                f"migrated: free space in {folder} and retry",
                database=location,
            ) from exc
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_discard, partial, held)
        raise
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(os.close, held)
    return target


def _claim(target: Path, partial: Path) -> int:
    """Remove dumps left by killed processes, then create ``partial`` (0600) and hold its
    lock; its descriptor. ``FileExistsError`` when ``target`` or ``partial`` is taken."""
    _remove_leftovers(partial.parent)
    if target.exists():
        raise FileExistsError(target)
    fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another process's clean-up holds it, about to take it for a leftover.
            raise FileExistsError(partial) from None
        # Another process's clean-up may have taken it for a leftover before it was locked.
        if not _names(partial, fd):
            raise FileExistsError(partial)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove_leftovers(folder: Path) -> None:
    """Delete each partial dump whose process is gone (nobody holds its lock)."""
    for leftover in folder.glob(f"hostkit-v*.dump{_PARTIAL}"):
        try:
            fd = os.open(leftover, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _names(leftover, fd):
                leftover.unlink(missing_ok=True)
        except BlockingIOError:
            continue  # a dump under way in another process
        finally:
            os.close(fd)


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open at ``fd``."""
    try:
        found, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (found.st_dev, found.st_ino) == (held.st_dev, held.st_ino)


def _publish(partial: Path, target: Path) -> None:
    """The verified dump on disk under its final name (blocking)."""
    with open(partial, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, target)
    # The rename itself is durable once the folder is synced (where it can be).
    with contextlib.suppress(OSError):
        fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _discard(partial: Path, held: int) -> None:
    """An unverified dump is deleted (under its lock, so no clean-up races it)."""
    try:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    finally:
        os.close(held)


def _tools() -> tuple[str, str] | None:
    dump, restore = shutil.which("pg_dump"), shutil.which("pg_restore")
    return (dump, restore) if dump and restore else None


async def _run(
    argv: list[str],
    *,
    what: str,
    timeout_s: float,
    location: str,
    env: dict[str, str] | None = None,
) -> str:
    try:
        with anyio.fail_after(timeout_s):
            result = await anyio.run_process(argv, check=False, env=env)
    except TimeoutError:
        raise MigrationError(
            f"{what} did not finish within {timeout_s:g} s; nothing was migrated",
            database=location,
        ) from None
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()
        raise MigrationError(
            f"{what} failed ({result.returncode}): {(detail or ['no output'])[-1][:300]}; "
            "nothing was migrated",
            database=location,
        )
    return result.stdout.decode(errors="replace")
