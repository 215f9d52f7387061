"""EffectRuntime: the per-turn catalog seam and the one effect pipeline."""

from hostkit.effects._approvals import (
    APPROVAL_TTL_S,
    ApprovalDecision,
    ApprovalKey,
    ApprovalOutcome,
    ApprovalProvider,
    ApprovalRequest,
    ApprovalRuntime,
)
from hostkit.effects._authored import AuthoredTool, ToolContext, ToolOutcome, tool
from hostkit.effects._catalog import CatalogEntry, PreparedEffectCatalog, provider_name
from hostkit.effects._files import workspace_tools
from hostkit.effects._fingerprint import fingerprint_of
from hostkit.effects._pending import (
    ApprovalLedger,
    ApprovalStatus,
    ClaimedApproval,
    PendingApproval,
)
from hostkit.effects._policy import EffectPolicy, PolicyDecision
from hostkit.effects._process import (
    ProcessControl,
    ProcessOutcome,
    ProcessSupervisor,
    opaque_artifact_dir,
    run_process,
)
from hostkit.effects._process_streams import load_artifact_key
from hostkit.effects._runtime import (
    DEFAULT_SECRET_TTL_S,
    EffectRuntime,
    Toolset,
    ToolsetProvider,
    approval_view,
    secret_grant,
)
from hostkit.effects._terminal import (
    DEFAULT_ENV_ALLOWLIST,
    EXECUTION_CONTROL_TARGETS,
    TerminalRuns,
)
from hostkit.effects._terminal_checks import ENV_NAME_PATTERN
from hostkit.effects._urlpolicy import UrlDenied, UrlPolicy
from hostkit.effects._views import MIN_SECRET_CHARS, redact_secrets
from hostkit.effects._web import web_tools
from hostkit.effects._workspace import (
    WorkspaceError,
    WorkspaceEscape,
    WorkspaceIOFailure,
    WorkspaceScope,
)

__all__ = [
    "APPROVAL_TTL_S",
    "DEFAULT_ENV_ALLOWLIST",
    "ENV_NAME_PATTERN",
    "EXECUTION_CONTROL_TARGETS",
    "ProcessControl",
    "ProcessOutcome",
    "ProcessSupervisor",
    "TerminalRuns",
    "load_artifact_key",
    "opaque_artifact_dir",
    "run_process",
    "DEFAULT_SECRET_TTL_S",
    "MIN_SECRET_CHARS",
    "ApprovalLedger",
    "ApprovalStatus",
    "ClaimedApproval",
    "CatalogEntry",
    "PendingApproval",
    "ToolOutcome",
    "approval_view",
    "fingerprint_of",
    "redact_secrets",
    "secret_grant",
    "ApprovalDecision",
    "ApprovalKey",
    "ApprovalOutcome",
    "ApprovalProvider",
    "ApprovalRequest",
    "ApprovalRuntime",
    "AuthoredTool",
    "EffectPolicy",
    "EffectRuntime",
    "PolicyDecision",
    "PreparedEffectCatalog",
    "ToolContext",
    "Toolset",
    "ToolsetProvider",
    "UrlDenied",
    "UrlPolicy",
    "WorkspaceError",
    "WorkspaceEscape",
    "WorkspaceIOFailure",
    "WorkspaceScope",
    "provider_name",
    "tool",
    "web_tools",
    "workspace_tools",
]
