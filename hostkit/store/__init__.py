"""The store seam: ``RuntimeStore`` and its groups; the SQLite adapter (WAL, aiosqlite).

All SQL of hostkit lives in this package. Other packages use the abstract
interface and the frozen values it returns.
"""

from hostkit.store import _inbox_checks as inbox_checks
from hostkit.store._approval_facts import ApprovalFacts, approval_facts
from hostkit.store._approvals import (
    ApprovalAnswer,
    ApprovalDecision,
    ApprovalFilter,
    ApprovalPage,
    ApprovalRevocation,
    ApprovalStatus,
    ApprovalStore,
    ClaimedApproval,
    NewApproval,
    PendingApproval,
    RevocationPage,
)
from hostkit.store._attachments import (
    ATTACHMENT_GRACE_S,
    MAX_RECLAIM,
    RECLAIM_BATCH,
    AttachmentStore,
    StoredAttachment,
)
from hostkit.store._checks import MAX_CLAIM_OWNERS
from hostkit.store._connection import Synchronous
from hostkit.store._context import (
    MAX_BOOTSTRAP_CHARS,
    MAX_SUMMARY_CHARS,
    MAX_WINDOW,
    ContextStore,
)
from hostkit.store._context_values import (
    Calibration,
    CommittedSummary,
    CompactionLease,
    CompactionState,
    ContextState,
    HistoryRow,
    LeaseTake,
    ObservedStep,
    StepRecord,
)
from hostkit.store._cores import ANY_VERSION, MAX_CORE_HISTORY, CoreStore
from hostkit.store._cores_sql import SqlCoreStore
from hostkit.store._delivery import (
    DELIVERY_ATTEMPTS_EXHAUSTED,
    MAX_DELIVERY_CLAIM,
    MAX_DELIVERY_LIST,
    MAX_REPLY_CHARS,
    DeliveryStore,
)
from hostkit.store._delivery_sql import SqlDeliveryStore
from hostkit.store._inbox import (
    ATTEMPTS_EXHAUSTED,
    MAX_CLAIM_BATCH,
    MAX_INBOX_LIST,
    InboxStore,
)
from hostkit.store._inbox_sql import SqlInboxStore
from hostkit.store._inspect import (
    MAX_INSPECT_ROWS,
    InspectQueries,
    RecordedDecision,
    SessionActivity,
    SessionUsage,
    TurnDecisions,
    TurnHeader,
    TurnUsageRows,
    UsageRow,
    UsageSums,
)
from hostkit.store._interface import RuntimeStore
from hostkit.store._lease import LeaseOwner, owner_is_dead
from hostkit.store._mcp import (
    MAX_MCP_DESCRIPTION_CHARS,
    MAX_MCP_DETAIL_CHARS,
    MAX_MCP_STATUS_ROWS,
    MAX_MCP_TOOLS,
    McpStatusStore,
)
from hostkit.store._memory import (
    MAX_MEMORY_CHARS,
    MAX_MEMORY_CHARS_PER_OWNER,
    MAX_MEMORY_ITEMS_PER_OWNER,
    MAX_MEMORY_LIST,
    MAX_RECALL,
    MemoryItem,
    MemoryStore,
)
from hostkit.store._migrate import MigrationReport, logical_fingerprint
from hostkit.store._owned import OwnedKind, now, owner_predicate
from hostkit.store._pg_url import carries_password, redact_url
from hostkit.store._row_store import MAX_REASON, RowStore, audit_reason
from hostkit.store._schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, Migration
from hostkit.store._scopes import ScopeMint
from hostkit.store._sessions import ConversationSelect, OwnerFacts, insert_audit
from hostkit.store._sqlite import SqliteStore, Transaction
from hostkit.store._terminal_runs import (
    MAX_TERMINAL_RUN_LIST,
    TERMINAL_RUN_LEASE_S,
    NewTerminalRun,
    TerminalRunEnding,
    TerminalRunLimit,
    TerminalRunRecord,
    TerminalRunState,
    TerminalRunStore,
    TerminalStreamStats,
)
from hostkit.store._turn_rows import (
    EMPTY_NOTICE,
    FAILED_ACTED_NOTICE,
    FAILED_NOTICE,
    INDETERMINATE_NOTICE,
    LOST_NOTICE,
    epoch_of,
)
from hostkit.store._turn_values import (
    MAX_EXTENDED_INSTRUCTIONS_CHARS,
    MAX_LEASE_TTL_S,
    Admitted,
    CarriedContext,
    ConversationTarget,
    RecoveredTurn,
    SessionBusy,
    SessionLease,
    TranscriptEntry,
    TurnAdmission,
    TurnState,
    TurnStatus,
    TurnWrite,
)
from hostkit.store._turns import TurnStore
from hostkit.store._wait_limit import WaitLimit, stores_opened_follow

