"""Host authority: the only place PrincipalScopes are made."""

from hostkit.authority._operator import OperatorIssuer
from hostkit.authority._resolver import (
    RESERVED_CHANNELS,
    AdmittedTurn,
    AuthorityResolver,
    BindingListener,
    conversation_principal,
)

__all__ = [
    "RESERVED_CHANNELS",
    "AdmittedTurn",
    "AuthorityResolver",
    "BindingListener",
    "OperatorIssuer",
    "conversation_principal",
]
