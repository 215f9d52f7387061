"""A verified ``pg_dump`` before a destructive PostgreSQL migration.

``pg_dump --format=custom`` writes the whole database to a new file in the
backup folder (0600, never overwritten), then ``pg_restore --list`` must read
that archive's table of contents back and find ``hostkit_schema`` in it: a
dump that cannot be listed is not a backup. Both programs come from the
PostgreSQL client package; the password reaches them through the inherited
environment (``PGPASSWORD`` / ``PGPASSFILE``), never the command line.
"""

from __future__ import annotations

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
    try:
        # Created empty and private before pg_dump writes a byte of the database into it.
        await anyio.to_thread.run_sync(_create_private, target)
    except FileExistsError:
        raise MigrationError(f"{target} exists; retry in a second", database=location) from None
    await _run(
        [dump, "--format=custom", f"--file={target}", f"--dbname={url}"],
        what="pg_dump",
        timeout_s=_DUMP_TIMEOUT_S,
        location=location,
        env=env,
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


def _create_private(path: Path) -> None:
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


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
