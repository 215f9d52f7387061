"""RuntimeStore: the transactional source of truth (SQLite in WAL mode via aiosqlite)."""

from hostkit.store._connection import Synchronous
from hostkit.store._migrate import MigrationReport, logical_fingerprint
from hostkit.store._runtime import RuntimeStore, Transaction
from hostkit.store._schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, Migration
from hostkit.store._scopes import ScopeMint
from hostkit.store._sessions import OwnerFacts

__all__ = [
    "APPLICATION_ID",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Migration",
    "MigrationReport",
    "OwnerFacts",
    "RuntimeStore",
    "ScopeMint",
    "Synchronous",
    "Transaction",
    "logical_fingerprint",
]
