"""PrincipalScope: the immutable Host authority carried into every owned operation."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Literal, TypeGuard, get_args

from hostkit.errors import InvalidValue
from hostkit.types._bounds import is_text
from hostkit.types._keys import check_key, principal_id_of

__all__ = [
    "MAX_ALLOWED_SESSIONS",
    "Authority",
    "ConversationFacts",
    "PrincipalScope",
    "is_channel_id",
]

Authority = Literal["conversation", "operator", "system", "delegated_agent"]
_AUTHORITIES = frozenset(get_args(Authority))

# Non-operator scopes name their sessions explicitly; the bound keeps owner
# predicates to a short bind list. Operators use a relational predicate instead.
MAX_ALLOWED_SESSIONS = 16
_MAX_ID = 256
# No ':' in channel names, so "channel:principal_key" is an unambiguous principal id.
_CHANNEL = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def is_channel_id(value: object) -> TypeGuard[str]:
    """True for a channel (or channel instance) id: a-z, 0-9, '_', '-', '.', 1-64 chars."""
    return isinstance(value, str) and _CHANNEL.fullmatch(value) is not None


def _check_text(name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not is_text(value, limit=_MAX_ID):  # a lone surrogate could never be stored
        raise InvalidValue(
            f"{name} must be a non-empty string of at most {_MAX_ID} characters of valid text"
        )


@dataclass(frozen=True, slots=True)
class ConversationFacts:
    """Authenticated facts a transport adapter contributes about an inbound message.

    ``principal_key`` is set by the Host-side adapter after authentication;
    routing handles and payload fields never become authority on their own.
    """

    channel: str
    conversation_key: str
    principal_key: str

    def __post_init__(self) -> None:
        for name in ("channel", "conversation_key", "principal_key"):
            value = getattr(self, name)
            if isinstance(value, str):
                # A plain copy: a subclass's own __eq__ or __hash__ never runs later.
                object.__setattr__(self, name, str.__str__(value))
        _check_text("channel", self.channel)
        if not is_channel_id(self.channel):
            raise InvalidValue("channel must be a lower-case identifier (a-z, 0-9, '_', '-', '.')")
        check_key("conversation_key", self.conversation_key)
        check_key("principal_key", self.principal_key)
        # The principal id it resolves to is a key too: refused here, not at admission.
        principal_id_of(self.channel, self.principal_key)


@dataclass(frozen=True, slots=True, repr=False)
class PrincipalScope:
    """Who is acting, with which authority, over which sessions.

    Only the store-bound ``AuthorityResolver`` constructs valid scopes: ``proof``
    is an HMAC over every other field under a key that exists only in the memory
    of the store that issued it (``issuer_id``). A scope built by hand, edited
    with ``dataclasses.replace`` or issued by another store fails verification
    in every owned query. ``grant_id`` names the live operator grant for
    operator scopes and is empty otherwise.
    """

    principal_id: str
    authority: Authority
    channel: str
    conversation_key: str | None
    session_id: str | None
    allowed_session_ids: frozenset[str]
    issuer_id: str
    grant_id: str = ""
    proof: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        check_key("principal_id", self.principal_id)
        if self.authority not in _AUTHORITIES:
            raise InvalidValue(f"authority must be one of {sorted(_AUTHORITIES)}")
        _check_text("channel", self.channel)
        if self.conversation_key is not None:
            check_key("conversation_key", self.conversation_key)
        _check_text("session_id", self.session_id, optional=True)
        _check_text("issuer_id", self.issuer_id)
        allowed = self.allowed_session_ids
        if not isinstance(allowed, frozenset | set | tuple | list):
            raise InvalidValue("allowed_session_ids must be a set of session ids")
        allowed = frozenset(allowed)
        for session_id in allowed:
            _check_text("allowed_session_ids[]", session_id)
        if len(allowed) > MAX_ALLOWED_SESSIONS:
            raise InvalidValue(f"a scope names at most {MAX_ALLOWED_SESSIONS} sessions")
        object.__setattr__(self, "allowed_session_ids", allowed)
        if self.session_id is not None and self.session_id not in allowed:
            raise InvalidValue("session_id must be one of allowed_session_ids")
        if self.authority != "operator" and self.session_id is None:
            raise InvalidValue(f"a {self.authority} scope is bound to exactly one session")
        if (self.authority == "operator") != bool(self.grant_id):
            raise InvalidValue("grant_id is set for operator scopes and only for them")

    def signing_payload(self) -> bytes:
        """Canonical bytes the issuer's HMAC covers: every field except ``proof``."""
        return json.dumps(
            [
                self.principal_id,
                self.authority,
                self.channel,
                self.conversation_key,
                self.session_id,
                sorted(self.allowed_session_ids),
                self.issuer_id,
                self.grant_id,
            ],
            separators=(",", ":"),
        ).encode()

    def __repr__(self) -> str:
        # The proof is a bearer credential inside one process; keep it out of logs.
        return (
            f"PrincipalScope(principal_id={self.principal_id!r}, authority={self.authority!r}, "
            f"channel={self.channel!r}, session_id={self.session_id!r}, "
            f"allowed_session_ids={sorted(self.allowed_session_ids)!r})"
        )
