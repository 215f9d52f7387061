"""hostkit: an agent Host with durable turns, explicit authority, approvals and bounded context.

```python
import hostkit

async with hostkit.Host.open("hostkit.toml") as host:
    text = await host.run_turn("assistant", "Summarise notes.md")
    result = await host.turns.run(hostkit.TurnRequest(...))
```
"""

from hostkit.authority import AuthorityResolver, OperatorIssuer
from hostkit.errors import (
    ConfigError,
    HostkitError,
    NotFoundOrUnauthorized,
    ScopeError,
    TurnInProgress,
    TurnRejected,
)
from hostkit.host import (
    DefaultCapabilities,
    Host,
    HostConfig,
    RuntimeCapabilities,
    TurnNotCompleted,
)
from hostkit.store import RuntimeStore
from hostkit.types import (
    ConversationFacts,
    FreshSession,
    PrincipalScope,
    ResumeSession,
    TurnExecutionContext,
    TurnRequest,
    TurnResult,
)

__version__ = "0.1.0"

__all__ = [
    "AuthorityResolver",
    "load_ipython_extension",
    "ConfigError",
    "ConversationFacts",
    "DefaultCapabilities",
    "FreshSession",
    "Host",
    "HostConfig",
    "HostkitError",
    "NotFoundOrUnauthorized",
    "OperatorIssuer",
    "PrincipalScope",
    "ResumeSession",
    "RuntimeCapabilities",
    "RuntimeStore",
    "ScopeError",
    "TurnExecutionContext",
    "TurnInProgress",
    "TurnNotCompleted",
    "TurnRejected",
    "TurnRequest",
    "TurnResult",
    "__version__",
]


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext hostkit``: the ``%%agent`` cell magic (imports the notebook extra lazily)."""
    from hostkit.notebook import load_ipython_extension as load

    load(ipython)
