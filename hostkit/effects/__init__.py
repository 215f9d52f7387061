"""EffectRuntime: the per-turn catalog seam and the one effect pipeline.

This package is the pipeline only: catalog, authored tools, policy,
approvals, secrets and bounded, redacted views. The builtin tool families
(terminal and processes, workspace files, web) live in ``hostkit.builtins``
above it and reach it through this interface alone; ``hostkit.host`` wires
them in. Names a tool author needs to size or redact its output
(``MAX_MODEL_VIEW_CHARS``, ``redact_secrets``, ``MIN_SECRET_CHARS``) and to
name a bindable secret (``ENV_NAME_PATTERN``) are exported on purpose.
"""

import typing

from hostkit import _lazy
from hostkit.effects._authored import (
    MAX_DESCRIPTION_CHARS,
    MAX_WARNING_CHARS,
    AuthoredTool,
    AuthorHandles,
    AuthorState,
    BuiltinOutcome,
    Prepared,
    ToolChanged,
    ToolContext,
    ToolOutcome,
    is_effect_name,
    is_timeout,
    tool,
)
from hostkit.effects._catalog import (
    CatalogEntry,
    EffectCollision,
    PreparedEffectCatalog,
    SourcedTool,
    check_collisions,
    provider_name,
)
from hostkit.effects._diff import DIFF_KEY, MAX_DIFF_CHARS, MAX_DIFF_LINES, unified_diff
from hostkit.effects._fingerprint import fingerprint_of
from hostkit.effects._mcp import (
    MCP_SERVER_NAME_PATTERN,
    McpConnection,
    McpConnector,
    McpServer,
    McpServerDeclaration,
    McpToolSpec,
    mcp_call_grant,
    mcp_connect_grant,
)
from hostkit.effects._mcp_names import mcp_effect_name
from hostkit.effects._policy import EffectPolicy, PolicyDecision, provider_spelling
from hostkit.effects._redaction import Redactor
from hostkit.effects._rule_names import quoted_rule, rule_problem
from hostkit.effects._schema import SchemaTool, schema_problem, schema_refusal
from hostkit.effects._views import MAX_MODEL_VIEW_CHARS, MIN_SECRET_CHARS, redact_secrets

if typing.TYPE_CHECKING:
    from hostkit.effects._approvals import (
        APPROVAL_TTL_S,
        ApprovalDecision,
        ApprovalKey,
        ApprovalOutcome,
        ApprovalProvider,
        ApprovalRequest,
        ApprovalRuntime,
        still_pending,
    )
    from hostkit.effects._mcp_catalog import MCP_WINDOW_SHARE
    from hostkit.effects._mcp_config import MAX_MCP_SERVERS, McpServerConfig, McpServerName
    from hostkit.effects._mcp_pool import (
        DISCOVERY_WINDOW,
        FAILURE_TTL_S,
        McpConnections,
        McpDiscovery,
        McpTool,
    )
    from hostkit.effects._pending import (
        INLINE,
        ApprovalFilter,
        ApprovalLedger,
        ApprovalPage,
        ApprovalStatus,
        ClaimedApproval,
        PendingApproval,
    )
    from hostkit.effects._runtime import (
        DEFAULT_ENV_ALLOWLIST,
        DEFAULT_SECRET_TTL_S,
        ENV_NAME_PATTERN,
        EffectRuntime,
        Toolset,
        ToolsetProvider,
        approval_view,
        secret_grant,
    )

