"""RuntimeStore: the transactional source of truth (SQLite in WAL mode via aiosqlite)."""

from hostkit.store._connection import Synchronous
from hostkit.store._lease import LeaseOwner, owner_is_dead
from hostkit.store._migrate import MigrationReport, logical_fingerprint
from hostkit.store._owned import OwnedKind, now, owner_predicate
from hostkit.store._runtime import MAX_REASON, RuntimeStore, Transaction, audit_reason
from hostkit.store._schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, Migration
from hostkit.store._scopes import ScopeMint
from hostkit.store._sessions import ConversationSelect, OwnerFacts, insert_audit

__all__ = [
    "APPLICATION_ID",
    "MAX_REASON",
    "ConversationSelect",
    "LeaseOwner",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Migration",
    "MigrationReport",
    "OwnedKind",
    "OwnerFacts",
    "RuntimeStore",
    "ScopeMint",
    "Synchronous",
    "Transaction",
    "audit_reason",
    "insert_audit",
    "logical_fingerprint",
    "now",
    "owner_is_dead",
    "owner_predicate",
]
