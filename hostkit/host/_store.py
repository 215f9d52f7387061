"""Open the store a configuration names: PostgreSQL at ``[store] url``, else the SQLite file."""

from __future__ import annotations

import logging

import anyio

from hostkit.errors import StoreError, bounded
from hostkit.host._config import HostConfig
from hostkit.store import RuntimeStore

__all__ = ["open_configured_store", "store_exists", "upgrade_notices"]


_log = logging.getLogger("hostkit.host")


async def open_configured_store(config: HostConfig) -> RuntimeStore:
    """Open (creating or migrating) the configured store; the caller closes it. An upgrade
    of its schema is logged (``upgrade_notices``): every command that opens the database
    may upgrade it, a listing as much as ``serve``."""
    store = await _open(config)
    for line in upgrade_notices(store):
        _log.warning("%s", line)
    return store


def upgrade_notices(store: RuntimeStore) -> tuple[str, ...]:
    """The line that tells the operator this open upgraded the database's schema, and
    where the old database is kept (none when it was current or new). Only the process
    that upgraded a database tells it: the others find it done."""
    upgrade = store.migration
    if not 0 < upgrade.from_version < upgrade.to_version:
        return ()
    line = f"upgraded the database from schema v{upgrade.from_version} to v{upgrade.to_version}"
    if upgrade.backup is not None:
        line += f"; its old copy is {upgrade.backup}: delete it once this version runs well"
    return (line,)


async def _open(config: HostConfig) -> RuntimeStore:
    if config.store.url is not None:
        return await RuntimeStore.open_postgres(
            config.store.url,
            pool_size=config.store.pool_size,
            connect_timeout_s=config.store.connect_timeout_s,
            statement_timeout_s=config.store.statement_timeout_s,
            backup_dir=config.resolve(config.store.backup_dir),
            max_clock_skew_s=config.store.max_clock_skew_s,
        )
    folder = config.database_path.parent
    try:
        await anyio.Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        # The same one line as a file SQLite cannot open, not the OS error's traceback.
        raise StoreError(
            bounded(
                f"opening {config.database_path} failed: cannot create its folder {folder}: "
                f"{exc.strerror or exc}",
                600,
            )
        ) from None
    return await RuntimeStore.open(config.database_path, synchronous=config.host.synchronous)


async def store_exists(config: HostConfig) -> bool:
    """Whether there is a store to read without creating one (a server always exists)."""
    return config.store.url is not None or await anyio.Path(config.database_path).exists()
