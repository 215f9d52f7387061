"""The store seam: ``RuntimeStore`` and its groups; the SQLite adapter (WAL, aiosqlite).

All SQL of hostkit lives in this package. Other packages use the abstract
interface and the frozen values it returns.
"""

from hostkit.store._approvals import ApprovalStore
from hostkit.store._connection import Synchronous
from hostkit.store._context import ContextStore
from hostkit.store._inspect import InspectQueries
from hostkit.store._interface import RuntimeStore
from hostkit.store._lease import LeaseOwner, owner_is_dead
from hostkit.store._memory import MemoryStore
from hostkit.store._migrate import MigrationReport, logical_fingerprint
from hostkit.store._owned import OwnedKind, now, owner_predicate
from hostkit.store._schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, Migration
from hostkit.store._scopes import ScopeMint
from hostkit.store._sessions import ConversationSelect, OwnerFacts, insert_audit
from hostkit.store._sqlite import MAX_REASON, SqliteStore, Transaction, audit_reason
from hostkit.store._turns import TurnStore

__all__ = [
    "APPLICATION_ID",
    "ApprovalStore",
    "ContextStore",
    "InspectQueries",
    "MemoryStore",
    "SqliteStore",
    "TurnStore",
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
