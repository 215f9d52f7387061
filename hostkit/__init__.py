"""hostkit: an agent Host with durable turns, explicit authority, approvals and bounded context.

```python
import hostkit

async with hostkit.Host.open("hostkit.toml") as host:
    text = await host.run_turn("assistant", "Summarise notes.md")
    result = await host.turns.run(hostkit.TurnRequest(...))
```

The top level holds what an embedder writes or passes: the Host and its
configuration, turn requests and results, the interfaces an embedder
implements (tools, model providers, approval providers, capability sources),
the scripted model for tests, and the whole error tree. What the Host builds
for itself (the store, the authority resolver, scopes, turn contexts) lives
in its own package (``hostkit.store``, ``hostkit.authority``, ``hostkit.types``).
"""

from hostkit._version import __version__
from hostkit.adapters.scripted import CallTools, Fail, Reply, ScriptedModel
from hostkit.effects import (
    ApprovalDecision,
    ApprovalProvider,
    ApprovalRequest,
    AuthoredTool,
    ToolContext,
    ToolOutcome,
    tool,
)
from hostkit.errors import (
    ApprovalClosed,
    ApprovalRefused,
    AttachmentRefused,
    ChannelRefused,
    ClockSkew,
    ConfigError,
    ContextOverflow,
    DatabaseReplaced,
    DeliveryRefused,
    HostkitError,
    InvalidTurnRequest,
    InvalidValue,
    LeaseLost,
    MigrationError,
    MissingDependency,
    NotFoundOrUnauthorized,
    PolicyRefusal,
    PollError,
    PromotionRefused,
    ProviderError,
    RefLocked,
    RequestConflict,
    RuntimeFailure,
    ScopeError,
    StaleClaim,
    StateConflict,
    StoreClosed,
    StoreError,
    StoreOutcomeUnknown,
    TurnInfrastructureError,
    TurnInProgress,
    TurnRejected,
    UnboundToken,
    UserError,
)
from hostkit.host import (
    Agent,
    DefaultCapabilities,
    Host,
    HostConfig,
    MemorySource,
    ProviderSource,
    RuntimeCapabilities,
    ToolSource,
    TurnNotCompleted,
)
from hostkit.providers import ModelProvider
from hostkit.types import (
    Attachment,
    AttachmentSupport,
    ConversationFacts,
    FreshSession,
    ModelLimits,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ResumeSession,
    StreamEvent,
    ToolCall,
    TurnRequest,
    TurnResult,
    Usage,
)

__all__ = [
    "Agent",
    "ApprovalClosed",
    "ApprovalDecision",
    "ApprovalProvider",
    "ApprovalRefused",
    "ApprovalRequest",
    "Attachment",
    "AttachmentRefused",
    "AttachmentSupport",
    "AuthoredTool",
    "CallTools",
    "ChannelRefused",
    "ClockSkew",
    "ConfigError",
    "ContextOverflow",
    "ConversationFacts",
    "DatabaseReplaced",
    "DefaultCapabilities",
    "DeliveryRefused",
    "Fail",
    "FreshSession",
    "Host",
    "HostConfig",
    "HostkitError",
    "InvalidTurnRequest",
    "InvalidValue",
    "LeaseLost",
    "MemorySource",
    "MigrationError",
    "MissingDependency",
    "ModelLimits",
    "ModelMessage",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "NotFoundOrUnauthorized",
    "PolicyRefusal",
    "PollError",
    "PromotionRefused",
    "ProviderError",
    "ProviderSource",
    "RefLocked",
    "Reply",
    "RequestConflict",
    "ResumeSession",
    "RuntimeCapabilities",
    "RuntimeFailure",
    "ScopeError",
    "ScriptedModel",
    "StaleClaim",
    "StateConflict",
    "StoreClosed",
    "StoreError",
    "StoreOutcomeUnknown",
    "StreamEvent",
    "ToolCall",
    "ToolContext",
    "ToolOutcome",
    "ToolSource",
    "TurnInProgress",
    "TurnInfrastructureError",
    "TurnNotCompleted",
    "TurnRejected",
    "TurnRequest",
    "TurnResult",
    "UnboundToken",
    "Usage",
    "UserError",
    "__version__",
    "load_ipython_extension",
    "tool",
]


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext hostkit``: the ``%%agent`` cell magic (imports the notebook extra lazily)."""
    from hostkit.notebook import load_ipython_extension as load

    load(ipython)
