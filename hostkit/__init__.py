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

Names load on first use (PEP 562): ``import hostkit`` is quick, so a command
line that starts with it can answer Ctrl-C at once, and a name costs its
module's import only when it is read.
"""

import importlib
import importlib.util
import typing

from hostkit._version import __version__

if typing.TYPE_CHECKING:
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
        DeliveryInProgress,
        DeliveryRefused,
        HostkitError,
        InboxFull,
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

# Each exported name and the module it comes from.
_EXPORTS: dict[str, str] = {
    "Agent": "hostkit.host",
    "ApprovalClosed": "hostkit.errors",
    "ApprovalDecision": "hostkit.effects",
    "ApprovalProvider": "hostkit.effects",
    "ApprovalRefused": "hostkit.errors",
    "ApprovalRequest": "hostkit.effects",
    "Attachment": "hostkit.types",
    "AttachmentRefused": "hostkit.errors",
    "AttachmentSupport": "hostkit.types",
    "AuthoredTool": "hostkit.effects",
    "CallTools": "hostkit.adapters.scripted",
    "ChannelRefused": "hostkit.errors",
    "ClockSkew": "hostkit.errors",
    "ConfigError": "hostkit.errors",
    "ContextOverflow": "hostkit.errors",
    "ConversationFacts": "hostkit.types",
    "DatabaseReplaced": "hostkit.errors",
    "DefaultCapabilities": "hostkit.host",
    "DeliveryInProgress": "hostkit.errors",
    "DeliveryRefused": "hostkit.errors",
    "Fail": "hostkit.adapters.scripted",
    "FreshSession": "hostkit.types",
    "Host": "hostkit.host",
    "HostConfig": "hostkit.host",
    "HostkitError": "hostkit.errors",
    "InboxFull": "hostkit.errors",
    "InvalidTurnRequest": "hostkit.errors",
    "InvalidValue": "hostkit.errors",
    "LeaseLost": "hostkit.errors",
    "MemorySource": "hostkit.host",
    "MigrationError": "hostkit.errors",
    "MissingDependency": "hostkit.errors",
    "ModelLimits": "hostkit.types",
    "ModelMessage": "hostkit.types",
    "ModelProvider": "hostkit.providers",
    "ModelRequest": "hostkit.types",
    "ModelResponse": "hostkit.types",
    "NotFoundOrUnauthorized": "hostkit.errors",
    "PolicyRefusal": "hostkit.errors",
    "PollError": "hostkit.errors",
    "PromotionRefused": "hostkit.errors",
    "ProviderError": "hostkit.errors",
    "ProviderSource": "hostkit.host",
    "RefLocked": "hostkit.errors",
    "Reply": "hostkit.adapters.scripted",
    "RequestConflict": "hostkit.errors",
    "ResumeSession": "hostkit.types",
    "RuntimeCapabilities": "hostkit.host",
    "RuntimeFailure": "hostkit.errors",
    "ScopeError": "hostkit.errors",
    "ScriptedModel": "hostkit.adapters.scripted",
    "StaleClaim": "hostkit.errors",
    "StateConflict": "hostkit.errors",
    "StoreClosed": "hostkit.errors",
    "StoreError": "hostkit.errors",
    "StoreOutcomeUnknown": "hostkit.errors",
    "StreamEvent": "hostkit.types",
    "ToolCall": "hostkit.types",
    "ToolContext": "hostkit.effects",
    "ToolOutcome": "hostkit.effects",
    "ToolSource": "hostkit.host",
    "TurnInProgress": "hostkit.errors",
    "TurnInfrastructureError": "hostkit.errors",
    "TurnNotCompleted": "hostkit.host",
    "TurnRejected": "hostkit.errors",
    "TurnRequest": "hostkit.types",
    "TurnResult": "hostkit.types",
    "UnboundToken": "hostkit.errors",
    "Usage": "hostkit.types",
    "UserError": "hostkit.errors",
    "tool": "hostkit.effects",
}

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
    "DeliveryInProgress",
    "DeliveryRefused",
    "Fail",
    "FreshSession",
    "Host",
    "HostConfig",
    "HostkitError",
    "InboxFull",
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


def _subpackage(name: str) -> bool:
    """Whether ``name`` is a public subpackage or module (never ``__main__``, which runs the
    command line when imported, nor a private helper)."""
    return (
        name.isidentifier()
        and not name.startswith("_")
        and importlib.util.find_spec(f"hostkit.{name}") is not None
    )


# Hidden from type checkers, which see the imports above: a misspelled name stays an error.
if not typing.TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        """An exported name, imported from its module on first use; a subpackage by its name."""
        module = _EXPORTS.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
        elif _subpackage(name):
            value = importlib.import_module(f"hostkit.{name}")
        else:
            raise AttributeError(f"module 'hostkit' has no attribute {name!r}")
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The exported names, the subpackages loaded so far and the module's own dunders (not
    the helpers of lazy loading)."""
    loaded = {name for name, value in globals().items() if isinstance(value, type(typing))}
    dunders = {name for name in globals() if name.startswith("__")}
    return sorted({*__all__, *dunders, *(loaded - {"importlib", "typing"})})


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext hostkit``: the ``%%agent`` cell magic (imports the notebook extra lazily)."""
    from hostkit.notebook import load_ipython_extension as load

    load(ipython)
