"""A verified ``pg_dump`` before a destructive PostgreSQL migration.

``pg_dump --format=custom`` writes the whole database to a new file in the
backup folder (0600, never overwritten), then ``pg_restore --list`` must read
that archive's table of contents back and find ``hostkit_schema`` in it: a
dump that cannot be listed is not a backup. Both programs come from the
PostgreSQL client package; the password reaches them through the inherited
environment (``PGPASSWORD`` / ``PGPASSFILE``), never the command line.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import anyio

from hostkit.errors import MigrationError

__all__ = ["dump_and_verify"]

_DUMP_TIMEOUT_S = 3_600.0
_LIST_TIMEOUT_S = 300.0


async def dump_and_verify(url: str, folder: Path, version: int, *, location: str) -> Path:
    """Dump the database at ``url`` into ``folder`` and verify the archive; its path."""
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
    target = folder / f"hostkit-v{version}-{time.strftime('%Y%m%dT%H%M%S')}.dump"
    if await anyio.Path(target).exists():
        raise MigrationError(f"{target} exists; retry in a second", database=location)
    await _run(
        [dump, "--format=custom", f"--file={target}", f"--dbname={url}"],
        what="pg_dump",
        timeout_s=_DUMP_TIMEOUT_S,
        location=location,
    )
    await anyio.Path(target).chmod(0o600)
    listing = await _run(
        [restore, "--list", str(target)],
        what="pg_restore --list",
        timeout_s=_LIST_TIMEOUT_S,
        location=location,
    )
    if "hostkit_schema" not in listing:
        raise MigrationError(
            "the new backup does not list hostkit_schema; nothing was migrated",
            database=location,
            backup=str(target),
        )
    return target


def _tools() -> tuple[str, str] | None:
    dump, restore = shutil.which("pg_dump"), shutil.which("pg_restore")
    return (dump, restore) if dump and restore else None


async def _run(argv: list[str], *, what: str, timeout_s: float, location: str) -> str:
    try:
        with anyio.fail_after(timeout_s):
            result = await anyio.run_process(argv, check=False)
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
