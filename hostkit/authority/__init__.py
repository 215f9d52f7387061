"""Host authority: the only place PrincipalScopes are made."""

from hostkit.authority._operator import OperatorIssuer
from hostkit.authority._resolver import AdmittedTurn, AuthorityResolver, conversation_principal

__all__ = ["AdmittedTurn", "AuthorityResolver", "OperatorIssuer", "conversation_principal"]
