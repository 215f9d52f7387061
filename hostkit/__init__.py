"""hostkit: an agent Host with durable turns, explicit authority, approvals and bounded context."""

from hostkit.authority import AuthorityResolver, OperatorIssuer
from hostkit.errors import HostkitError, NotFoundOrUnauthorized, ScopeError
from hostkit.store import RuntimeStore
from hostkit.types import ConversationFacts, PrincipalScope, TurnExecutionContext

__version__ = "0.1.0"

__all__ = [
    "AuthorityResolver",
    "ConversationFacts",
    "HostkitError",
    "NotFoundOrUnauthorized",
    "OperatorIssuer",
    "PrincipalScope",
    "RuntimeStore",
    "ScopeError",
    "TurnExecutionContext",
    "__version__",
]