__all__ = [
    "ANY_VERSION",
    "APPLICATION_ID",
    "ATTACHMENT_GRACE_S",
    "ATTEMPTS_EXHAUSTED",
    "DELIVERY_ATTEMPTS_EXHAUSTED",
    "EMPTY_NOTICE",
    "FAILED_ACTED_NOTICE",
    "FAILED_NOTICE",
    "INDETERMINATE_NOTICE",
    "LOST_NOTICE",
    "MAX_BOOTSTRAP_CHARS",
    "MAX_CLAIM_BATCH",
    "MAX_CLAIM_OWNERS",
    "MAX_CORE_HISTORY",
    "MAX_DELIVERY_CLAIM",
    "MAX_DELIVERY_LIST",
    "MAX_EXTENDED_INSTRUCTIONS_CHARS",
    "MAX_INBOX_LIST",
    "MAX_INSPECT_ROWS",
    "MAX_LEASE_TTL_S",
    "MAX_MCP_DESCRIPTION_CHARS",
    "MAX_MCP_DETAIL_CHARS",
    "MAX_MCP_STATUS_ROWS",
    "MAX_MCP_TOOLS",
    "MAX_MEMORY_CHARS",
    "MAX_MEMORY_CHARS_PER_OWNER",
    "MAX_MEMORY_ITEMS_PER_OWNER",
    "MAX_MEMORY_LIST",
    "MAX_REASON",
    "MAX_RECALL",
    "MAX_RECLAIM",
    "MAX_REPLY_CHARS",
    "MAX_SUMMARY_CHARS",
    "MAX_TERMINAL_RUN_LIST",
    "MAX_WINDOW",
    "MIGRATIONS",
    "RECLAIM_BATCH",
    "SCHEMA_VERSION",
    "TERMINAL_RUN_LEASE_S",
    "Admitted",
    "ApprovalAnswer",
    "ApprovalDecision",
    "ApprovalFacts",
    "ApprovalFilter",
    "ApprovalPage",
    "ApprovalRevocation",
    "ApprovalStatus",
    "ApprovalStore",
    "AttachmentStore",
    "Calibration",
    "CarriedContext",
    "ClaimedApproval",
    "CommittedSummary",
    "CompactionLease",
    "CompactionState",
    "ContextState",
    "ContextStore",
    "ConversationSelect",
    "ConversationTarget",
    "CoreStore",
    "DeliveryStore",
    "HistoryRow",
    "InboxStore",
    "InspectQueries",
    "LeaseOwner",
    "LeaseTake",
    "McpStatusStore",
    "MemoryItem",
    "MemoryStore",
    "Migration",
    "MigrationReport",
    "NewApproval",
    "NewTerminalRun",
    "ObservedStep",
    "OwnedKind",
    "OwnerFacts",
    "PendingApproval",
    "RecordedDecision",
    "RecoveredTurn",
    "RevocationPage",
    "RowStore",
    "RuntimeStore",
    "ScopeMint",
    "SessionActivity",
    "SessionBusy",
    "SessionLease",
    "SessionUsage",
    "SqlCoreStore",
    "SqlDeliveryStore",
    "SqlInboxStore",
    "SqliteStore",
    "StepRecord",
    "StoredAttachment",
    "Synchronous",
    "TerminalRunEnding",
    "TerminalRunLimit",
    "TerminalRunRecord",
    "TerminalRunState",
    "TerminalRunStore",
    "TerminalStreamStats",
    "Transaction",
    "TranscriptEntry",
    "TurnAdmission",
    "TurnDecisions",
    "TurnHeader",
    "TurnState",
    "TurnStatus",
    "TurnStore",
    "TurnUsageRows",
    "TurnWrite",
    "UsageRow",
    "UsageSums",
    "WaitLimit",
    "approval_facts",
    "audit_reason",
    "carries_password",
    "epoch_of",
    "inbox_checks",
    "insert_audit",
    "logical_fingerprint",
    "now",
    "owner_is_dead",
    "owner_predicate",
    "redact_url",
    "stores_opened_follow",
]
