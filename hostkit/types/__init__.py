"""Frozen contract values: no I/O, deeply immutable, validated on construction."""

from hostkit.types._context import TokenKind, TurnExecutionContext, TurnToken
from hostkit.types._ids import new_id
from hostkit.types._model import (
    FinishReason,
    ModelLimits,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    Role,
    StreamEvent,
    ToolCall,
    ToolDefinition,
    Usage,
)
from hostkit.types._records import (
    AuditRecord,
    LegacyRepairView,
    MessageRecord,
    OwnerKind,
    Page,
    SessionRecord,
    TaskRecord,
)
from hostkit.types._redact import REDACTED, bounded_metadata, is_secret_field
from hostkit.types._scope import (
    MAX_ALLOWED_SESSIONS,
    Authority,
    ConversationFacts,
    PrincipalScope,
)

__all__ = [
    "MAX_ALLOWED_SESSIONS",
    "REDACTED",
    "AuditRecord",
    "Authority",
    "ConversationFacts",
    "FinishReason",
    "LegacyRepairView",
    "MessageRecord",
    "ModelLimits",
    "ModelMessage",
    "ModelRequest",
    "ModelResponse",
    "OwnerKind",
    "Page",
    "PrincipalScope",
    "Role",
    "SessionRecord",
    "StreamEvent",
    "TaskRecord",
    "TokenKind",
    "ToolCall",
    "ToolDefinition",
    "TurnExecutionContext",
    "TurnToken",
    "Usage",
    "bounded_metadata",
    "is_secret_field",
    "new_id",
]
