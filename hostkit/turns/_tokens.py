"""What the tokens a running turn captured resolve to, for exactly as long as it runs.

A TurnExecutionContext carries three immutable identities (route, admission
lease, cancellation). Whoever acts for the turn later — the terminal commit
and its delivery intents, a fenced write, a cancel, a prompt or task the turn
started — resolves the exact captured token here and gets the live state
behind it. When the turn ends the tokens are unbound, and a lease taken over
by another Host unbinds the admission token at once: from then on they fail
closed (``UnboundToken``, or ``LeaseLost`` for a write). A token with the
right ids and any other nonce was never bound.

The cancellation token also works in other Host processes: the admission
records the sha256 of its nonce with the turn, and ``TurnStore.request_cancel``
checks a presented token against it.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from typing import Any

from hostkit.errors import InvalidValue, LeaseLost, UnboundToken
from hostkit.store import SessionLease
from hostkit.turns._active import ActiveTurn
from hostkit.types import TokenKind, TurnExecutionContext, TurnToken

__all__ = ["TokenNonces", "TurnTokens", "new_nonces", "token_digest"]

TokenNonces = Mapping[TokenKind, str]
_KINDS: tuple[TokenKind, ...] = ("route", "admission", "cancellation")


def new_nonces() -> TokenNonces:
    """One unguessable nonce per token kind (128 bits of OS randomness each)."""
    return {kind: secrets.token_hex(16) for kind in _KINDS}


def token_digest(nonce: str) -> str:
    """What the store keeps of a nonce: it can check a token, never act as one."""
    return hashlib.sha256(nonce.encode()).hexdigest()


def _captured(context: TurnExecutionContext) -> tuple[TurnToken, ...]:
    return (context.route_token, context.admission_lease_token, context.cancellation_token)


class TurnTokens:
    """The live bindings of this TurnExecution's running turns, by exact token."""

    def __init__(self) -> None:
        self._bound: dict[TurnToken, ActiveTurn] = {}

    def __len__(self) -> int:
        return len(self._bound)

    def bind(self, active: ActiveTurn) -> None:
        for token in _captured(active.context):
            self._bound[token] = active

    def unbind(self, context: TurnExecutionContext) -> None:
        for token in _captured(context):
            self._bound.pop(token, None)

    def lease_lost(self, context: TurnExecutionContext) -> None:
        """Another Host took the session over: the turn's writes fail closed from now on."""
        self._bound.pop(context.admission_lease_token, None)

    def resolve(self, token: TurnToken, kind: TokenKind | None = None) -> ActiveTurn:
        """The running turn ``token`` was captured by; ``UnboundToken`` otherwise."""
        if not isinstance(token, TurnToken):
            raise InvalidValue("a TurnToken is required")
        if kind is not None and token.kind != kind:
            raise InvalidValue(f"a {kind} token is required, not a {token.kind} token")
        active = self._bound.get(token)
        if active is None:
            raise UnboundToken()
        return active

    def lease(self, token: TurnToken) -> SessionLease:
        """The session lease a fenced write of the turn carries; ``LeaseLost`` once unbound."""
        try:
            return self.resolve(token, "admission").lease
        except UnboundToken:
            raise LeaseLost("session lease") from None

    def route(self, token: TurnToken) -> Mapping[str, Any] | None:
        """Where the turn's replies go: the route captured at admission, whatever came since."""
        return self.resolve(token, "route").route
