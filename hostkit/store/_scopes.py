"""Scope proofs: the per-open key that makes a PrincipalScope this store's own.

The key lives only in this process's memory and only for one store open, so a
scope built by hand, edited after issuance, or issued by another open of the
same file never verifies. Operator scopes also name a grant that must still be
live: the Host revokes its grant when it closes, and every retained operator
scope stops working at once.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import replace

from hostkit.errors import ScopeError
from hostkit.types import PrincipalScope, new_id

__all__ = ["ScopeKeys", "ScopeMint"]


class ScopeKeys:
    """The store's secret and its live operator grants (never leaves the store)."""

    def __init__(self) -> None:
        self.issuer_id = new_id("store")
        self._key = os.urandom(32)
        self._live_grants: set[str] = set()
        self._mint_taken = False
        self._closed = False

    def _proof(self, scope: PrincipalScope) -> str:
        return hmac.new(self._key, scope.signing_payload(), hashlib.sha256).hexdigest()

    def sign(self, scope: PrincipalScope) -> PrincipalScope:
        if self._closed:
            raise ScopeError("the issuing store is closed")
        if scope.issuer_id != self.issuer_id:
            raise ScopeError("cannot sign a scope for another store")
        if scope.authority == "operator" and scope.grant_id not in self._live_grants:
            raise ScopeError("operator grant is not live")
        return replace(scope, proof=self._proof(scope))

    def verify(self, scope: object) -> PrincipalScope:
        """Return ``scope`` if this store issued it and it is still valid, else raise."""
        if not isinstance(scope, PrincipalScope):
            raise ScopeError("a PrincipalScope is required")
        if self._closed:
            raise ScopeError("the issuing store is closed")
        if scope.issuer_id != self.issuer_id:
            raise ScopeError("scope was issued by another store")
        if not hmac.compare_digest(scope.proof, self._proof(scope)):
            raise ScopeError("scope proof does not verify (forged or altered)")
        if scope.authority == "operator" and scope.grant_id not in self._live_grants:
            raise ScopeError("operator scope was revoked")
        return scope

    def take_mint(self) -> ScopeMint:
        if self._mint_taken:
            raise ScopeError("this store is already bound to an AuthorityResolver")
        self._mint_taken = True
        return ScopeMint(self)

    def open_grant(self) -> str:
        grant = new_id("grant")
        self._live_grants.add(grant)
        return grant

    def revoke_grant(self, grant_id: str) -> None:
        self._live_grants.discard(grant_id)

    def close(self) -> None:
        self._closed = True
        self._live_grants.clear()


class ScopeMint:
    """The one capability that signs scopes; a store hands it out once per open."""

    def __init__(self, keys: ScopeKeys) -> None:
        self._keys = keys

    @property
    def issuer_id(self) -> str:
        return self._keys.issuer_id

    def sign(self, scope: PrincipalScope) -> PrincipalScope:
        return self._keys.sign(scope)

    def open_operator_grant(self) -> str:
        return self._keys.open_grant()

    def revoke_operator_grant(self, grant_id: str) -> None:
        self._keys.revoke_grant(grant_id)
