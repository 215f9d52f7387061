"""Operator issuance: a process-local capability held by the open Host."""

from __future__ import annotations

import logging

from hostkit.errors import InvalidValue, ScopeError, StoreClosed, StoreError
from hostkit.store import RuntimeStore, ScopeMint, audit_reason
from hostkit.types import PrincipalScope, is_text, joined_key

__all__ = ["OPERATOR_CHANNEL", "OperatorIssuer"]

OPERATOR_CHANNEL = "operator"

_log = logging.getLogger(__name__)


class OperatorIssuer:
    """Issues operator scopes while the Host that holds it is open.

    It exists only in memory: reopening the database path creates a new store
    with no issuer, so a file on disk never enables operator authority. When
    ``revoke()`` runs (the Host does it in ``finally`` on close), every scope
    this issuer produced is rejected by the store from then on.
    """

    def __init__(self, store: RuntimeStore, mint: ScopeMint) -> None:
        self._store = store
        self._mint = mint
        self._grant = mint.open_operator_grant()
        self._live = True

    @property
    def live(self) -> bool:
        return self._live

    async def issue(
        self,
        operator_id: str,
        *,
        reason: str,
        conversation_key: str | None = None,
        audit_best_effort: bool = False,
    ) -> PrincipalScope:
        """An operator scope for ``operator_id``, audited with ``reason``.

        With ``conversation_key`` the scope is also bound to the operator's own
        session for that key (created on first use and owned durably by the
        operator); callers never pass ``allowed_session_ids``. Its binding key is
        ``operator_id/conversation_key``: ``conversation_key`` may not contain
        ``/`` and the two together fit ``MAX_KEY_CHARS`` (``InvalidValue``, before
        anything is written), so two operators' consoles never share a key.
        ``audit_best_effort`` (an operator's read-only view, without a
        ``conversation_key``): an audit the store cannot write now is one warning,
        not a refused scope, so a view works while another process writes.
        """
        if not self._live:
            raise ScopeError("operator issuance was revoked (the Host is closed)")
        text = audit_reason(reason)
        if not is_text(operator_id, limit=128):
            raise InvalidValue("operator_id must be 1 to 128 characters of valid text")
        if conversation_key is not None and not is_text(conversation_key, limit=128):
            raise InvalidValue("conversation_key must be 1 to 128 characters of valid text")
        principal_id = f"operator:{operator_id}"
        session_id: str | None = None
        key: str | None = None
        if conversation_key is not None:
            key = joined_key(
                "/", ("operator_id", operator_id), ("conversation_key", conversation_key)
            )
            session_id, _ = await self._store.bind_conversation(
                channel=OPERATOR_CHANNEL,
                conversation_key=key,
                principal_id=principal_id,
                owner_kind="operator",
            )
            owner = await self._store.owner_facts(session_id)
            if owner is None or (owner.owner_kind, owner.principal_id) != (
                "operator",
                principal_id,
            ):
                raise ScopeError("the operator session is not durably owned by this operator")
        scope = self._mint.sign(
            PrincipalScope(
                principal_id=principal_id,
                authority="operator",
                channel=OPERATOR_CHANNEL,
                conversation_key=key,
                session_id=session_id,
                allowed_session_ids=frozenset({session_id} if session_id else ()),
                issuer_id=self._mint.issuer_id,
                grant_id=self._grant,
            )
        )
        try:
            await self._store.audit(
                "principal_scope.operator_issued",
                scope=scope,
                session_id=session_id,
                reason=text,
                # Names the grant, so an operator's later acts can cite this reason.
                detail={"grant_id": self._grant},
            )
        except StoreClosed:
            raise
        except StoreError as exc:
            if not audit_best_effort or conversation_key is not None:
                raise
            _log.warning("this read was not audited: %s", exc)
        return scope

    def revoke(self) -> None:
        """Stop issuing and invalidate every scope issued so far; idempotent."""
        self._live = False
        self._mint.revoke_operator_grant(self._grant)
