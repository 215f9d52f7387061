"""Open the store a configuration names: PostgreSQL at ``[store] url``, else the SQLite file."""

from __future__ import annotations

import anyio

from hostkit.errors import StoreError, bounded
from hostkit.host._config import HostConfig
from hostkit.store import RuntimeStore

__all__ = ["open_configured_store", "store_exists"]


async def open_configured_store(config: HostConfig) -> RuntimeStore:
    """Open (creating or migrating) the configured store; the caller closes it."""
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