# What needs the store loads on first use: a tool module (and the child that lists its
# tools) imports the authoring API alone.
_PIPELINE = {
    "APPROVAL_TTL_S": "hostkit.effects._approvals",
    "ApprovalDecision": "hostkit.effects._approvals",
    "ApprovalFilter": "hostkit.effects._pending",
    "ApprovalKey": "hostkit.effects._approvals",
    "ApprovalLedger": "hostkit.effects._pending",
    "ApprovalOutcome": "hostkit.effects._approvals",
    "ApprovalPage": "hostkit.effects._pending",
    "ApprovalProvider": "hostkit.effects._approvals",
    "ApprovalRequest": "hostkit.effects._approvals",
    "ApprovalRuntime": "hostkit.effects._approvals",
    "ApprovalStatus": "hostkit.effects._pending",
    "ClaimedApproval": "hostkit.effects._pending",
    "DEFAULT_ENV_ALLOWLIST": "hostkit.effects._runtime",
    "DEFAULT_SECRET_TTL_S": "hostkit.effects._runtime",
    "DISCOVERY_WINDOW": "hostkit.effects._mcp_pool",
    "ENV_NAME_PATTERN": "hostkit.effects._runtime",
    "EffectRuntime": "hostkit.effects._runtime",
    "FAILURE_TTL_S": "hostkit.effects._mcp_pool",
    "INLINE": "hostkit.effects._pending",
    "MAX_MCP_SERVERS": "hostkit.effects._mcp_config",
    "MCP_WINDOW_SHARE": "hostkit.effects._mcp_catalog",
    "McpConnections": "hostkit.effects._mcp_pool",
    "McpDiscovery": "hostkit.effects._mcp_pool",
    "McpServerConfig": "hostkit.effects._mcp_config",
    "McpServerName": "hostkit.effects._mcp_config",
    "McpTool": "hostkit.effects._mcp_pool",
    "PendingApproval": "hostkit.effects._pending",
    "Toolset": "hostkit.effects._runtime",
    "ToolsetProvider": "hostkit.effects._runtime",
    "approval_view": "hostkit.effects._runtime",
    "secret_grant": "hostkit.effects._runtime",
    "still_pending": "hostkit.effects._approvals",
}

__all__ = [
    "APPROVAL_TTL_S",
    "DEFAULT_ENV_ALLOWLIST",
    "DEFAULT_SECRET_TTL_S",
    "DIFF_KEY",
    "DISCOVERY_WINDOW",
    "ENV_NAME_PATTERN",
    "FAILURE_TTL_S",
    "INLINE",
    "MAX_DESCRIPTION_CHARS",
    "MAX_DIFF_CHARS",
    "MAX_DIFF_LINES",
    "MAX_MCP_SERVERS",
    "MAX_MODEL_VIEW_CHARS",
    "MAX_WARNING_CHARS",
    "MCP_SERVER_NAME_PATTERN",
    "MCP_WINDOW_SHARE",
    "MIN_SECRET_CHARS",
    "ApprovalDecision",
    "ApprovalFilter",
    "ApprovalKey",
    "ApprovalLedger",
    "ApprovalOutcome",
    "ApprovalPage",
    "ApprovalProvider",
    "ApprovalRequest",
    "ApprovalRuntime",
    "ApprovalStatus",
    "AuthorHandles",
    "AuthorState",
    "AuthoredTool",
    "BuiltinOutcome",
    "CatalogEntry",
    "ClaimedApproval",
    "EffectCollision",
    "EffectPolicy",
    "EffectRuntime",
    "McpConnection",
    "McpConnections",
    "McpConnector",
    "McpDiscovery",
    "McpServer",
    "McpServerConfig",
    "McpServerDeclaration",
    "McpServerName",
    "McpTool",
    "McpToolSpec",
    "PendingApproval",
    "PolicyDecision",
    "Prepared",
    "PreparedEffectCatalog",
    "Redactor",
    "SchemaTool",
    "SourcedTool",
    "ToolChanged",
    "ToolContext",
    "ToolOutcome",
    "Toolset",
    "ToolsetProvider",
    "approval_view",
    "check_collisions",
    "fingerprint_of",
    "is_effect_name",
    "is_timeout",
    "mcp_call_grant",
    "mcp_connect_grant",
    "mcp_effect_name",
    "provider_name",
    "provider_spelling",
    "quoted_rule",
    "redact_secrets",
    "rule_problem",
    "schema_problem",
    "schema_refusal",
    "secret_grant",
    "still_pending",
    "tool",
    "unified_diff",
]

__getattr__, __dir__ = _lazy.attributes(__name__, _PIPELINE)
